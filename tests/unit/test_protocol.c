/* Unit tests for protocol/protocol.h: round trips of every message type (NUL bytes inside code,
 * stdin and output, empty fields, every count at its bound), a malformed-message suite (every
 * truncation point, wrong magic/version/type, lengths past the end, counts over bounds, NUL in
 * strings, bad flags and enums, trailing bytes), a deterministic fuzz loop; and for
 * protocol/transport.h, the SOCK_SEQPACKET transport (inline and memfd messages, oversize and
 * forged records, hang-up).
 *
 * Every decode runs on an exact-size heap copy, so that a sanitizer build catches any read past
 * the end. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "protocol/protocol.h"
#include "protocol/transport.h"

#define MIB (1024u * 1024u)

static const char test_id[] = "0123456789abcdef0123456789abcdef";

/* Decodes a private exact-size copy of buf. */
static int decode_copy(const void *buf, size_t len, struct sbx_message *message,
                       struct sbx_error *err, void **copy_out)
{
        void *copy = malloc(len ? len : 1);
        assert_non_null(copy);
        memcpy(copy, buf, len);
        int rc = sbx_message_decode(copy, len, message, err);
        if (copy_out != NULL)
                *copy_out = copy;
        else
                free(copy);
        return rc;
}

static void expect_malformed(const void *buf, size_t len, const char *needle)
{
        static struct sbx_message message;
        struct sbx_error err = {0};
        assert_int_equal(decode_copy(buf, len, &message, &err, NULL), -1);
        assert_int_equal(err.code, EBADMSG);
        if (needle != NULL && strstr(err.message, needle) == NULL)
                fail_msg("error '%s' does not mention '%s'", err.message, needle);
}

static struct sbx_limits test_limits(void)
{
        return (struct sbx_limits){
                .wall_ms = 5000,
                .cpu_ms = 4000,
                .memory_bytes = 128 * MIB,
                .pids = 32,
                .disk_bytes = 16 * MIB,
                .output_bytes = MIB,
                .open_files = 64,
                .cpu_millicores = 1500,
        };
}

static void assert_limits_equal(const struct sbx_limits *a, const struct sbx_limits *b)
{
        /* Field by field: the struct ends in padding after cpu_millicores. */
        assert_int_equal(a->wall_ms, b->wall_ms);
        assert_int_equal(a->cpu_ms, b->cpu_ms);
        assert_int_equal(a->memory_bytes, b->memory_bytes);
        assert_int_equal(a->pids, b->pids);
        assert_int_equal(a->disk_bytes, b->disk_bytes);
        assert_int_equal(a->output_bytes, b->output_bytes);
        assert_int_equal(a->open_files, b->open_files);
        assert_int_equal(a->cpu_millicores, b->cpu_millicores);
}

/* ---- Round trips ----------------------------------------------------------------------------- */

static void test_run_code_round_trip(void **state)
{
        (void)state;
        static const char code[] = "print('a\0b')\n"; /* a NUL inside the program */
        static const char input[] = "in\0put";
        const char *args[] = {"one", "", "three with spaces"};
        const char *env[] = {"FOO=bar", "EMPTY="};
        struct sbx_request request = {
                .language = "python",
                .code = code,
                .code_size = sizeof(code) - 1,
                .args = args,
                .n_args = 3,
                .env = env,
                .n_env = 2,
                .stdin_data = input,
                .stdin_size = sizeof(input) - 1,
                .limits = test_limits(),
                .backend = "native",
                .tenant = "acme",
                .test = {.fail_step = "exec", .disabled_layers = SBX_LAYER_SECCOMP},
                .cancel_fd = 7,
        };
        void *buf;
        size_t len;
        struct sbx_error err = {0};
        assert_int_equal(sbx_message_encode_run(42, test_id, &request, &buf, &len, &err), 0);

        static struct sbx_message m;
        void *copy;
        assert_int_equal(decode_copy(buf, len, &m, &err, &copy), 0);
        assert_int_equal(m.header.type, SBX_MESSAGE_RUN);
        assert_int_equal(m.header.request_id, 42);
        assert_int_equal(m.header.body_len, len - SBX_MESSAGE_HEADER_BYTES);
        const struct sbx_request *r = &m.body.run.request;
        assert_string_equal(m.body.run.execution_id, test_id);
        assert_string_equal(r->language, "python");
        assert_string_equal(r->backend, "native");
        assert_string_equal(r->tenant, "acme");
        assert_int_equal(r->code_size, sizeof(code) - 1);
        assert_memory_equal(r->code, code, sizeof(code) - 1);
        assert_int_equal(r->code[r->code_size], '\0'); /* blobs are terminated too */
        assert_null(r->entrypoint);
        assert_int_equal(r->n_files, 0);
        assert_int_equal(r->n_args, 3);
        for (size_t i = 0; i < 3; i++)
                assert_string_equal(r->args[i], args[i]);
        assert_int_equal(r->n_env, 2);
        assert_string_equal(r->env[0], "FOO=bar");
        assert_string_equal(r->env[1], "EMPTY=");
        assert_int_equal(r->stdin_size, sizeof(input) - 1);
        assert_memory_equal(r->stdin_data, input, sizeof(input) - 1);
        struct sbx_limits limits = test_limits();
        assert_limits_equal(&r->limits, &limits);
        /* Never carried: no message can turn a layer off or hand the engine an fd number. */
        assert_null(r->test.fail_step);
        assert_int_equal(r->test.disabled_layers, 0);
        assert_int_equal(r->cancel_fd, -1);
        /* Zero-copy: the strings live in the buffer. */
        assert_true((const char *)r->language > (const char *)copy &&
                    (const char *)r->language < (const char *)copy + len);
        free(copy);
        free(buf);
}

static void test_run_files_round_trip(void **state)
{
        (void)state;
        static const char data[] = "#!/bin/sh\necho \0hi\n";
        struct sbx_file files[] = {
                {.path = "main.sh", .data = data, .size = sizeof(data) - 1, .executable = true},
                {.path = "lib/empty.txt", .data = NULL, .size = 0, .executable = false},
                {.path = "a/b/c.py", .data = "x", .size = 1},
        };
        struct sbx_request request = {
                .language = "sh",
                .files = files,
                .n_files = 3,
                .entrypoint = "main.sh",
                .limits = test_limits(),
        };
        void *buf;
        size_t len;
        struct sbx_error err = {0};
        assert_int_equal(sbx_message_encode_run(7, test_id, &request, &buf, &len, &err), 0);
        static struct sbx_message m;
        void *copy;
        assert_int_equal(decode_copy(buf, len, &m, &err, &copy), 0);
        const struct sbx_request *r = &m.body.run.request;
        assert_null(r->code);
        assert_null(r->backend);
        assert_string_equal(r->entrypoint, "main.sh");
        assert_int_equal(r->n_files, 3);
        for (size_t i = 0; i < 3; i++) {
                assert_string_equal(r->files[i].path, files[i].path);
                assert_int_equal(r->files[i].size, files[i].size);
                assert_int_equal(r->files[i].executable, files[i].executable);
                if (files[i].size > 0)
                        assert_memory_equal(r->files[i].data, files[i].data, files[i].size);
                assert_non_null(r->files[i].data); /* even an empty blob points at its 0 */
        }
        assert_int_equal(r->stdin_size, 0);
        assert_non_null(r->stdin_data);
        free(copy);
        free(buf);
}

static void test_run_empty_code(void **state)
{
        (void)state;
        struct sbx_request request = {.language = "bash", .code = "", .limits = test_limits()};
        void *buf;
        size_t len;
        struct sbx_error err = {0};
        assert_int_equal(sbx_message_encode_run(1, test_id, &request, &buf, &len, &err), 0);
        static struct sbx_message m;
        void *copy;
        assert_int_equal(decode_copy(buf, len, &m, &err, &copy), 0);
        /* Empty code is still code, not "no code": NULL and empty stay apart. */
        assert_non_null(m.body.run.request.code);
        assert_int_equal(m.body.run.request.code_size, 0);
        free(copy);
        free(buf);
}

/* Every count and size at its bound at once: 64 files sharing 4 MiB, 64 args of 4096 bytes, 64
 * env entries of 4096 bytes, 4 MiB of stdin. */
