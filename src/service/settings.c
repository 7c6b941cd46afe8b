#include "service/settings.h"

#include <ctype.h>
#include <pthread.h>
#include <errno.h>
#include <limits.h>
#include <openssl/evp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "model/backend.h"
#include "model/language.h"
#include "util/cleanup.h"

/* A byte string borrowed from the request body; it may contain NUL. */
struct byte_view {
        const char *data;
        size_t size;
};

struct file_draft {
        const char *path;
        struct byte_view content;
        bool executable;
};

struct env_draft {
        const char *name;
        const char *value;
};

/* The pipeline's working state. Until freeze every string points into the body, which the
 * caller keeps alive for the whole call. */
struct pipeline {
        const json_t *body;
        const struct sbx_tenant *tenant;
        const struct sbx_tier *tier;
        struct sbx_problem *problem;
        size_t n_problems; /* counted even past SBX_PROBLEM_MAX_ERRORS, for the detail */

        /* validate */
        const char *language_name;
        const char *backend_name;
        bool queued, retry;
        const char *callback_url;
        bool has_code;
        struct byte_view code;
        struct file_draft files[SBX_MAX_FILES];
        size_t n_files;
        const char *entrypoint;
        const char *args[SBX_MAX_ARGS];
        size_t n_args;
        struct env_draft env[SBX_MAX_ENV];
        size_t n_env;
        bool has_stdin;
        struct byte_view stdin_view;
        uint64_t requested_limits[SBX_LIMIT_COUNT];         /* API units; 0 = not given */
        uint64_t requested_compile_limits[SBX_LIMIT_COUNT]; /* likewise */
        char *decoded[SBX_MAX_FILES]; /* base64 contents, decoded: the drafts point here */

        /* assign id, resolve language, defaults, clamp */
        char id[SBX_EXECUTION_ID_CHARS + 1];
        const struct sbx_language *language;
        struct sbx_limits limits;
        struct sbx_limits compile_limits; /* a compiled language's; else zero */
        const char *clamped[2 * SBX_LIMIT_COUNT];
        size_t n_clamped;
};

/* ---- problems --------------------------------------------------------------------------- */

__attribute__((format(printf, 3, 4))) static void report(struct pipeline *p, const char *field,
                                                         const char *fmt, ...)
{
        p->n_problems++;
        char message[256];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(message, sizeof(message), fmt, ap);
        va_end(ap);
        sbx_problem_add_error(p->problem, field, "%s", message);
}

/* Ends the pipeline with status if any field was reported. */
static int finish_step(struct pipeline *p, int status)
{
        if (p->n_problems == 0)
                return 0;
        struct sbx_problem *problem = p->problem;
        if (p->n_problems == 1)
                sbx_problem_set(problem, (unsigned)status, "%s: %s", problem->errors[0].field,
                                problem->errors[0].message);
        else
                sbx_problem_set(problem, (unsigned)status,
                                "%zu problems in the request, listed in errors", p->n_problems);
        return -1;
}

static int fail_internal(struct pipeline *p, const char *what)
{
        sbx_problem_set(p->problem, 500, "%s", what);
        return -1;
}

/* ---- step: validate --------------------------------------------------------------------- */

static bool name_in(const char *name, size_t length, const char *const *names, size_t count)
{
        /* A key with a NUL inside would compare equal to its prefix; it is never a known name. */
        if (strlen(name) != length)
                return false;
        for (size_t i = 0; i < count; i++)
                if (strcmp(name, names[i]) == 0)
                        return true;
        return false;
}

/* Reports every key of object that is not in known, as prefix + key. */
static void check_known_fields(struct pipeline *p, const json_t *object, const char *prefix,
                               const char *const *known, size_t n_known)
{
        const char *key;
        size_t key_length;
        json_t *value;
        json_object_keylen_foreach((json_t *)object, key, key_length, value)
        {
                if (!name_in(key, key_length, known, n_known)) {
                        char field[128];
                        snprintf(field, sizeof(field), "%s%s", prefix, key);
                        report(p, field, "unknown field");
                }
        }
}

