/* The MCP server's tools (tools.h). Each tool builds an API request from its arguments (which the
 * API validates: a refusal comes back as a tool error carrying the problem's detail and fields),
 * and turns the answer into MCP content: text an LLM reads (the status, the output, what a cap
 * did), images for PNG results, and the API's JSON as structuredContent for programs. */
#define _GNU_SOURCE
#include "mcp/tools.h"

#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/compat.h"
#include "model/request.h"
#include "util/cleanup.h"

/* The tools, in the order tools/list gives them: src/mcp/tools.json, compiled in
 * (scripts/embed_text.py). Their descriptions are written for an LLM deciding which to call and
 * with what. */
extern const char sbx_mcp_tools_json[];

static json_t *tools;
static pthread_once_t tools_once = PTHREAD_ONCE_INIT;

static void load_tools(void)
{
        json_error_t error;
        tools = json_loads(sbx_mcp_tools_json, 0, &error);
}

const json_t *sbx_mcp_tools(void)
{
        pthread_once(&tools_once, load_tools);
        return tools;
}

bool sbx_mcp_tool_exists(const char *name)
{
        size_t index;
        const json_t *tool;
        json_array_foreach(sbx_mcp_tools(), index, tool)
        {
                if (strcmp(json_string_value(json_object_get(tool, "name")), name) == 0)
                        return true;
        }
        return false;
}

/* ---- results ---- */

/* {content: [{type: text, text}], isError} with text printf-style; structured (stolen, may be
 * NULL) as structuredContent. */
static json_t *tool_result(bool is_error, json_t *structured, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));

static json_t *tool_result(bool is_error, json_t *structured, const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        _cleanup_free_ char *text = NULL;
        int n = vasprintf(&text, fmt, ap);
        va_end(ap);
        json_t *result = n >= 0 ? json_pack("{s:[{s:s, s:s}], s:b}", "content", "type", "text",
                                            "text", text, "isError", is_error)
                                : NULL;
        if (result != NULL && structured != NULL)
                json_object_set(result, "structuredContent", structured);
        json_decref(structured);
        return result;
}

/* A problem body (RFC 9457) as a tool error: its detail and each field's message. */
static json_t *problem_result(const char *what, long status, const char *body)
{
        json_error_t error;
        json_t *problem = body != NULL ? json_loads(body, 0, &error) : NULL;
        const char *detail = json_string_value(json_object_get(problem, "detail"));
        char fields[1024] = "";
        size_t used = 0, index;
        const json_t *entry;
        json_array_foreach(json_object_get(problem, "errors"), index, entry)
        {
                if (used < sizeof(fields))
                        used += (size_t)snprintf(
                                fields + used, sizeof(fields) - used, "\n- %s: %s",
                                json_string_value(json_object_get(entry, "field")),
                                json_string_value(json_object_get(entry, "message")));
        }
        return tool_result(true, json_is_object(problem) ? problem : (json_decref(problem), NULL),
                           "%s failed (HTTP %ld): %s%s", what, status,
                           detail != NULL ? detail : "no detail", fields);
}

/* The tool error of a call that got no answer. */
static json_t *unreachable_result(const char *what, const struct sbx_error *err)
{
        return tool_result(true, NULL, "%s failed: %s", what, err->message);
}

/* ---- arguments ---- */

/* A string argument, or NULL. */
static const char *string_argument(const json_t *arguments, const char *name)
{
        return json_string_value(json_object_get(arguments, name));
}

/* path with each segment percent-encoded, the slashes kept (owned; NULL when out of memory). */
static char *escape_path(const char *path)
{
        size_t size = strlen(path) * 3 + 1;
        char *out = malloc(size);
        if (out == NULL)
                return NULL;
        size_t used = 0;
        for (const char *p = path;;) {
                size_t length = strcspn(p, "/");
                char *segment = curl_easy_escape(NULL, p, (int)length);
                if (segment == NULL) {
                        free(out);
                        return NULL;
                }
                used += (size_t)snprintf(out + used, size - used, "%s", segment);
                curl_free(segment);
                p += length;
                if (*p == '\0')
                        break;
                out[used++] = '/';
                out[used] = '\0';
                p++;
        }
        return out;
}

