#define _GNU_SOURCE
#include "engine/execution.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "engine/compile_cache.h"
#include "model/backend.h"
#include "model/language.h"
#include "sandbox/agent.h"
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

/* Builds argv: the interpreter (if any), its fixed arguments, the program file, the request's
 * args. */
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
        if (language->interpreter != NULL)
                argv[n++] = language->interpreter;
        for (size_t i = 0; i < fixed; i++)
                argv[n++] = language->interpreter_args[i];
        argv[n++] = program_path;
        for (size_t i = 0; i < request->n_args; i++)
                argv[n++] = request->args[i];
        argv[n] = NULL;
        return argv;
}

/* A compiled language's compile stage: its own sandbox, with the sources in /workspace, the
 * language's script run by /bin/sh, and the artifact coming back through a memfd. */
struct compile_plan {
        char *script;
        const char *argv[4 + SBX_MAX_FILES + 1]; /* sh -c script sh sources... */
        char *sources[SBX_MAX_FILES + 1];        /* "./path": never read as an option */
        const char *envp[SBX_REQUEST_BASE_ENVIRONMENT_SIZE + 8 + 2];
        struct sbx_spec spec;
        int artifact_fd;
        void *artifact; /* mapped after a compile that succeeded, or cached_artifact */
        size_t artifact_size;
        void *cached_artifact;                   /* a compile cache hit's, malloc'd */
        char key[SBX_COMPILE_CACHE_KEY_HEX + 1]; /* empty: the cache is not used */
};

struct execution_plan {
        const struct sbx_language *language;
        const struct sbx_backend *backend;
        struct sbx_file program;
        char program_path[SBX_MAX_FILE_PATH + 16];
        const char **argv;
        const char **envp;
        struct sbx_spec spec;
        struct compile_plan *compile; /* compiled languages only */
        struct sbx_file *run_files;   /* theirs: the files, the artifact in place of its name */
};

static void fail_internal(struct sbx_result *result, const struct sbx_error *err)
{
        result->status = SBX_STATUS_INTERNAL_ERROR;
        result->exit_code = -1;
        result->signal = 0;
        snprintf(result->error, sizeof(result->error), "%s", err->message);
}

static void compile_plan_free(struct compile_plan *compile)
{
        if (compile == NULL)
                return;
        if (compile->cached_artifact != NULL)
                free(compile->cached_artifact);
        else if (compile->artifact != NULL)
                munmap(compile->artifact, compile->artifact_size);
        sbx_closep(&compile->artifact_fd);
        free(compile->script);
        for (size_t i = 0; i < SBX_ARRAY_SIZE(compile->sources); i++)
                free(compile->sources[i]);
        free(compile);
}

static void plan_free(struct execution_plan *plan)
{
        free(plan->argv);
        free(plan->envp);
        plan->argv = plan->envp = NULL;
        compile_plan_free(steal_pointer(&plan->compile));
        free(steal_pointer(&plan->run_files));
}

/* Where a compile builds its artifact ($SBX_ARTIFACT), before its script copies it to fd 3. */
#define COMPILE_ARTIFACT_PATH "/tmp/.sandboxd-artifact"

/* The compile stage of plan (a compiled language): the sources the run's spec delivers, the
 * language's script with the artifact copied to fd 3 at its end, and the compile limits. */
