#define _GNU_SOURCE
#include "engine/execution.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/language.h"
#include "util/cleanup.h"
#include "util/log.h"
#include "util/time.h"

/* The base environment followed by the request's additions, NULL-terminated. */
static const char **build_envp(const struct sbx_request *request)
{
        size_t base = SBX_REQUEST_BASE_ENVIRONMENT_SIZE;
        const char **envp = calloc(base + request->n_env + 1, sizeof(*envp));
        if (envp == NULL)
                return NULL;
        for (size_t i = 0; i < base; i++)
                envp[i] = sbx_request_base_environment[i];
        for (size_t i = 0; i < request->n_env; i++)
                envp[base + i] = request->env[i];
        return envp;
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

struct execution_plan {
        const struct sbx_language *language;
        const struct sbx_backend *backend;
        struct sbx_file program;
        char program_path[SBX_MAX_FILE_PATH + 16];
        const char **argv;
        const char **envp;
        struct sbx_spec spec;
};

static void fail_internal(struct sbx_result *result, const struct sbx_error *err)
{
        result->status = SBX_STATUS_INTERNAL_ERROR;
        result->exit_code = -1;
        result->signal = 0;
        snprintf(result->error, sizeof(result->error), "%s", err->message);
}

/* Validates request and turns it into the spec a backend runs; plan owns argv and envp. */
static int plan_execution(const struct sbx_request *request, struct execution_plan *plan,
                          struct sbx_error *err)
{
        *plan = (struct execution_plan){0};
        plan->language = sbx_language_find(request->language);
        if (plan->language == NULL)
                return sbx_error_set(err, EINVAL, "unknown language '%s' (known: %s)",
                                     request->language ? request->language : "",
                                     sbx_language_names());
        plan->backend = sbx_backend_find(request->backend);
        if (plan->backend == NULL)
                return sbx_error_set(err, EINVAL, "unknown backend '%s'", request->backend);

        /* The API process checked it too; the engine checks again: it trusts no caller. */
        if (sbx_request_check(request, err) < 0)
                return -1;

        const struct sbx_language *language = plan->language;
        plan->program = (struct sbx_file){
                .path = language->file_name,
                .data = request->code,
                .size = request->code_size,
        };
        bool single = request->code != NULL;
        snprintf(plan->program_path, sizeof(plan->program_path), "/workspace/%s",
                 single ? language->file_name : request->entrypoint);
        plan->argv = build_argv(language, request, plan->program_path);
        plan->envp = build_envp(request);
        if (plan->argv == NULL || plan->envp == NULL)
                return sbx_error_set(err, ENOMEM, "allocate argv");
        plan->spec = (struct sbx_spec){
                .argv = plan->argv,
                .envp = plan->envp,
                .files = single ? &plan->program : request->files,
                .n_files = single ? 1 : request->n_files,
                .stdin_data = request->stdin_data,
                .stdin_size = request->stdin_size,
                .limits = request->limits,
                .network = SBX_NETWORK_NONE,
                .test = request->test,
                .cancel_fd = request->cancel_fd,
                .on_output = request->on_output,
                .output_ctx = request->output_ctx,
        };
        return 0;
}

static void plan_free(struct execution_plan *plan)
{
        free(plan->argv);
        free(plan->envp);
        plan->argv = plan->envp = NULL;
}

/* Runs a sandbox that is ready (started, and acquired when pooled) to its end, tears it down
 * and decides the status. t_ready is when the run may begin. */
static void run_to_end(const struct sbx_backend *backend, struct sbx_sandbox *sandbox, bool started,
                       struct sbx_result *result, uint64_t t0, uint64_t t_ready,
                       const struct sbx_error *setup_err)
{
        struct sbx_error step_err = {0};
        if (!started)
                fail_internal(result, setup_err);
        else if (backend->wait(sandbox, &result->run, &step_err) < 0)
                fail_internal(result, &step_err);
        uint64_t t3 = sbx_now_us();
        result->timing.run_us = started ? t3 - t_ready : 0;

        struct sbx_error teardown_err = {0};
        if (backend->kill(sandbox, &teardown_err) < 0)
                sbx_warn("teardown: %s", teardown_err.message);
        if (backend->read_evidence(sandbox, &result->evidence, &teardown_err) < 0)
                sbx_warn("teardown: evidence: %s", teardown_err.message);
        backend->destroy(sandbox);
        uint64_t t4 = sbx_now_us();
        result->timing.teardown_us = t4 - t3;
        result->timing.total_us = t4 - t0;

        if (result->run.canceled && result->status != SBX_STATUS_INTERNAL_ERROR) {
                /* Whatever the program did before, it did not finish: the caller asked to stop.
                 * Its usage and evidence so far stand. */
                result->status = SBX_STATUS_CANCELED;
                result->exit_code = -1;
                result->signal = 0;
                snprintf(result->error, sizeof(result->error), "canceled before the program ended");
        } else if (result->status != SBX_STATUS_INTERNAL_ERROR) {
                result->status = sbx_classify(&result->run, &result->evidence, &result->limits);
                result->exit_code = result->run.exited ? result->run.exit_code : -1;
                result->signal = result->run.exited ? 0 : result->run.signal;
        }
}

int sbx_execute(const struct sbx_request *request, struct sbx_result *result, struct sbx_error *err)
{
        char id[SBX_EXECUTION_ID_CHARS + 1];
        _cleanup_(plan_free) struct execution_plan plan = {0};
        if (sbx_execution_id_new(id, err) < 0 || plan_execution(request, &plan, err) < 0)
                return -1;
        const struct sbx_backend *backend = plan.backend;
        *result = (struct sbx_result){.limits = request->limits, .backend = backend->name};
        memcpy(result->id, id, sizeof(id));
        struct sbx_error step_err = {0};
        struct sbx_sandbox *sandbox = NULL;

        uint64_t t0 = sbx_now_us();
        if (backend->create(&plan.spec, &sandbox, &step_err) < 0) {
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
        run_to_end(backend, sandbox, started, result, t0, t2, &step_err);
        return 0;
}

/* ---- Warm pools ------------------------------------------------------------------------ */

/* The Python loader's source, embedded at build time from guest/python_loader.py. */
extern const char sbx_python_loader_source[];

struct sbx_pool_entry {
        const struct sbx_backend *backend;
        struct sbx_sandbox *sandbox;
        const struct sbx_language *language;
        const char *argv[4];
        struct sbx_spec spec;
};

/* The smallest memory cap a pooled request may have (see sbx_pool_request_eligible). */
#define POOL_MIN_MEMORY (32ull * 1024 * 1024)

/* The disk size pool entries are made with: their tmpfs cannot change size later, so only
 * requests for exactly this size can use one. */
static uint64_t pool_disk_bytes(void)
{
        struct sbx_limits defaults;
        sbx_limits_default(&defaults);
        return defaults.disk_bytes;
}

bool sbx_pool_supports(const char *language_name)
{
        const struct sbx_language *language = sbx_language_find(language_name);
        return language != NULL && language->pooled;
}

bool sbx_pool_request_eligible(const struct sbx_request *request)
{
        if (!sbx_pool_supports(request->language) ||
            request->limits.disk_bytes != pool_disk_bytes())
                return false;
        /* The waiting interpreter already uses ~8 MiB: a smaller cap could not be applied to it
         * (and would not leave the program room anyway); such a request runs cold. */
        if (request->limits.memory_bytes != 0 && request->limits.memory_bytes < POOL_MIN_MEMORY)
                return false;
        if (request->test.fail_step != NULL || request->test.disabled_layers != 0)
                return false;
        /* PYTHON* variables change how the interpreter starts (PYTHONPATH, PYTHONHASHSEED...);
         * a pre-started one cannot honour them, so such a request runs cold. */
        for (size_t i = 0; i < request->n_env; i++)
                if (strncmp(request->env[i], "PYTHON", 6) == 0)
                        return false;
        return true;
}

int sbx_pool_entry_create(const char *language_name, const char *backend_name,
                          struct sbx_pool_entry **out, struct sbx_error *err)
{
        if (!sbx_pool_supports(language_name))
                return sbx_error_set(err, EINVAL, "no warm pool for language '%s'", language_name);
        const struct sbx_backend *backend = sbx_backend_find(backend_name);
        if (backend == NULL || backend->acquire == NULL)
                return sbx_error_set(err, EINVAL, "backend '%s' has no warm pools",
                                     backend_name ? backend_name : "");
        struct sbx_pool_entry *entry = calloc(1, sizeof(*entry));
        if (entry == NULL)
                return sbx_error_set(err, ENOMEM, "allocate a pool entry");
        entry->backend = backend;
        entry->language = sbx_language_find(language_name);
        entry->argv[0] = entry->language->interpreter;
        entry->argv[1] = "-c";
        entry->argv[2] = sbx_python_loader_source;
        entry->argv[3] = NULL;
        entry->spec = (struct sbx_spec){
                .argv = entry->argv,
                .envp = sbx_request_base_environment,
                .network = SBX_NETWORK_NONE,
                .agent = true,
                .cancel_fd = -1,
        };
        /* Until acquire sets a request's limits, the loader lives under loose ones, so that
         * acquire only ever lowers them: the kernel refuses to raise some hard rlimits of
         * another process even to real root (RLIMIT_STACK, measured here), and the idle loader
         * is sandboxd's own code, not a tenant's. */
        sbx_limits_default(&entry->spec.limits);
        entry->spec.limits.memory_bytes = 0; /* no cgroup cap; STACK hard unlimited */
        entry->spec.limits.cpu_ms = 0;
        entry->spec.limits.pids = 0;
        entry->spec.limits.open_files = 0;
        if (backend->create(&entry->spec, &entry->sandbox, err) < 0) {
                free(entry);
                return -1;
        }
        if (backend->start(entry->sandbox, err) < 0) {
                sbx_pool_entry_destroy(entry);
                return -1;
        }
        *out = entry;
        return 0;
}

void sbx_pool_entry_destroy(struct sbx_pool_entry *entry)
{
        if (entry == NULL)
                return;
        if (entry->sandbox != NULL)
                entry->backend->destroy(entry->sandbox);
        free(entry);
}

int sbx_pool_entry_execute(struct sbx_pool_entry *entry, const struct sbx_request *request,
                           struct sbx_result *result, struct sbx_error *err)
{
        char id[SBX_EXECUTION_ID_CHARS + 1];
        _cleanup_(plan_free) struct execution_plan plan = {0};
        if (!sbx_pool_request_eligible(request)) {
                sbx_pool_entry_destroy(entry);
                return sbx_error_set(err, EINVAL, "request cannot use a warm pool entry");
        }
        if (sbx_execution_id_new(id, err) < 0 || plan_execution(request, &plan, err) < 0) {
                sbx_pool_entry_destroy(entry);
                return -1;
        }
        const struct sbx_backend *backend = entry->backend;
        struct sbx_sandbox *sandbox = steal_pointer(&entry->sandbox);
        sbx_pool_entry_destroy(entry);

        *result = (struct sbx_result){
                .limits = request->limits, .backend = backend->name, .pooled = true};
        memcpy(result->id, id, sizeof(id));
        struct sbx_error step_err = {0};
        uint64_t t0 = sbx_now_us();
        bool acquired = backend->acquire(sandbox, &plan.spec, &step_err) == 0;
        uint64_t t1 = sbx_now_us();
        result->timing.acquire_us = t1 - t0;
        run_to_end(backend, sandbox, acquired, result, t0, t1, &step_err);
        return 0;
}