/* The members names[] of arguments copied into a new object (the API checks each). */
static json_t *pick(const json_t *arguments, const char *const *names, size_t n)
{
        json_t *body = json_object();
        for (size_t i = 0; body != NULL && i < n; i++) {
                json_t *value = json_object_get(arguments, names[i]);
                if (value != NULL)
                        json_object_set(body, names[i], value);
        }
        return body;
}

/* A JSON body sent as a call; the answer in *answer. */
static int send_json(const struct sbx_mcp_target *target, const char *method, const char *path,
                     const json_t *body, bool event_stream, const atomic_bool *cancel,
                     struct sbx_mcp_answer *answer, struct sbx_error *err)
{
        _cleanup_free_ char *text = body != NULL ? json_dumps(body, JSON_COMPACT) : NULL;
        if (body != NULL && text == NULL)
                return sbx_error_set(err, ENOMEM, "out of memory");
        const struct sbx_mcp_call call = {
                .method = method,
                .path = path,
                .content_type = text != NULL ? "application/json" : NULL,
                .body = text,
                .body_size = text != NULL ? strlen(text) : 0,
                .event_stream = event_stream,
                .cancel = cancel,
        };
        return sbx_mcp_request(target, &call, answer, err);
}

/* The JSON of a 2xx answer (owned), or NULL. */
static json_t *answer_json(const struct sbx_mcp_answer *answer)
{
        json_error_t error;
        return answer->body != NULL ? json_loads(answer->body, 0, &error) : NULL;
}

/* What a call that was sent (sent: send_json's or sbx_mcp_request's return) came to: the JSON of
 * an answer with the expected status (a JSON null when it has no body; owned), or NULL with
 * *failure the tool error to answer with (the service unreachable, or its problem). Frees
 * answer. */
static json_t *answered_json(const char *what, int sent, const struct sbx_error *err,
                             struct sbx_mcp_answer *answer, long expected, json_t **failure)
{
        if (sent < 0) {
                *failure = unreachable_result(what, err);
                return NULL;
        }
        json_t *json = answer->status != expected ? NULL
                       : answer->size == 0        ? json_null()
                                                  : answer_json(answer);
        if (json == NULL)
                *failure = problem_result(what, answer->status, answer->body);
        sbx_mcp_answer_free(answer);
        return json;
}

/* ---- what a run says ---- */

/* Appends text to *out (grown), bounded: an LLM is better served by the start of a huge output
 * and a note than by megabytes. */
#define TEXT_OUTPUT_MAX (64 * 1024)

static void append(char **out, size_t *used, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));

static void append(char **out, size_t *used, const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        _cleanup_free_ char *piece = NULL;
        int n = vasprintf(&piece, fmt, ap);
        va_end(ap);
        if (n < 0 || *out == NULL)
                return;
        char *grown = realloc(*out, *used + (size_t)n + 1);
        if (grown == NULL)
                return;
        memcpy(grown + *used, piece, (size_t)n + 1);
        *out = grown;
        *used += (size_t)n;
}

static void append_stream(char **out, size_t *used, const char *name, const json_t *run)
{
        const char *text = json_string_value(json_object_get(run, name));
        size_t length = json_string_length(json_object_get(run, name));
        if (text == NULL || length == 0)
                return;
        bool cut = length > TEXT_OUTPUT_MAX;
        append(out, used, "\n--- %s ---\n%.*s%s", name, (int)(cut ? TEXT_OUTPUT_MAX : length), text,
               cut ? "\n[... cut here for the reader; structuredContent has it all]" : "");
        if (json_is_true(json_object_get(json_object_get(run, "truncated"), name)))
                append(out, used, "\n[%s passed the output cap and was truncated]", name);
}