static int plan_compile(const struct sbx_request *request, struct execution_plan *plan,
                        struct sbx_error *err)
{
        const struct sbx_language *language = plan->language;
        struct compile_plan *compile = calloc(1, sizeof(*compile));
        if (compile == NULL)
                return sbx_error_set(err, ENOMEM, "allocate the compile plan");
        plan->compile = compile;
        compile->artifact_fd = memfd_create("sandboxd-artifact", MFD_CLOEXEC);
        if (compile->artifact_fd < 0)
                return sbx_error_set(err, errno, "memfd_create for the artifact");
        /* The script's failure is the compile's exit status; only a built artifact goes back. */
        if (asprintf(&compile->script, "{\n%s\n} || exit\nexec /bin/cat -- \"$SBX_ARTIFACT\" >&3\n",
                     language->compile) < 0) {
                compile->script = NULL;
                return sbx_error_set(err, ENOMEM, "allocate the compile script");
        }
        size_t n = 0;
        compile->argv[n++] = "/bin/sh";
        compile->argv[n++] = "-c";
        compile->argv[n++] = compile->script;
        compile->argv[n++] = "sh";
        /* Each source as "./path": a file named "-fplugin=x.so" is a file to the compiler, never
         * one of its options. */
        const char *entrypoint = request->code != NULL ? language->file_name : request->entrypoint;
        size_t n_sources = 0;
        if (asprintf(&compile->sources[n_sources++], "./%s", entrypoint) < 0)
                compile->sources[0] = NULL;
        for (size_t i = 0; language->compile_all_sources && i < request->n_files; i++)
                if (strcmp(request->files[i].path, entrypoint) != 0 &&
                    sbx_language_matches_path(language, request->files[i].path) &&
                    asprintf(&compile->sources[n_sources++], "./%s", request->files[i].path) < 0)
                        compile->sources[n_sources - 1] = NULL;
        for (size_t i = 0; i < n_sources; i++) {
                if (compile->sources[i] == NULL)
                        return sbx_error_set(err, ENOMEM, "allocate the compile's arguments");
                compile->argv[n++] = compile->sources[i];
        }
        compile->argv[n] = NULL;

        n = 0;
        for (size_t i = 0; i < SBX_REQUEST_BASE_ENVIRONMENT_SIZE; i++)
                compile->envp[n++] = sbx_request_base_environment[i];
        for (size_t i = 0; language->compile_env != NULL && language->compile_env[i] != NULL &&
                           n < SBX_ARRAY_SIZE(compile->envp) - 2;
             i++)
                compile->envp[n++] = language->compile_env[i];
        compile->envp[n++] = "SBX_ARTIFACT=" COMPILE_ARTIFACT_PATH;
        compile->envp[n] = NULL;

        compile->spec = plan->spec;
        compile->spec.argv = compile->argv;
        compile->spec.envp = compile->envp;
        compile->spec.stdin_data = NULL;
        compile->spec.stdin_size = 0;
        compile->spec.on_output = NULL; /* a stream carries the run's output only */
        compile->spec.output_ctx = NULL;
        compile->spec.artifact_fd = compile->artifact_fd;
        compile->spec.artifact_path = COMPILE_ARTIFACT_PATH;
        /* The service's, as its settings made them for the tier; else the language's. */
        if (request->compile_limits.wall_ms != 0)
                compile->spec.limits = request->compile_limits;
        else
                sbx_language_compile_limits(language, &request->limits, &compile->spec.limits);
        return 0;
}

/* The run stage's files once the compile built its artifact: the request's files (a file of the
 * artifact's name gives way) and the artifact, read-only. */
static int plan_run_files(struct execution_plan *plan, struct sbx_error *err)
{
        const struct sbx_file *given = plan->spec.files;
        size_t n_given = plan->spec.n_files;
        plan->run_files = calloc(n_given + 1, sizeof(*plan->run_files));
        if (plan->run_files == NULL)
                return sbx_error_set(err, ENOMEM, "allocate the run's files");
        size_t n = 0;
        for (size_t i = 0; i < n_given; i++)
                if (strcmp(given[i].path, plan->language->artifact) != 0)
                        plan->run_files[n++] = given[i];
        plan->run_files[n++] = (struct sbx_file){
                .path = plan->language->artifact,
                .data = plan->compile->artifact,
                .size = plan->compile->artifact_size,
                .executable = plan->language->interpreter == NULL,
                .read_only = true,
        };
        plan->spec.files = plan->run_files;
        plan->spec.n_files = n;
        return 0;
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
                 sbx_language_compiles(language) ? language->artifact
                 : single                        ? language->file_name
                                                 : request->entrypoint);
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
        if (sbx_language_compiles(language))
                return plan_compile(request, plan, err);
        return 0;
}

/* Runs a sandbox that is ready (started, and acquired when pooled) to its end, tears it down
 * and decides the status. t_ready is when the run may begin. */
