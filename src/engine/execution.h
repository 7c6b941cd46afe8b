/* One execution, start to end: pick the backend, resolve the language, create the sandbox,
 * start it, supervise it, read the evidence, tear it down, decide the status, time every phase. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "engine/result.h"
#include "sandbox/sandbox.h"
#include "util/error.h"

/* Limits on what one request may carry; the API's settings pipeline and the engine both enforce
 * them (the engine again, on every message). */
#define SBX_MAX_FILES       64
#define SBX_MAX_FILE_PATH   255
#define SBX_MAX_ARGS        64
#define SBX_MAX_ARG_BYTES   4096
#define SBX_MAX_ENV         64
#define SBX_MAX_ENV_BYTES   4096
#define SBX_MAX_CODE_BYTES  (4u * 1024u * 1024u) /* all files together */
#define SBX_MAX_STDIN_BYTES (4u * 1024u * 1024u)

/* The range every limit must be in; the CLI, the settings pipeline and the engine (again, on
 * every RUN) enforce it. No limit may be "none" (0): a request always runs capped. */
#define SBX_MIN_MEMORY_BYTES   (4ull << 20) /* an interpreter needs a few MiB to start */
#define SBX_MIN_PIDS           2            /* the sandbox's init and the program */
#define SBX_MIN_DISK_BYTES     (1ull << 20)
#define SBX_MIN_OPEN_FILES     8                     /* stdio and a few more */
#define SBX_MIN_CPU_MILLICORES 10                    /* the kernel's 1 ms quota per 100 ms period */
#define SBX_MAX_LIMIT_MS       (24ull * 3600 * 1000) /* wall and CPU: a day */
#define SBX_MAX_MEMORY_BYTES   (1ull << 40)
#define SBX_MAX_PIDS           (4ull << 20) /* PID_MAX_LIMIT on 64-bit */
#define SBX_MAX_DISK_BYTES     (1ull << 40)
#define SBX_MAX_OUTPUT_BYTES   (1ull << 30)
#define SBX_MAX_OPEN_FILES     (1ull << 20) /* the default fs.nr_open */
#define SBX_MAX_CPU_MILLICORES 1024000u

struct sbx_request {
        const char *language; /* sbx_language_find() name */
        /* Either code (one program: /workspace/<language file_name>) ... */
        const char *code;
        size_t code_size;
        /* ... or files (code NULL) with entrypoint naming the one to run. Paths are relative to
         * /workspace and already validated (sbx_request_path_valid). */
        const struct sbx_file *files;
        size_t n_files;
        const char *entrypoint;
        const char *const *args; /* extra argv after the program file */
        size_t n_args;
        const char *const *env; /* extra "NAME=value" entries (sbx_request_env_valid) */
        size_t n_env;
        const void *stdin_data;
        size_t stdin_size;
        struct sbx_limits limits;
        const char *backend; /* NULL = "native" */
        struct sbx_test_hooks test;
        /* Readable = cancel: the sandbox is killed and the result's status is canceled
         * (the engine's worker passes a signalfd for SIGTERM). Set -1 for none; 0 also means none,
         * so a zero-initialised request is never cancelled by a readable stdin. Not closed here. */
        int cancel_fd;
};

/* Whether path may name a file in /workspace: relative, no "." or ".." component, no empty
 * component, no NUL, at most SBX_MAX_FILE_PATH bytes, printable ASCII without backslash. */
bool sbx_request_path_valid(const char *path);

/* Whether entry is "NAME=value" with NAME matching [A-Za-z_][A-Za-z0-9_]{0,63}, not starting with
 * LD_ (the dynamic loader's knobs) and not one of the variables sandboxd sets itself (PATH, HOME,
 * TMPDIR, LANG), and the whole entry at most SBX_MAX_ENV_BYTES. */
bool sbx_request_env_valid(const char *entry);

/* Whether every limit is within the SBX_MIN_* / SBX_MAX_* range above; when not, *field names
 * the first that is not. */
bool sbx_limits_valid(const struct sbx_limits *limits, const char **field);

/* A new execution id: 128 random bits as 32 lowercase hex characters, NUL-terminated. */
#define SBX_EXECUTION_ID_CHARS 32
int sbx_execution_id_new(char id[static SBX_EXECUTION_ID_CHARS + 1], struct sbx_error *err);

/* The built-in default limits (README documents them). */
void sbx_limits_default(struct sbx_limits *limits);

/* Runs the request. Returns 0 whenever result was filled, including status internal_error when
 * sandboxd failed to set up (the program never ran); -1 with err only for a request that cannot
 * be run at all (unknown language or backend). Free the result with sbx_result_free(). */
int sbx_execute(const struct sbx_request *request, struct sbx_result *result,
                struct sbx_error *err);

/* ---- Warm pools (DESIGN.md "Warm pools") ----
 * A pool entry is a sandbox that finished every setup step and runs the language's loader
 * (guest/), waiting for one execution. Creating one pays for namespaces, mounts and the
 * interpreter's start-up while no client waits; executing it applies the request's limits,
 * delivers the files and lets the program run, exactly as a cold run would. One use, then the
 * sandbox is destroyed. */
struct sbx_pool_entry;

/* Whether language has a loader (python). */
bool sbx_pool_supports(const char *language);

/* Whether request can run in a pool entry: a pooled language, the pool's disk size, a memory cap
 * of at least 32 MiB (the waiting interpreter's own use must fit under it), no test hooks, no
 * PYTHON* variables (they act at interpreter start-up). Others run cold. */
bool sbx_pool_request_eligible(const struct sbx_request *request);

/* Creates and starts a pool entry for language on backend (NULL = native). */
int sbx_pool_entry_create(const char *language, const char *backend, struct sbx_pool_entry **out,
                          struct sbx_error *err);

/* Runs request in entry, which it consumes (destroyed afterwards, also on failure). Returns like
 * sbx_execute; result->pooled is true. */
int sbx_pool_entry_execute(struct sbx_pool_entry *entry, const struct sbx_request *request,
                           struct sbx_result *result, struct sbx_error *err);

/* Destroys an entry that will not run anything. NULL is a no-op. */
void sbx_pool_entry_destroy(struct sbx_pool_entry *entry);