/* What a run's result says, for an LLM: its status and what explains it, then the output. */
static char *describe_run(const json_t *run)
{
        size_t used = 0;
        char *out = strdup("");
        const char *status = json_string_value(json_object_get(run, "status"));
        append(&out, &used, "status: %s", status != NULL ? status : "?");
        const json_t *exit_code = json_object_get(run, "exit_code");
        const json_t *signal = json_object_get(run, "signal");
        if (json_is_integer(exit_code))
                append(&out, &used, " (exit code %lld)", (long long)json_integer_value(exit_code));
        if (json_is_integer(signal))
                append(&out, &used, " (signal %lld)", (long long)json_integer_value(signal));
        const char *error = json_string_value(json_object_get(run, "error"));
        if (error != NULL)
                append(&out, &used, "\nerror: %s", error);
        const json_t *session_error = json_object_get(run, "error");
        if (json_is_object(session_error))
                append(&out, &used, "\nerror: %s: %s",
                       json_string_value(json_object_get(session_error, "name")),
                       json_string_value(json_object_get(session_error, "value")));
        const json_t *evidence = json_object_get(run, "evidence");
        static const char *const counters[] = {"oom_kills", "memory_max_events", "pids_max_events",
                                               "cpu_nr_throttled"};
        for (size_t i = 0; i < SBX_ARRAY_SIZE(counters); i++) {
                json_int_t value = json_integer_value(json_object_get(evidence, counters[i]));
                if (value > 0)
                        append(&out, &used, "\nkernel evidence: %s = %lld", counters[i],
                               (long long)value);
        }
        static const char *const flags[] = {"wall_timeout", "output_limit", "disk_full"};
        for (size_t i = 0; i < SBX_ARRAY_SIZE(flags); i++)
                if (json_is_true(json_object_get(evidence, flags[i])))
                        append(&out, &used, "\nevidence: %s", flags[i]);
        const json_t *compile = json_object_get(run, "compile");
        if (json_is_object(compile) && status != NULL && strcmp(status, "compile_error") == 0)
                append_stream(&out, &used, "stderr", compile);
        append_stream(&out, &used, "stdout", run);
        append_stream(&out, &used, "stderr", run);
        return out;
}

/* A run's result (an execution's or a session run's) as a tool result: its description, an
 * image for each PNG result, the rest of the rich results as text; structured: the result. */
static json_t *run_result(json_t *run)
{
        _cleanup_free_ char *text = describe_run(run);
        json_t *result = tool_result(false, run, "%s", text != NULL ? text : "");
        json_t *content = json_object_get(result, "content");
        size_t index;
        const json_t *bundle;
        json_array_foreach(json_object_get(run, "results"), index, bundle)
        {
                const char *png = json_string_value(json_object_get(bundle, "image/png"));
                const char *plain = json_string_value(json_object_get(bundle, "text/plain"));
                if (png != NULL)
                        json_array_append_new(content,
                                              json_pack("{s:s, s:s, s:s}", "type", "image", "data",
                                                        png, "mimeType", "image/png"));
                else if (plain != NULL)
                        json_array_append_new(
                                content, json_pack("{s:s, s:s}", "type", "text", "text", plain));
        }
        return result;
}

/* A streamed run's answer: its end event's result, or its problem as a tool error. */
static json_t *streamed_run_result(const char *what, const struct sbx_mcp_answer *answer)
{
        if (answer->status != 200 || strcmp(answer->content_type, "text/event-stream") != 0)
                return problem_result(what, answer->status, answer->body);
        _cleanup_free_ char *end = sbx_mcp_event_data(answer->body, answer->size, "end");
        if (end == NULL) {
                _cleanup_free_ char *problem =
                        sbx_mcp_event_data(answer->body, answer->size, "problem");
                return problem_result(what, 200, problem);
        }
        json_error_t error;
        json_t *run = json_loads(end, 0, &error);
        if (run == NULL)
                return tool_result(true, NULL, "%s: the answer is not JSON: %s", what, error.text);
        return run_result(run);
}