/* The bytes of a JSON string (NUL allowed), or NULL after reporting a wrong type or size. */
static const char *bytes_field(struct pipeline *p, const json_t *value, const char *field,
                               size_t max_size, size_t *size)
{
        if (!json_is_string(value)) {
                report(p, field, "must be a string");
                return NULL;
        }
        *size = json_string_length(value);
        if (*size > max_size) {
                report(p, field, "longer than %zu bytes", max_size);
                return NULL;
        }
        return json_string_value(value);
}

/* A JSON string that becomes a C string (no NUL inside), or NULL after reporting. */
static const char *text_field(struct pipeline *p, const json_t *value, const char *field,
                              size_t max_size)
{
        size_t size;
        const char *text = bytes_field(p, value, field, max_size, &size);
        if (text != NULL && memchr(text, '\0', size) != NULL) {
                report(p, field, "must not contain a NUL character");
                return NULL;
        }
        return text;
}

static void validate_language(struct pipeline *p)
{
        const json_t *language = json_object_get(p->body, "language");
        if (language == NULL) {
                report(p, "language", "required (one of: %s)", sbx_language_names());
                return;
        }
        /* Longer than any name, so "unknown" below says it; 64 keeps the echo short. */
        p->language_name = text_field(p, language, "language", 64);
}

/* Standard base64 with padding (RFC 4648, section 4), strictly: n characters of the alphabet,
 * n a multiple of 4, '=' only as the last one or two. A new buffer of *size bytes, or NULL. */
static char *base64_decode(const char *text, size_t n, size_t *size)
{
        if (n % 4 != 0 || n > INT_MAX)
                return NULL;
        size_t padding = (n > 0 && text[n - 1] == '=') + (n > 1 && text[n - 2] == '=');
        for (size_t i = 0; i < n - padding; i++)
                if (!isalnum((unsigned char)text[i]) && text[i] != '+' && text[i] != '/')
                        return NULL;
        if (padding == 1 && n > 1 && text[n - 2] == '=')
                return NULL;
        unsigned char *out = malloc(n / 4 * 3 + 1);
        if (out == NULL)
                return NULL;
        int decoded = EVP_DecodeBlock(out, (const unsigned char *)text, (int)n);
        if (decoded < 0 || (size_t)decoded < padding) {
                free(out);
                return NULL;
        }
        *size = (size_t)decoded - padding;
        out[*size] = '\0';
        return (char *)out;
}

