/* libFuzzer harness for the unit parsers (util/parse.h): sizes ("64M") and durations ("1.5s")
 * typed in the configuration and on the command line, and plain integers. Each gets the input as
 * a C string (a NUL ends it). A refusal must say EINVAL; nothing may overflow (UBSan aborts on
 * signed overflow and bad float-to-integer conversions). */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/parse.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *parser, const struct sbx_error *err)
{
        fprintf(stderr, "fuzz_parse: %s: refused with code %d, not EINVAL: %s\n", parser, err->code,
                err->message);
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        char *text = malloc(size + 1);
        if (text == NULL)
                return 0;
        memcpy(text, data, size);
        text[size] = '\0';

        uint64_t value;
        struct sbx_error err = {0};
        if (sbx_parse_size(text, &value, &err) < 0 && err.code != EINVAL)
                fail("sbx_parse_size", &err);
        err = (struct sbx_error){0};
        if (sbx_parse_duration_ms(text, &value, &err) < 0 && err.code != EINVAL)
                fail("sbx_parse_duration_ms", &err);
        static const uint64_t maxima[] = {0, 1, 1000, UINT32_MAX, UINT64_MAX};
        for (size_t i = 0; i < sizeof(maxima) / sizeof(maxima[0]); i++) {
                err = (struct sbx_error){0};
                if (sbx_parse_u64(text, maxima[i], &value, &err) == 0) {
                        if (value > maxima[i]) {
                                fprintf(stderr, "fuzz_parse: sbx_parse_u64 went over its max\n");
                                abort();
                        }
                } else if (err.code != EINVAL) {
                        fail("sbx_parse_u64", &err);
                }
        }
        free(text);
        return 0;
}