/* ---- the tools ---- */

static json_t *run_code(const struct sbx_mcp_target *target, const json_t *arguments,
                        const atomic_bool *cancel)
{
        static const char *const fields[] = {"language", "code", "files",  "entrypoint",    "stdin",
                                             "args",     "env",  "limits", "compile_limits"};
        _cleanup_(json_decrefp) json_t *body = pick(arguments, fields, SBX_ARRAY_SIZE(fields));
        struct sbx_mcp_answer answer;
        struct sbx_error err = {0};
        if (send_json(target, "POST", "/v1/executions", body, true, cancel, &answer, &err) < 0)
                return unreachable_result("run_code", &err);
        json_t *result = streamed_run_result("run_code", &answer);
        sbx_mcp_answer_free(&answer);
        return result;
}

static json_t *list_languages(const struct sbx_mcp_target *target, const atomic_bool *cancel)
{
        struct sbx_mcp_answer answer;
        struct sbx_error err = {0};
        json_t *failure = NULL;
        int sent = send_json(target, "GET", "/v1/languages", NULL, false, cancel, &answer, &err);
        json_t *languages = answered_json("list_languages", sent, &err, &answer, 200, &failure);
        if (languages == NULL)
                return failure;
        static const char heading[] = "Languages you may use (name: version; aliases):";
        size_t used = sizeof(heading) - 1, index;
        char *text = strdup(heading);
        const json_t *language;
        json_array_foreach(json_object_get(languages, "languages"), index, language)
        {
                if (!json_is_true(json_object_get(language, "allowed")))
                        continue;
                const char *version = json_string_value(json_object_get(language, "version"));
                append(&text, &used, "\n- %s: %s",
                       json_string_value(json_object_get(language, "name")),
                       version != NULL ? version : "version unknown");
                size_t alias_index;
                const json_t *alias;
                json_array_foreach(json_object_get(language, "aliases"), alias_index, alias)
                {
                        append(&text, &used, "%s%s", alias_index == 0 ? "; " : ", ",
                               json_string_value(alias));
                }
                if (json_is_true(json_object_get(language, "compiled")))
                        append(&text, &used, " (compiled)");
        }
        json_t *result = tool_result(false, languages, "%s", text != NULL ? text : "");
        free(text);
        return result;
}

static json_t *create_session(const struct sbx_mcp_target *target, const json_t *arguments,
                              const atomic_bool *cancel)
{
        static const char *const fields[] = {"language", "limits",         "env",
                                             "files",    "idle_timeout_s", "max_lifetime_s"};
        _cleanup_(json_decrefp) json_t *body = pick(arguments, fields, SBX_ARRAY_SIZE(fields));
        if (json_object_get(body, "language") == NULL)
                json_object_set_new(body, "language", json_string("python"));
        struct sbx_mcp_answer answer;
        struct sbx_error err = {0};
        json_t *failure = NULL;
        int sent = send_json(target, "POST", "/v1/sessions", body, false, cancel, &answer, &err);
        json_t *session = answered_json("create_session", sent, &err, &answer, 201, &failure);
        if (session == NULL)
                return failure;
        return tool_result(false, session,
                           "session %s is open (%s); pass its id as session_id to "
                           "run_in_session, write_file, read_file, list_files and close_session",
                           json_string_value(json_object_get(session, "id")),
                           json_string_value(json_object_get(session, "language")));
}

static json_t *run_in_session(const struct sbx_mcp_target *target, const char *session,
                              const json_t *arguments, const atomic_bool *cancel)
{
        static const char *const fields[] = {"code", "stdin", "timeout_ms"};
        _cleanup_(json_decrefp) json_t *body = pick(arguments, fields, SBX_ARRAY_SIZE(fields));
        char path[96];
        snprintf(path, sizeof(path), "/v1/sessions/%s/run", session);
        struct sbx_mcp_answer answer;
        struct sbx_error err = {0};
        if (send_json(target, "POST", path, body, true, cancel, &answer, &err) < 0)
                return unreachable_result("run_in_session", &err);
        json_t *result = streamed_run_result("run_in_session", &answer);
        sbx_mcp_answer_free(&answer);
        return result;
}

