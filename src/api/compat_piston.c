/* Piston v2 on sandboxd (compat_piston.h).
 *
 * A Piston request becomes a v1 body: its files (the first UTF-8 one is the entrypoint, as
 * Piston runs it), stdin and args; run_timeout, run_cpu_time and run_memory_limit (bytes) become
 * limits.wall_ms, cpu_ms and memory_mb, the compile_* ones compile_limits. Where Piston refuses
 * a limit above its configured maximum, sandboxd clamps it to the tenant's tier, as every
 * request. The v1 result becomes Piston's answer: run and compile stages with stdout, stderr,
 * output (stdout, then stderr: sandboxd keeps the streams apart, so their interleaving is not
 * known), code, signal, status and message as isolate reports them (RE, SG, TO, OL, EL, XX),
 * cpu_time and wall_time (ms) and memory (bytes). A compile error answers with the compile stage
 * as the run stage too, as Piston does. The execution's id is in X-Sandboxd-Execution-Id: its
 * audit record is GET /v1/executions/{id}. */
#define _GNU_SOURCE
#include "api/compat_piston.h"

#include <math.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/languages.h"
#include "api/respond.h"
#include "model/language.h"
#include "model/limits.h"
#include "service/settings.h"
#include "util/cleanup.h"

#define PISTON_PREFIX "/api/v2/"
/* Piston's error key: its clients read the reason from "message". */
#define PISTON_ERROR_MEMBER "message"
/* The header naming the sandboxd execution behind an answer. */
#define EXECUTION_ID_HEADER "X-Sandboxd-Execution-Id"

bool sbx_piston_route_reads_body(const char *url, const char *method)
{
        return strcmp(url, PISTON_PREFIX "execute") == 0 &&
               strcmp(method, MHD_HTTP_METHOD_POST) == 0;
}

/* A 400 in Piston's words. */
static enum MHD_Result bad_request(struct sbx_api *api, struct MHD_Connection *connection,
                                   const char *field, const char *detail)
{
        const struct sbx_problem_field problem_field = {field, detail};
        return sbx_http_respond_problem(api, connection, 400, detail, &problem_field, field != NULL,
                                        NULL, 0);
}

/* ---- GET /api/v2/runtimes, /api/v2/packages ---- */

/* Every language the tier allows whose toolchain answers its version, as Piston lists its
 * runtimes (packages: false) or its installed packages (true). */
static json_t *runtimes_json(const struct sbx_tier *tier, bool packages)
{
        json_t *list = json_array();
        for (size_t i = 0; list != NULL && i < sbx_language_count(); i++) {
                const struct sbx_language *language = sbx_language_at(i);
                char version[32];
                if (!sbx_tier_allows_language(tier, language->name) ||
                    !sbx_compat_version(language, version))
                        continue;
                json_t *entry = packages ? json_pack("{s:s, s:s, s:b}", "language", language->name,
                                                     "language_version", version, "installed", true)
                                         : json_pack("{s:s, s:s, s:o}", "language", language->name,
                                                     "version", version, "aliases",
                                                     sbx_language_words_json(language->aliases));
                if (entry == NULL || json_array_append_new(list, entry) < 0) {
                        json_decref(list);
                        return NULL;
                }
        }
        return list;
}

/* ---- POST /api/v2/execute: the request ---- */

/* Piston's files as v1 files (into body), the entrypoint the first UTF-8 one. NULL on success,
 * else why (a static string, or written into why). */