static void test_run_at_bounds(void **state)
{
        (void)state;
        char *blob = malloc(SBX_MAX_CODE_BYTES);
        assert_non_null(blob);
        for (size_t i = 0; i < SBX_MAX_CODE_BYTES; i++)
                blob[i] = (char)(i * 7); /* NULs included */
        static struct sbx_file files[SBX_MAX_FILES];
        static char paths[SBX_MAX_FILES][SBX_MAX_FILE_PATH + 1];
        size_t share = SBX_MAX_CODE_BYTES / SBX_MAX_FILES;
        for (size_t i = 0; i < SBX_MAX_FILES; i++) {
                /* The longest path there is: 255 bytes. */
                memset(paths[i], 'p', SBX_MAX_FILE_PATH);
                paths[i][SBX_MAX_FILE_PATH] = '\0';
                snprintf(paths[i], 8, "f%03zu/", i);
                paths[i][5] = 'p'; /* undo snprintf's terminator */
                files[i] = (struct sbx_file){
                        .path = paths[i], .data = blob + i * share, .size = share};
        }
        static char arg_storage[SBX_MAX_ARGS][SBX_MAX_ARG_BYTES + 1];
        static const char *args[SBX_MAX_ARGS];
        static char env_storage[SBX_MAX_ENV][SBX_MAX_ENV_BYTES + 1];
        static const char *env[SBX_MAX_ENV];
        for (size_t i = 0; i < SBX_MAX_ARGS; i++) {
                memset(arg_storage[i], 'a', SBX_MAX_ARG_BYTES);
                args[i] = arg_storage[i];
        }
        for (size_t i = 0; i < SBX_MAX_ENV; i++) {
                memset(env_storage[i], 'v', SBX_MAX_ENV_BYTES);
                snprintf(env_storage[i], 16, "VAR_%zu=", i);
                env_storage[i][strlen(env_storage[i])] = 'v';
                env[i] = env_storage[i];
        }
        struct sbx_request request = {
                .language = "python",
                .files = files,
                .n_files = SBX_MAX_FILES,
                .entrypoint = paths[SBX_MAX_FILES - 1],
                .args = args,
                .n_args = SBX_MAX_ARGS,
                .env = env,
                .n_env = SBX_MAX_ENV,
                .stdin_data = blob,
                .stdin_size = SBX_MAX_STDIN_BYTES,
                .limits = test_limits(),
        };
        request.limits.output_bytes = SBX_MESSAGE_MAX_OUTPUT_BYTES;
        void *buf;
        size_t len;
        struct sbx_error err = {0};
        assert_int_equal(sbx_message_encode_run(9, test_id, &request, &buf, &len, &err), 0);
        assert_true(len < SBX_MESSAGE_MAX_BYTES);
        static struct sbx_message m;
        void *copy;
        assert_int_equal(decode_copy(buf, len, &m, &err, &copy), 0);
        const struct sbx_request *r = &m.body.run.request;
        assert_int_equal(r->n_files, SBX_MAX_FILES);
        assert_int_equal(r->n_args, SBX_MAX_ARGS);
        assert_int_equal(r->n_env, SBX_MAX_ENV);
        assert_int_equal(strlen(r->args[SBX_MAX_ARGS - 1]), SBX_MAX_ARG_BYTES);
        assert_int_equal(strlen(r->env[SBX_MAX_ENV - 1]), SBX_MAX_ENV_BYTES);
        assert_int_equal(strlen(r->files[0].path), SBX_MAX_FILE_PATH);
        assert_memory_equal(r->files[SBX_MAX_FILES - 1].data, blob + (SBX_MAX_FILES - 1) * share,
                            share);
        assert_memory_equal(r->stdin_data, blob, SBX_MAX_STDIN_BYTES);
        free(copy);
        free(buf);

        /* One past each bound is refused by the encoder (which runs the decoder). */
        struct sbx_request over = request;
        over.stdin_size = SBX_MAX_STDIN_BYTES + 1;
        char *bigger = malloc(SBX_MAX_STDIN_BYTES + 1);
        assert_non_null(bigger);
        memset(bigger, 0, SBX_MAX_STDIN_BYTES + 1);
        over.stdin_data = bigger;
        assert_int_equal(sbx_message_encode_run(9, test_id, &over, &buf, &len, &err), -1);
        assert_int_equal(err.code, EINVAL);
        over = request;
        over.n_args = SBX_MAX_ARGS + 1;
        assert_int_equal(sbx_message_encode_run(9, test_id, &over, &buf, &len, &err), -1);
        assert_int_equal(err.code, EINVAL);
        over = request;
        files[0].size = share + 1; /* the files together pass 4 MiB by one byte */
        assert_int_equal(sbx_message_encode_run(9, test_id, &over, &buf, &len, &err), -1);
        assert_int_equal(err.code, EINVAL);
        files[0].size = share;
        over = request;
        over.limits.output_bytes = SBX_MESSAGE_MAX_OUTPUT_BYTES + 1ull;
        assert_int_equal(sbx_message_encode_run(9, test_id, &over, &buf, &len, &err), -1);
        free(bigger);
        free(blob);
}

static void test_run_encoder_refuses(void **state)
{
        (void)state;
        const char *long_arg_storage = NULL;
        char *long_arg = malloc(SBX_MAX_ARG_BYTES + 2);
        assert_non_null(long_arg);
        memset(long_arg, 'x', SBX_MAX_ARG_BYTES + 1);
        long_arg[SBX_MAX_ARG_BYTES + 1] = '\0';
        long_arg_storage = long_arg;
        const char *bad_env[] = {"LD_PRELOAD=/x"};
        const char *path_env[] = {"PATH=/evil"};
        struct sbx_file dotdot[] = {{.path = "../x", .data = "", .size = 0}};
        struct sbx_file good[] = {{.path = "x.py", .data = "", .size = 0}};

        struct {
                const char *name;
                struct sbx_request request;
                const char *id;
        } cases[] = {
                {"no language", {.code = "x"}, test_id},
                {"empty language", {.language = "", .code = "x"}, test_id},
                {"no program", {.language = "python"}, test_id},
                {"long arg",
                 {.language = "python", .code = "x", .args = &long_arg_storage, .n_args = 1},
                 test_id},
                {"LD_ env",
                 {.language = "python", .code = "x", .env = bad_env, .n_env = 1},
                 test_id},
                {"PATH env",
                 {.language = "python", .code = "x", .env = path_env, .n_env = 1},
                 test_id},
                {"dotdot path",
                 {.language = "python", .files = dotdot, .n_files = 1, .entrypoint = "../x"},
                 test_id},
                {"entrypoint not a file",
                 {.language = "python", .files = good, .n_files = 1, .entrypoint = "y.py"},
                 test_id},
                {"files without entrypoint",
                 {.language = "python", .files = good, .n_files = 1},
                 test_id},
                {"code and files",
                 {.language = "python",
                  .code = "x",
                  .files = good,
                  .n_files = 1,
                  .entrypoint = "x.py"},
                 test_id},
                {"upper-case id",
                 {.language = "python", .code = "x"},
                 "0123456789ABCDEF0123456789abcdef"},
                {"short id", {.language = "python", .code = "x"}, "0123"},
                {"long id",
                 {.language = "python", .code = "x"},
                 "0123456789abcdef0123456789abcdef0"},
        };
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                struct sbx_request request = cases[i].request;
                request.limits = test_limits();
                void *buf = NULL;
                size_t len;
                struct sbx_error err = {0};
                if (sbx_message_encode_run(1, cases[i].id, &request, &buf, &len, &err) != -1)
                        fail_msg("case '%s' was encoded", cases[i].name);
                assert_int_equal(err.code, EINVAL);
                assert_null(buf);
        }
        struct sbx_request zero_wall = {.language = "python", .code = "x"};
        void *buf;
        size_t len;
        struct sbx_error err = {0};
        assert_int_equal(sbx_message_encode_run(1, test_id, &zero_wall, &buf, &len, &err), -1);
        /* No limit may be "none" (0) or past its range: the engine does not trust the API
         * process to have checked (each field alone, the others valid). */
        size_t offsets[] = {offsetof(struct sbx_limits, cpu_ms),
                            offsetof(struct sbx_limits, memory_bytes),
                            offsetof(struct sbx_limits, pids),
                            offsetof(struct sbx_limits, disk_bytes),
                            offsetof(struct sbx_limits, output_bytes),
                            offsetof(struct sbx_limits, open_files)};
        for (size_t i = 0; i < sizeof(offsets) / sizeof(offsets[0]); i++) {
                struct sbx_request uncapped = {.language = "python", .code = "x"};
                uncapped.limits = test_limits();
                *(uint64_t *)((char *)&uncapped.limits + offsets[i]) = 0;
                assert_int_equal(sbx_message_encode_run(1, test_id, &uncapped, &buf, &len, &err),
                                 -1);
                *(uint64_t *)((char *)&uncapped.limits + offsets[i]) = UINT64_MAX;
                assert_int_equal(sbx_message_encode_run(1, test_id, &uncapped, &buf, &len, &err),
                                 -1);
        }
        struct sbx_request one_pid = {.language = "python", .code = "x"};
        one_pid.limits = test_limits();
        one_pid.limits.pids = 1;
        assert_int_equal(sbx_message_encode_run(1, test_id, &one_pid, &buf, &len, &err), -1);
        one_pid.limits.pids = 2;
        assert_int_equal(sbx_message_encode_run(1, test_id, &one_pid, &buf, &len, &err), 0);
        free(buf);
        free(long_arg);
}