/* "/v1/sessions/ID/files/PATH" with PATH escaped (owned). */
static char *file_url(const char *session, const char *file)
{
        _cleanup_free_ char *escaped = escape_path(file[0] == '/' ? file + 1 : file);
        char *path = NULL;
        if (escaped == NULL || asprintf(&path, "/v1/sessions/%s/files/%s", session, escaped) < 0)
                return NULL;
        return path;
}

static json_t *write_file(const struct sbx_mcp_target *target, const char *session,
                          const json_t *arguments, const atomic_bool *cancel)
{
        const char *file = string_argument(arguments, "path");
        const json_t *content = json_object_get(arguments, "content");
        const char *encoding = string_argument(arguments, "encoding");
        if (file == NULL || !json_is_string(content))
                return tool_result(true, NULL, "write_file needs path and content (strings)");
        bool base64 = encoding != NULL && strcmp(encoding, "base64") == 0;
        if (encoding != NULL && !base64 && strcmp(encoding, "utf8") != 0)
                return tool_result(true, NULL, "write_file: encoding is utf8 or base64");
        size_t size = json_string_length(content);
        _cleanup_free_ char *decoded =
                base64 ? sbx_compat_base64_decode(json_string_value(content), size, &size) : NULL;
        _cleanup_free_ char *path = file_url(session, file);
        if (path == NULL || (base64 && decoded == NULL))
                return tool_result(true, NULL, "write_file: out of memory");
        const struct sbx_mcp_call call = {
                .method = "PUT",
                .path = path,
                .content_type = "application/octet-stream",
                .body = base64 ? decoded : json_string_value(content),
                .body_size = size,
                .cancel = cancel,
        };
        struct sbx_mcp_answer answer;
        struct sbx_error err = {0};
        json_t *failure = NULL;
        int sent = sbx_mcp_request(target, &call, &answer, &err);
        json_t *written = answered_json("write_file", sent, &err, &answer, 201, &failure);
        if (written == NULL)
                return failure;
        return tool_result(false, written, "wrote %lld bytes to %s",
                           (long long)json_integer_value(json_object_get(written, "size")),
                           json_string_value(json_object_get(written, "path")));
}

static json_t *read_file(const struct sbx_mcp_target *target, const char *session,
                         const json_t *arguments, const atomic_bool *cancel)
{
        const char *file = string_argument(arguments, "path");
        if (file == NULL)
                return tool_result(true, NULL, "read_file needs path (a string)");
        _cleanup_free_ char *path = file_url(session, file);
        if (path == NULL)
                return tool_result(true, NULL, "read_file: out of memory");
        struct sbx_mcp_answer answer;
        struct sbx_error err = {0};
        if (send_json(target, "GET", path, NULL, false, cancel, &answer, &err) < 0)
                return unreachable_result("read_file", &err);
        if (answer.status != 200) {
                json_t *result = problem_result("read_file", answer.status, answer.body);
                sbx_mcp_answer_free(&answer);
                return result;
        }
        const char *data = answer.body != NULL ? answer.body : "";
        json_t *text = json_stringn(data, answer.size); /* NULL: not UTF-8 */
        bool image = strncmp(answer.content_type, "image/", 6) == 0;
        json_t *result = NULL;
        if (text != NULL && !image) {
                result = json_pack("{s:[{s:s, s:o}], s:b}", "content", "type", "text", "text", text,
                                   "isError", false);
        } else {
                json_decref(text);
                _cleanup_free_ char *encoded = sbx_compat_base64(data, answer.size);
                _cleanup_free_ char *uri = NULL;
                if (encoded != NULL && asprintf(&uri, "sandboxd://sessions/%s/files/%s", session,
                                                file[0] == '/' ? file + 1 : file) >= 0)
                        result = image ? json_pack("{s:[{s:s, s:s, s:s}], s:b}", "content", "type",
                                                   "image", "data", encoded, "mimeType",
                                                   answer.content_type, "isError", false)
                                       : json_pack("{s:[{s:s, s:{s:s, s:s, s:s}}], s:b}", "content",
                                                   "type", "resource", "resource", "uri", uri,
                                                   "mimeType", answer.content_type, "blob", encoded,
                                                   "isError", false);
        }
        sbx_mcp_answer_free(&answer);
        return result;
}

