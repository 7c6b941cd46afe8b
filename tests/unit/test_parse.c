/* Unit tests for util/parse.h: the sizes and durations users type on the command line and in
 * requests. Valid forms, the edges (zero, the largest value that fits, the first that does not)
 * and the junk each parser must refuse without touching its output. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "util/parse.h"

/* A value no parser produces, to prove a failed parse left the output untouched. */
#define UNTOUCHED 0xdeadbeefcafef00dULL

static void assert_size(const char *text, uint64_t expected)
{
        struct sbx_error err = {0};
        uint64_t bytes = UNTOUCHED;
        if (sbx_parse_size(text, &bytes, &err) != 0)
                fail_msg("sbx_parse_size(\"%s\") failed: %s", text, err.message);
        if (bytes != expected)
                fail_msg("sbx_parse_size(\"%s\") = %llu, want %llu", text,
                         (unsigned long long)bytes, (unsigned long long)expected);
}

static void assert_size_rejected(const char *text)
{
        struct sbx_error err = {0};
        uint64_t bytes = UNTOUCHED;
        if (sbx_parse_size(text, &bytes, &err) != -1)
                fail_msg("sbx_parse_size(\"%s\") accepted, = %llu", text ? text : "(null)",
                         (unsigned long long)bytes);
        assert_int_equal(err.code, EINVAL);
        assert_true(err.message[0] != '\0');
        assert_true(bytes == UNTOUCHED);
}

static void assert_duration(const char *text, uint64_t expected_ms)
{
        struct sbx_error err = {0};
        uint64_t ms = UNTOUCHED;
        if (sbx_parse_duration_ms(text, &ms, &err) != 0)
                fail_msg("sbx_parse_duration_ms(\"%s\") failed: %s", text, err.message);
        if (ms != expected_ms)
                fail_msg("sbx_parse_duration_ms(\"%s\") = %llu ms, want %llu", text,
                         (unsigned long long)ms, (unsigned long long)expected_ms);
}

static void assert_duration_rejected(const char *text)
{
        struct sbx_error err = {0};
        uint64_t ms = UNTOUCHED;
        if (sbx_parse_duration_ms(text, &ms, &err) != -1)
                fail_msg("sbx_parse_duration_ms(\"%s\") accepted, = %llu ms",
                         text ? text : "(null)", (unsigned long long)ms);
        assert_int_equal(err.code, EINVAL);
        assert_true(err.message[0] != '\0');
        assert_true(ms == UNTOUCHED);
}

static void assert_u64(const char *text, uint64_t max, uint64_t expected)
{
        struct sbx_error err = {0};
        uint64_t value = UNTOUCHED;
        if (sbx_parse_u64(text, max, &value, &err) != 0)
                fail_msg("sbx_parse_u64(\"%s\", %llu) failed: %s", text, (unsigned long long)max,
                         err.message);
        if (value != expected)
                fail_msg("sbx_parse_u64(\"%s\") = %llu, want %llu", text, (unsigned long long)value,
                         (unsigned long long)expected);
}

static void assert_u64_rejected(const char *text, uint64_t max)
{
        struct sbx_error err = {0};
        uint64_t value = UNTOUCHED;
        if (sbx_parse_u64(text, max, &value, &err) != -1)
                fail_msg("sbx_parse_u64(\"%s\", %llu) accepted, = %llu", text ? text : "(null)",
                         (unsigned long long)max, (unsigned long long)value);
        assert_int_equal(err.code, EINVAL);
        assert_true(err.message[0] != '\0');
        assert_true(value == UNTOUCHED);
}

static void test_size_plain_bytes(void **state)
{
        assert_size("0", 0);
        assert_size("1", 1);
        assert_size("4096", 4096);
        assert_size("007", 7);
        assert_size("100B", 100);
        assert_size("100b", 100);
}

static void test_size_suffixes(void **state)
{
        assert_size("64K", 64ULL << 10);
        assert_size("64k", 64ULL << 10);
        assert_size("256M", 256ULL << 20);
        assert_size("256m", 256ULL << 20);
        assert_size("1G", 1ULL << 30);
        assert_size("1g", 1ULL << 30);
        assert_size("0M", 0);
}

static void test_size_byte_spellings(void **state)
{
        /* "MB" and "MiB" both mean powers of 1024: the header promises one meaning per letter. */
        assert_size("64MB", 64ULL << 20);
        assert_size("64MiB", 64ULL << 20);
        assert_size("64mib", 64ULL << 20);
        assert_size("1KiB", 1024);
        assert_size("2GB", 2ULL << 30);
}

