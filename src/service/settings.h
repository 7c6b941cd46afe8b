/* The settings pipeline: a POST /v1/executions body becomes the effective, immutable settings
 * of one execution, in named steps (DESIGN.md "The request lifecycle"):
 *
 *   validate -> assign id -> resolve language -> defaults (built-in, then the tier's default_*)
 *   -> clamp to the tier's max_* (each clamped request field recorded) -> cross-field checks
 *   (entrypoint among the files; language and backend allowed for the tier) -> freeze
 *
 * Nothing of the body is trusted: every field is typed, bounded and checked by name, unknown
 * fields are errors, and the result owns copies of everything it needs. A refusal comes back as a
 * problem (RFC 9457 material for the HTTP layer) naming each bad field by its JSON path. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "model/request.h"
#include "protocol/protocol.h"
#include "service/config.h"
#include "service/problem.h"

/* The longest callback_url a request may name. */
#define SBX_CALLBACK_URL_MAX 2048

struct sbx_settings {
        char id[SBX_EXECUTION_ID_CHARS + 1]; /* 128 random bits in hex */
        char *tenant;                        /* the tenant's name */
        const char *language;                /* static: the sbx_language_find() name */
        const char *backend;                 /* static: the sbx_backend_find() name */
        bool queued; /* "wait": false: answered 202 at once, run from the queue (api/async.h) */
        bool retry;  /* "retry": true: queued again when a crash interrupted its run */
        char *callback_url; /* a queued one's webhook (api/webhooks.h); NULL: none */
        /* Either code (bytes, may contain NUL; NUL-terminated for convenience) ... */
        char *code;
        size_t code_size;
        /* ... or files with entrypoint naming one of them (code NULL). Each path and data is
         * owned by the settings (data NUL-terminated for convenience). */
        struct sbx_file *files;
        size_t n_files;
        char *entrypoint;
        char **args; /* no NUL inside */
        size_t n_args;
        char **env; /* "NAME=value", each valid per sbx_request_env_valid */
        size_t n_env;
        char *stdin_data; /* bytes, may contain NUL; NULL when none */
        size_t stdin_size;
        struct sbx_limits limits; /* effective */
        /* A compiled language's compile stage: effective; all zero for the others. */
        struct sbx_limits compile_limits;
        /* The request's limit fields lowered to the tier's ceiling ("memory_mb", then
         * "compile_limits.memory_mb"), static strings in SBX_LIMITS order. */
        const char *clamped[2 * SBX_LIMIT_COUNT];
        size_t n_clamped;
        json_t *requested; /* a copy of the body as received, for the audit log (owned) */
};

/* Runs the pipeline on body (a parsed JSON value, not modified, not kept) for tenant (whose tier
 * supplies defaults, ceilings and permissions). On success returns 0 and *out (free with
 * sbx_settings_free; treat as const). Otherwise returns -1 with problem filled: status 400 for
 * anything wrong with the request itself, 403 when it is valid but asks for a language or backend
 * the tier does not allow, 500 when memory or randomness runs out.
 *
 * JSON strings for code, stdin and file contents may contain NUL (decode with JSON_ALLOW_NUL);
 * language, paths, args, env names and values may not. */
int sbx_settings_build(const json_t *body, const struct sbx_tenant *tenant,
                       struct sbx_settings **out, struct sbx_problem *problem);

/* Frees settings and all it owns. NULL is a no-op. */
void sbx_settings_free(struct sbx_settings *settings);

/* Fills request with pointers into settings (which must outlive it); no test hooks. */
void sbx_settings_to_request(const struct sbx_settings *settings, struct sbx_request *request);
