/* The agent channel (sandbox/agent.h): what the supervisor sends an exec entry's init is what
 * init receives, and a malformed or truncated message is refused rather than half-used. */
#define _GNU_SOURCE
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "model/limits.h"
#include "sandbox/agent.h"
#include "sandbox/native/rlimit.h"
#include "util/buffer.h"
#include "util/file.h"

static struct sbx_spec base_spec(void)
{
        static const char *const none[] = {NULL};
        struct sbx_spec spec = {.argv = none, .envp = none, .agent = true, .exec_on_acquire = true};
        sbx_limits_default(&spec.limits);
        return spec;
}

/* Sends spec over a socket pair and receives it as init would; returns receive's result. */
static int round_trip(const struct sbx_spec *sent, struct sbx_agent_received *received)
{
        int fds[2];
        assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
        struct sbx_error err = {0};
        assert_int_equal(sbx_agent_send_execution(fds[0], SBX_AGENT_SOCKET, sent, &err), 0);
        close(fds[0]);
        struct sbx_spec base = base_spec();
        int got = sbx_agent_receive_execution(fds[1], &base, received, &err);
        close(fds[1]);
        return got;
}

static void test_an_execution_arrives_whole(void **state)
{
        (void)state;
        const char *argv[] = {"/workspace/main", "first arg", "", NULL};
        const char *envp[] = {"PATH=/usr/bin", "HOME=/workspace", NULL};
        const struct sbx_file files[] = {
                {.path = "main",
                 .data = "\x7f"
                         "ELF\0\1",
                 .size = 6,
                 .executable = true,
                 .read_only = true},
                {.path = "dir/data.txt", .data = "", .size = 0},
        };
        struct sbx_spec sent = base_spec();
        sent.argv = argv;
        sent.envp = envp;
        sent.files = files;
        sent.n_files = 2;
        sent.limits.memory_bytes = 123 * SBX_LIMIT_MIB;
        sent.limits.pids = 7;
        struct sbx_agent_received owner;
        assert_int_equal(round_trip(&sent, &owner), 1);
        const struct sbx_spec received = owner.spec;
        assert_string_equal(received.argv[0], "/workspace/main");
        assert_string_equal(received.argv[1], "first arg");
        assert_string_equal(received.argv[2], "");
        assert_null(received.argv[3]);
        assert_string_equal(received.envp[1], "HOME=/workspace");
        assert_null(received.envp[2]);
        assert_int_equal(received.n_files, 2);
        assert_string_equal(received.files[0].path, "main");
        assert_int_equal(received.files[0].size, 6);
        assert_memory_equal(received.files[0].data,
                            "\x7f"
                            "ELF\0\1",
                            6);
        assert_true(received.files[0].executable && received.files[0].read_only);
        assert_false(received.files[1].executable || received.files[1].read_only);
        assert_int_equal(received.limits.memory_bytes, 123 * SBX_LIMIT_MIB);
        assert_int_equal(received.limits.pids, 7);
        assert_true(received.exec_on_acquire); /* the rest is base's */
        sbx_agent_free_files(&owner);
        assert_null(owner.files[0].data);
        assert_string_equal(owner.spec.argv[1], "first arg"); /* kept until the exec */
        sbx_agent_received_free(&owner);
}