static void fill_result(struct sbx_result *result)
{
        memset(result, 0, sizeof(*result));
        snprintf(result->id, sizeof(result->id), "%s", test_id);
        result->status = SBX_STATUS_SIGNALED;
        result->exit_code = -1;
        result->signal = 9;
        result->run.exited = false;
        result->run.exit_code = -1;
        result->run.signal = 9;
        result->run.wall_timeout = true;
        result->run.output_limit = true;
        result->run.canceled = true;
        sbx_buffer_init(&result->run.out, 1000);
        sbx_buffer_init(&result->run.err, 1000);
        assert_int_equal(sbx_buffer_append(&result->run.out, "out\0put", 7), 0);
        assert_int_equal(sbx_buffer_append(&result->run.err, "\0\0err", 5), 0);
        result->run.err.overflow = true;
        result->run.disk_known = true;
        result->run.disk_used_bytes = 1;
        result->run.disk_total_bytes = 2;
        result->run.inodes_free = 3;
        result->run.wall_us = 4;
        result->evidence = (struct sbx_evidence){5, 6, 7, 8, 9, 10, 11, 12};
        result->guest = (struct sbx_guest_evidence){
                .known = true, .counters = {21, 22, 23, 24, 25, 26, 27, 28}, .thrash_kills = 29};
        result->limits = test_limits();
        result->timing = (struct sbx_timing){13, 14, 15, 16, 17};
        result->backend = "native";
        result->pooled = true;
        snprintf(result->error, sizeof(result->error), "setup step 'x': \"quoted\"");
}

static void test_result_round_trip(void **state)
{
        (void)state;
        struct sbx_result result;
        fill_result(&result);
        void *buf;
        size_t len;
        struct sbx_error err = {0};
        assert_int_equal(sbx_message_encode_result(77, &result, &buf, &len, &err), 0);
        static struct sbx_message m;
        void *copy;
        assert_int_equal(decode_copy(buf, len, &m, &err, &copy), 0);
        const struct sbx_result *r = &m.body.result;
        assert_int_equal(m.header.request_id, 77);
        assert_string_equal(r->id, test_id);
        assert_int_equal(r->status, SBX_STATUS_SIGNALED);
        assert_int_equal(r->exit_code, -1);
        assert_int_equal(r->signal, 9);
        assert_false(r->run.exited);
        assert_int_equal(r->run.exit_code, -1);
        assert_int_equal(r->run.signal, 9);
        assert_true(r->run.wall_timeout);
        assert_true(r->run.output_limit);
        assert_true(r->run.canceled);
        assert_int_equal(r->run.out.len, 7);
        assert_memory_equal(r->run.out.data, "out\0put", 7);
        assert_int_equal(r->run.out.data[7], '\0');
        assert_false(r->run.out.overflow);
        assert_int_equal(r->run.out.cap, 1000);
        assert_int_equal(r->run.out.alloc, 0); /* borrowed */
        assert_int_equal(r->run.err.len, 5);
        assert_memory_equal(r->run.err.data, "\0\0err", 5);
        assert_true(r->run.err.overflow);
        assert_true(r->run.disk_known);
        assert_int_equal(r->run.disk_used_bytes, 1);
        assert_int_equal(r->run.disk_total_bytes, 2);
        assert_int_equal(r->run.inodes_free, 3);
        assert_int_equal(r->run.wall_us, 4);
        assert_memory_equal(&r->evidence, &result.evidence, sizeof(result.evidence));
        assert_true(r->guest.known);
        assert_memory_equal(&r->guest.counters, &result.guest.counters,
                            sizeof(result.guest.counters));
        assert_int_equal(r->guest.thrash_kills, 29);
        assert_limits_equal(&r->limits, &result.limits);
        assert_memory_equal(&r->timing, &result.timing, sizeof(result.timing));
        assert_string_equal(r->backend, "native");
        assert_true(r->pooled);
        assert_string_equal(r->error, result.error);
        assert_null(r->compile);
        free(copy);
        free(buf);
        sbx_result_free(&result);
}

static void test_result_with_its_compile_stage_round_trips(void **state)
{
        (void)state;
        struct sbx_result result;
        fill_result(&result);
        result.status = SBX_STATUS_COMPILE_ERROR;
        struct sbx_result *compile = calloc(1, sizeof(*compile));
        assert_non_null(compile);
        fill_result(compile);
        compile->id[0] = '\0';
        compile->status = SBX_STATUS_EXIT_NONZERO;
        compile->cached = true;
        compile->guest = (struct sbx_guest_evidence){0}; /* a backend without a guest kernel */
        result.compile = compile;
        void *buf;
        size_t len;
        struct sbx_error err = {0};
        assert_int_equal(sbx_message_encode_result(5, &result, &buf, &len, &err), 0);
        static struct sbx_message m;
        void *copy;
        assert_int_equal(decode_copy(buf, len, &m, &err, &copy), 0);
        const struct sbx_result *r = &m.body.result;
        assert_int_equal(r->status, SBX_STATUS_COMPILE_ERROR);
        assert_false(r->cached);
        /* The compile stage decodes into the message's own storage, one level deep. */
        assert_ptr_equal(r->compile, &m.compile);
        assert_int_equal(r->compile->status, SBX_STATUS_EXIT_NONZERO);
        assert_true(r->compile->cached);
        assert_null(r->compile->compile);
        assert_string_equal(r->compile->id, "");
        assert_memory_equal(r->compile->run.out.data, "out\0put", 7);
        assert_memory_equal(&r->compile->evidence, &compile->evidence, sizeof(compile->evidence));
        assert_false(r->compile->guest.known);
        assert_true(r->guest.known);
        free(copy);
        free(buf);
        sbx_result_free(&result); /* and its compile stage */
        assert_null(result.compile);
}

static void test_result_empty_fields(void **state)
{
        (void)state;
        /* What the engine sends for a RUN it could not even decode: no id, no backend, no
         * output buffers ever initialised. */
        struct sbx_result result = {.status = SBX_STATUS_INTERNAL_ERROR, .exit_code = -1};
        snprintf(result.error, sizeof(result.error), "engine busy");
        void *buf;
        size_t len;
        struct sbx_error err = {0};
        assert_int_equal(sbx_message_encode_result(3, &result, &buf, &len, &err), 0);
        static struct sbx_message m;
        void *copy;
        assert_int_equal(decode_copy(buf, len, &m, &err, &copy), 0);
        const struct sbx_result *r = &m.body.result;
        assert_string_equal(r->id, "");
        assert_null(r->backend);
        assert_int_equal(r->run.out.len, 0);
        assert_non_null(r->run.out.data);
        assert_string_equal((const char *)r->run.out.data, "");
        assert_int_equal(r->status, SBX_STATUS_INTERNAL_ERROR);
        assert_string_equal(r->error, "engine busy");
        free(copy);
        free(buf);
}