static const char *translate_files(const json_t *files, const struct sbx_language *language,
                                   json_t *body, char *why, size_t why_size)
{
        json_t *out = json_array();
        if (out == NULL || json_object_set_new(body, "files", out) < 0)
                return "out of memory";
        const char *entrypoint = NULL;
        size_t index;
        const json_t *file;
        json_array_foreach(files, index, file)
        {
                const json_t *content = json_object_get(file, "content");
                const json_t *name = json_object_get(file, "name");
                const json_t *encoding = json_object_get(file, "encoding");
                const char *encoding_name = encoding != NULL ? json_string_value(encoding) : "utf8";
                if (!json_is_string(content)) {
                        snprintf(why, why_size, "files[%zu].content is required as a string",
                                 index);
                        return why;
                }
                if (name != NULL && !json_is_string(name)) {
                        snprintf(why, why_size, "files[%zu].name must be a string", index);
                        return why;
                }
                if (encoding_name == NULL ||
                    (strcmp(encoding_name, "utf8") != 0 && strcmp(encoding_name, "base64") != 0 &&
                     strcmp(encoding_name, "hex") != 0)) {
                        snprintf(why, why_size,
                                 "files[%zu].encoding must be one of base64, hex or utf8", index);
                        return why;
                }
                bool utf8 = strcmp(encoding_name, "utf8") == 0;
                char fallback[32];
                const char *path = json_string_value(name);
                if (path == NULL || path[0] == '\0') {
                        /* Piston names a nameless file file<i>.code; the entrypoint gets the
                         * language's own name, which its compiler recognizes. */
                        if (utf8 && entrypoint == NULL)
                                snprintf(fallback, sizeof(fallback), "%s", language->file_name);
                        else
                                snprintf(fallback, sizeof(fallback), "file%zu.code", index);
                        path = fallback;
                }
                json_t *v1 = json_pack("{s:s}", "path", path);
                if (v1 == NULL || json_array_append_new(out, v1) < 0)
                        return "out of memory";
                if (strcmp(encoding_name, "hex") == 0) {
                        _cleanup_free_ char *data = sbx_compat_hex_to_base64(
                                json_string_value(content), json_string_length(content));
                        if (data == NULL) {
                                snprintf(why, why_size, "files[%zu].content is not hex", index);
                                return why;
                        }
                        json_object_set_new(v1, "content", json_string(data));
                        json_object_set_new(v1, "encoding", json_string("base64"));
                } else {
                        json_object_set(v1, "content", (json_t *)content);
                        json_object_set_new(v1, "encoding", json_string(encoding_name));
                }
                if (utf8 && entrypoint == NULL)
                        entrypoint = json_string_value(json_object_get(v1, "path"));
        }
        if (entrypoint == NULL)
                return "files must include at least one utf8 encoded file";
        json_object_set_new(body, "entrypoint", json_string(entrypoint));
        return NULL;
}

/* Piston's limit members of a stage (prefix "run" or "compile") as v1 limits: timeout and
 * cpu_time in ms, memory_limit in bytes (-1: none). NULL on success, else why. A member left
 * out, null or 0 leaves the tier's default, as in Piston. */
static const char *translate_limits(const json_t *request, const char *prefix, json_t *limits,
                                    char *why, size_t why_size)
{
        static const struct {
                const char *piston, *v1;
                double divisor;
        } members[] = {
                {"timeout", "wall_ms", 1},
                {"cpu_time", "cpu_ms", 1},
                {"memory_limit", "memory_mb", (double)SBX_LIMIT_MIB},
        };
        for (size_t i = 0; i < SBX_ARRAY_SIZE(members); i++) {
                char name[64];
                snprintf(name, sizeof(name), "%s_%s", prefix, members[i].piston);
                const json_t *value = json_object_get(request, name);
                if (value == NULL || json_is_null(value))
                        continue;
                if (!json_is_number(value)) {
                        snprintf(why, why_size, "If specified, %s must be a number", name);
                        return why;
                }
                double number = json_number_value(value);
                if (number == 0 || (number == -1 && strcmp(members[i].piston, "memory_limit") == 0))
                        continue;
                if (number < 0 || !isfinite(number)) {
                        snprintf(why, why_size, "%s must be non-negative", name);
                        return why;
                }
                double converted = ceil(number / members[i].divisor);
                if (converted > 1e15)
                        converted = 1e15; /* past every ceiling: the tier clamps it */
                json_object_set_new(limits, members[i].v1, json_integer((json_int_t)converted));
        }
        return NULL;
}