static void test_size_edges(void **state)
{
        assert_size("18446744073709551615", UINT64_MAX);
        /* 2^34 G is 2^64: the first G value that does not fit. */
        assert_size("17179869183G", 17179869183ULL << 30);
        assert_size_rejected("17179869184G");
        assert_size("17592186044415M", 17592186044415ULL << 20);
        assert_size_rejected("17592186044416M");
        assert_size_rejected("18446744073709551616");
        assert_size_rejected("99999999999999999999999K");
}

static void test_size_rejects_junk(void **state)
{
        assert_size_rejected(NULL);
        assert_size_rejected("");
        assert_size_rejected("12Q");
        assert_size_rejected("M");
        assert_size_rejected("-1");
        assert_size_rejected("-64M");
        assert_size_rejected("+64M");
        assert_size_rejected(" 64M");
        assert_size_rejected("64M ");
        assert_size_rejected("64 M");
        assert_size_rejected("1.5M");
        assert_size_rejected("64MM");
        assert_size_rejected("64KM");
        assert_size_rejected("1T");
        assert_size_rejected("1iB");
        assert_size_rejected("64Mi");
        assert_size_rejected("64MBB");
        assert_size_rejected("0x10");
        assert_size_rejected("1e6");
}

static void test_duration_units(void **state)
{
        assert_duration("500ms", 500);
        assert_duration("10s", 10000);
        assert_duration("2m", 120000);
        assert_duration("1h", 3600000);
        assert_duration("0", 0);
        assert_duration("0s", 0);
        assert_duration("0ms", 0);
}

static void test_duration_bare_number_is_seconds(void **state)
{
        assert_duration("10", 10000);
        assert_duration("1", 1000);
}

static void test_duration_fractions(void **state)
{
        assert_duration("1.5s", 1500);
        assert_duration("0.5s", 500);
        assert_duration(".5s", 500);
        assert_duration("0.25m", 15000);
        assert_duration("1.5", 1500);
        assert_duration("2.5ms", 3); /* rounded to the nearest millisecond */
}

static void test_duration_large(void **state)
{
        assert_duration("1000h", 3600000000ULL);
        assert_duration_rejected("1e20s");
        assert_duration_rejected("1e400s");
        assert_duration_rejected("99999999999999999999h");
}

static void test_duration_rejects_junk(void **state)
{
        assert_duration_rejected(NULL);
        assert_duration_rejected("");
        assert_duration_rejected("5x");
        assert_duration_rejected("s");
        assert_duration_rejected("ms");
        assert_duration_rejected("-1s");
        assert_duration_rejected("-0.5s");
        assert_duration_rejected("+1s");
        assert_duration_rejected(" 1s");
        assert_duration_rejected("1s ");
        assert_duration_rejected("1 s");
        assert_duration_rejected("10sec");
        assert_duration_rejected("1m30s");
        assert_duration_rejected("inf");
        assert_duration_rejected("nan");
        assert_duration_rejected("1d");
}

static void test_u64_valid(void **state)
{
        assert_u64("0", 10, 0);
        assert_u64("10", 10, 10);
        assert_u64("7", UINT64_MAX, 7);
        assert_u64("0064", 100, 64);
        assert_u64("18446744073709551615", UINT64_MAX, UINT64_MAX);
}

static void test_u64_above_max(void **state)
{
        assert_u64_rejected("11", 10);
        assert_u64_rejected("1", 0);
        assert_u64_rejected("18446744073709551616", UINT64_MAX);
        assert_u64_rejected("99999999999999999999999", UINT64_MAX);
}

static void test_u64_rejects_junk(void **state)
{
        assert_u64_rejected(NULL, 10);
        assert_u64_rejected("", 10);
        assert_u64_rejected("-1", 10);
        assert_u64_rejected("+1", 10);
        assert_u64_rejected(" 1", 10);
        assert_u64_rejected("1 ", 10);
        assert_u64_rejected("1a", 10);
        assert_u64_rejected("1.0", 10);
        assert_u64_rejected("0x1", 10);
        assert_u64_rejected("abc", 10);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_size_plain_bytes),
                cmocka_unit_test(test_size_suffixes),
                cmocka_unit_test(test_size_byte_spellings),
                cmocka_unit_test(test_size_edges),
                cmocka_unit_test(test_size_rejects_junk),
                cmocka_unit_test(test_duration_units),
                cmocka_unit_test(test_duration_bare_number_is_seconds),
                cmocka_unit_test(test_duration_fractions),
                cmocka_unit_test(test_duration_large),
                cmocka_unit_test(test_duration_rejects_junk),
                cmocka_unit_test(test_u64_valid),
                cmocka_unit_test(test_u64_above_max),
                cmocka_unit_test(test_u64_rejects_junk),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