static void run_to_end(const struct sbx_backend *backend, struct sbx_sandbox *sandbox, bool started,
                       struct sbx_result *result, uint64_t t0, uint64_t t_ready,
                       const struct sbx_error *setup_err, const struct sbx_request *answer_to)
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
        if (backend->read_guest_evidence != NULL)
                backend->read_guest_evidence(sandbox, &result->guest);
        /* The result is whole now. When the caller answers it here, the sandbox's removal
         * (reaping init, the cgroups) happens after the answer, off the client's wait; the
         * timing then ends at the answer. */
        bool answering = answer_to != NULL && answer_to->on_result != NULL;
        if (!answering)
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
        if (answering) {
                answer_to->on_result(answer_to->result_ctx, result);
                backend->destroy(sandbox);
        }
}

/* Runs spec in a fresh sandbox of backend, start to end, into result (status, run, evidence,
 * timing). */
static void run_sandbox(const struct sbx_backend *backend, const struct sbx_spec *spec,
                        struct sbx_result *result, const struct sbx_request *answer_to)
{
        struct sbx_error step_err = {0};
        struct sbx_sandbox *sandbox = NULL;
        uint64_t t0 = sbx_now_us();
        if (backend->create(spec, &sandbox, &step_err) < 0) {
                fail_internal(result, &step_err);
                result->timing.acquire_us = sbx_now_us() - t0;
                result->timing.total_us = result->timing.acquire_us;
                return;
        }
        uint64_t t1 = sbx_now_us();
        result->timing.acquire_us = t1 - t0;
        bool started = backend->start(sandbox, &step_err) == 0;
        uint64_t t2 = sbx_now_us();
        result->timing.setup_us = t2 - t1;
        run_to_end(backend, sandbox, started, result, t0, t2, &step_err, answer_to);
}

/* Maps the artifact a compile that succeeded wrote into its memfd. */
static int take_artifact(struct compile_plan *compile, struct sbx_error *err)
{
        struct stat st;
        if (fstat(compile->artifact_fd, &st) < 0)
                return sbx_error_set(err, errno, "fstat the artifact");
        compile->artifact_size = (size_t)st.st_size;
        if (compile->artifact_size == 0)
                return 0;
        void *data =
                mmap(NULL, compile->artifact_size, PROT_READ, MAP_PRIVATE, compile->artifact_fd, 0);
        if (data == MAP_FAILED)
                return sbx_error_set(err, errno, "map the artifact");
        compile->artifact = data;
        return 0;
}

/* Refuses (EFBIG) an artifact the run's disk cannot hold: the compile's own disk may be larger,
 * and a cached one may come from a run with a larger disk. */
static int artifact_fits(const struct execution_plan *plan, struct sbx_error *err)
{
        if (plan->compile->artifact_size <= plan->spec.limits.disk_bytes)
                return 0;
        return sbx_error_set(err, EFBIG,
                             "the artifact (%zu bytes) does not fit the run's disk (disk_mb %llu)",
                             plan->compile->artifact_size,
                             (unsigned long long)(plan->spec.limits.disk_bytes / SBX_LIMIT_MIB));
}

/* A hit of the compile cache: the artifact, and a compile stage that says it was cached. */
static bool compile_cached(struct execution_plan *plan, const struct sbx_request *request,
                           struct sbx_result *compile)
{
        struct compile_plan *stage = plan->compile;
        if (request->compile_cache == NULL || request->tenant == NULL)
                return false;
        struct sbx_error err = {0};
        if (sbx_compile_cache_key(request->tenant, plan->language, stage->argv, stage->spec.files,
                                  stage->spec.n_files, stage->key, &err) < 0) {
                sbx_warn("compile cache: %s", err.message);
                return false;
        }
        uint64_t t0 = sbx_now_us();
        int found = sbx_compile_cache_get(request->compile_cache, stage->key,
                                          &stage->cached_artifact, &stage->artifact_size, &err);
        if (found < 0)
                sbx_warn("compile cache: %s", err.message);
        if (found <= 0)
                return false;
        stage->artifact = stage->cached_artifact;
        compile->cached = true;
        compile->status = SBX_STATUS_OK;
        compile->run.exited = true;
        compile->timing.total_us = sbx_now_us() - t0;
        return true;
}