static void test_result_status_bounds(void **state)
{
        (void)state;
        struct sbx_result result = {.status = (enum sbx_status)SBX_STATUS_COUNT};
        void *buf;
        size_t len;
        struct sbx_error err = {0};
        assert_int_equal(sbx_message_encode_result(3, &result, &buf, &len, &err), -1);
        result.status = SBX_STATUS_OK;
        result.exit_code = 256;
        assert_int_equal(sbx_message_encode_result(3, &result, &buf, &len, &err), -1);
        result.exit_code = 0;
        result.signal = 65;
        assert_int_equal(sbx_message_encode_result(3, &result, &buf, &len, &err), -1);
        result.signal = 0;
        sbx_buffer_init(&result.run.out, 2);
        result.run.out.data = (uint8_t *)"abc";
        result.run.out.len = 3; /* more kept than its cap */
        assert_int_equal(sbx_message_encode_result(3, &result, &buf, &len, &err), -1);
        result.run.out = (struct sbx_buffer){0};
        snprintf(result.id, sizeof(result.id), "not-hex");
        assert_int_equal(sbx_message_encode_result(3, &result, &buf, &len, &err), -1);
}

static void test_small_messages_round_trip(void **state)
{
        (void)state;
        enum sbx_message_type empty[] = {SBX_MESSAGE_CANCEL, SBX_MESSAGE_PING, SBX_MESSAGE_PONG,
                                         SBX_MESSAGE_STATS};
        for (size_t i = 0; i < 4; i++) {
                void *buf;
                size_t len;
                struct sbx_error err = {0};
                assert_int_equal(sbx_message_encode_empty(empty[i], 1000 + i, &buf, &len, &err), 0);
                assert_int_equal(len, SBX_MESSAGE_HEADER_BYTES);
                static struct sbx_message m;
                assert_int_equal(decode_copy(buf, len, &m, &err, NULL), 0);
                assert_int_equal(m.header.type, empty[i]);
                assert_int_equal(m.header.request_id, 1000 + i);
                assert_int_equal(m.header.magic, SBX_PROTOCOL_MAGIC);
                assert_int_equal(m.header.version, SBX_PROTOCOL_VERSION);
                free(buf);
        }
        void *buf;
        size_t len;
        struct sbx_error err = {0};
        assert_int_equal(sbx_message_encode_empty(SBX_MESSAGE_RUN, 1, &buf, &len, &err), -1);
        assert_int_equal(sbx_message_encode_empty(SBX_MESSAGE_STATS_REPLY, 1, &buf, &len, &err),
                         -1);

        struct sbx_message_stats stats = {1, 2,  3,  4,  UINT64_MAX, 6,  7,  8,
                                          9, 10, 11, 12, 13,         14, 15, 16};
        assert_int_equal(sbx_message_encode_stats_reply(5, &stats, &buf, &len, &err), 0);
        static struct sbx_message m;
        assert_int_equal(decode_copy(buf, len, &m, &err, NULL), 0);
        assert_int_equal(m.header.type, SBX_MESSAGE_STATS_REPLY);
        assert_memory_equal(&m.body.stats, &stats, sizeof(stats));
        free(buf);
        assert_string_equal(sbx_message_type_name(SBX_MESSAGE_STATS_REPLY), "STATS_REPLY");

        /* REFUSED: every reason, and a detail cut to what the protocol carries. */
        static const enum sbx_refusal reasons[] = {SBX_REFUSAL_BUSY, SBX_REFUSAL_STOPPING,
                                                   SBX_REFUSAL_INVALID, SBX_REFUSAL_FAILED};
        static const char *const names[] = {"busy", "stopping", "invalid", "failed"};
        for (size_t i = 0; i < 4; i++) {
                assert_int_equal(
                        sbx_message_encode_refused(7, reasons[i], "engine busy", &buf, &len, &err),
                        0);
                /* buf itself: the decoded pointers point into it. */
                assert_int_equal(sbx_message_decode(buf, len, &m, &err), 0);
                assert_int_equal(m.header.type, SBX_MESSAGE_REFUSED);
                assert_int_equal(m.header.request_id, 7);
                assert_int_equal(m.body.refused.reason, reasons[i]);
                assert_string_equal(m.body.refused.detail, "engine busy");
                assert_string_equal(sbx_refusal_name(reasons[i]), names[i]);
                free(buf);
        }
        char long_detail[SBX_ERROR_MESSAGE_MAX * 2];
        memset(long_detail, 'x', sizeof(long_detail) - 1);
        long_detail[sizeof(long_detail) - 1] = '\0';
        assert_int_equal(
                sbx_message_encode_refused(7, SBX_REFUSAL_BUSY, long_detail, &buf, &len, &err), 0);
        assert_int_equal(sbx_message_decode(buf, len, &m, &err), 0);
        assert_int_equal(strlen(m.body.refused.detail), SBX_ERROR_MESSAGE_MAX - 1);
        free(buf);
        /* An unknown reason is refused by the encoder's own decode. */
        assert_int_equal(sbx_message_encode_refused(7, (enum sbx_refusal)0, "x", &buf, &len, &err),
                         -1);
        assert_int_equal(sbx_message_encode_refused(7, (enum sbx_refusal)99, "x", &buf, &len, &err),
                         -1);
        assert_string_equal(sbx_refusal_name((enum sbx_refusal)99), "unknown");

        /* CONFIG: the file's bytes as they are, NUL included; no bigger than the bound. */
        static const char text[] = "[tier.x]\nmax_pids = 8\n\0tail";
        assert_int_equal(sbx_message_encode_config(text, sizeof(text), &buf, &len, &err), 0);
        assert_int_equal(sbx_message_decode(buf, len, &m, &err), 0);
        assert_int_equal(m.header.type, SBX_MESSAGE_CONFIG);
        assert_int_equal(m.header.request_id, 0);
        assert_int_equal(m.body.config.size, sizeof(text));
        assert_memory_equal(m.body.config.text, text, sizeof(text));
        /* Unasked: a CONFIG never carries a request's id. */
        uint64_t request_id = 7;
        memcpy((uint8_t *)buf + 8, &request_id, sizeof(request_id));
        assert_int_equal(decode_copy(buf, len, &m, &err, NULL), -1);
        free(buf);
        char *big = calloc(1, SBX_MESSAGE_MAX_CONFIG_BYTES + 1);
        assert_non_null(big);
        assert_int_equal(
                sbx_message_encode_config(big, SBX_MESSAGE_MAX_CONFIG_BYTES, &buf, &len, &err), 0);
        free(buf);
        assert_int_equal(
                sbx_message_encode_config(big, SBX_MESSAGE_MAX_CONFIG_BYTES + 1, &buf, &len, &err),
                -1);
        free(big);
        assert_string_equal(sbx_message_type_name(0), "unknown");
        assert_string_equal(sbx_message_type_name(999), "unknown");
}

/* ---- Malformed messages ---------------------------------------------------------------------- */

/* A hand-written message, for shapes the encoder refuses to make. */
struct raw {
        uint8_t data[4096];
        size_t len;
};

static void raw_put(struct raw *raw, const void *p, size_t n)
{
        assert_true(raw->len + n <= sizeof(raw->data));
        memcpy(raw->data + raw->len, p, n);
        raw->len += n;
}

static void raw_u8(struct raw *raw, uint8_t v)
{
        raw_put(raw, &v, 1);
}

static void raw_u32(struct raw *raw, uint32_t v)
{
        raw_put(raw, &v, 4);
}

static void raw_u64(struct raw *raw, uint64_t v)
{
        raw_put(raw, &v, 8);
}

static void raw_bytes(struct raw *raw, const void *p, uint32_t n)
{
        raw_u32(raw, n);
        raw_put(raw, p, n);
        raw_u8(raw, 0);
}

static void raw_string(struct raw *raw, const char *s)
{
        raw_bytes(raw, s, (uint32_t)strlen(s));
}

static void raw_header(struct raw *raw, uint16_t type)
{
        raw->len = 0;
        raw_u32(raw, SBX_PROTOCOL_MAGIC);
        uint16_t version = SBX_PROTOCOL_VERSION;
        raw_put(raw, &version, 2);
        raw_put(raw, &type, 2);
        raw_u64(raw, 1);
        raw_u32(raw, 0); /* body_len: raw_finish */
        raw_u32(raw, 0);
}

static void raw_finish(struct raw *raw)
{
        uint32_t body_len = (uint32_t)(raw->len - SBX_MESSAGE_HEADER_BYTES);
        memcpy(raw->data + 16, &body_len, 4);
}

