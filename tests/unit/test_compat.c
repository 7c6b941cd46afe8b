/* The drop-in APIs' version logic (api/compat.h): a toolchain's line as Piston's
 * MAJOR.MINOR.PATCH, and the SemVer selectors clients send. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
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

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_version_of_line),
                cmocka_unit_test(test_version_selectors),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
