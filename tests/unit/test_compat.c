/* What the drop-in APIs share (api/compat.h): a toolchain's line as Piston's MAJOR.MINOR.PATCH,
 * the SemVer selectors clients send, and the peers' encodings (Judge0's base64 in and out,
 * Piston's hex files). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "api/compat.h"

static void assert_version_of(const char *line, const char *expected)
{
        char version[32] = "";
        bool found = sbx_compat_version_of_line(line, version);
        if (expected == NULL) {
                assert_false(found);
                return;
        }
        assert_true(found);
        assert_string_equal(version, expected);
}

/* What the toolchains of src/model/language.c print on Debian 12. */
static void test_version_of_line(void **state)
{
        assert_version_of("Python 3.11.2", "3.11.2");
        assert_version_of("GNU bash, version 5.2.15(1)-release (x86_64-pc-linux-gnu)", "5.2.15");
        assert_version_of("v20.20.2", "20.20.2");
        assert_version_of("4.8.4", "4.8.4");
        assert_version_of("12", "12.0.0");
        assert_version_of("go version go1.19.8 linux/amd64", "1.19.8");
        assert_version_of("rustc 1.63.0", "1.63.0");
        assert_version_of("openjdk 17.0.15 2025-04-15", "17.0.15");
        assert_version_of("1.2.3.4", "1.2.3");
        assert_version_of("no digits here", NULL);
        /* Parts past nine digits are cut to 999999999 (fuzz_compat: a long one overflowed the
         * text, which then matched nothing). */
        assert_version_of("v555555555555555555555.1", "999999999.1.0");
        assert_true(sbx_compat_version_matches("999999999.999999999.999999999", "*"));
}

static void test_version_selectors(void **state)
{
        static const struct {
                const char *selector;
                bool matches;
        } cases[] = {
                {"*", true},        {"x", true},         {"latest", true},  {"", true},
                {"3", true},        {"3.11", true},      {"3.11.2", true},  {"3.x", true},
                {"3.11.x", true},   {"v3.11.2", true},   {"=3.11.2", true}, {"^3.10", true},
                {"^3.11.2", true},  {"~3.11", true},     {"~3.11.1", true}, {">=3.8", true},
                {">=3.11.2", true}, {"2", false},        {"3.10", false},   {"3.11.3", false},
                {"^3.12", false},   {"^2.7", false},     {"~3.10", false},  {"~3.11.3", false},
                {">=3.12", false},  {"3.11.2.1", false}, {"three", false},  {"3.1a", false},
                {"<3", false},
        };
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
                if (sbx_compat_version_matches("3.11.2", cases[i].selector) != cases[i].matches)
                        fail_msg("3.11.2 against '%s': expected %s", cases[i].selector,
                                 cases[i].matches ? "a match" : "no match");
        assert_false(sbx_compat_version_matches("3.11", "*"));
}

static void assert_decodes(const char *text, const char *expected, size_t expected_size)
{
        size_t size = 99;
        char *bytes = sbx_compat_base64_decode(text, strlen(text), &size);
        assert_non_null(bytes);
        assert_int_equal(size, expected_size);
        assert_memory_equal(bytes, expected, expected_size);
        assert_int_equal(bytes[size], '\0');
        free(bytes);
}

/* Ruby's decode64, as Judge0 reads its inputs: lenient about what is not base64. */
static void test_base64_decode(void **state)
{
        assert_decodes("aGVsbG8sIEp1ZGdlMAo=", "hello, Judge0\n", 14);
        assert_decodes("aGVsbG8sIEp1ZGdlMAo", "hello, Judge0\n", 14); /* no padding */
        assert_decodes("aGVs\nbG8s IEp1\tZGdl*MAo=\n", "hello, Judge0\n", 14);
        assert_decodes("aGk=", "hi", 2);
        assert_decodes("aA==", "h", 1);
        assert_decodes("AP8Q", "\x00\xff\x10", 3);
        assert_decodes("", "", 0);
        assert_decodes("!!!", "", 0);
        assert_decodes("a", "", 0); /* a lone character carries no byte */
}

/* Ruby's encode64, as Judge0 writes its outputs: lines of 60 and a newline after each. */
static void test_base64_lines(void **state)
{
        json_t *short_one = sbx_compat_base64_lines("hello, Judge0\n", 14);
        assert_string_equal(json_string_value(short_one), "aGVsbG8sIEp1ZGdlMAo=\n");
        json_decref(short_one);
        char hundred[101];
        memset(hundred, 'x', 100);
        hundred[100] = '\n';
        json_t *lines = sbx_compat_base64_lines(hundred, 101);
        const char *text = json_string_value(lines);
        assert_int_equal(strlen(text), 136 + 3);
        assert_int_equal(text[60], '\n');
        assert_int_equal(text[121], '\n');
        assert_int_equal(text[138], '\n');
        size_t size = 0;
        char *back = sbx_compat_base64_decode(text, strlen(text), &size);
        assert_int_equal(size, 101);
        assert_memory_equal(back, hundred, 101);
        free(back);
        json_decref(lines);
        json_t *empty = sbx_compat_base64_lines("", 0);
        assert_string_equal(json_string_value(empty), "");
        json_decref(empty);
}

/* Piston's hex files. */
static void test_hex(void **state)
{
        char *base64 = sbx_compat_hex_to_base64("68690aFF", 8);
        assert_string_equal(base64, "aGkK/w==");
        free(base64);
        base64 = sbx_compat_hex_to_base64("", 0);
        assert_string_equal(base64, "");
        free(base64);
        static const char *const bad[] = {"6", "zz", "0x", "+1", "-1", " 1", "6869 "};
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
                if (sbx_compat_hex_to_base64(bad[i], strlen(bad[i])) != NULL)
                        fail_msg("'%s' taken for hex", bad[i]);
        /* A JSON string may hold NUL: it is no hex digit (fuzz_compat found it taken as 0). */
        assert_null(sbx_compat_hex_to_base64("\0\0", 2));
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_version_of_line),
                cmocka_unit_test(test_version_selectors),
                cmocka_unit_test(test_base64_decode),
                cmocka_unit_test(test_base64_lines),
                cmocka_unit_test(test_hex),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
