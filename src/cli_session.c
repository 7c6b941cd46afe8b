/* `sandboxd session`: one session driven by JSON lines, no server (for trying sessions out and
 * for the tests of engine/session.c; the HTTP API drives the same code).
 *
 * Standard input: one JSON object a line. The first opens the session:
 *   {"op": "open", "language": "python"|"bash", "limits": {...}, "env": {...}}
 * where limits takes the API's names (memory_mb, pids, disk_mb, open_files, and wall_ms and
 * output_bytes as each run's defaults) and missing ones are the built-in defaults.
 * Then, in any number and order:
 *   {"op": "run", "code": "...", "stdin": "...", "env": {...}, "timeout_ms": N, "stream": true}
 * (with stream, the run's events come first, a line each: {"event": "stdout", "data": {...}})
 *   {"op": "put", "path": "...", "data_base64": "...", "mode": 420}
 *   {"op": "get", "path": "..."}      {"op": "list", "path": "..."}    {"op": "delete", "path":
 * "..."} Standard output: one JSON object a line per op (a run: its result; a file operation:
 * {"ok": true, ...} or {"ok": false, "error": "...", "errno": "..."}). End of input closes the
 * session. Exit status 0, or 64 for input that is not such a line, 70 when the session cannot open.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "engine/session.h"
#include "engine/session_frame.h"
#include "model/limits.h"
#include "util/error.h"

/* The most one input line may hold: a file of SBX_SESSION_MAX_FILE_BYTES in base64, and room. */
#define LINE_MAX_BYTES (100u * 1024u * 1024u)

static void print_json(json_t *value)
{
        char *text = json_dumps(value, JSON_COMPACT);
        if (text != NULL) {
                puts(text);
                fflush(stdout);
                free(text);
        }
        json_decref(value);
}

static void print_error(const struct sbx_error *err)
{
        print_json(json_pack("{s:b,s:s,s:s}", "ok", 0, "error", err->message, "errno",
                             strerrorname_np(err->code) ? strerrorname_np(err->code) : "EIO"));
}

/* limits (the API's names and units, model/limits.h) over the defaults; a limit a session does
 * not take is refused. */
static int parse_limits(const json_t *limits, struct sbx_limits *out, struct sbx_error *err)
{
        sbx_limits_default(out);
        if (limits == NULL)
                return 0;
        if (!json_is_object(limits))
                return sbx_error_set(err, EINVAL, "limits: not an object");
        const char *key;
        json_t *value;
        json_object_foreach((json_t *)limits, key, value)
        {
                const struct sbx_limit_field *field = sbx_limit_field_find(key);
                /* cpu_ms is RLIMIT_CPU, a process's whole life: a session's CPU is measured
                 * per run instead. */
                if (field == NULL || field->kind != SBX_LIMIT_SETTABLE ||
                    strcmp(field->name, "cpu_ms") == 0)
                        return sbx_error_set(err, EINVAL, "limits.%s: not a session limit", key);
                json_int_t n = json_integer_value(value);
                if (!json_is_integer(value) || n <= 0 || (uint64_t)n > field->max / field->unit)
                        return sbx_error_set(err, EINVAL, "limits.%s: not an integer in range",
                                             key);
                sbx_limit_set(out, field, (uint64_t)n * field->unit);
        }
        const char *field = NULL;
        if (!sbx_limits_valid(out, &field))
                return sbx_error_set(err, EINVAL, "limits.%s: out of range", field);
        return 0;
}

/* env as "NAME=value" strings (owned by *storage); *n of them. */
static int parse_env(const json_t *env, char ***storage, size_t *n, struct sbx_error *err)
{
        *storage = NULL;
        *n = 0;
        if (env == NULL)
                return 0;
        if (!json_is_object(env) || json_object_size(env) > SBX_MAX_ENV)
                return sbx_error_set(err, EINVAL, "env: not an object of at most %d entries",
                                     SBX_MAX_ENV);
        *storage = calloc(json_object_size(env) + 1, sizeof(char *));
        if (*storage == NULL)
                return sbx_error_set(err, ENOMEM, "env");
        const char *key;
        json_t *value;
        json_object_foreach((json_t *)env, key, value)
        {
                if (!json_is_string(value) ||
                    asprintf(&(*storage)[*n], "%s=%s", key, json_string_value(value)) < 0)
                        return sbx_error_set(err, EINVAL, "env.%s: not a string", key);
                (*n)++;
        }
        return 0;
}