static void raw_limits(struct raw *raw)
{
        struct sbx_limits l = test_limits();
        raw_u64(raw, l.wall_ms);
        raw_u64(raw, l.cpu_ms);
        raw_u64(raw, l.memory_bytes);
        raw_u64(raw, l.pids);
        raw_u64(raw, l.disk_bytes);
        raw_u64(raw, l.output_bytes);
        raw_u64(raw, l.open_files);
        raw_u32(raw, l.cpu_millicores);
}

/* The start of a RUN for code "x" up to (excluding) n_files. */
static void raw_run_start(struct raw *raw)
{
        raw_header(raw, SBX_MESSAGE_RUN);
        raw_put(raw, test_id, SBX_EXECUTION_ID_CHARS);
        raw_string(raw, "python");
        raw_u8(raw, 0); /* no backend */
        raw_u8(raw, 0); /* no tenant */
        raw_u8(raw, 1);
        raw_string(raw, "x"); /* code */
        raw_u8(raw, 0);       /* no entrypoint */
}

static void raw_run_tail(struct raw *raw)
{
        raw_bytes(raw, "", 0); /* stdin */
        raw_limits(raw);
        raw_u8(raw, 0); /* no compile limits */
        raw_u8(raw, 0); /* not streamed */
        raw_finish(raw);
}

static void test_raw_builder_matches_encoder(void **state)
{
        (void)state;
        struct raw raw;
        raw_run_start(&raw);
        raw_u32(&raw, 0);
        raw_u32(&raw, 0);
        raw_u32(&raw, 0);
        raw_run_tail(&raw);
        struct sbx_request request = {
                .language = "python", .code = "x", .code_size = 1, .limits = test_limits()};
        void *buf;
        size_t len;
        struct sbx_error err = {0};
        assert_int_equal(sbx_message_encode_run(1, test_id, &request, &buf, &len, &err), 0);
        assert_int_equal(len, raw.len);
        assert_memory_equal(buf, raw.data, len);
        free(buf);
}

static void test_every_truncation_fails(void **state)
{
        (void)state;
        const char *args[] = {"a", "bb"};
        const char *env[] = {"X=1"};
        struct sbx_file files[] = {{.path = "m.py", .data = "print(1)", .size = 8},
                                   {.path = "d/e", .data = "", .size = 0, .executable = true}};
        struct sbx_request request = {.language = "python",
                                      .backend = "native",
                                      .files = files,
                                      .n_files = 2,
                                      .entrypoint = "m.py",
                                      .args = args,
                                      .n_args = 2,
                                      .env = env,
                                      .n_env = 1,
                                      .stdin_data = "in",
                                      .stdin_size = 2,
                                      .limits = test_limits()};
        void *buf;
        size_t len;
        struct sbx_error err = {0};
        assert_int_equal(sbx_message_encode_run(1, test_id, &request, &buf, &len, &err), 0);
        uint8_t *cut = malloc(len);
        assert_non_null(cut);
        for (size_t n = 0; n < len; n++) {
                /* As is: body_len no longer matches. */
                expect_malformed(buf, n, NULL);
                /* With body_len patched to match, so that the body itself is what ends early. */
                if (n >= SBX_MESSAGE_HEADER_BYTES) {
                        memcpy(cut, buf, n);
                        uint32_t body_len = (uint32_t)(n - SBX_MESSAGE_HEADER_BYTES);
                        memcpy(cut + 16, &body_len, 4);
                        expect_malformed(cut, n, "RUN");
                }
        }
        free(cut);

        /* Likewise every truncation of a RESULT. */
        struct sbx_result result;
        fill_result(&result);
        free(buf);
        assert_int_equal(sbx_message_encode_result(1, &result, &buf, &len, &err), 0);
        cut = malloc(len);
        assert_non_null(cut);
        for (size_t n = SBX_MESSAGE_HEADER_BYTES; n < len; n++) {
                memcpy(cut, buf, n);
                uint32_t body_len = (uint32_t)(n - SBX_MESSAGE_HEADER_BYTES);
                memcpy(cut + 16, &body_len, 4);
                expect_malformed(cut, n, "RESULT");
        }
        free(cut);
        free(buf);
        sbx_result_free(&result);
}

static void test_bad_headers(void **state)
{
        (void)state;
        void *buf;
        size_t len;
        struct sbx_error err = {0};
        assert_int_equal(sbx_message_encode_empty(SBX_MESSAGE_PING, 1, &buf, &len, &err), 0);
        uint8_t m[SBX_MESSAGE_HEADER_BYTES + 1];
        memcpy(m, buf, len);
        free(buf);

        m[0] ^= 1;
        expect_malformed(m, SBX_MESSAGE_HEADER_BYTES, "magic");
        m[0] ^= 1;
        uint16_t version = SBX_PROTOCOL_VERSION + 1;
        memcpy(m + 4, &version, 2);
        expect_malformed(m, SBX_MESSAGE_HEADER_BYTES, "version");
        version = 0;
        memcpy(m + 4, &version, 2);
        expect_malformed(m, SBX_MESSAGE_HEADER_BYTES, "version");
        version = SBX_PROTOCOL_VERSION;
        memcpy(m + 4, &version, 2);
        uint16_t types[] = {0, SBX_MESSAGE_SESSION_EVENT + 1, 0xffff};
        for (size_t i = 0; i < 3; i++) {
                memcpy(m + 6, &types[i], 2);
                expect_malformed(m, SBX_MESSAGE_HEADER_BYTES, "type");
        }
        uint16_t ping = SBX_MESSAGE_PING;
        memcpy(m + 6, &ping, 2);
        m[20] = 1; /* reserved */
        expect_malformed(m, SBX_MESSAGE_HEADER_BYTES, "reserved");
        m[20] = 0;
        /* A body on an empty message: trailing bytes. */
        m[SBX_MESSAGE_HEADER_BYTES] = 0;
        uint32_t body_len = 1;
        memcpy(m + 16, &body_len, 4);
        expect_malformed(m, sizeof(m), "trailing");
        /* body_len pointing past the end. */
        body_len = 0xffffffffu;
        memcpy(m + 16, &body_len, 4);
        expect_malformed(m, SBX_MESSAGE_HEADER_BYTES, "body_len");
        expect_malformed(m, 0, "shorter");
        expect_malformed(m, 23, "shorter");

        struct sbx_message_header header;
        assert_int_equal(sbx_message_decode_header(m, SBX_MESSAGE_HEADER_BYTES, &header, &err), -1);
        assert_int_equal(header.request_id, 1); /* still readable for a reply */
}