static void validate_files(struct pipeline *p, const json_t *files)
{
        static const char *const file_fields[] = {"path", "content", "encoding", "executable"};
        if (!json_is_array(files)) {
                report(p, "files", "must be an array of objects");
                return;
        }
        size_t n = json_array_size(files);
        if (n == 0 || n > SBX_MAX_FILES) {
                report(p, "files", "must hold 1 to %d files", SBX_MAX_FILES);
                return;
        }
        size_t total = 0;
        for (size_t i = 0; i < n; i++) {
                const json_t *file = json_array_get(files, i);
                struct file_draft *draft = &p->files[i];
                char prefix[32], field[64];
                snprintf(prefix, sizeof(prefix), "files[%zu]", i);
                if (!json_is_object(file)) {
                        report(p, prefix, "must be an object");
                        continue;
                }
                snprintf(prefix, sizeof(prefix), "files[%zu].", i);
                check_known_fields(p, file, prefix, file_fields, SBX_ARRAY_SIZE(file_fields));

                snprintf(field, sizeof(field), "files[%zu].path", i);
                const json_t *path = json_object_get(file, "path");
                if (path == NULL)
                        report(p, field, "required");
                else if ((draft->path = text_field(p, path, field, SBX_MAX_FILE_PATH)) != NULL &&
                         !sbx_request_path_valid(draft->path)) {
                        report(p, field,
                               "must be a relative path of printable ASCII without '\\', empty, "
                               "'.' or '..' components");
                        draft->path = NULL;
                }

                snprintf(field, sizeof(field), "files[%zu].encoding", i);
                const json_t *encoding = json_object_get(file, "encoding");
                const char *encoding_name = encoding != NULL ? json_string_value(encoding) : "utf8";
                bool base64 = encoding_name != NULL && strcmp(encoding_name, "base64") == 0;
                if (encoding_name == NULL || (!base64 && strcmp(encoding_name, "utf8") != 0))
                        report(p, field, "must be \"utf8\" or \"base64\"");

                snprintf(field, sizeof(field), "files[%zu].content", i);
                const json_t *content = json_object_get(file, "content");
                /* Base64 text is a third longer than what it carries. */
                size_t max = base64 ? SBX_MAX_CODE_BYTES / 3 * 4 + 4 : SBX_MAX_CODE_BYTES;
                if (content == NULL)
                        report(p, field, "required");
                else if ((draft->content.data = bytes_field(p, content, field, max,
                                                            &draft->content.size)) != NULL &&
                         base64) {
                        p->decoded[i] = base64_decode(draft->content.data, draft->content.size,
                                                      &draft->content.size);
                        draft->content.data = p->decoded[i];
                        if (p->decoded[i] == NULL)
                                report(p, field, "is not base64 (RFC 4648, with padding)");
                }
                if (draft->content.data != NULL)
                        total += draft->content.size;

                snprintf(field, sizeof(field), "files[%zu].executable", i);
                const json_t *executable = json_object_get(file, "executable");
                if (executable != NULL && !json_is_boolean(executable))
                        report(p, field, "must be a boolean");
                draft->executable = json_is_true(executable);
        }
        p->n_files = n;
        if (total > SBX_MAX_CODE_BYTES)
                report(p, "files", "contents together are longer than %u bytes",
                       SBX_MAX_CODE_BYTES);

        /* Two files at one path would silently overwrite each other, and "a" next to "a/b"
         * cannot exist at all (a is either a file or a directory). */
        for (size_t j = 0; j < n; j++) {
                for (size_t i = 0; i < j; i++) {
                        const char *a = p->files[i].path, *b = p->files[j].path;
                        if (a == NULL || b == NULL)
                                continue;
                        size_t la = strlen(a), lb = strlen(b);
                        char field[32];
                        snprintf(field, sizeof(field), "files[%zu].path", j);
                        if (la == lb && strcmp(a, b) == 0)
                                report(p, field, "same path as files[%zu]", i);
                        else if ((la < lb && strncmp(a, b, la) == 0 && b[la] == '/') ||
                                 (lb < la && strncmp(a, b, lb) == 0 && a[lb] == '/'))
                                report(p, field,
                                       "conflicts with files[%zu]: one would be a directory "
                                       "of the other",
                                       i);
                }
        }
}

static void validate_program(struct pipeline *p)
{
        const json_t *code = json_object_get(p->body, "code");
        const json_t *files = json_object_get(p->body, "files");
        const json_t *entrypoint = json_object_get(p->body, "entrypoint");
        if (code != NULL && files != NULL)
                report(p, "code", "give either code or files, not both");
        else if (code == NULL && files == NULL)
                report(p, "code", "required: code, or files with an entrypoint");

        if (code != NULL) {
                p->code.data = bytes_field(p, code, "code", SBX_MAX_CODE_BYTES, &p->code.size);
                p->has_code = p->code.data != NULL;
                if (entrypoint != NULL && files == NULL)
                        report(p, "entrypoint", "only allowed with files");
        }
        if (files != NULL) {
                validate_files(p, files);
                if (entrypoint == NULL)
                        report(p, "entrypoint", "required with files");
        }
        if (entrypoint != NULL && files != NULL)
                p->entrypoint = text_field(p, entrypoint, "entrypoint", SBX_MAX_FILE_PATH);
}

