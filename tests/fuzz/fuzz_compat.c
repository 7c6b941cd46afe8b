/* libFuzzer harness for what the drop-in APIs read from a client (api/compat.h): Judge0's base64
 * (decoded, then written as Ruby's encode64 does, which must decode to the same bytes again),
 * Piston's hex files (taken exactly when they are hex: even length, hex digits only) and the
 * versions and SemVer selectors of both. */
#include <ctype.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/compat.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *what)
{
        fprintf(stderr, "fuzz_compat: %s\n", what);
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        char *text = malloc(size + 1);
        if (text == NULL)
                return 0;
        memcpy(text, data, size);
        text[size] = '\0';

        size_t decoded_size = 0;
        char *decoded = sbx_compat_base64_decode(text, size, &decoded_size);
        if (decoded != NULL) {
                json_t *lines = sbx_compat_base64_lines(decoded, decoded_size);
                size_t again_size = 0;
                char *again = lines != NULL ? sbx_compat_base64_decode(json_string_value(lines),
                                                                       json_string_length(lines),
                                                                       &again_size)
                                            : NULL;
                if (lines != NULL && (again == NULL || again_size != decoded_size ||
                                      memcmp(again, decoded, decoded_size) != 0))
                        fail("base64 written as lines does not decode to the same bytes");
                free(again);
                json_decref(lines);
                free(decoded);
        }

        bool hex = size % 2 == 0;
        for (size_t i = 0; i < size; i++)
                hex &= isxdigit(data[i]) != 0;
        char *base64 = sbx_compat_hex_to_base64(text, size);
        if ((base64 != NULL) != hex)
                fail(hex ? "hex refused" : "not hex, taken");
        if (base64 != NULL) {
                size_t bytes = 0;
                char *back = sbx_compat_base64_decode(base64, strlen(base64), &bytes);
                if (back == NULL || bytes != size / 2)
                        fail("hex as base64 does not hold its bytes");
                free(back);
                free(base64);
        }

        char version[32];
        if (sbx_compat_version_of_line(text, version)) {
                if (!sbx_compat_version_matches(version, version) ||
                    !sbx_compat_version_matches(version, "*"))
                        fail("a version does not match itself or *");
        }
        sbx_compat_version_matches("3.11.2", text);
        sbx_compat_version_matches(text, text);
        free(text);
        return 0;
}