static void test_bad_run_bodies(void **state)
{
        (void)state;
        struct raw raw;

        /* A length far past the end. */
        raw_header(&raw, SBX_MESSAGE_RUN);
        raw_put(&raw, test_id, SBX_EXECUTION_ID_CHARS);
        raw_u32(&raw, 6);
        raw_put(&raw, "python", 6); /* missing terminator, then the end */
        raw_finish(&raw);
        expect_malformed(raw.data, raw.len, "language");
        raw_header(&raw, SBX_MESSAGE_RUN);
        raw_put(&raw, test_id, SBX_EXECUTION_ID_CHARS);
        raw_u32(&raw, 0xfffffff0u);
        raw_put(&raw, "python", 7);
        raw_finish(&raw);
        expect_malformed(raw.data, raw.len, "language");

        /* A NUL inside a string. */
        raw_header(&raw, SBX_MESSAGE_RUN);
        raw_put(&raw, test_id, SBX_EXECUTION_ID_CHARS);
        raw_bytes(&raw, "py\0thon", 7);
        raw_finish(&raw);
        expect_malformed(raw.data, raw.len, "NUL");

        /* A terminator that is not 0. */
        raw_header(&raw, SBX_MESSAGE_RUN);
        raw_put(&raw, test_id, SBX_EXECUTION_ID_CHARS);
        raw_u32(&raw, 6);
        raw_put(&raw, "pythonX", 7);
        raw_finish(&raw);
        expect_malformed(raw.data, raw.len, "terminated");

        /* Upper-case execution id. */
        raw_header(&raw, SBX_MESSAGE_RUN);
        raw_put(&raw, "0123456789ABCDEF0123456789abcdef", SBX_EXECUTION_ID_CHARS);
        raw_finish(&raw);
        expect_malformed(raw.data, raw.len, "execution_id");

        /* A flag that is neither 0 nor 1. */
        raw_header(&raw, SBX_MESSAGE_RUN);
        raw_put(&raw, test_id, SBX_EXECUTION_ID_CHARS);
        raw_string(&raw, "python");
        raw_u8(&raw, 2);
        raw_finish(&raw);
        expect_malformed(raw.data, raw.len, "flag");

        /* Counts over their bounds, followed by as many valid elements. */
        raw_run_start(&raw);
        raw_u32(&raw, SBX_MAX_ARGS + 1); /* n_files */
        raw_finish(&raw);
        expect_malformed(raw.data, raw.len, "n_files");
        raw_run_start(&raw);
        raw_u32(&raw, 0);
        raw_u32(&raw, SBX_MAX_ARGS + 1);
        for (int i = 0; i < SBX_MAX_ARGS + 1; i++)
                raw_string(&raw, "a");
        raw_u32(&raw, 0);
        raw_run_tail(&raw);
        expect_malformed(raw.data, raw.len, "args");
        raw_run_start(&raw);
        raw_u32(&raw, 0);
        raw_u32(&raw, 0);
        raw_u32(&raw, 0xffffffffu);
        raw_finish(&raw);
        expect_malformed(raw.data, raw.len, "env");

        /* An env entry the engine does not allow. */
        raw_run_start(&raw);
        raw_u32(&raw, 0);
        raw_u32(&raw, 0);
        raw_u32(&raw, 1);
        raw_string(&raw, "LD_PRELOAD=/tmp/x.so");
        raw_run_tail(&raw);
        expect_malformed(raw.data, raw.len, "env[0]");

        /* A file path escaping the workspace. */
        raw_header(&raw, SBX_MESSAGE_RUN);
        raw_put(&raw, test_id, SBX_EXECUTION_ID_CHARS);
        raw_string(&raw, "python");
        raw_u8(&raw, 0); /* no backend */
        raw_u8(&raw, 0); /* no tenant */
        raw_u8(&raw, 0); /* no code */
        raw_u8(&raw, 1);
        raw_string(&raw, "ok.py");
        raw_u32(&raw, 1);
        raw_string(&raw, "/etc/passwd");
        raw_u8(&raw, 0);
        raw_bytes(&raw, "", 0);
        raw_u32(&raw, 0);
        raw_u32(&raw, 0);
        raw_run_tail(&raw);
        expect_malformed(raw.data, raw.len, "files[0].path");

        /* The wall deadline must be there (it is what ends a worker). */
        raw_run_start(&raw);
        raw_u32(&raw, 0);
        raw_u32(&raw, 0);
        raw_u32(&raw, 0);
        raw_bytes(&raw, "", 0);
        raw_u64(&raw, 0); /* wall_ms */
        for (int i = 0; i < 6; i++)
                raw_u64(&raw, 1);
        raw_u32(&raw, 1000);
        raw_u8(&raw, 0); /* no compile limits */
        raw_u8(&raw, 0); /* not streamed */
        raw_finish(&raw);
        expect_malformed(raw.data, raw.len, "wall_ms");

        /* Compile limits, when given, are checked like the run's. */
        raw_run_start(&raw);
        raw_u32(&raw, 0);
        raw_u32(&raw, 0);
        raw_u32(&raw, 0);
        raw_bytes(&raw, "", 0);
        raw_limits(&raw);
        raw_u8(&raw, 1);
        raw_u64(&raw, 1); /* wall_ms */
        raw_u64(&raw, 1);
        raw_u64(&raw, 1); /* memory_bytes: below the least */
        for (int i = 0; i < 4; i++)
                raw_u64(&raw, 1u << 20);
        raw_u32(&raw, 1000);
        raw_u8(&raw, 0); /* not streamed */
        raw_finish(&raw);
        expect_malformed(raw.data, raw.len, "compile_limits.memory_mb");

        /* A valid RUN plus one byte. */
        raw_run_start(&raw);
        raw_u32(&raw, 0);
        raw_u32(&raw, 0);
        raw_u32(&raw, 0);
        raw_bytes(&raw, "", 0);
        raw_limits(&raw);
        raw_u8(&raw, 0); /* no compile limits */
        raw_u8(&raw, 0); /* not streamed */
        raw_u8(&raw, 0);
        raw_finish(&raw);
        expect_malformed(raw.data, raw.len, "trailing");
}

static void test_bad_result_bodies(void **state)
{
        (void)state;
        struct sbx_result result;
        fill_result(&result);
        void *buf;
        size_t len;
        struct sbx_error err = {0};
        assert_int_equal(sbx_message_encode_result(1, &result, &buf, &len, &err), 0);
        sbx_result_free(&result);
        uint8_t *m = buf;
        /* Layout: header, id (4 + 32 + 1), status. */
        size_t status_at = SBX_MESSAGE_HEADER_BYTES + 4 + SBX_EXECUTION_ID_CHARS + 1;
        uint32_t status = (uint32_t)SBX_STATUS_COUNT;
        uint32_t saved;
        memcpy(&saved, m + status_at, 4);
        memcpy(m + status_at, &status, 4);
        expect_malformed(m, len, "status");
        memcpy(m + status_at, &saved, 4);
        int32_t exit_code = 300;
        memcpy(m + status_at + 4, &exit_code, 4);
        expect_malformed(m, len, "exit_code");
        exit_code = -1;
        memcpy(m + status_at + 4, &exit_code, 4);
        int32_t sig = -3;
        memcpy(m + status_at + 8, &sig, 4);
        expect_malformed(m, len, "signal");
        sig = 9;
        memcpy(m + status_at + 8, &sig, 4);
        /* stdout's length claiming more than is there. */
        size_t stdout_at = status_at + 12 + 1 + 4 + 4 + 3;
        uint32_t huge = 0x7fffffffu;
        memcpy(m + stdout_at, &huge, 4);
        expect_malformed(m, len, "stdout");
        uint32_t seven = 7;
        memcpy(m + stdout_at, &seven, 4);
        static struct sbx_message ok;
        assert_int_equal(decode_copy(m, len, &ok, &err, NULL), 0); /* restored */
        free(buf);
}

/* ---- Fuzz ------------------------------------------------------------------------------------ */

static uint64_t rng_state = 0x5eed5eed12345678ull;

static uint64_t rng_next(void)
{
        /* xorshift64*: deterministic across libcs, unlike rand(). */
        rng_state ^= rng_state >> 12;
        rng_state ^= rng_state << 25;
        rng_state ^= rng_state >> 27;
        return rng_state * 0x2545F4914F6CDD1Dull;
}

/* Re-encodes a decoded message: the encoding is canonical, so a mutation the decoder accepts
 * must come back byte for byte. */
static void reencode(const struct sbx_message *m, void **buf, size_t *len)
{
        struct sbx_error err = {0};
        int rc = -1;
        switch (m->header.type) {
        case SBX_MESSAGE_RUN:
                rc = sbx_message_encode_run(m->header.request_id, m->body.run.execution_id,
                                            &m->body.run.request, buf, len, &err);
                break;
        case SBX_MESSAGE_RESULT:
                rc = sbx_message_encode_result(m->header.request_id, &m->body.result, buf, len,
                                               &err);
                break;
        case SBX_MESSAGE_STATS_REPLY:
                rc = sbx_message_encode_stats_reply(m->header.request_id, &m->body.stats, buf, len,
                                                    &err);
                break;
        case SBX_MESSAGE_SESSION:
        case SBX_MESSAGE_SESSION_REPLY:
        case SBX_MESSAGE_SESSION_ENDED:
        case SBX_MESSAGE_SESSION_EVENT:
                rc = sbx_message_encode_session(m->header.type, m->header.request_id,
                                                &m->body.session, buf, len, &err);
                break;
        default:
                rc = sbx_message_encode_empty(m->header.type, m->header.request_id, buf, len, &err);
                break;
        }
        if (rc < 0)
                fail_msg("decoded message does not re-encode: %s", err.message);
}