static void test_a_compiles_artifact_file_travels_with_it(void **state)
{
        (void)state;
        const char *argv[] = {"/bin/sh", "-c", "build", NULL};
        const char *envp[] = {NULL};
        struct sbx_spec sent = base_spec();
        sent.argv = argv;
        sent.envp = envp;
        sent.artifact_fd = memfd_create("artifact", MFD_CLOEXEC);
        assert_true(sent.artifact_fd > 0);
        struct sbx_agent_received owner;
        assert_int_equal(round_trip(&sent, &owner), 1);
        int got = owner.spec.artifact_fd;
        assert_true(got >= 0 && got != sent.artifact_fd);
        assert_int_equal(fcntl(got, F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
        /* The same file: what the compile writes through its copy, the worker reads. */
        assert_int_equal(write(got, "built", 5), 5);
        char back[8] = {0};
        assert_int_equal(pread(sent.artifact_fd, back, sizeof(back), 0), 5);
        assert_string_equal(back, "built");
        close(got);
        sbx_agent_received_free(&owner);
        /* Without one, none arrives. */
        sent.artifact_fd = -1;
        assert_int_equal(round_trip(&sent, &owner), 1);
        assert_int_equal(owner.spec.artifact_fd, -1);
        sbx_agent_received_free(&owner);
}

/* Two files attached to the prefix: refused, and neither is kept. */
static void test_more_than_one_attached_file_is_refused(void **state)
{
        (void)state;
        int fds[2];
        assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
        int two[2] = {memfd_create("a", MFD_CLOEXEC), memfd_create("b", MFD_CLOEXEC)};
        union {
                struct cmsghdr header;
                char space[CMSG_SPACE(sizeof(two))];
        } control = {0};
        const uint8_t prefix[4] = {1, 0, 0, 0};
        struct iovec iov = {.iov_base = (void *)prefix, .iov_len = sizeof(prefix)};
        struct msghdr msg = {.msg_iov = &iov,
                             .msg_iovlen = 1,
                             .msg_control = control.space,
                             .msg_controllen = sizeof(control.space)};
        struct cmsghdr *cmsg = CMSG_FIRSTHDR(&msg);
        cmsg->cmsg_level = SOL_SOCKET;
        cmsg->cmsg_type = SCM_RIGHTS;
        cmsg->cmsg_len = CMSG_LEN(sizeof(two));
        memcpy(CMSG_DATA(cmsg), two, sizeof(two));
        assert_int_equal(sendmsg(fds[0], &msg, 0), 4);
        assert_int_equal(write(fds[0], "x", 1), 1);
        close(fds[0]);
        close(two[0]);
        close(two[1]);
        int lowest_before = dup(0);
        close(lowest_before);
        struct sbx_spec base = base_spec();
        struct sbx_agent_received received;
        struct sbx_error err = {0};
        assert_int_equal(sbx_agent_receive_execution(fds[1], &base, &received, &err), -1);
        close(fds[1]);
        /* Both received copies were closed: the lowest free fd is where it was. */
        int lowest = dup(0);
        assert_int_equal(lowest, lowest_before);
        close(lowest);
}

static void test_a_retired_entry_sees_end_of_file(void **state)
{
        (void)state;
        int fds[2];
        assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
        close(fds[0]);
        struct sbx_spec base = base_spec();
        struct sbx_agent_received received;
        struct sbx_error err = {0};
        assert_int_equal(sbx_agent_receive_execution(fds[1], &base, &received, &err), 0);
        close(fds[1]);
}

/* Writes raw bytes (a little-endian length prefix, then header) and expects a refusal. */
static void expect_refused(const char *header, size_t length, const void *tail, size_t tail_len)
{
        int fds[2];
        assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
        uint8_t prefix[4] = {(uint8_t)length, (uint8_t)(length >> 8), (uint8_t)(length >> 16),
                             (uint8_t)(length >> 24)};
        assert_int_equal(sbx_write_all(fds[0], prefix, 4), 0);
        assert_int_equal(sbx_write_all(fds[0], header, length), 0);
        if (tail_len > 0)
                assert_int_equal(sbx_write_all(fds[0], tail, tail_len), 0);
        close(fds[0]);
        struct sbx_spec base = base_spec();
        struct sbx_agent_received received;
        struct sbx_error err = {0};
        assert_int_equal(sbx_agent_receive_execution(fds[1], &base, &received, &err), -1);
        assert_int_not_equal(err.code, 0);
        assert_null(received.header); /* nothing kept */
        close(fds[1]);
}

/* The limits' part of a header: the count and every default value. */
static size_t limits_fields(char *out)
{
        struct sbx_limits limits;
        sbx_limits_default(&limits);
        size_t n = (size_t)sprintf(out, "%d", SBX_LIMIT_COUNT) + 1;
        for (size_t i = 0; i < SBX_LIMIT_COUNT; i++)
                n += (size_t)sprintf(
                             out + n, "%llu",
                             (unsigned long long)sbx_limit_get(&limits, &sbx_limit_fields[i])) +
                     1;
        return n - 1; /* the last field's NUL is not sent */
}

static void test_malformed_messages_are_refused(void **state)
{
        (void)state;
        char header[512];
        char limits[256];
        size_t n_limits = limits_fields(limits);

        /* A well-formed one, to show that what follows fails for its own reason. */
        static const char good[] = "1\0/bin/true\0"
                                   "0\0"
                                   "0\0"
                                   "/bin/true\0";
        memcpy(header, good, sizeof(good) - 1);
        memcpy(header + sizeof(good) - 1, limits, n_limits);
        {
                int fds[2];
                assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
                size_t length = sizeof(good) - 1 + n_limits;
                uint8_t prefix[4] = {(uint8_t)length, 0, 0, 0};
                assert_int_equal(sbx_write_all(fds[0], prefix, 4), 0);
                assert_int_equal(sbx_write_all(fds[0], header, length), 0);
                close(fds[0]);
                struct sbx_spec base = base_spec();
                struct sbx_agent_received received;
                struct sbx_error err = {0};
                assert_int_equal(sbx_agent_receive_execution(fds[1], &base, &received, &err), 1);
                assert_string_equal(received.spec.argv[0], "/bin/true");
                sbx_agent_received_free(&received);
                close(fds[1]);
        }

        /* No argv at all; a count that is not a number; more argv than the count allows. */
        expect_refused("0\0"
                       "0\0"
                       "0\0"
                       "x",
                       7, NULL, 0);
        expect_refused("x\0/bin/true", 11, NULL, 0);
        expect_refused("99999\0/bin/true", 15, NULL, 0);
        /* A file path leaving the workspace, unknown flags, a size past the disk. */
        static const char escape[] = "1\0/bin/true\0"
                                     "0\0"
                                     "1\0../etc/x\0"
                                     "1\0"
                                     "\0"
                                     "m\0";
        expect_refused(escape, sizeof(escape) - 1, "a", 1);
        static const char flags[] = "1\0/bin/true\0"
                                    "0\0"
                                    "1\0f\0"
                                    "1\0"
                                    "xz\0"
                                    "m\0";
        expect_refused(flags, sizeof(flags) - 1, "a", 1);
        static const char huge[] = "1\0/bin/true\0"
                                   "0\0"
                                   "1\0f\0"
                                   "99999999999\0"
                                   "\0"
                                   "m\0";
        expect_refused(huge, sizeof(huge) - 1, NULL, 0);
        /* Limits missing, out of range, or trailing fields. */
        expect_refused(good, sizeof(good) - 2, NULL, 0);
        static const char zero_limits[] = "1\0/bin/true\0"
                                          "0\0"
                                          "0\0"
                                          "/bin/true\0"
                                          "8\0"
                                          "0\0"
                                          "0\0"
                                          "0\0"
                                          "0\0"
                                          "0\0"
                                          "0\0"
                                          "0\0"
                                          "0";
        expect_refused(zero_limits, sizeof(zero_limits) - 1, NULL, 0);
        memcpy(header + sizeof(good) - 1 + n_limits, "\0extra", 6);
        expect_refused(header, sizeof(good) - 1 + n_limits + 6, NULL, 0);
        /* A file's bytes cut short by the sender hanging up. */
        static const char short_file[] = "1\0/bin/true\0"
                                         "0\0"
                                         "1\0f\0"
                                         "10\0"
                                         "x\0"
                                         "m\0";
        memcpy(header, short_file, sizeof(short_file) - 1);
        memcpy(header + sizeof(short_file) - 1, limits, n_limits);
        expect_refused(header, sizeof(short_file) - 1 + n_limits, "abc", 3);
        /* An empty or oversized header length. */
        expect_refused("", 0, NULL, 0);
}

/* A gVisor entry's loader reads its execution from a pipe (its stdin) and sets its rlimits itself:
 * the header ends with the plan's rlimits for the execution's limits, and the file's bytes follow
 * at once (what comes after them is the program's stdin). */
static void test_a_stdin_channel_carries_the_rlimits(void **state)
{
        (void)state;
        const char *argv[] = {"/usr/bin/python3", "/workspace/main.py", NULL};
        const char *envp[] = {"HOME=/workspace", NULL};
        const struct sbx_file file = {.path = "main.py", .data = "print(1)", .size = 8};
        struct sbx_spec sent = base_spec();
        sent.argv = argv;
        sent.envp = envp;
        sent.files = &file;
        sent.n_files = 1;
        sent.limits.pids = 9;
        sent.limits.open_files = 77;
        int fds[2];
        assert_int_equal(pipe(fds), 0);
        struct sbx_error err = {0};
        assert_int_equal(sbx_agent_send_execution(fds[1], SBX_AGENT_STDIN, &sent, &err), 0);
        sent.artifact_fd = fds[0]; /* nothing but bytes travels on a pipe */
        assert_int_equal(sbx_agent_send_execution(fds[1], SBX_AGENT_STDIN, &sent, &err), -1);
        close(fds[1]);
        char bytes[4096];
        ssize_t n = read(fds[0], bytes, sizeof(bytes));
        close(fds[0]);
        assert_true(n > 4);
        size_t length = (uint8_t)bytes[0] | (size_t)(uint8_t)bytes[1] << 8;
        assert_int_equal((size_t)n, 4 + length + 8);
        assert_memory_equal(bytes + 4 + length, "print(1)", 8);

        /* The fields after the limits: count, then resource, soft, hard each. */
        char *fields[256];
        size_t n_fields = 0;
        bytes[4 + length] = '\0';
        for (char *f = bytes + 4; f < bytes + 4 + length && n_fields < 256; f += strlen(f) + 1)
                fields[n_fields++] = f;
        struct rlimit_setting plan[RLIMIT_PLAN_MAX];
        size_t n_plan = rlimit_plan(&sent.limits, plan);
        assert_true(n_fields > 3 * n_plan + 1);
        size_t first = n_fields - 3 * n_plan - 1;
        assert_int_equal(strtoull(fields[first], NULL, 10), n_plan);
        for (size_t i = 0; i < n_plan; i++) {
                assert_int_equal(strtoull(fields[first + 1 + 3 * i], NULL, 10), plan[i].resource);
                assert_int_equal(strtoull(fields[first + 2 + 3 * i], NULL, 10),
                                 plan[i].value.rlim_cur);
                assert_int_equal(strtoull(fields[first + 3 + 3 * i], NULL, 10),
                                 plan[i].value.rlim_max);
                if (plan[i].resource == RLIMIT_NPROC)
                        assert_true(plan[i].value.rlim_max >= 9);
                if (plan[i].resource == RLIMIT_NOFILE)
                        assert_int_equal(plan[i].value.rlim_max, 77);
        }
        /* Before them, the limits' rows as on the socket. */
        assert_int_equal(strtoull(fields[first - SBX_LIMIT_COUNT - 1], NULL, 10), SBX_LIMIT_COUNT);
}

/* A uml entry's execution reaches its guest through a console, from a buffer: the same bytes as
 * on a stdin channel, appended to what the buffer holds; one byte past its cap is E2BIG. */
static void test_an_encoded_execution_is_what_a_stdin_channel_carries(void **state)
{
        (void)state;
        const char *argv[] = {"/usr/bin/python3", "/workspace/main.py", NULL};
        const char *envp[] = {"HOME=/workspace", NULL};
        const struct sbx_file files[] = {{.path = "main.py", .data = "print(1)", .size = 8},
                                         {.path = "d/x.bin", .data = "\0\1\2", .size = 3}};
        struct sbx_spec spec = base_spec();
        spec.argv = argv;
        spec.envp = envp;
        spec.files = files;
        spec.n_files = 2;
        int fds[2];
        assert_int_equal(pipe(fds), 0);
        struct sbx_error err = {0};
        assert_int_equal(sbx_agent_send_execution(fds[1], SBX_AGENT_STDIN, &spec, &err), 0);
        close(fds[1]);
        char sent[4096];
        ssize_t n = read(fds[0], sent, sizeof(sent));
        close(fds[0]);
        assert_true(n > 4);

        struct sbx_buffer out;
        sbx_buffer_init(&out, 2 + (size_t)n);
        assert_int_equal(sbx_buffer_append(&out, "ab", 2), 0);
        assert_int_equal(sbx_agent_encode_execution(&spec, &out, &err), 0);
        assert_int_equal(out.len, 2 + (size_t)n);
        assert_memory_equal(out.data, "ab", 2);
        assert_memory_equal(out.data + 2, sent, (size_t)n);
        sbx_buffer_free(&out);

        sbx_buffer_init(&out, (size_t)n - 1);
        assert_int_equal(sbx_agent_encode_execution(&spec, &out, &err), -1);
        assert_int_equal(err.code, E2BIG);
        sbx_buffer_free(&out);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_an_execution_arrives_whole),
                cmocka_unit_test(test_a_compiles_artifact_file_travels_with_it),
                cmocka_unit_test(test_more_than_one_attached_file_is_refused),
                cmocka_unit_test(test_a_retired_entry_sees_end_of_file),
                cmocka_unit_test(test_malformed_messages_are_refused),
                cmocka_unit_test(test_a_stdin_channel_carries_the_rlimits),
                cmocka_unit_test(test_an_encoded_execution_is_what_a_stdin_channel_carries),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