static json_t *list_files(const struct sbx_mcp_target *target, const char *session,
                          const json_t *arguments, const atomic_bool *cancel)
{
        const char *directory = string_argument(arguments, "path");
        _cleanup_free_ char *escaped =
                directory != NULL ? curl_easy_escape(NULL, directory, 0) : NULL;
        _cleanup_free_ char *path = NULL;
        if (asprintf(&path, "/v1/sessions/%s/files%s%s", session, escaped ? "?path=" : "",
                     escaped ? escaped : "") < 0)
                return tool_result(true, NULL, "list_files: out of memory");
        struct sbx_mcp_answer answer;
        struct sbx_error err = {0};
        json_t *failure = NULL;
        int sent = send_json(target, "GET", path, NULL, false, cancel, &answer, &err);
        json_t *listing = answered_json("list_files", sent, &err, &answer, 200, &failure);
        if (listing == NULL)
                return failure;
        size_t used = 0, index;
        char *text = strdup("");
        append(&text, &used, "%s:", json_string_value(json_object_get(listing, "path")));
        const json_t *entry;
        json_array_foreach(json_object_get(listing, "entries"), index, entry)
        {
                append(&text, &used, "\n%s %s (%lld bytes)",
                       json_string_value(json_object_get(entry, "type")),
                       json_string_value(json_object_get(entry, "name")),
                       (long long)json_integer_value(json_object_get(entry, "size")));
        }
        json_t *result = tool_result(false, listing, "%s", text != NULL ? text : "");
        free(text);
        return result;
}

static json_t *close_session(const struct sbx_mcp_target *target, const char *session,
                             const atomic_bool *cancel)
{
        char path[64];
        snprintf(path, sizeof(path), "/v1/sessions/%s", session);
        struct sbx_mcp_answer answer;
        struct sbx_error err = {0};
        json_t *failure = NULL;
        int sent = send_json(target, "DELETE", path, NULL, false, cancel, &answer, &err);
        json_t *closed = answered_json("close_session", sent, &err, &answer, 204, &failure);
        if (closed == NULL)
                return failure;
        json_decref(closed);
        return tool_result(false, NULL, "session %s is closed", session);
}

json_t *sbx_mcp_call_tool(const struct sbx_mcp_target *target, const char *name,
                          const json_t *arguments, const atomic_bool *cancel)
{
        if (strcmp(name, "run_code") == 0)
                return run_code(target, arguments, cancel);
        if (strcmp(name, "list_languages") == 0)
                return list_languages(target, cancel);
        if (strcmp(name, "create_session") == 0)
                return create_session(target, arguments, cancel);
        const char *session = string_argument(arguments, "session_id");
        /* A session id is an execution id's form; it goes into a URL path. */
        if (session == NULL || !sbx_execution_id_valid(session))
                return tool_result(true, NULL,
                                   "%s needs session_id: the id create_session answered (32 hex "
                                   "digits)",
                                   name);
        if (strcmp(name, "run_in_session") == 0)
                return run_in_session(target, session, arguments, cancel);
        if (strcmp(name, "write_file") == 0)
                return write_file(target, session, arguments, cancel);
        if (strcmp(name, "read_file") == 0)
                return read_file(target, session, arguments, cancel);
        if (strcmp(name, "list_files") == 0)
                return list_files(target, session, arguments, cancel);
        if (strcmp(name, "close_session") == 0)
                return close_session(target, session, cancel);
        return tool_result(true, NULL, "no tool is called %s", name);
}