/* The v1 body of a Piston request, or NULL with why (static, or written into why). */
static json_t *translate_request(const json_t *request, const struct sbx_language *language,
                                 char *why, size_t why_size, const char **reason)
{
        _cleanup_(json_decrefp) json_t *body = json_pack("{s:s}", "language", language->name);
        json_t *limits = json_object(), *compile_limits = json_object();
        if (body == NULL || json_object_set_new(body, "limits", limits) < 0) {
                json_decref(compile_limits);
                *reason = "out of memory";
                return NULL;
        }
        if ((*reason = translate_files(json_object_get(request, "files"), language, body, why,
                                       why_size)) != NULL ||
            (*reason = translate_limits(request, "run", limits, why, why_size)) != NULL ||
            (*reason = translate_limits(request, "compile", compile_limits, why, why_size)) !=
                    NULL) {
                json_decref(compile_limits);
                return NULL;
        }
        /* Piston sends its compile members for every language: only one that compiles has
         * compile limits in v1. */
        if (sbx_language_compiles(language) && json_object_size(compile_limits) > 0)
                json_object_set_new(body, "compile_limits", compile_limits);
        else
                json_decref(compile_limits);
        const json_t *stdin_value = json_object_get(request, "stdin");
        if (json_is_string(stdin_value) && json_string_length(stdin_value) > 0)
                json_object_set(body, "stdin", (json_t *)stdin_value);
        else if (stdin_value != NULL && !json_is_string(stdin_value) &&
                 !json_is_null(stdin_value)) {
                *reason = "stdin must be a string";
                return NULL;
        }
        const json_t *args = json_object_get(request, "args");
        if (json_is_array(args) && json_array_size(args) > 0)
                json_object_set(body, "args", (json_t *)args);
        else if (args != NULL && !json_is_array(args) && !json_is_null(args)) {
                *reason = "args must be an array of strings";
                return NULL;
        }
        return steal_pointer(&body);
}

/* ---- POST /api/v2/execute: the answer ---- */

/* "SIGKILL" for 9; NULL for 0. */
static json_t *signal_name(json_int_t number)
{
        const char *abbreviation = number > 0 ? sigabbrev_np((int)number) : NULL;
        if (abbreviation == NULL)
                return json_null();
        char name[32];
        snprintf(name, sizeof(name), "SIG%s", abbreviation);
        return json_string(name);
}

