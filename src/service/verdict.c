/* A test case's verdict (verdict.h). */
#include "service/verdict.h"

#include <string.h>

static const char *const compare_names[] = {
        [SBX_COMPARE_EXACT] = "exact",
        [SBX_COMPARE_TRIM] = "trim",
        [SBX_COMPARE_TOKENS] = "tokens",
};

bool sbx_compare_find(const char *name, enum sbx_compare *out)
{
        for (size_t i = 0; i < sizeof(compare_names) / sizeof(compare_names[0]); i++)
                if (name != NULL && strcmp(name, compare_names[i]) == 0) {
                        *out = (enum sbx_compare)i;
                        return true;
                }
        return false;
}

const char *sbx_compare_name(enum sbx_compare compare)
{
        return compare_names[compare];
}

static bool is_space(char c)
{
        return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

/* A cursor over text's lines with their trailing whitespace cut. */
struct lines {
        const char *at, *end;
};

/* The next line (without its end and trailing blanks) into *line, *len; false at the end. */
static bool next_line(struct lines *lines, const char **line, size_t *len)
{
        if (lines->at >= lines->end)
                return false;
        const char *newline = memchr(lines->at, '\n', (size_t)(lines->end - lines->at));
        const char *stop = newline != NULL ? newline : lines->end;
        *line = lines->at;
        while (stop > *line && is_space(stop[-1]))
                stop--;
        *len = (size_t)(stop - *line);
        lines->at = newline != NULL ? newline + 1 : lines->end;
        return true;
}

/* The length of text without its trailing whitespace (blank lines included). */
static size_t trimmed_length(const char *text, size_t len)
{
        while (len > 0 && is_space(text[len - 1]))
                len--;
        return len;
}

static bool lines_match(const char *a, size_t a_len, const char *b, size_t b_len)
{
        struct lines x = {a, a + trimmed_length(a, a_len)}, y = {b, b + trimmed_length(b, b_len)};
        const char *line_a, *line_b;
        size_t len_a, len_b;
        for (;;) {
                bool more_a = next_line(&x, &line_a, &len_a),
                     more_b = next_line(&y, &line_b, &len_b);
                if (!more_a || !more_b)
                        return more_a == more_b;
                if (len_a != len_b || memcmp(line_a, line_b, len_a) != 0)
                        return false;
        }
}

/* The next token of [*at, end) into *token, *len; false when none is left. */
static bool next_token(const char **at, const char *end, const char **token, size_t *len)
{
        while (*at < end && is_space(**at))
                (*at)++;
        if (*at == end)
                return false;
        *token = *at;
        while (*at < end && !is_space(**at))
                (*at)++;
        *len = (size_t)(*at - *token);
        return true;
}

static bool tokens_match(const char *a, size_t a_len, const char *b, size_t b_len)
{
        const char *x = a, *y = b, *token_a, *token_b;
        size_t len_a, len_b;
        for (;;) {
                bool more_a = next_token(&x, a + a_len, &token_a, &len_a);
                bool more_b = next_token(&y, b + b_len, &token_b, &len_b);
                if (!more_a || !more_b)
                        return more_a == more_b;
                if (len_a != len_b || memcmp(token_a, token_b, len_a) != 0)
                        return false;
        }
}

bool sbx_output_matches(enum sbx_compare compare, const char *output, size_t output_len,
                        const char *expected, size_t expected_len)
{
        if (output == NULL)
                output = "";
        switch (compare) {
        case SBX_COMPARE_TRIM:
                return lines_match(output, output_len, expected, expected_len);
        case SBX_COMPARE_TOKENS:
                return tokens_match(output, output_len, expected, expected_len);
        case SBX_COMPARE_EXACT:
                break;
        }
        return output_len == expected_len && memcmp(output, expected, output_len) == 0;
}

const char *sbx_verdict(enum sbx_status status, enum sbx_compare compare, const char *output,
                        size_t output_len, const char *expected, size_t expected_len)
{
        if (status != SBX_STATUS_OK)
                return sbx_status_name(status);
        if (expected == NULL ||
            sbx_output_matches(compare, output, output_len, expected, expected_len))
                return "accepted";
        return "wrong_answer";
}