/* Keeps a fresh artifact for the next run of the same sources. Before the run: a request for
 * the same program that comes right after this one's answer must find it. */
static void compile_remember(struct execution_plan *plan, const struct sbx_request *request)
{
        struct compile_plan *stage = plan->compile;
        if (request->compile_cache == NULL || stage->key[0] == '\0')
                return;
        struct sbx_error err = {0};
        if (sbx_compile_cache_put(request->compile_cache, stage->key, stage->artifact,
                                  stage->artifact_size, &err) < 0)
                sbx_warn("compile cache: %s", err.message);
}

/* The disk a compile entry is made with: the language's compile stage's by default (its tmpfs
 * cannot change size later, so only compiles of exactly this size can use one). */
static uint64_t compile_entry_disk_bytes(const struct sbx_language *language)
{
        struct sbx_limits run, compile;
        sbx_limits_default(&run);
        sbx_language_compile_limits(language, &run, &compile);
        return compile.disk_bytes;
}

/* A pool's compile entry: its sandbox and the backend that made it. */
struct compile_entry {
        const struct sbx_backend *backend;
        struct sbx_sandbox *sandbox;
};

/* Runs the compile of plan in entry's sandbox (taken: it becomes NULL) when it fits the entry,
 * else, or when the entry cannot be acquired, in a fresh sandbox. */
static void run_compile(struct execution_plan *plan, struct sbx_result *compile,
                        struct compile_entry *entry)
{
        const struct sbx_spec *spec = &plan->compile->spec;
        if (entry->sandbox == NULL ||
            spec->limits.disk_bytes != compile_entry_disk_bytes(plan->language)) {
                run_sandbox(plan->backend, spec, compile, NULL);
                return;
        }
        struct sbx_sandbox *sandbox = steal_pointer(&entry->sandbox);
        struct sbx_error step_err = {0};
        uint64_t t0 = sbx_now_us();
        if (entry->backend->acquire(sandbox, spec, &step_err) < 0) {
                /* Nothing of the compile ran there: a fresh sandbox does it instead. */
                sbx_warn("compile: a warm entry failed (%s); compiling in a fresh sandbox",
                         step_err.message);
                entry->backend->destroy(sandbox);
                run_sandbox(plan->backend, spec, compile, NULL);
                return;
        }
        uint64_t t1 = sbx_now_us();
        compile->timing.acquire_us = t1 - t0;
        compile->pooled = true;
        run_to_end(entry->backend, sandbox, true, compile, t0, t1, &step_err, NULL);
}

/* The compile stage, into result->compile; in *compile_entry when there is one that fits (it
 * is taken then). 0: the artifact is the run's; -1: result is final (compile_error, canceled or
 * internal_error) and nothing is to run. */
static int compile_stage(struct execution_plan *plan, const struct sbx_request *request,
                         struct sbx_result *result, struct compile_entry *compile_entry)
{
        struct sbx_error err = {0};
        struct sbx_result *compile = calloc(1, sizeof(*compile));
        if (compile == NULL) {
                sbx_error_set(&err, ENOMEM, "allocate the compile's result");
                fail_internal(result, &err);
                return -1;
        }
        *compile = (struct sbx_result){.limits = plan->compile->spec.limits,
                                       .backend = plan->backend->name};
        result->compile = compile;
        bool cached = compile_cached(plan, request, compile);
        if (!cached)
                run_compile(plan, compile, compile_entry);
        result->timing.total_us = compile->timing.total_us;

        if (compile->status == SBX_STATUS_OK) {
                if ((cached || take_artifact(plan->compile, &err) == 0) &&
                    artifact_fits(plan, &err) == 0 && plan_run_files(plan, &err) == 0) {
                        if (!cached)
                                compile_remember(plan, request);
                        return 0;
                }
                if (err.code != EFBIG) {
                        fail_internal(result, &err);
                        return -1;
                }
        }
        result->exit_code = -1;
        result->signal = 0;
        if (compile->status == SBX_STATUS_INTERNAL_ERROR ||
            compile->status == SBX_STATUS_CANCELED) {
                result->status = compile->status;
                snprintf(result->error, sizeof(result->error), "compile stage: %.*s",
                         (int)sizeof(result->error) - 16, compile->error);
        } else if (compile->status == SBX_STATUS_OK) {
                result->status = SBX_STATUS_COMPILE_ERROR;
                snprintf(result->error, sizeof(result->error), "%s", err.message);
        } else {
                result->status = SBX_STATUS_COMPILE_ERROR;
                char how[32] = "";
                if (compile->status == SBX_STATUS_EXIT_NONZERO)
                        snprintf(how, sizeof(how), " (exit code %d)", compile->exit_code);
                snprintf(result->error, sizeof(result->error), "the compile ended %s%s",
                         sbx_status_name(compile->status), how);
        }
        return -1;
}

