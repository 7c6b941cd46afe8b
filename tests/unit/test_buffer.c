/* Unit tests for util/buffer.h: the capped buffer behind stdout and stderr. The cap is the
 * promise "an output flood keeps exactly `cap` bytes and never grows the supervisor's memory
 * beyond it", so the edges around the cap are tested byte by byte. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "util/buffer.h"

static void test_init_is_empty(void **state)
{
        struct sbx_buffer buf;
        memset(&buf, 0xa5, sizeof(buf));
        sbx_buffer_init(&buf, 100);
        assert_null(buf.data);
        assert_int_equal(buf.len, 0);
        assert_int_equal(buf.cap, 100);
        assert_int_equal(buf.alloc, 0);
        assert_false(buf.overflow);
        sbx_buffer_free(&buf);
}

static void test_append_within_cap(void **state)
{
        struct sbx_buffer buf;
        sbx_buffer_init(&buf, 100);
        assert_int_equal(sbx_buffer_append(&buf, "hello ", 6), 0);
        assert_int_equal(sbx_buffer_append(&buf, "world", 5), 0);
        assert_int_equal(buf.len, 11);
        assert_memory_equal(buf.data, "hello world", 11);
        assert_int_equal(buf.data[buf.len], '\0');
        assert_false(buf.overflow);
        assert_true(buf.alloc >= buf.len);
        sbx_buffer_free(&buf);
}

static void test_fill_exactly_to_cap_is_no_overflow(void **state)
{
        struct sbx_buffer buf;
        sbx_buffer_init(&buf, 8);
        assert_int_equal(sbx_buffer_append(&buf, "0123", 4), 0);
        assert_int_equal(sbx_buffer_append(&buf, "4567", 4), 0);
        assert_int_equal(buf.len, 8);
        assert_memory_equal(buf.data, "01234567", 8);
        assert_int_equal(buf.data[8], '\0');
        assert_false(buf.overflow);
        /* An empty append at the cap offers nothing, so it drops nothing. */
        assert_int_equal(sbx_buffer_append(&buf, "", 0), 0);
        assert_false(buf.overflow);
        /* One byte more is the overflow. */
        assert_int_equal(sbx_buffer_append(&buf, "8", 1), 0);
        assert_true(buf.overflow);
        assert_int_equal(buf.len, 8);
        assert_memory_equal(buf.data, "01234567", 8);
        assert_int_equal(buf.data[8], '\0');
        sbx_buffer_free(&buf);
}

static void test_append_across_cap_keeps_prefix(void **state)
{
        struct sbx_buffer buf;
        sbx_buffer_init(&buf, 10);
        assert_int_equal(sbx_buffer_append(&buf, "abcdef", 6), 0);
        assert_int_equal(sbx_buffer_append(&buf, "ghijklmnop", 10), 0);
        assert_true(buf.overflow);
        assert_int_equal(buf.len, 10);
        assert_memory_equal(buf.data, "abcdefghij", 10);
        assert_int_equal(buf.data[10], '\0');
        assert_true(buf.alloc <= buf.cap);
        /* Once overflowed it stays overflowed and keeps the same bytes. */
        assert_int_equal(sbx_buffer_append(&buf, "zz", 2), 0);
        assert_true(buf.overflow);
        assert_int_equal(buf.len, 10);
        assert_memory_equal(buf.data, "abcdefghij", 10);
        sbx_buffer_free(&buf);
}

static void test_single_append_larger_than_cap(void **state)
{
        static uint8_t big[10000];
        for (size_t i = 0; i < sizeof(big); i++)
                big[i] = (uint8_t)(i * 7);
        struct sbx_buffer buf;
        sbx_buffer_init(&buf, 4097);
        assert_int_equal(sbx_buffer_append(&buf, big, sizeof(big)), 0);
        assert_true(buf.overflow);
        assert_int_equal(buf.len, 4097);
        assert_memory_equal(buf.data, big, 4097);
        assert_true(buf.alloc <= buf.cap);
        sbx_buffer_free(&buf);
}

static void test_empty_appends(void **state)
{
        struct sbx_buffer buf;
        sbx_buffer_init(&buf, 16);
        assert_int_equal(sbx_buffer_append(&buf, "", 0), 0);
        assert_int_equal(buf.len, 0);
        assert_false(buf.overflow);
        assert_int_equal(sbx_buffer_append(&buf, "ab", 2), 0);
        assert_int_equal(sbx_buffer_append(&buf, "xyz", 0), 0);
        assert_int_equal(buf.len, 2);
        assert_memory_equal(buf.data, "ab", 2);
        assert_false(buf.overflow);
        sbx_buffer_free(&buf);
}