static void validate_args(struct pipeline *p)
{
        const json_t *args = json_object_get(p->body, "args");
        if (args == NULL)
                return;
        if (!json_is_array(args)) {
                report(p, "args", "must be an array of strings");
                return;
        }
        size_t n = json_array_size(args);
        if (n > SBX_MAX_ARGS) {
                report(p, "args", "more than %d arguments", SBX_MAX_ARGS);
                return;
        }
        for (size_t i = 0; i < n; i++) {
                char field[32];
                snprintf(field, sizeof(field), "args[%zu]", i);
                p->args[i] = text_field(p, json_array_get(args, i), field, SBX_MAX_ARG_BYTES);
        }
        p->n_args = n;
}

static void validate_env(struct pipeline *p)
{
        const json_t *env = json_object_get(p->body, "env");
        if (env == NULL)
                return;
        if (!json_is_object(env)) {
                report(p, "env", "must be an object of strings");
                return;
        }
        if (json_object_size(env) > SBX_MAX_ENV) {
                report(p, "env", "more than %d variables", SBX_MAX_ENV);
                return;
        }
        const char *name;
        size_t name_length;
        json_t *value;
        json_object_keylen_foreach((json_t *)env, name, name_length, value)
        {
                char field[128];
                snprintf(field, sizeof(field), "env.%s", name);
                const char *text = text_field(p, value, field, SBX_MAX_ENV_BYTES);
                if (text == NULL)
                        continue;
                /* The engine receives "NAME=value": a '=' (or NUL) in the name would move the
                 * split and set a different variable than the one asked for. */
                bool valid = strlen(name) == name_length && strchr(name, '=') == NULL &&
                             name_length + 1 + strlen(text) <= SBX_MAX_ENV_BYTES;
                if (valid) {
                        char entry[SBX_MAX_ENV_BYTES + 1];
                        snprintf(entry, sizeof(entry), "%s=%s", name, text);
                        valid = sbx_request_env_valid(entry);
                }
                if (!valid) {
                        report(p, field,
                               "not allowed: a name matches [A-Za-z_][A-Za-z0-9_]{0,63}, is not "
                               "LD_*, PATH, HOME, TMPDIR or LANG, and NAME=value fits %d bytes",
                               SBX_MAX_ENV_BYTES);
                        continue;
                }
                p->env[p->n_env++] = (struct env_draft){name, text};
        }
}

static void validate_stdin(struct pipeline *p)
{
        const json_t *stdin_value = json_object_get(p->body, "stdin");
        if (stdin_value == NULL)
                return;
        p->stdin_view.data =
                bytes_field(p, stdin_value, "stdin", SBX_MAX_STDIN_BYTES, &p->stdin_view.size);
        p->has_stdin = p->stdin_view.data != NULL;
}

/* The object member (limits or compile_limits): each settable limit in API units into
 * requested (0: not given). */
static void validate_limits(struct pipeline *p, const char *member, uint64_t *requested)
{
        const json_t *limits = json_object_get(p->body, member);
        if (limits == NULL)
                return;
        if (!json_is_object(limits)) {
                report(p, member, "must be an object of integers");
                return;
        }
        char prefix[32];
        snprintf(prefix, sizeof(prefix), "%s.", member);
        const char *names[SBX_LIMIT_COUNT];
        size_t n_names = 0;
        for (size_t i = 0; i < SBX_LIMIT_COUNT; i++)
                if (sbx_limit_fields[i].kind == SBX_LIMIT_SETTABLE)
                        names[n_names++] = sbx_limit_fields[i].name;
        check_known_fields(p, limits, prefix, names, n_names);
        for (size_t i = 0; i < SBX_LIMIT_COUNT; i++) {
                const struct sbx_limit_field *limit = &sbx_limit_fields[i];
                const json_t *value = json_object_get(limits, limit->name);
                if (value == NULL || limit->kind != SBX_LIMIT_SETTABLE)
                        continue;
                char field[64];
                snprintf(field, sizeof(field), "%s%s", prefix, limit->name);
                uint64_t minimum = sbx_limit_api_min(limit);
                if (!json_is_integer(value))
                        report(p, field, "must be an integer");
                else if (json_integer_value(value) < (json_int_t)minimum)
                        report(p, field, "must be at least %llu", (unsigned long long)minimum);
                else
                        requested[i] = (uint64_t)json_integer_value(value);
        }
}