int sbx_execute(const struct sbx_request *request, struct sbx_result *result, struct sbx_error *err)
{
        char id[SBX_EXECUTION_ID_CHARS + 1];
        _cleanup_(plan_free) struct execution_plan plan = {0};
        if (sbx_execution_id_new(id, err) < 0 || plan_execution(request, &plan, err) < 0)
                return -1;
        *result = (struct sbx_result){.limits = request->limits, .backend = plan.backend->name};
        memcpy(result->id, id, sizeof(id));
        struct compile_entry no_entry = {0};
        if (plan.compile != NULL && compile_stage(&plan, request, result, &no_entry) < 0)
                return 0;
        run_sandbox(plan.backend, &plan.spec, result, request);
        return 0;
}

/* ---- Warm pools ------------------------------------------------------------------------ */

/* The warm-pool loaders a language row may name: how its interpreter runs one (`-c SOURCE`, or
 * a file of the entry's /workspace that the loader removes at once), and the smallest memory cap
 * a request may have to use one (the waiting interpreter's own use must fit under it with room
 * for the program; such a request runs cold). */
static const struct loader {
        const char *name;
        const char *eval_flag; /* NULL: run as the file below */
        const char *file;
        const char *source;
        uint64_t min_memory_bytes;
} loaders[] = {
        {"python", "-c", NULL, sbx_python_loader_source, 32ull << 20}, /* ~8 MiB idle */
        {"node", NULL, ".sandboxd-node-loader.cjs", sbx_node_loader_source,
         96ull << 20}, /* ~40 MiB idle */
};

static const struct loader *loader_named(const char *name)
{
        for (size_t i = 0; name != NULL && i < SBX_ARRAY_SIZE(loaders); i++)
                if (strcmp(loaders[i].name, name) == 0)
                        return &loaders[i];
        return NULL;
}

static const struct loader *loader_of(const struct sbx_language *language)
{
        return loader_named(language->loader);
}

struct sbx_pool_entry {
        const struct sbx_backend *backend;
        struct sbx_sandbox *sandbox;
        const struct sbx_language *language;
        const char *argv[4];
        char loader_path[64];
        /* A loader run as a file, written by init; and a compiled language's artifact path,
         * made read-only there for the loader to write (sbx_file.loader_writes). */
        struct sbx_file files[2];
        struct sbx_spec spec;
        /* A compiled language's second sandbox, for the compile stage: an exec entry with the
         * disk of the language's default compile limits (compile_entry_disk_bytes). */
        struct sbx_sandbox *compile_sandbox;
        struct sbx_spec compile_spec;
};

static const char *const exec_entry_argv[] = {"/bin/true", NULL};

/* Until acquire sets a request's limits, an entry lives under loose ones, so that acquire only
 * ever lowers them: the kernel refuses to raise some hard rlimits of another process even to
 * real root (RLIMIT_STACK, measured here), and what waits is sandboxd's own code, not a
 * tenant's. */
static void loose_limits(struct sbx_limits *limits, uint64_t disk_bytes)
{
        sbx_limits_default(limits);
        limits->memory_bytes = 0; /* no cgroup cap; STACK hard unlimited */
        limits->cpu_ms = 0;
        limits->pids = 0;
        limits->open_files = 0;
        limits->disk_bytes = disk_bytes;
}

/* Makes and starts the sandbox of spec into *out. */
static int start_entry_sandbox(const struct sbx_backend *backend, const struct sbx_spec *spec,
                               struct sbx_sandbox **out, struct sbx_error *err)
{
        if (backend->create(spec, out, err) < 0)
                return -1;
        if (backend->start(*out, err) < 0) {
                backend->destroy(*out);
                *out = NULL;
                return -1;
        }
        return 0;
}