static void free_env(char **env, size_t n)
{
        for (size_t i = 0; i < n; i++)
                free(env[i]);
        free(env);
}

static size_t base64_decoded(const char *in, unsigned char *out, bool *ok)
{
        static const char alphabet[] =
                "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        size_t n = 0;
        unsigned bits = 0, count = 0;
        *ok = true;
        for (const char *p = in; *p != '\0' && *p != '='; p++) {
                const char *at = strchr(alphabet, *p);
                if (at == NULL) {
                        *ok = false;
                        return 0;
                }
                bits = (bits << 6) | (unsigned)(at - alphabet);
                count += 6;
                if (count >= 8) {
                        count -= 8;
                        out[n++] = (unsigned char)(bits >> count);
                }
        }
        return n;
}

static void base64_encode(const unsigned char *in, size_t len, char *out)
{
        static const char alphabet[] =
                "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        size_t o = 0;
        for (size_t i = 0; i < len; i += 3) {
                unsigned v = (unsigned)in[i] << 16;
                if (i + 1 < len)
                        v |= (unsigned)in[i + 1] << 8;
                if (i + 2 < len)
                        v |= in[i + 2];
                out[o++] = alphabet[(v >> 18) & 63];
                out[o++] = alphabet[(v >> 12) & 63];
                out[o++] = i + 1 < len ? alphabet[(v >> 6) & 63] : '=';
                out[o++] = i + 2 < len ? alphabet[v & 63] : '=';
        }
        out[o] = '\0';
}

/* A streamed event, as a line of its own before the run's result. */
static void print_event(void *ctx, const char *event, const json_t *payload)
{
        (void)ctx;
        print_json(json_pack("{s:s,s:O}", "event", event, "data", payload));
}

static void do_run(struct sbx_session *session, const json_t *line)
{
        const json_t *code = json_object_get(line, "code");
        const json_t *stdin_value = json_object_get(line, "stdin");
        struct sbx_error err = {0};
        char **env = NULL;
        size_t n_env = 0;
        if (!json_is_string(code) || (stdin_value != NULL && !json_is_string(stdin_value)) ||
            parse_env(json_object_get(line, "env"), &env, &n_env, &err) < 0) {
                if (err.message[0] == '\0')
                        sbx_error_set(&err, EINVAL, "run: code (and stdin) must be strings");
                print_error(&err);
                free_env(env, n_env);
                return;
        }
        struct sbx_session_run_request request = {
                .code = json_string_value(code),
                .code_size = json_string_length(code),
                .stdin_data = stdin_value ? json_string_value(stdin_value) : NULL,
                .stdin_size = stdin_value ? json_string_length(stdin_value) : 0,
                .env = (const char *const *)env,
                .n_env = n_env,
                .timeout_ms = (uint64_t)json_integer_value(json_object_get(line, "timeout_ms")),
                .cancel_fd = -1,
                .on_event = json_is_true(json_object_get(line, "stream")) ? print_event : NULL,
        };
        json_t *result = sbx_session_run(session, &request, &err);
        free_env(env, n_env);
        if (result == NULL)
                print_error(&err);
        else
                print_json(result);
}

