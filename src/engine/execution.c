#define _GNU_SOURCE
#include "engine/execution.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "engine/language.h"
#include "util/cleanup.h"
#include "util/log.h"
#include "util/time.h"

#define MIB (1024ull * 1024ull)

/* The environment every program gets, and nothing else of the host's. */
static const char *const sandbox_environment[] = {
    "PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/workspace", "TMPDIR=/tmp", "LANG=C.UTF-8", NULL,
};

void sbx_limits_default(struct sbx_limits *limits)
{
        *limits = (struct sbx_limits){
            .wall_ms = 10 * 1000,
            .cpu_ms = 10 * 1000,
            .memory_bytes = 256 * MIB,
            .pids = 64,
            .disk_bytes = 64 * MIB,
            .output_bytes = 1 * MIB,
            .open_files = 256,
            .cpu_millicores = 1000,
        };
}

static void new_execution_id(char id[static 33])
{
        unsigned char bytes[16];
        if (getrandom(bytes, sizeof(bytes), 0) != (ssize_t)sizeof(bytes)) {
                /* Never expected on Linux >= 3.17; an id only needs to be unique, not secret. */
                uint64_t now = sbx_now_us();
                memcpy(bytes, &now, sizeof(now));
                memset(bytes + sizeof(now), 0, sizeof(bytes) - sizeof(now));
        }
        for (size_t i = 0; i < sizeof(bytes); i++)
                snprintf(id + 2 * i, 3, "%02x", bytes[i]);
}

/* Builds argv: the interpreter, its fixed arguments, the program file, the request's args. */
static const char **build_argv(const struct sbx_language *language,
                               const struct sbx_request *request, char *program_path)
{
        size_t fixed = 0;
        while (language->interpreter_args[fixed] != NULL)
                fixed++;
        const char **argv = calloc(fixed + request->n_args + 3, sizeof(*argv));
        if (argv == NULL)
                return NULL;
        size_t n = 0;
        argv[n++] = language->interpreter;
        for (size_t i = 0; i < fixed; i++)
                argv[n++] = language->interpreter_args[i];
        argv[n++] = program_path;
        for (size_t i = 0; i < request->n_args; i++)
                argv[n++] = request->args[i];
        argv[n] = NULL;
        return argv;
}

static void fail_internal(struct sbx_result *result, const struct sbx_error *err)
{
        result->status = SBX_STATUS_INTERNAL_ERROR;
        result->exit_code = -1;
        result->signal = 0;
        snprintf(result->error, sizeof(result->error), "%s", err->message);
}

int sbx_execute(const struct sbx_request *request, struct sbx_result *result, struct sbx_error *err)
{
        const struct sbx_language *language = sbx_language_find(request->language);
        if (language == NULL)
                return sbx_error_set(err, EINVAL, "unknown language '%s' (known: %s)",
                                     request->language ? request->language : "",
                                     sbx_language_names());
        const struct sbx_backend *backend = sbx_backend_find(request->backend);
        if (backend == NULL)
                return sbx_error_set(err, EINVAL, "unknown backend '%s'", request->backend);

        char program_path[64];
        snprintf(program_path, sizeof(program_path), "/workspace/%s", language->file_name);
        _cleanup_free_ const char **argv = build_argv(language, request, program_path);
        if (argv == NULL)
                return sbx_error_set(err, ENOMEM, "allocate argv");
        struct sbx_file program = {
            .path = language->file_name,
            .data = request->code,
            .size = request->code_size,
        };
        struct sbx_spec spec = {
            .argv = argv,
            .envp = sandbox_environment,
            .files = &program,
            .n_files = 1,
            .stdin_data = request->stdin_data,
            .stdin_size = request->stdin_size,
            .limits = request->limits,
            .network = SBX_NETWORK_NONE,
            .test = request->test,
        };

        *result = (struct sbx_result){.limits = request->limits, .backend = backend->name};
        new_execution_id(result->id);
        struct sbx_error step_err = {0};
        struct sbx_sandbox *sandbox = NULL;

        uint64_t t0 = sbx_now_us();
        if (backend->create(&spec, &sandbox, &step_err) < 0) {
                fail_internal(result, &step_err);
                result->timing.acquire_us = sbx_now_us() - t0;
                result->timing.total_us = result->timing.acquire_us;
                return 0;
        }
        uint64_t t1 = sbx_now_us();
        result->timing.acquire_us = t1 - t0;

        bool started = backend->start(sandbox, &step_err) == 0;
        uint64_t t2 = sbx_now_us();
        result->timing.setup_us = t2 - t1;
        if (!started) {
                fail_internal(result, &step_err);
        } else {
                if (backend->wait(sandbox, &result->run, &step_err) < 0)
                        fail_internal(result, &step_err);
        }
        uint64_t t3 = sbx_now_us();
        result->timing.run_us = started ? t3 - t2 : 0;

        struct sbx_error teardown_err = {0};
        if (backend->kill(sandbox, &teardown_err) < 0)
                sbx_warn("teardown: %s", teardown_err.message);
        if (backend->read_evidence(sandbox, &result->evidence, &teardown_err) < 0)
                sbx_warn("teardown: evidence: %s", teardown_err.message);
        backend->destroy(sandbox);
        uint64_t t4 = sbx_now_us();
        result->timing.teardown_us = t4 - t3;
        result->timing.total_us = t4 - t0;

        if (result->status != SBX_STATUS_INTERNAL_ERROR) {
                result->status = sbx_classify(&result->run, &result->evidence, &result->limits);
                result->exit_code = result->run.exited ? result->run.exit_code : -1;
                result->signal = result->run.exited ? 0 : result->run.signal;
        }
        return 0;
}