/* The disk size pool entries are made with: their tmpfs cannot change size later, so only
 * requests for exactly this size can use one. */
static uint64_t pool_disk_bytes(void)
{
        struct sbx_limits defaults;
        sbx_limits_default(&defaults);
        return defaults.disk_bytes;
}

/* The most bytes of files and stdin a uml entry takes: its console moves them at ~2.5 MB/s, a
 * byte per host system call (sandbox/uml/uml.c), within the program's wall clock (256 KiB: ~0.1 s);
 * a request with more runs cold, whose files are staged on the host. */
#define UML_POOL_INPUT_MAX_BYTES (256u << 10)

static size_t request_input_bytes(const struct sbx_request *request)
{
        size_t bytes = request->code_size + request->stdin_size;
        for (size_t i = 0; i < request->n_files; i++)
                bytes += request->files[i].size;
        return bytes;
}

uint64_t sbx_pool_guest_memory_bytes(const char *backend, uint64_t configured)
{
        if (strcmp(backend, "uml") != 0)
                return 0;
        if (configured != 0)
                return configured;
        struct sbx_limits defaults;
        sbx_limits_default(&defaults);
        return defaults.memory_bytes;
}

bool sbx_pool_supports(const char *language_name)
{
        return sbx_language_find(language_name) != NULL;
}

/* sbx_pool_request_eligible, but for an entry made with test hooks (sandboxd run --pooled
 * --template --test-without LAYER: the hostile suite's controls on that path): the request's must
 * be the entry's. */
static bool eligible_for(const struct sbx_request *request, const struct sbx_test_hooks *entry)
{
        const struct sbx_language *language = sbx_language_find(request->language);
        if (language == NULL || request->limits.disk_bytes != pool_disk_bytes())
                return false;
        if (request->test.disabled_layers != entry->disabled_layers ||
            (request->test.fail_step != NULL) != (entry->fail_step != NULL) ||
            (request->test.fail_step != NULL &&
             strcmp(request->test.fail_step, entry->fail_step) != 0))
                return false;
        const char *backend = request->backend != NULL ? request->backend : SBX_BACKEND_DEFAULT;
        if (sbx_backend_name_find(backend) == NULL ||
            !sbx_backend_pools_language(backend, language))
                return false;
        /* A uml entry's guest gets the files and stdin through a console, on the program's
         * clock; its RAM is its pool's key (pools_find_ready, and the entry's own check). */
        if (strcmp(backend, "uml") == 0 &&
            (request->limits.memory_bytes == 0 ||
             request_input_bytes(request) > UML_POOL_INPUT_MAX_BYTES))
                return false;
        const struct loader *loader = loader_of(language);
        /* An exec entry: init waits, nothing of the program runs yet; on gVisor, Python's loader
         * waits (gvisor/spec.h), whose own memory a smaller cap could not hold. */
        if (loader == NULL)
                return strcmp(backend, "gvisor") != 0 || request->limits.memory_bytes == 0 ||
                       request->limits.memory_bytes >= loader_named("python")->min_memory_bytes;
        /* The waiting interpreter's own memory: a smaller cap could not be applied to it (and
         * would not leave the program room anyway); such a request runs cold. */
        if (request->limits.memory_bytes != 0 &&
            request->limits.memory_bytes < loader->min_memory_bytes)
                return false;
        /* PYTHON* and NODE_* variables change how the interpreter starts (PYTHONPATH,
         * NODE_OPTIONS...); a pre-started one cannot honour them, so such a request runs cold. */
        for (size_t i = 0; i < request->n_env; i++)
                if (strncmp(request->env[i], "PYTHON", 6) == 0 ||
                    strncmp(request->env[i], "NODE_", 5) == 0)
                        return false;
        return true;
}

bool sbx_pool_request_eligible(const struct sbx_request *request)
{
        return eligible_for(request, &(struct sbx_test_hooks){0});
}

