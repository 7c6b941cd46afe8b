#include "util/parse.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int sbx_parse_u64(const char *text, uint64_t max, uint64_t *value, struct sbx_error *err)
{
        if (text == NULL || !isdigit((unsigned char)text[0]))
                return sbx_error_set(err, EINVAL, "'%s' is not a non-negative integer",
                                     text ? text : "");
        errno = 0;
        char *end;
        unsigned long long v = strtoull(text, &end, 10);
        if (errno == ERANGE || *end != '\0' || v > max)
                return sbx_error_set(err, EINVAL, "'%s' is not an integer from 0 to %llu", text,
                                     (unsigned long long)max);
        *value = v;
        return 0;
}

int sbx_parse_size(const char *text, uint64_t *bytes, struct sbx_error *err)
{
        if (text == NULL || !isdigit((unsigned char)text[0]))
                return sbx_error_set(err, EINVAL, "'%s' is not a size (like 64M or 1G)",
                                     text ? text : "");
        errno = 0;
        char *end;
        unsigned long long v = strtoull(text, &end, 10);
        if (errno == ERANGE)
                return sbx_error_set(err, EINVAL, "size '%s' is too large", text);
        unsigned shift = 0;
        switch (toupper((unsigned char)*end)) {
        case '\0':
                break;
        case 'K':
                shift = 10;
                end++;
                break;
        case 'M':
                shift = 20;
                end++;
                break;
        case 'G':
                shift = 30;
                end++;
                break;
        case 'B':
                break;
        default:
                return sbx_error_set(err, EINVAL, "'%s' is not a size (like 64M or 1G)", text);
        }
        /* Accept "64M", "64MB", "64MiB" and "100B"; nothing else may follow. */
        if (strcasecmp(end, "") != 0 && strcasecmp(end, "B") != 0 &&
            !(shift != 0 && strcasecmp(end, "iB") == 0))
                return sbx_error_set(err, EINVAL, "'%s' is not a size (like 64M or 1G)", text);
        if (shift != 0 && v > (UINT64_MAX >> shift))
                return sbx_error_set(err, EINVAL, "size '%s' is too large", text);
        *bytes = (uint64_t)v << shift;
        return 0;
}

int sbx_parse_duration_ms(const char *text, uint64_t *ms, struct sbx_error *err)
{
        if (text == NULL || !(isdigit((unsigned char)text[0]) || text[0] == '.'))
                return sbx_error_set(err, EINVAL, "'%s' is not a duration (like 500ms or 10s)",
                                     text ? text : "");
        errno = 0;
        char *end;
        double v = strtod(text, &end);
        if (errno == ERANGE || end == text || !isfinite(v) || v < 0)
                return sbx_error_set(err, EINVAL, "'%s' is not a duration (like 500ms or 10s)",
                                     text);
        double scale;
        if (strcmp(end, "ms") == 0)
                scale = 1;
        else if (strcmp(end, "s") == 0 || strcmp(end, "") == 0)
                scale = 1000;
        else if (strcmp(end, "m") == 0)
                scale = 60 * 1000;
        else if (strcmp(end, "h") == 0)
                scale = 3600 * 1000;
        else
                return sbx_error_set(err, EINVAL, "'%s' is not a duration (like 500ms or 10s)",
                                     text);
        double total = v * scale;
        if (total > 1e15)
                return sbx_error_set(err, EINVAL, "duration '%s' is too large", text);
        *ms = (uint64_t)(total + 0.5);
        return 0;
}
