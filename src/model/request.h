/* A request: what one execution runs, with the bounds on what it may carry and the checks both
 * processes apply to it. The API process builds it (service/settings.c), the protocol carries it
 * (protocol/protocol.h), the engine plans and runs it (engine/execution.h); each checks it with
 * sbx_request_check, so there is one definition of a runnable request. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "model/limits.h"
#include "util/error.h"

struct sbx_compile_cache;
struct sbx_result;

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

/* A file delivered into /workspace before the program starts. */
struct sbx_file {
        const char *path; /* relative to /workspace; already validated: no "..", not absolute */
        const void *data;
        size_t size;
        bool executable;
        /* A read-only mount of its own: the program can neither change, chmod nor replace it (a
         * compiled artifact: the program cannot rewrite its own binary). */
        bool read_only;
        /* With read_only, in a loader's pool entry (native): the loader gets a writable fd to the
         * file, made before the mount, as its fd 5, writes the read-only file an execution brings
         * for this path through it and closes it before the program runs: a loader, which may not
         * mount, thus holds an artifact its program cannot write (guest/node_loader.js). */
        bool loader_writes;
};

/* Layers a test can turn off one at a time (the hostile suite's `without:<layer>` controls).
 * Only `sandboxd run`'s test flags set these; no API request or config can. */
enum sbx_layer {
        SBX_LAYER_SECCOMP = 1u << 0,
        SBX_LAYER_LANDLOCK = 1u << 1,
        SBX_LAYER_CAPS = 1u << 2,
        SBX_LAYER_NO_NEW_PRIVS = 1u << 3,
        SBX_LAYER_RLIMITS = 1u << 4,
        SBX_LAYER_NETNS = 1u << 5,
};

struct sbx_test_hooks {
        const char *fail_step;    /* setup step forced to fail, by name; NULL for none */
        unsigned disabled_layers; /* enum sbx_layer bits */
};

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
        /* A compiled language's compile stage (sbx_language_compile_limits, then the request's
         * own, clamped to the tier's); all zero: the engine derives them from limits. */
        struct sbx_limits compile_limits;
        const char *backend; /* NULL = "native" */
        /* Whose execution it is: the compile cache keeps each tenant's artifacts apart. NULL:
         * nobody's (`sandboxd run`), and the cache is not used. */
        const char *tenant;
        /* The engine's compile cache (engine/compile_cache.h), set by its worker; NULL: none.
         * Not carried by the protocol. */
        const struct sbx_compile_cache *compile_cache;
        struct sbx_test_hooks test;
        /* Readable = cancel: the sandbox is killed and the result's status is canceled
         * (the engine's worker passes a signalfd for SIGTERM). Set -1 for none; 0 also means none,
         * so a zero-initialised request is never cancelled by a readable stdin. Not closed here. */
        int cancel_fd;
        /* Streaming: the client asked for the output as it comes (carried by RUN). The engine's
         * worker then sets on_output, which the supervisor calls with each piece of output it
         * keeps (stream 1 stdout, 2 stderr), as it reads it. */
        bool stream;
        void (*on_output)(void *ctx, int stream, const void *data, size_t len);
        void *output_ctx;
        /* NULL, or called with the result of the run once it is whole, before the sandbox is
         * removed (the engine's worker answers then: removing the cgroups and reaping is off
         * the client's wait). Not called when the run's sandbox could not be made or there is
         * no run stage (compile_error): the result then comes back from sbx_execute only. */
        void (*on_result)(void *ctx, struct sbx_result *result);
        void *result_ctx;
};

/* The environment every program gets, and nothing else of the host's, NULL-terminated; a request
 * may add to it (sbx_request_env_valid) but not replace these. */
extern const char *const sbx_request_base_environment[];
#define SBX_REQUEST_BASE_ENVIRONMENT_SIZE 4

/* Whether path may name a file in /workspace: relative, no "." or ".." component, no empty
 * component, no NUL, at most SBX_MAX_FILE_PATH bytes, printable ASCII without backslash. */
bool sbx_request_path_valid(const char *path);

/* Whether entry is "NAME=value" with NAME matching [A-Za-z_][A-Za-z0-9_]{0,63}, not starting with
 * LD_ (the dynamic loader's knobs) and not one of the variables sandboxd sets itself (PATH, HOME,
 * TMPDIR, LANG), and the whole entry at most SBX_MAX_ENV_BYTES. */
bool sbx_request_env_valid(const char *entry);

/* Whether request can run, as far as it alone says: counts within SBX_MAX_*, code xor files with
 * an entrypoint that is one of them, every file path and env entry valid, every limit in its
 * range. The language and backend are the planner's to resolve. The one check of a request:
 * the protocol's RUN decoder and the engine's planning both call it. Pure; -1 with err->code
 * EINVAL and a message naming the field ("files[2].path: ...") when the request is refused. */
int sbx_request_check(const struct sbx_request *request, struct sbx_error *err);

/* An execution id: 128 random bits as 32 lowercase hex characters, NUL-terminated. */
#define SBX_EXECUTION_ID_CHARS 32

/* A new execution id. */
int sbx_execution_id_new(char id[static SBX_EXECUTION_ID_CHARS + 1], struct sbx_error *err);

/* Whether id is exactly SBX_EXECUTION_ID_CHARS lowercase hex digits. */
bool sbx_execution_id_valid(const char *id);
