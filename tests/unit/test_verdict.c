/* Unit tests for service/verdict.h: the three comparisons (exact bytes; trim: trailing
 * whitespace of lines and trailing blank lines ignored, nothing else; tokens: whitespace of any
 * kind and amount between the same tokens) and the verdict a status and an output give. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "service/verdict.h"

static bool matches(enum sbx_compare compare, const char *output, const char *expected)
{
        return sbx_output_matches(compare, output, strlen(output), expected, strlen(expected));
}

static void test_exact(void **state)
{
        assert_true(matches(SBX_COMPARE_EXACT, "1 2\n", "1 2\n"));
        assert_false(matches(SBX_COMPARE_EXACT, "1 2", "1 2\n"));
        assert_false(matches(SBX_COMPARE_EXACT, "1 2 \n", "1 2\n"));
        assert_true(matches(SBX_COMPARE_EXACT, "", ""));
        /* Bytes, NUL included. */
        assert_false(sbx_output_matches(SBX_COMPARE_EXACT, "a\0b", 3, "a\0c", 3));
        assert_true(sbx_output_matches(SBX_COMPARE_EXACT, "a\0b", 3, "a\0b", 3));
}

static void test_trim(void **state)
{
        assert_true(matches(SBX_COMPARE_TRIM, "1 2 \r\n3\t\n\n\n", "1 2\n3"));
        assert_true(matches(SBX_COMPARE_TRIM, "42", "42\n"));
        assert_true(matches(SBX_COMPARE_TRIM, "", "\n \n"));
        /* Leading whitespace, inner whitespace and inner blank lines count. */
        assert_false(matches(SBX_COMPARE_TRIM, " 42", "42"));
        assert_false(matches(SBX_COMPARE_TRIM, "1  2", "1 2"));
        assert_false(matches(SBX_COMPARE_TRIM, "1\n\n2", "1\n2"));
        assert_false(matches(SBX_COMPARE_TRIM, "1\n2", "1\n2\n3"));
        assert_false(matches(SBX_COMPARE_TRIM, "1\n2\n3", "1\n2"));
}

static void test_tokens(void **state)
{
        assert_true(matches(SBX_COMPARE_TOKENS, "  1\t2\n\n3 ", "1 2 3"));
        assert_true(matches(SBX_COMPARE_TOKENS, "", " \n"));
        assert_false(matches(SBX_COMPARE_TOKENS, "1 2", "1 2 3"));
        assert_false(matches(SBX_COMPARE_TOKENS, "12", "1 2"));
        assert_false(matches(SBX_COMPARE_TOKENS, "1 3 2", "1 2 3"));
}

static void test_verdicts(void **state)
{
        assert_string_equal(sbx_verdict(SBX_STATUS_OK, SBX_COMPARE_EXACT, "hi\n", 3, "hi\n", 3),
                            "accepted");
        assert_string_equal(sbx_verdict(SBX_STATUS_OK, SBX_COMPARE_EXACT, "ho\n", 3, "hi\n", 3),
                            "wrong_answer");
        /* Nothing expected: a clean run is accepted. */
        assert_string_equal(sbx_verdict(SBX_STATUS_OK, SBX_COMPARE_TRIM, "x", 1, NULL, 0),
                            "accepted");
        /* Any other end is its own verdict, whatever the output. */
        assert_string_equal(
                sbx_verdict(SBX_STATUS_TIMEOUT, SBX_COMPARE_EXACT, "hi\n", 3, "hi\n", 3),
                "timeout");
        assert_string_equal(sbx_verdict(SBX_STATUS_MEMORY_LIMIT, SBX_COMPARE_EXACT, "", 0, "", 0),
                            "memory_limit");
        assert_string_equal(sbx_verdict(SBX_STATUS_EXIT_NONZERO, SBX_COMPARE_EXACT, "", 0, "", 0),
                            "exit_nonzero");
        enum sbx_compare compare;
        assert_true(sbx_compare_find("tokens", &compare));
        assert_int_equal(compare, SBX_COMPARE_TOKENS);
        assert_string_equal(sbx_compare_name(compare), "tokens");
        assert_false(sbx_compare_find("fuzzy", &compare));
        assert_false(sbx_compare_find(NULL, &compare));
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_exact),
                cmocka_unit_test(test_trim),
                cmocka_unit_test(test_tokens),
                cmocka_unit_test(test_verdicts),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