static void validate_network(struct pipeline *p)
{
        const json_t *network = json_object_get(p->body, "network");
        if (network == NULL)
                return;
        const char *text = text_field(p, network, "network", 64);
        if (text != NULL && strcmp(text, "none") != 0)
                report(p, "network", "only \"none\" is supported");
}

static void validate_backend(struct pipeline *p)
{
        const json_t *backend = json_object_get(p->body, "backend");
        p->backend_name = SBX_BACKEND_DEFAULT;
        if (backend == NULL)
                return;
        const char *text = text_field(p, backend, "backend", 64);
        const char *found = text ? sbx_backend_name_find(text) : NULL;
        if (text != NULL && found == NULL)
                report(p, "backend", "unknown backend '%s' (known: %s)", text, sbx_backend_names());
        p->backend_name = found;
}

static bool boolean_field(struct pipeline *p, const char *name, bool absent)
{
        const json_t *value = json_object_get(p->body, name);
        if (value == NULL)
                return absent;
        if (!json_is_boolean(value))
                report(p, name, "must be true or false");
        return json_is_true(value);
}

/* wait: false queues the execution (api/async.h); retry: true lets one that a crash interrupted
 * run again, which only a queued one can (a waiting client's connection died with it). */
static void validate_asynchrony(struct pipeline *p)
{
        p->queued = !boolean_field(p, "wait", true);
        p->retry = boolean_field(p, "retry", false);
        if (p->retry && !p->queued)
                report(p, "retry", "only an asynchronous execution (\"wait\": false) can retry");
        const json_t *callback = json_object_get(p->body, "callback_url");
        if (callback == NULL)
                return;
        p->callback_url = text_field(p, callback, "callback_url", SBX_CALLBACK_URL_MAX);
        if (p->callback_url != NULL && !p->queued)
                report(p, "callback_url",
                       "only an asynchronous execution (\"wait\": false) calls back");
        else if (p->callback_url != NULL && strncmp(p->callback_url, "http://", 7) != 0 &&
                 strncmp(p->callback_url, "https://", 8) != 0)
                report(p, "callback_url", "an http:// or https:// URL");
}

/* Types, unknown fields, bounds, paths and env names: everything one request shows alone. */
static int step_validate(struct pipeline *p)
{
        static const char *const top_level_fields[] = {
                "language", "code", "files",  "entrypoint",     "stdin",
                "args",     "env",  "limits", "compile_limits", "network",
                "backend",  "wait", "retry",  "callback_url",
        };
        if (!json_is_object(p->body)) {
                sbx_problem_set(p->problem, 400, "the request body must be a JSON object");
                return -1;
        }
        check_known_fields(p, p->body, "", top_level_fields, SBX_ARRAY_SIZE(top_level_fields));
        validate_language(p);
        validate_program(p);
        validate_args(p);
        validate_env(p);
        validate_stdin(p);
        validate_limits(p, "limits", p->requested_limits);
        validate_limits(p, "compile_limits", p->requested_compile_limits);
        validate_network(p);
        validate_backend(p);
        validate_asynchrony(p);
        return finish_step(p, 400);
}

/* ---- the other steps -------------------------------------------------------------------- */

static int step_assign_id(struct pipeline *p)
{
        struct sbx_error err = {0};
        if (sbx_execution_id_new(p->id, &err) < 0)
                return fail_internal(p, "no random bytes for the execution id");
        return 0;
}