/* SESSION and its answers: every field back as sent; the engine's bounds and checks. */
static void test_session_messages(void **state)
{
        (void)state;
        struct sbx_error err = {0};
        struct sbx_message_session sent = {
                .session_id = "0123456789abcdef0123456789abcdef",
                .op = SBX_SESSION_RUN,
                .fields = "{\"code\":\"x = 1\"}",
                .fields_len = 16,
                .data = (const uint8_t *)"in\0put",
                .data_len = 6,
        };
        void *buf = NULL;
        size_t len = 0;
        assert_int_equal(
                sbx_message_encode_session(SBX_MESSAGE_SESSION, 7, &sent, &buf, &len, &err), 0);
        struct sbx_message *m = malloc(sizeof(*m));
        assert_non_null(m);
        assert_int_equal(sbx_message_decode(buf, len, m, &err), 0);
        assert_int_equal(m->header.type, SBX_MESSAGE_SESSION);
        assert_string_equal(m->body.session.session_id, sent.session_id);
        assert_int_equal(m->body.session.op, SBX_SESSION_RUN);
        assert_string_equal(m->body.session.fields, sent.fields);
        assert_int_equal(m->body.session.data_len, 6);
        assert_memory_equal(m->body.session.data, "in\0put", 6);
        /* An op out of range, a session id that is not lowercase hex: refused. */
        uint32_t op = 99;
        memcpy((uint8_t *)buf + SBX_MESSAGE_HEADER_BYTES + SBX_EXECUTION_ID_CHARS, &op, 4);
        assert_int_equal(sbx_message_decode(buf, len, m, &err), -1);
        assert_non_null(strstr(err.message, "op"));
        free(buf);
        sent.session_id[0] = 'G';
        assert_int_equal(
                sbx_message_encode_session(SBX_MESSAGE_SESSION, 7, &sent, &buf, &len, &err), -1);
        sent.session_id[0] = '0';
        /* SESSION_ENDED is unasked: request id 0 only. */
        sent.error = ENOENT;
        assert_int_equal(
                sbx_message_encode_session(SBX_MESSAGE_SESSION_ENDED, 3, &sent, &buf, &len, &err),
                -1);
        assert_int_equal(
                sbx_message_encode_session(SBX_MESSAGE_SESSION_REPLY, 3, &sent, &buf, &len, &err),
                0);
        assert_int_equal(sbx_message_decode(buf, len, m, &err), 0);
        assert_int_equal(m->body.session.error, ENOENT);
        free(buf);
        free(m);
}

static void test_fuzz(void **state)
{
        (void)state;
        void *seeds[4];
        size_t seed_len[4];
        struct sbx_error err = {0};
        const char *args[] = {"a", "bb"};
        const char *env[] = {"X=1"};
        struct sbx_file files[] = {{.path = "m.py", .data = "print(1)", .size = 8},
                                   {.path = "d/e", .data = "", .size = 0, .executable = true}};
        struct sbx_request files_request = {.language = "python",
                                            .backend = "native",
                                            .files = files,
                                            .n_files = 2,
                                            .entrypoint = "m.py",
                                            .args = args,
                                            .n_args = 2,
                                            .env = env,
                                            .n_env = 1,
                                            .stdin_data = "in",
                                            .stdin_size = 2,
                                            .limits = test_limits()};
        struct sbx_request code_request = {
                .language = "bash", .code = "echo\0x", .code_size = 6, .limits = test_limits()};
        struct sbx_result result;
        fill_result(&result);
        struct sbx_message_stats stats = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
        assert_int_equal(
                sbx_message_encode_run(1, test_id, &files_request, &seeds[0], &seed_len[0], &err),
                0);
        assert_int_equal(
                sbx_message_encode_run(2, test_id, &code_request, &seeds[1], &seed_len[1], &err),
                0);
        assert_int_equal(sbx_message_encode_result(3, &result, &seeds[2], &seed_len[2], &err), 0);
        assert_int_equal(sbx_message_encode_stats_reply(4, &stats, &seeds[3], &seed_len[3], &err),
                         0);
        sbx_result_free(&result);

        static struct sbx_message m;
        unsigned accepted = 0;
        for (int iteration = 0; iteration < 10000; iteration++) {
                size_t which = rng_next() % 4;
                size_t len = seed_len[which];
                /* Sometimes cut or extend too, keeping body_len consistent half of the time. */
                uint64_t shape = rng_next() % 8;
                if (shape == 0 && len > 1)
                        len = (size_t)(rng_next() % len);
                else if (shape == 1)
                        len += (size_t)(rng_next() % 8);
                uint8_t *mutant = malloc(len ? len : 1);
                assert_non_null(mutant);
                memset(mutant, 0, len);
                memcpy(mutant, seeds[which], len < seed_len[which] ? len : seed_len[which]);
                unsigned flips = 1 + (unsigned)(rng_next() % 8);
                for (unsigned f = 0; f < flips && len > 0; f++) {
                        size_t at = (size_t)(rng_next() % len);
                        if (rng_next() % 2)
                                mutant[at] ^= (uint8_t)(1u << (rng_next() % 8));
                        else
                                mutant[at] = (uint8_t)rng_next();
                }
                if (len >= SBX_MESSAGE_HEADER_BYTES && rng_next() % 2) {
                        uint32_t body_len = (uint32_t)(len - SBX_MESSAGE_HEADER_BYTES);
                        memcpy(mutant + 16, &body_len, 4);
                }
                if (sbx_message_decode(mutant, len, &m, &err) == 0) {
                        accepted++;
                        void *again;
                        size_t again_len;
                        reencode(&m, &again, &again_len);
                        assert_int_equal(again_len, len);
                        assert_memory_equal(again, mutant, len);
                        free(again);
                } else {
                        assert_int_equal(err.code, EBADMSG);
                }
                free(mutant);
        }
        /* Flipped bytes inside blobs and counters are legal: some mutants must get through. */
        assert_true(accepted > 0);
        for (int i = 0; i < 4; i++)
                free(seeds[i]);
}

/* ---- Transport ------------------------------------------------------------------------------- */

static void socket_pair(int sv[2])
{
        assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
}

static void test_transport_inline_and_memfd(void **state)
{
        (void)state;
        int sv[2];
        socket_pair(sv);
        struct sbx_error err = {0};
        void *ping;
        size_t ping_len;
        assert_int_equal(sbx_message_encode_empty(SBX_MESSAGE_PING, 11, &ping, &ping_len, &err), 0);
        assert_int_equal(sbx_message_send(sv[0], ping, ping_len, &err), 0);

        /* A RESULT of 8 MiB: far over what one record can carry, so it goes in a memfd. */
        struct sbx_result result;
        fill_result(&result);
        sbx_buffer_free(&result.run.out);
        sbx_buffer_init(&result.run.out, 8 * MIB);
        char *chunk = malloc(8 * MIB);
        assert_non_null(chunk);
        for (size_t i = 0; i < 8 * MIB; i++)
                chunk[i] = (char)(i % 251);
        assert_int_equal(sbx_buffer_append(&result.run.out, chunk, 8 * MIB), 0);
        void *big;
        size_t big_len;
        assert_int_equal(sbx_message_encode_result(12, &result, &big, &big_len, &err), 0);
        assert_true(big_len > SBX_MESSAGE_INLINE_MAX);
        /* Sent before anything is read: the record is a bare header, whatever the size. */
        assert_int_equal(sbx_message_send(sv[0], big, big_len, &err), 0);

        void *got;
        size_t got_len;
        assert_int_equal(sbx_message_receive(sv[1], &got, &got_len, &err), 1);
        assert_int_equal(got_len, ping_len);
        assert_memory_equal(got, ping, ping_len);
        free(got);
        assert_int_equal(sbx_message_receive(sv[1], &got, &got_len, &err), 1);
        assert_int_equal(got_len, big_len);
        assert_memory_equal(got, big, big_len);
        static struct sbx_message m;
        assert_int_equal(sbx_message_decode(got, got_len, &m, &err), 0);
        assert_int_equal(m.body.result.run.out.len, 8 * MIB);
        assert_memory_equal(m.body.result.run.out.data, chunk, 8 * MIB);
        free(got);

        /* The peer hangs up: 0. */
        close(sv[0]);
        assert_int_equal(sbx_message_receive(sv[1], &got, &got_len, &err), 0);
        close(sv[1]);
        free(big);
        free(ping);
        free(chunk);
        sbx_result_free(&result);
}