/* A v1 stage (the result, or its compile member) as Piston's. */
static json_t *piston_stage(const json_t *stage)
{
        const char *status = json_string_value(json_object_get(stage, "status"));
        const char *out = json_string_value(json_object_get(stage, "stdout"));
        const char *err = json_string_value(json_object_get(stage, "stderr"));
        const json_t *exit_code = json_object_get(stage, "exit_code");
        const json_t *signal = json_object_get(stage, "signal");
        const json_t *usage = json_object_get(stage, "usage");
        const json_t *truncated = json_object_get(stage, "truncated");
        if (status == NULL || out == NULL || err == NULL)
                return NULL;
        /* isolate's status codes, which Piston passes on, and its messages. */
        const char *code = NULL;
        char message[160] = "";
        if (strcmp(status, "timeout") == 0) {
                code = "TO";
                snprintf(message, sizeof(message), "Time limit exceeded");
        } else if (strcmp(status, "output_limit") == 0) {
                bool stderr_over = json_is_true(json_object_get(truncated, "stderr"));
                code = stderr_over ? "EL" : "OL";
                snprintf(message, sizeof(message), "%s length exceeded",
                         stderr_over ? "stderr" : "stdout");
        } else if (strcmp(status, "internal_error") == 0 || strcmp(status, "canceled") == 0) {
                code = "XX";
                const char *error = json_string_value(json_object_get(stage, "error"));
                snprintf(message, sizeof(message), "%.150s", error != NULL ? error : status);
        } else if (json_is_integer(signal)) {
                code = "SG";
                snprintf(message, sizeof(message), "Caught fatal signal %lld%s",
                         (long long)json_integer_value(signal),
                         strcmp(status, "memory_limit") == 0 ? " (memory limit exceeded)" : "");
        } else if (json_integer_value(exit_code) != 0) {
                code = "RE";
                snprintf(message, sizeof(message), "Exited with error status %lld",
                         (long long)json_integer_value(exit_code));
        }
        /* A run ended by a cap is killed: Piston says SIGKILL for those. */
        bool killed = code != NULL && (strcmp(code, "TO") == 0 || strcmp(code, "OL") == 0 ||
                                       strcmp(code, "EL") == 0);
        size_t out_len = json_string_length(json_object_get(stage, "stdout"));
        size_t err_len = json_string_length(json_object_get(stage, "stderr"));
        _cleanup_free_ char *output = malloc(out_len + err_len + 1);
        if (output == NULL)
                return NULL;
        memcpy(output, out, out_len);
        memcpy(output + out_len, err, err_len);
        return json_pack(
                "{s:s, s:s, s:s%, s:O, s:o, s:o, s:o, s:O, s:O, s:O}", "stdout", out, "stderr", err,
                "output", output, out_len + err_len, "code",
                json_is_integer(exit_code) ? exit_code : json_null(), "signal",
                killed ? json_string("SIGKILL")
                       : signal_name(json_is_integer(signal) ? json_integer_value(signal) : 0),
                "status", code != NULL ? json_string(code) : json_null(), "message",
                message[0] != '\0' ? json_string(message) : json_null(), "cpu_time",
                json_object_get(usage, "cpu_ms"), "wall_time", json_object_get(usage, "wall_ms"),
                "memory", json_object_get(usage, "memory_peak_bytes"));
}

/* The v1 response as Piston's answer. */
static json_t *piston_answer(const json_t *response, const struct sbx_language *language,
                             const char *version)
{
        _cleanup_(json_decrefp) json_t *answer =
                json_pack("{s:s, s:s}", "language", language->name, "version", version);
        const json_t *compile = json_object_get(response, "compile");
        json_t *compile_stage = json_is_object(compile) ? piston_stage(compile) : NULL;
        if (answer == NULL || (json_is_object(compile) && compile_stage == NULL))
                return NULL;
        if (compile_stage != NULL)
                json_object_set_new(answer, "compile", compile_stage);
        const char *status = json_string_value(json_object_get(response, "status"));
        if (status != NULL && strcmp(status, "compile_error") == 0 && compile_stage != NULL) {
                /* Piston answers a failed compile with it as the run stage too. */
                json_object_set(answer, "run", compile_stage);
        } else {
                json_t *run = piston_stage(response);
                if (run == NULL)
                        return NULL;
                json_object_set_new(answer, "run", run);
        }
        return steal_pointer(&answer);
}