static int step_resolve_language(struct pipeline *p)
{
        p->language = sbx_language_find(p->language_name);
        if (p->language == NULL)
                report(p, "language", "unknown language '%s' (known: %s)", p->language_name,
                       sbx_language_names());
        return finish_step(p, 400);
}

/* The request's own values (API units) on top of limits. */
static void apply_requested(struct sbx_limits *limits, const uint64_t *requested)
{
        for (size_t i = 0; i < SBX_LIMIT_COUNT; i++) {
                const struct sbx_limit_field *field = &sbx_limit_fields[i];
                if (field->kind == SBX_LIMIT_SETTABLE && requested[i] != 0)
                        /* Saturate: a request for more than fits is simply more than any
                         * ceiling, and the clamp step lowers it. */
                        sbx_limit_set(limits, field,
                                      requested[i] > UINT64_MAX / field->unit
                                              ? UINT64_MAX
                                              : requested[i] * field->unit);
        }
}

/* Built-in defaults, then the tier's default_*; the request's own values go on top. A compiled
 * language's compile limits: the language's (model/language.h), then the request's
 * compile_limits. Nothing is clamped yet. */
static int step_apply_defaults(struct pipeline *p)
{
        sbx_limits_default(&p->limits);
        for (size_t i = 0; i < SBX_LIMIT_COUNT; i++) {
                const struct sbx_limit_field *field = &sbx_limit_fields[i];
                if (field->kind != SBX_LIMIT_SETTABLE)
                        continue;
                uint64_t tier_default = sbx_limit_get(&p->tier->defaults, field);
                if (tier_default != 0)
                        sbx_limit_set(&p->limits, field, tier_default);
        }
        apply_requested(&p->limits, p->requested_limits);
        if (!sbx_language_compiles(p->language)) {
                if (json_object_get(p->body, "compile_limits") != NULL)
                        report(p, "compile_limits", "language '%s' has no compile stage",
                               p->language->name);
                return finish_step(p, 400);
        }
        sbx_language_compile_limits(p->language, &p->limits, &p->compile_limits);
        apply_requested(&p->compile_limits, p->requested_compile_limits);
        return 0;
}

/* "compile_limits.NAME" for each limit, made once: the clamped list holds static strings. */
static char compile_limit_names[SBX_LIMIT_COUNT][48];
static pthread_once_t compile_limit_names_once = PTHREAD_ONCE_INIT;

static void make_compile_limit_names(void)
{
        for (size_t i = 0; i < SBX_LIMIT_COUNT; i++)
                snprintf(compile_limit_names[i], sizeof(compile_limit_names[i]),
                         "compile_limits.%s", sbx_limit_fields[i].name);
}

/* Lowers each limit of limits to ceiling; records the fields the request had set (names[i]), so
 * the response can say what it did not get. Defaults above a ceiling are lowered silently: the
 * request did not ask for them. */
static void clamp(struct pipeline *p, struct sbx_limits *limits, const struct sbx_limits *ceiling,
                  const uint64_t *requested, bool compile)
{
        for (size_t i = 0; i < SBX_LIMIT_COUNT; i++) {
                const struct sbx_limit_field *field = &sbx_limit_fields[i];
                if (field->kind != SBX_LIMIT_SETTABLE)
                        continue;
                uint64_t most = sbx_limit_get(ceiling, field);
                if (sbx_limit_get(limits, field) <= most)
                        continue;
                sbx_limit_set(limits, field, most);
                if (requested[i] != 0)
                        p->clamped[p->n_clamped++] = compile ? compile_limit_names[i] : field->name;
        }
}

/* The run's limits to the tier's max_*, a compile's to its max_compile_*. */
static int step_clamp_to_tier(struct pipeline *p)
{
        pthread_once(&compile_limit_names_once, make_compile_limit_names);
        clamp(p, &p->limits, &p->tier->max, p->requested_limits, false);
        if (sbx_language_compiles(p->language))
                clamp(p, &p->compile_limits, &p->tier->max_compile, p->requested_compile_limits,
                      true);
        return 0;
}