static void do_file(struct sbx_session *session, const char *op, const json_t *line)
{
        const char *path = json_string_value(json_object_get(line, "path"));
        struct sbx_error err = {0};
        if (path == NULL) {
                sbx_error_set(&err, EINVAL, "%s: path must be a string", op);
                print_error(&err);
                return;
        }
        if (strcmp(op, "put") == 0) {
                const char *data = json_string_value(json_object_get(line, "data_base64"));
                json_t *mode = json_object_get(line, "mode");
                size_t len = data ? strlen(data) : 0;
                unsigned char *bytes = malloc(len / 4 * 3 + 3);
                bool ok = data != NULL && bytes != NULL;
                size_t size = ok ? base64_decoded(data, bytes, &ok) : 0;
                if (!ok) {
                        sbx_error_set(&err, EINVAL, "put: data_base64 must be base64");
                        print_error(&err);
                } else if (sbx_session_put(session, path, bytes, size,
                                           mode ? (unsigned)json_integer_value(mode) : 0644,
                                           &err) < 0) {
                        print_error(&err);
                } else {
                        print_json(json_pack("{s:b,s:I}", "ok", 1, "size", (json_int_t)size));
                }
                free(bytes);
        } else if (strcmp(op, "get") == 0) {
                void *data = NULL;
                size_t size = 0;
                if (sbx_session_get(session, path, SBX_SESSION_MAX_FILE_BYTES, &data, &size, &err) <
                    0) {
                        print_error(&err);
                        return;
                }
                char *encoded = malloc(size / 3 * 4 + 8);
                if (encoded != NULL) {
                        base64_encode(data, size, encoded);
                        print_json(json_pack("{s:b,s:s,s:I}", "ok", 1, "data_base64", encoded,
                                             "size", (json_int_t)size));
                }
                free(encoded);
                free(data);
        } else if (strcmp(op, "list") == 0) {
                json_t *entries = sbx_session_list(session, path, &err);
                if (entries == NULL)
                        print_error(&err);
                else
                        print_json(json_pack("{s:b,s:o}", "ok", 1, "entries", entries));
        } else if (sbx_session_delete(session, path, &err) < 0) {
                print_error(&err);
        } else {
                print_json(json_pack("{s:b}", "ok", 1));
        }
}

/* The first line: {"op": "open", "language", "limits", "env"}. */
static int open_session(const char *op, const json_t *line, struct sbx_session **session,
                        struct sbx_error *err)
{
        if (strcmp(op, "open") != 0)
                return sbx_error_set(err, EINVAL, "the first op must be open");
        struct sbx_session_options options = {
                .language = json_string_value(json_object_get(line, "language")),
        };
        if (parse_limits(json_object_get(line, "limits"), &options.limits, err) < 0)
                return -1;
        char **env = NULL;
        size_t n_env = 0;
        int rc = parse_env(json_object_get(line, "env"), &env, &n_env, err);
        options.env = (const char *const *)env;
        options.n_env = n_env;
        if (rc == 0)
                rc = sbx_session_open(&options, session, err);
        free_env(env, n_env);
        return rc;
}

int cli_session(int argc, char **argv)
{
        if (argc > 1) {
                fprintf(stderr, "usage: sandboxd session < JSON-LINES (see README)\n");
                return CLI_EXIT_USAGE;
        }
        char *line = NULL;
        size_t alloc = 0;
        struct sbx_session *session = NULL;
        int status = 0;
        ssize_t len;
        while ((len = getline(&line, &alloc, stdin)) >= 0) {
                if ((size_t)len > LINE_MAX_BYTES) {
                        fprintf(stderr, "sandboxd session: a line over %u bytes\n", LINE_MAX_BYTES);
                        status = CLI_EXIT_USAGE;
                        break;
                }
                json_error_t json_error;
                json_t *value = json_loadb(line, (size_t)len, 0, &json_error);
                const char *op = json_string_value(json_object_get(value, "op"));
                if (op == NULL) {
                        fprintf(stderr, "sandboxd session: not a JSON object with an op: %s\n",
                                json_error.text);
                        json_decref(value);
                        status = CLI_EXIT_USAGE;
                        break;
                }
                if (session == NULL) {
                        struct sbx_error err = {0};
                        if (open_session(op, value, &session, &err) < 0) {
                                fprintf(stderr, "sandboxd session: %s\n", err.message);
                                status = err.code == EINVAL ? CLI_EXIT_USAGE : CLI_EXIT_SOFTWARE;
                                json_decref(value);
                                break;
                        }
                        print_json(json_pack("{s:b,s:O}", "ok", 1, "language",
                                             json_object_get(value, "language")));
                        json_decref(value);
                        continue;
                }
                if (strcmp(op, "run") == 0) {
                        do_run(session, value);
                } else if (strcmp(op, "put") == 0 || strcmp(op, "get") == 0 ||
                           strcmp(op, "list") == 0 || strcmp(op, "delete") == 0) {
                        do_file(session, op, value);
                } else {
                        struct sbx_error err = {0};
                        sbx_error_set(&err, EINVAL, "unknown op '%s'", op);
                        print_error(&err);
                }
                json_decref(value);
        }
        free(line);
        sbx_session_close(session);
        return status;
}