static void test_zero_cap_keeps_nothing(void **state)
{
        struct sbx_buffer buf;
        sbx_buffer_init(&buf, 0);
        assert_int_equal(sbx_buffer_append(&buf, "", 0), 0);
        assert_false(buf.overflow);
        assert_int_equal(sbx_buffer_append(&buf, "x", 1), 0);
        assert_true(buf.overflow);
        assert_int_equal(buf.len, 0);
        assert_int_equal(buf.alloc, 0);
        sbx_buffer_free(&buf);
}

static void test_binary_data_with_nuls(void **state)
{
        const uint8_t bytes[] = {0x00, 0xff, 0x00, 0x80, 0x0a, 0x00};
        struct sbx_buffer buf;
        sbx_buffer_init(&buf, 64);
        assert_int_equal(sbx_buffer_append(&buf, bytes, sizeof(bytes)), 0);
        assert_int_equal(buf.len, sizeof(bytes));
        assert_memory_equal(buf.data, bytes, sizeof(bytes));
        assert_int_equal(buf.data[buf.len], '\0');
        sbx_buffer_free(&buf);
}

static void test_growth_in_small_chunks(void **state)
{
        /* A megabyte in 3-byte pieces crosses many reallocations; every byte must survive, in
         * order, and the cap must land in the middle of a piece. */
        const size_t cap = (1u << 20) + 1;
        struct sbx_buffer buf;
        sbx_buffer_init(&buf, cap);
        size_t offered = 0;
        uint8_t piece[3];
        while (offered < cap + 10) {
                for (size_t i = 0; i < sizeof(piece); i++)
                        piece[i] = (uint8_t)((offered + i) % 251);
                assert_int_equal(sbx_buffer_append(&buf, piece, sizeof(piece)), 0);
                offered += sizeof(piece);
                assert_true(buf.len <= buf.cap);
                assert_true(buf.alloc >= buf.len);
                assert_true(buf.alloc <= buf.cap);
        }
        assert_true(buf.overflow);
        assert_int_equal(buf.len, cap);
        for (size_t i = 0; i < cap; i++)
                if (buf.data[i] != (uint8_t)(i % 251))
                        fail_msg("byte %zu is %u, want %u", i, buf.data[i], (unsigned)(i % 251));
        assert_int_equal(buf.data[cap], '\0');
        sbx_buffer_free(&buf);
}

static void test_huge_cap_allocates_lazily(void **state)
{
        /* A 1 GiB cap must not cost 1 GiB for a 10-byte output. */
        struct sbx_buffer buf;
        sbx_buffer_init(&buf, (size_t)1 << 30);
        assert_int_equal(sbx_buffer_append(&buf, "0123456789", 10), 0);
        assert_int_equal(buf.len, 10);
        assert_true(buf.alloc >= 10);
        assert_true(buf.alloc <= 65536);
        sbx_buffer_free(&buf);
}

static void test_free_resets_and_allows_reuse(void **state)
{
        struct sbx_buffer buf;
        sbx_buffer_init(&buf, 4);
        assert_int_equal(sbx_buffer_append(&buf, "abcdef", 6), 0);
        assert_true(buf.overflow);
        sbx_buffer_free(&buf);
        assert_null(buf.data);
        assert_int_equal(buf.len, 0);
        assert_int_equal(buf.alloc, 0);
        assert_false(buf.overflow);
        assert_int_equal(buf.cap, 4);
        assert_int_equal(sbx_buffer_append(&buf, "xy", 2), 0);
        assert_int_equal(buf.len, 2);
        assert_memory_equal(buf.data, "xy", 2);
        assert_false(buf.overflow);
        sbx_buffer_free(&buf);
        /* Freeing an already empty buffer is harmless. */
        sbx_buffer_free(&buf);
        assert_null(buf.data);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_init_is_empty),
                cmocka_unit_test(test_append_within_cap),
                cmocka_unit_test(test_fill_exactly_to_cap_is_no_overflow),
                cmocka_unit_test(test_append_across_cap_keeps_prefix),
                cmocka_unit_test(test_single_append_larger_than_cap),
                cmocka_unit_test(test_empty_appends),
                cmocka_unit_test(test_zero_cap_keeps_nothing),
                cmocka_unit_test(test_binary_data_with_nuls),
                cmocka_unit_test(test_growth_in_small_chunks),
                cmocka_unit_test(test_huge_cap_allocates_lazily),
                cmocka_unit_test(test_free_resets_and_allows_reuse),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