int sbx_pool_entry_create(const char *language_name, const char *backend_name,
                          uint64_t memory_bytes, int python_template_fd,
                          const struct sbx_test_hooks *test, struct sbx_pool_entry **out,
                          struct sbx_error *err)
{
        if (!sbx_pool_supports(language_name))
                return sbx_error_set(err, EINVAL, "no warm pool for language '%s'", language_name);
        const struct sbx_backend *backend = sbx_backend_find(backend_name);
        if (backend == NULL || backend->acquire == NULL ||
            !sbx_backend_pools_language(backend->name, sbx_language_find(language_name)))
                return sbx_error_set(err, EINVAL, "backend '%s' has no warm pool for '%s'",
                                     backend_name ? backend_name : "", language_name);
        struct sbx_pool_entry *entry = calloc(1, sizeof(*entry));
        if (entry == NULL)
                return sbx_error_set(err, ENOMEM, "allocate a pool entry");
        entry->backend = backend;
        entry->language = sbx_language_find(language_name);
        /* A language with a loader (python) waits in its interpreter; every other one in an
         * exec entry, whose init waits to start the program (argv comes with the execution). */
        const struct loader *loader = loader_of(entry->language);
        size_t n_files = 0;
        entry->argv[0] = loader ? entry->language->interpreter : exec_entry_argv[0];
        if (loader != NULL && loader->eval_flag != NULL) {
                entry->argv[1] = loader->eval_flag;
                entry->argv[2] = loader->source;
        } else if (loader != NULL) {
                snprintf(entry->loader_path, sizeof(entry->loader_path), "/workspace/%s",
                         loader->file);
                entry->argv[1] = entry->loader_path;
                entry->files[n_files++] = (struct sbx_file){
                        .path = loader->file,
                        .data = loader->source,
                        .size = strlen(loader->source),
                };
        }
        /* The run stage's artifact is read-only (plan_run_files): made so by init here, where
         * the loader's execution cannot mount. */
        if (loader != NULL && sbx_language_compiles(entry->language))
                entry->files[n_files++] = (struct sbx_file){
                        .path = entry->language->artifact,
                        .data = "",
                        .read_only = true,
                        .loader_writes = true,
                };
        entry->spec = (struct sbx_spec){
                .argv = entry->argv,
                .envp = sbx_request_base_environment,
                .files = entry->files,
                .n_files = n_files,
                .network = SBX_NETWORK_NONE,
                .agent = true,
                .exec_on_acquire = loader == NULL,
                .cancel_fd = -1,
        };
        if (test != NULL)
                entry->spec.test = *test;
        /* Forked from the template (sandbox/native/template.h): the same interpreter, already
         * started, with the same argv and environment. */
        if (loader != NULL && strcmp(loader->name, "python") == 0 &&
            strcmp(backend->name, "native") == 0)
                entry->spec.template_fd = python_template_fd;
        loose_limits(&entry->spec.limits, pool_disk_bytes());
        entry->spec.limits.memory_bytes = sbx_pool_guest_memory_bytes(backend->name, memory_bytes);
        int rc = start_entry_sandbox(backend, &entry->spec, &entry->sandbox, err);
        if (rc < 0 && entry->spec.template_fd > 0 && test == NULL) {
                /* The template is gone (the engine starts another): this entry execs its own
                 * interpreter instead, as every entry does without one. */
                sbx_debug("pool entry: not from the template: %s", err->message);
                entry->spec.template_fd = -1;
                rc = start_entry_sandbox(backend, &entry->spec, &entry->sandbox, err);
        }
        if (rc < 0) {
                free(entry);
                return -1;
        }
        /* The compile stage skips its sandbox's setup too: a second, exec-mode entry. */
        if (sbx_language_compiles(entry->language)) {
                entry->compile_spec = (struct sbx_spec){
                        .argv = exec_entry_argv,
                        .envp = sbx_request_base_environment,
                        .network = SBX_NETWORK_NONE,
                        .agent = true,
                        .exec_on_acquire = true,
                        .cancel_fd = -1,
                };
                loose_limits(&entry->compile_spec.limits,
                             compile_entry_disk_bytes(entry->language));
                if (start_entry_sandbox(backend, &entry->compile_spec, &entry->compile_sandbox,
                                        err) < 0) {
                        sbx_pool_entry_destroy(entry);
                        return -1;
                }
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
        if (entry->compile_sandbox != NULL)
                entry->backend->destroy(entry->compile_sandbox);
        free(entry);
}

int sbx_pool_entry_execute(struct sbx_pool_entry *entry, const struct sbx_request *request,
                           struct sbx_result *result, struct sbx_error *err)
{
        char id[SBX_EXECUTION_ID_CHARS + 1];
        _cleanup_(plan_free) struct execution_plan plan = {0};
        /* Never another boundary than the one asked for. */
        const char *backend_name = request->backend ? request->backend : SBX_BACKEND_DEFAULT;
        /* A uml entry's guest has its pool's RAM (its spec's memory, which is 0 on the other
         * backends): a cap over it does not fit. */
        uint64_t guest_memory = entry->spec.limits.memory_bytes;
        if (!eligible_for(request, &entry->spec.test) ||
            strcmp(entry->backend->name, backend_name) != 0 ||
            (guest_memory != 0 && request->limits.memory_bytes > guest_memory)) {
                sbx_pool_entry_destroy(entry);
                return sbx_error_set(err, EINVAL, "request cannot use this warm pool entry");
        }
        if (sbx_execution_id_new(id, err) < 0 || plan_execution(request, &plan, err) < 0) {
                sbx_pool_entry_destroy(entry);
                return -1;
        }
        const struct sbx_backend *backend = entry->backend;
        struct sbx_sandbox *sandbox = steal_pointer(&entry->sandbox);
        struct compile_entry compile_entry = {backend, steal_pointer(&entry->compile_sandbox)};
        sbx_pool_entry_destroy(entry);