/* What needs several fields, or the tier, to decide. */
static int step_check_cross_fields(struct pipeline *p)
{
        if (p->entrypoint != NULL) {
                bool found = false;
                for (size_t i = 0; i < p->n_files; i++)
                        if (strcmp(p->files[i].path, p->entrypoint) == 0)
                                found = true;
                if (!found)
                        report(p, "entrypoint", "must be the path of one of the files");
        }
        if (p->language != NULL && p->backend_name != NULL &&
            !sbx_backend_runs_language(p->backend_name, p->language))
                report(p, "backend", "backend '%s' does not run %s (it has no compile stage)",
                       p->backend_name, p->language->name);
        if (finish_step(p, 400) != 0)
                return -1;

        if (!sbx_tier_allows_language(p->tier, p->language->name))
                report(p, "language", "language '%s' is not allowed for tier '%s'",
                       p->language->name, p->tier->name);
        if (!sbx_tier_allows_backend(p->tier, p->backend_name))
                report(p, "backend", "backend '%s' is not allowed for tier '%s'", p->backend_name,
                       p->tier->name);
        return finish_step(p, 403);
}

/* ---- step: freeze ----------------------------------------------------------------------- */

/* A NUL-terminated copy of size bytes (which may contain NUL themselves). */
static char *copy_bytes(const char *data, size_t size)
{
        char *copy = malloc(size + 1);
        if (copy != NULL) {
                memcpy(copy, data, size);
                copy[size] = '\0';
        }
        return copy;
}

static int freeze_files(struct pipeline *p, struct sbx_settings *settings)
{
        settings->files = calloc(p->n_files, sizeof(*settings->files));
        if (settings->files == NULL)
                return -1;
        for (size_t i = 0; i < p->n_files; i++) {
                const struct file_draft *draft = &p->files[i];
                struct sbx_file *file = &settings->files[i];
                settings->n_files = i + 1; /* so that free sees what is allocated so far */
                file->path = strdup(draft->path);
                file->data = copy_bytes(draft->content.data, draft->content.size);
                file->size = draft->content.size;
                file->executable = draft->executable;
                if (file->path == NULL || file->data == NULL)
                        return -1;
        }
        settings->entrypoint = strdup(p->entrypoint);
        return settings->entrypoint ? 0 : -1;
}

static int freeze_strings(struct pipeline *p, struct sbx_settings *settings)
{
        settings->args = calloc(p->n_args + 1, sizeof(char *));
        settings->env = calloc(p->n_env + 1, sizeof(char *));
        if (settings->args == NULL || settings->env == NULL)
                return -1;
        for (size_t i = 0; i < p->n_args; i++) {
                settings->n_args = i + 1;
                settings->args[i] = strdup(p->args[i]);
                if (settings->args[i] == NULL)
                        return -1;
        }
        for (size_t i = 0; i < p->n_env; i++) {
                settings->n_env = i + 1;
                size_t name_length = strlen(p->env[i].name);
                size_t value_length = strlen(p->env[i].value);
                char *entry = malloc(name_length + 1 + value_length + 1);
                if (entry == NULL)
                        return -1;
                memcpy(entry, p->env[i].name, name_length);
                entry[name_length] = '=';
                memcpy(entry + name_length + 1, p->env[i].value, value_length + 1);
                settings->env[i] = entry;
        }
        return 0;
}