static enum MHD_Result handle_execute(struct sbx_api *api, struct MHD_Connection *connection,
                                      const struct sbx_tenant *tenant,
                                      const struct sbx_compat_request *request)
{
        enum MHD_Result answered = MHD_NO;
        _cleanup_(json_decrefp) json_t *piston =
                sbx_compat_body(api, connection, request, &answered);
        if (piston == NULL)
                return answered;
        const json_t *language_value = json_object_get(piston, "language");
        const json_t *version_value = json_object_get(piston, "version");
        if (!json_is_string(language_value))
                return bad_request(api, connection, "language", "language is required as a string");
        if (version_value != NULL && !json_is_string(version_value))
                return bad_request(api, connection, "version", "version is required as a string");
        if (!json_is_array(json_object_get(piston, "files")))
                return bad_request(api, connection, "files", "files is required as an array");
        const char *name = json_string_value(language_value);
        const char *selector = version_value != NULL ? json_string_value(version_value) : "*";
        const struct sbx_language *language = sbx_language_find(name);
        char version[32];
        if (language == NULL || !sbx_compat_version(language, version) ||
            !sbx_compat_version_matches(version, selector)) {
                char detail[160];
                snprintf(detail, sizeof(detail), "%.64s-%.64s runtime is unknown", name, selector);
                return bad_request(api, connection, "language", detail);
        }
        char why[160];
        const char *reason = NULL;
        _cleanup_(json_decrefp) json_t *body =
                translate_request(piston, language, why, sizeof(why), &reason);
        if (body == NULL)
                return bad_request(api, connection, NULL, reason);

        struct sbx_settings *settings = NULL;
        struct sbx_problem problem;
        if (sbx_settings_build(body, tenant, &settings, &problem) < 0)
                return sbx_http_respond_json(api, connection, problem.status,
                                             SBX_PROBLEM_CONTENT_TYPE,
                                             sbx_problem_to_json(&problem), NULL, 0);
        json_t *response =
                sbx_http_execute(api, connection, tenant, settings, request->in_flight, &answered);
        char id[sizeof(settings->id)];
        snprintf(id, sizeof(id), "%s", settings->id);
        sbx_settings_free(settings);
        if (response == NULL)
                return answered;
        json_t *answer = piston_answer(response, language, version);
        json_decref(response);
        if (answer == NULL)
                return sbx_http_respond_problem(api, connection, 500, "out of memory", NULL, 0,
                                                NULL, 0);
        const struct sbx_http_header header = {EXECUTION_ID_HEADER, id};
        return sbx_http_respond_json(api, connection, 200, JSON_CONTENT_TYPE, answer, &header, 1);
}

/* ---- routing ---- */

static enum MHD_Result route(struct sbx_api *api, struct MHD_Connection *connection,
                             const char *url, const char *method,
                             const struct sbx_compat_request *request)
{
        bool read = strcmp(method, MHD_HTTP_METHOD_GET) == 0 ||
                    strcmp(method, MHD_HTTP_METHOD_HEAD) == 0;
        const char *path = url + strlen(PISTON_PREFIX);
        bool runtimes = strcmp(path, "runtimes") == 0, packages = strcmp(path, "packages") == 0;
        bool execute = strcmp(path, "execute") == 0;
        if (!runtimes && !packages && !execute)
                return sbx_http_respond_problem(api, connection, 404, "no such resource", NULL, 0,
                                                NULL, 0);
        if ((runtimes || packages) && !read)
                return sbx_http_respond_method_not_allowed(api, connection, method, "GET, HEAD");
        if (execute && strcmp(method, MHD_HTTP_METHOD_POST) != 0)
                return sbx_http_respond_method_not_allowed(api, connection, method, "POST");
        enum MHD_Result answered = MHD_NO;
        const struct sbx_tenant *tenant = sbx_compat_authenticate(
                api, connection, request->tenants, SBX_COMPAT_PISTON, NULL, &answered);
        if (tenant == NULL)
                return answered;
        if (execute)
                return handle_execute(api, connection, tenant, request);
        json_t *list = runtimes_json(tenant->tier, packages);
        if (list == NULL)
                return sbx_http_respond_problem(api, connection, 500, "out of memory", NULL, 0,
                                                NULL, 0);
        return sbx_http_respond_json(api, connection, 200, JSON_CONTENT_TYPE, list, NULL, 0);
}

enum MHD_Result sbx_piston_route(struct sbx_api *api, struct MHD_Connection *connection,
                                 const char *url, const char *method,
                                 const struct sbx_compat_request *request, bool *handled)
{
        *handled = strncmp(url, PISTON_PREFIX, strlen(PISTON_PREFIX)) == 0;
        if (!*handled)
                return MHD_NO;
        sbx_http_set_problem_echo(PISTON_ERROR_MEMBER);
        enum MHD_Result answered = route(api, connection, url, method, request);
        sbx_http_set_problem_echo(NULL);
        return answered;
}