static int send_raw(int fd, const void *buf, size_t len, int attached)
{
        struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
        union {
                struct cmsghdr h;
                char space[CMSG_SPACE(sizeof(int))];
        } control;
        memset(&control, 0, sizeof(control));
        struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
        if (attached >= 0) {
                msg.msg_control = control.space;
                msg.msg_controllen = sizeof(control.space);
                struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
                c->cmsg_level = SOL_SOCKET;
                c->cmsg_type = SCM_RIGHTS;
                c->cmsg_len = CMSG_LEN(sizeof(int));
                memcpy(CMSG_DATA(c), &attached, sizeof(int));
        }
        return (int)sendmsg(fd, &msg, MSG_NOSIGNAL);
}

/* Forged records are consumed and dropped, and the next real message still arrives. */
static void test_transport_refuses_forged_records(void **state)
{
        (void)state;
        int sv[2];
        socket_pair(sv);
        struct sbx_error err = {0};
        void *ping;
        size_t ping_len;
        assert_int_equal(sbx_message_encode_empty(SBX_MESSAGE_PING, 1, &ping, &ping_len, &err), 0);
        void *got;
        size_t got_len;

        /* An inline record over the inline cap. */
        size_t big = SBX_MESSAGE_INLINE_MAX + 1;
        char *junk = calloc(1, big);
        assert_non_null(junk);
        assert_int_equal(send_raw(sv[0], junk, big, -1), (int)big);
        assert_int_equal(send_raw(sv[0], ping, ping_len, -1), (int)ping_len);
        assert_int_equal(sbx_message_receive(sv[1], &got, &got_len, &err), -1);
        assert_int_equal(err.code, EMSGSIZE);
        assert_int_equal(sbx_message_receive(sv[1], &got, &got_len, &err), 1);
        free(got);

        /* An empty record while the peer is still there. */
        assert_int_equal(send_raw(sv[0], junk, 0, -1), 0);
        assert_int_equal(sbx_message_receive(sv[1], &got, &got_len, &err), -1);
        assert_int_equal(err.code, EBADMSG);

        /* A header-only record with a pipe attached instead of a sealed memfd: a reader of a
         * pipe could block forever. */
        int pipe_fds[2];
        assert_int_equal(pipe(pipe_fds), 0);
        assert_int_equal(send_raw(sv[0], ping, ping_len, pipe_fds[0]), (int)ping_len);
        assert_int_equal(sbx_message_receive(sv[1], &got, &got_len, &err), -1);
        assert_int_equal(err.code, EBADMSG);

        /* An unsealed memfd: its size could change while it is read. */
        int memfd = memfd_create("test", MFD_CLOEXEC);
        assert_true(memfd >= 0);
        assert_int_equal(write(memfd, ping, ping_len), (ssize_t)ping_len);
        assert_int_equal(send_raw(sv[0], ping, ping_len, memfd), (int)ping_len);
        assert_int_equal(sbx_message_receive(sv[1], &got, &got_len, &err), -1);
        assert_int_equal(err.code, EBADMSG);

        /* A sealed memfd whose content does not match the header it came with. */
        int sealed = memfd_create("test", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        assert_true(sealed >= 0);
        uint8_t other[SBX_MESSAGE_HEADER_BYTES];
        memcpy(other, ping, sizeof(other));
        other[8] ^= 1; /* another request_id */
        assert_int_equal(write(sealed, other, sizeof(other)), (ssize_t)sizeof(other));
        assert_int_equal(fcntl(sealed, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE), 0);
        assert_int_equal(send_raw(sv[0], ping, ping_len, sealed), (int)ping_len);
        assert_int_equal(sbx_message_receive(sv[1], &got, &got_len, &err), -1);
        assert_int_equal(err.code, EBADMSG);

        /* An fd attached to a record that is more than a header. */
        assert_int_equal(send_raw(sv[0], junk, 100, sealed), 100);
        assert_int_equal(sbx_message_receive(sv[1], &got, &got_len, &err), -1);
        assert_int_equal(err.code, EBADMSG);

        /* Still in sync: a real message gets through, and no received fd was leaked (the
         * lowest free fd is what it was). */
        int probe = dup(0);
        close(probe);
        assert_int_equal(send_raw(sv[0], ping, ping_len, -1), (int)ping_len);
        assert_int_equal(sbx_message_receive(sv[1], &got, &got_len, &err), 1);
        assert_memory_equal(got, ping, ping_len);
        free(got);
        int probe_after = dup(0);
        assert_int_equal(probe_after, probe);
        close(probe_after);

        close(pipe_fds[0]);
        close(pipe_fds[1]);
        close(memfd);
        close(sealed);
        close(sv[0]);
        close(sv[1]);
        free(junk);
        free(ping);
}

/* A passed fd (a session's channel) arrives with its message where the receiver takes one, and
 * works there; a receiver that takes none drops the record and closes the fd. */
static void test_transport_passes_a_channel(void **state)
{
        (void)state;
        int sv[2], channel[2];
        socket_pair(sv);
        socket_pair(channel);
        struct sbx_error err = {0};
        void *reply;
        size_t reply_len;
        struct sbx_message_session session = {.fields = "{}", .fields_len = 2};
        memset(session.session_id, 'a', sizeof(session.session_id) - 1);
        assert_int_equal(sbx_message_encode_session(SBX_MESSAGE_SESSION_REPLY, 5, &session, &reply,
                                                    &reply_len, &err),
                         0);
        assert_int_equal(sbx_message_send_passing(sv[0], reply, reply_len, channel[1], &err), 0);

        void *got;
        size_t got_len;
        int passed = -1;
        assert_int_equal(sbx_message_receive_passed(sv[1], &got, &got_len, &passed, &err), 1);
        assert_int_equal(got_len, reply_len);
        assert_memory_equal(got, reply, reply_len);
        free(got);
        assert_true(passed >= 0 && passed != channel[1]);
        /* The same socket as the sender's end: what goes in one comes out of the other. */
        assert_int_equal(write(channel[0], "ping", 4), 4);
        char buf[8];
        assert_int_equal(read(passed, buf, sizeof(buf)), 4);
        assert_memory_equal(buf, "ping", 4);
        close(passed);

        /* A message without an fd: none taken. */
        assert_int_equal(sbx_message_send(sv[0], reply, reply_len, &err), 0);
        passed = 7;
        assert_int_equal(sbx_message_receive_passed(sv[1], &got, &got_len, &passed, &err), 1);
        assert_int_equal(passed, -1);
        free(got);

        /* The plain receiver refuses a passed fd (only the API's dispatcher takes channels):
         * the record is dropped, the fd closed (the lowest free fd is what it was), and the
         * next message still arrives. */
        int probe = dup(0);
        close(probe);
        assert_int_equal(sbx_message_send_passing(sv[0], reply, reply_len, channel[1], &err), 0);
        assert_int_equal(sbx_message_send(sv[0], reply, reply_len, &err), 0);
        assert_int_equal(sbx_message_receive(sv[1], &got, &got_len, &err), -1);
        assert_true(sbx_message_dropped(&err));
        assert_int_equal(sbx_message_receive(sv[1], &got, &got_len, &err), 1);
        free(got);
        int probe_after = dup(0);
        assert_int_equal(probe_after, probe);
        close(probe_after);

        close(channel[0]);
        close(channel[1]);
        close(sv[0]);
        close(sv[1]);
        free(reply);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_run_code_round_trip),
                cmocka_unit_test(test_run_files_round_trip),
                cmocka_unit_test(test_run_empty_code),
                cmocka_unit_test(test_run_at_bounds),
                cmocka_unit_test(test_run_encoder_refuses),
                cmocka_unit_test(test_result_round_trip),
                cmocka_unit_test(test_result_with_its_compile_stage_round_trips),
                cmocka_unit_test(test_result_empty_fields),
                cmocka_unit_test(test_result_status_bounds),
                cmocka_unit_test(test_small_messages_round_trip),
                cmocka_unit_test(test_raw_builder_matches_encoder),
                cmocka_unit_test(test_every_truncation_fails),
                cmocka_unit_test(test_bad_headers),
                cmocka_unit_test(test_bad_run_bodies),
                cmocka_unit_test(test_bad_result_bodies),
                cmocka_unit_test(test_fuzz),
                cmocka_unit_test(test_transport_inline_and_memfd),
                cmocka_unit_test(test_transport_refuses_forged_records),
                cmocka_unit_test(test_transport_passes_a_channel),
                cmocka_unit_test(test_session_messages),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