/* Copies everything into memory the settings own, so that the body can go. */
static int step_freeze(struct pipeline *p, struct sbx_settings **out)
{
        struct sbx_settings *settings = calloc(1, sizeof(*settings));
        if (settings == NULL)
                return fail_internal(p, "out of memory");
        memcpy(settings->id, p->id, sizeof(settings->id));
        settings->language = p->language->name;
        settings->backend = p->backend_name;
        settings->queued = p->queued;
        settings->retry = p->retry;
        settings->callback_url = p->callback_url ? strdup(p->callback_url) : NULL;
        settings->limits = p->limits;
        memcpy(settings->clamped, p->clamped, sizeof(p->clamped));
        settings->n_clamped = p->n_clamped;
        settings->compile_limits = p->compile_limits;
        settings->tenant = strdup(p->tenant->name);
        settings->requested = json_deep_copy(p->body);
        bool ok = settings->tenant != NULL && settings->requested != NULL &&
                  (p->callback_url == NULL || settings->callback_url != NULL);
        if (ok && p->has_code) {
                settings->code = copy_bytes(p->code.data, p->code.size);
                settings->code_size = p->code.size;
                ok = settings->code != NULL;
        }
        if (ok && p->n_files > 0)
                ok = freeze_files(p, settings) == 0;
        if (ok)
                ok = freeze_strings(p, settings) == 0;
        if (ok && p->has_stdin) {
                settings->stdin_data = copy_bytes(p->stdin_view.data, p->stdin_view.size);
                settings->stdin_size = p->stdin_view.size;
                ok = settings->stdin_data != NULL;
        }
        if (!ok) {
                sbx_settings_free(settings);
                return fail_internal(p, "out of memory");
        }
        *out = settings;
        return 0;
}

/* ---- the pipeline ----------------------------------------------------------------------- */

static void pipeline_freep(struct pipeline **p)
{
        if (*p == NULL)
                return;
        for (size_t i = 0; i < SBX_MAX_FILES; i++)
                free((*p)->decoded[i]);
        free(*p);
}

int sbx_settings_build(const json_t *body, const struct sbx_tenant *tenant,
                       struct sbx_settings **out, struct sbx_problem *problem)
{
        *out = NULL;
        memset(problem, 0, sizeof(*problem));
        _cleanup_(pipeline_freep) struct pipeline *p = calloc(1, sizeof(*p));
        if (p == NULL) {
                sbx_problem_set(problem, 500, "out of memory");
                return -1;
        }
        p->body = body;
        p->tenant = tenant;
        p->tier = tenant->tier;
        p->problem = problem;
        if (step_validate(p) != 0 || step_assign_id(p) != 0 || step_resolve_language(p) != 0 ||
            step_apply_defaults(p) != 0 || step_clamp_to_tier(p) != 0 ||
            step_check_cross_fields(p) != 0 || step_freeze(p, out) != 0)
                return -1;
        return 0;
}

void sbx_settings_free(struct sbx_settings *settings)
{
        if (settings == NULL)
                return;
        free(settings->tenant);
        free(settings->code);
        for (size_t i = 0; i < settings->n_files; i++) {
                free((void *)settings->files[i].path);
                free((void *)settings->files[i].data);
        }
        free(settings->files);
        free(settings->entrypoint);
        free(settings->callback_url);
        for (size_t i = 0; i < settings->n_args; i++)
                free(settings->args[i]);
        free(settings->args);
        for (size_t i = 0; i < settings->n_env; i++)
                free(settings->env[i]);
        free(settings->env);
        free(settings->stdin_data);
        json_decref(settings->requested);
        free(settings);
}

void sbx_settings_to_request(const struct sbx_settings *settings, struct sbx_request *request)
{
        *request = (struct sbx_request){
                .language = settings->language,
                .code = settings->code,
                .code_size = settings->code_size,
                .files = settings->files,
                .n_files = settings->n_files,
                .entrypoint = settings->entrypoint,
                .args = (const char *const *)settings->args,
                .n_args = settings->n_args,
                .env = (const char *const *)settings->env,
                .n_env = settings->n_env,
                .stdin_data = settings->stdin_data,
                .stdin_size = settings->stdin_size,
                .limits = settings->limits,
                .backend = settings->backend,
                .tenant = settings->tenant,
                .compile_limits = settings->compile_limits,
        };
}
