/* Unit tests for util/file.h's sbx_read_all_fd: the reader behind `sandboxd run FILE`, --stdin
 * and every kernel text file. Its bound is the promise that a huge input fails with EFBIG rather
 * than growing the process without end, so the edges around it are tested byte by byte. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "util/file.h"

/* A pipe holding size bytes (pattern i % 251, NULs included), write end closed. */
static int pipe_with(size_t size)
{
        int fds[2];
        assert_int_equal(pipe(fds), 0);
        for (size_t i = 0; i < size; i++) {
                unsigned char byte = (unsigned char)(i % 251);
                assert_int_equal(write(fds[1], &byte, 1), 1);
        }
        close(fds[1]);
        return fds[0];
}

static void expect_read(size_t size, size_t max)
{
        int fd = pipe_with(size);
        char *data = NULL;
        size_t length = 12345;
        struct sbx_error err = {0};
        assert_int_equal(sbx_read_all_fd(fd, max, &data, &length, &err), 0);
        close(fd);
        assert_int_equal(length, size);
        for (size_t i = 0; i < size; i++)
                assert_int_equal((unsigned char)data[i], i % 251);
        assert_int_equal(data[size], '\0');
        free(data);
}

static void expect_too_large(size_t size, size_t max)
{
        int fd = pipe_with(size);
        char *data = NULL;
        struct sbx_error err = {0};
        assert_int_equal(sbx_read_all_fd(fd, max, &data, NULL, &err), -1);
        close(fd);
        assert_int_equal(err.code, EFBIG);
        assert_null(data);
}

static void test_empty(void **state)
{
        expect_read(0, 100);
}

static void test_binary_across_growth(void **state)
{
        /* Past the first 4096-byte buffer and one doubling, with NULs inside. */
        expect_read(10000, 1 << 20);
}

static void test_exactly_max_is_read(void **state)
{
        expect_read(100, 100);
        expect_read(8192, 8192);
}

static void test_one_byte_over_max_fails(void **state)
{
        expect_too_large(101, 100);
        expect_too_large(8193, 8192);
}

static void test_text_file_at(void **state)
{
        char path[] = "/tmp/sandboxd-test-file-XXXXXX";
        int fd = mkstemp(path);
        assert_true(fd >= 0);
        assert_int_equal(sbx_write_all(fd, "a b\nc\n", 6), 0);
        close(fd);
        char *text = NULL;
        struct sbx_error err = {0};
        assert_int_equal(sbx_read_text_at(AT_FDCWD, path, &text, &err), 0);
        unlink(path);
        assert_string_equal(text, "a b\nc\n");
        free(text);
        assert_int_equal(sbx_read_text_at(AT_FDCWD, path, &text, &err), -1);
        assert_int_equal(err.code, ENOENT);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_empty),
                cmocka_unit_test(test_binary_across_growth),
                cmocka_unit_test(test_exactly_max_is_read),
                cmocka_unit_test(test_one_byte_over_max_fails),
                cmocka_unit_test(test_text_file_at),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