        *result = (struct sbx_result){
                .limits = request->limits, .backend = backend->name, .pooled = true};
        memcpy(result->id, id, sizeof(id));
        /* A compiled language's compile stage runs (or comes from the cache) first, in the
         * entry's compile sandbox when it fits; the artifact's run takes the entry. */
        if (plan.compile != NULL && compile_stage(&plan, request, result, &compile_entry) < 0) {
                backend->destroy(sandbox);
                if (compile_entry.sandbox != NULL)
                        backend->destroy(compile_entry.sandbox);
                return 0;
        }
        struct sbx_error step_err = {0};
        uint64_t t0 = sbx_now_us();
        bool acquired = backend->acquire(sandbox, &plan.spec, &step_err) == 0;
        uint64_t t1 = sbx_now_us();
        result->timing.acquire_us = t1 - t0;
        run_to_end(backend, sandbox, acquired, result, t0, t1, &step_err, request);
        /* A compile cache hit left it unused: removed after the answer, off the client's wait. */
        if (compile_entry.sandbox != NULL)
                backend->destroy(compile_entry.sandbox);
        return 0;
}

int sbx_execute_with_template(const struct sbx_request *request, int python_template_fd,
                              struct sbx_result *result, struct sbx_error *err)
{
        const char *backend = request->backend != NULL ? request->backend : SBX_BACKEND_DEFAULT;
        const struct sbx_language *language = sbx_language_find(request->language);
        if (python_template_fd <= 0 || language == NULL || strcmp(language->name, "python") != 0 ||
            strcmp(backend, "native") != 0 || !sbx_pool_request_eligible(request))
                return sbx_execute(request, result, err);
        uint64_t t0 = sbx_now_us();
        struct sbx_pool_entry *entry = NULL;
        struct sbx_error entry_err = {0};
        if (sbx_pool_entry_create(language->name, backend, 0, python_template_fd, NULL, &entry,
                                  &entry_err) < 0) {
                /* The template is gone (being restarted): cold, as without one. */
                sbx_debug("execution: no sandbox from the template: %s", entry_err.message);
                return sbx_execute(request, result, err);
        }
        uint64_t setup_us = sbx_now_us() - t0;
        int rc = sbx_pool_entry_execute(entry, request, result, err);
        /* Not a ready entry's: made for this request, its making was this request's setup. */
        result->pooled = false;
        result->timing.setup_us += setup_us;
        result->timing.total_us += setup_us;
        return rc;
}
