/* Batches: test cases of one program, or a list of executions (batches.h). */
#define _GNU_SOURCE
#include "api/batches.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/async.h"
#include "api/respond.h"
#include "api/session_registry.h"
#include "api/webhooks.h"
#include "model/request.h"
#include "service/audit_queue.h"
#include "service/settings.h"
#include "service/verdict.h"
#include "util/cleanup.h"
#include "util/log.h"
#include "util/time.h"

#define BATCHES_PATH "/v1/batches"

/* What a test case batch's program may say (a POST /v1/executions body's fields but those of a
 * case; retry: a case a crash interrupted is queued again, as an asynchronous execution's), and
 * what a case may. */
static const char *const program_fields[] = {"language",   "code",           "files",
                                             "entrypoint", "compile_limits", "env",
                                             "backend",    "network",        "retry"};
static const char *const case_fields[] = {"stdin", "args", "limits", "expected_stdout"};

/* What GET's fields= may name (a case's result's members; index is always there). */
static const char *const result_fields[] = {"id",    "status", "verdict", "exit_code", "signal",
                                            "error", "stdout", "stderr",  "usage",     "timing"};

static bool listed(const char *const *names, size_t n, const char *name)
{
        for (size_t i = 0; i < n; i++)
                if (strcmp(names[i], name) == 0)
                        return true;
        return false;
}

/* The first key of object not in names, or NULL. */
static const char *unknown_key(const json_t *object, const char *const *names, size_t n)
{
        const char *key;
        json_t *value;
        json_object_foreach((json_t *)object, key, value)
        {
                if (!listed(names, n, key))
                        return key;
        }
        return NULL;
}

static enum MHD_Result bad_field(struct sbx_api *api, struct MHD_Connection *connection,
                                 const char *field, const char *message)
{
        return sbx_sessions_bad_request(api, connection, field, message);
}

/* The executions of a batch as they are built, freed together. */
struct batch_items {
        struct sbx_settings **settings;
        struct sbx_http_record_parts *parts;
        struct sbx_audit_record *records;
        struct sbx_async_item *items;
        size_t n;
};

static int batch_items_init(struct batch_items *b, size_t capacity)
{
        *b = (struct batch_items){
                .settings = calloc(capacity, sizeof(*b->settings)),
                .parts = calloc(capacity, sizeof(*b->parts)),
                .records = calloc(capacity, sizeof(*b->records)),
                .items = calloc(capacity, sizeof(*b->items)),
        };
        return b->settings && b->parts && b->records && b->items ? 0 : -1;
}

static void batch_items_free(struct batch_items *b)
{
        for (size_t i = 0; i < b->n; i++) {
                sbx_settings_free(b->settings[i]);
                sbx_http_record_parts_free(&b->parts[i]);
        }
        free(b->settings);
        free(b->parts);
        free(b->records);
        free(b->items);
}

/* Adds settings (taken) as the execution of index, expecting expected (may be NULL). */
static void batch_items_add(struct batch_items *b, struct sbx_settings *settings, size_t index,
                            const json_t *expected, uint64_t created_at_ms)
{
        size_t i = b->n++;
        b->settings[i] = settings;
        b->records[i] = sbx_http_record_of(settings, created_at_ms, &b->parts[i]);
        b->items[i] = (struct sbx_async_item){
                .settings = settings,
                .record = &b->records[i],
                .index = index,
                .expected_stdout = json_string_value(expected),
                .expected_size = json_string_length(expected),
        };
}

/* A settings problem of case index as the batch's: each field under program. or cases[i]. */
static json_t *case_problem(const struct sbx_problem *problem, size_t index)
{
        struct sbx_problem renamed = *problem;
        for (size_t e = 0; e < renamed.n_errors; e++) {
                const char *field = problem->errors[e].field;
                bool of_case = false;
                for (size_t k = 0; k < SBX_ARRAY_SIZE(case_fields); k++)
                        of_case |= strncmp(field, case_fields[k], strlen(case_fields[k])) == 0;
                if (of_case)
                        snprintf(renamed.errors[e].field, sizeof(renamed.errors[e].field),
                                 "cases[%zu].%.90s", index, field);
                else
                        snprintf(renamed.errors[e].field, sizeof(renamed.errors[e].field),
                                 "program.%.110s", field);
        }
        return sbx_problem_to_json(&renamed);
}

static enum MHD_Result respond_problem_json(struct sbx_api *api, struct MHD_Connection *connection,
                                            json_t *problem)
{
        unsigned status = (unsigned)json_integer_value(json_object_get(problem, "status"));
        return sbx_http_respond_json(api, connection, status ? status : 500,
                                     SBX_PROBLEM_CONTENT_TYPE, problem, NULL, 0);
}

/* The batch's callback_url (NULL: none), or false with *answer when it is not one tenant may
 * have. */
static bool batch_callback(struct sbx_api *api, struct MHD_Connection *connection,
                           const struct sbx_tenant *tenant, const json_t *body,
                           const char **callback_url, enum MHD_Result *answer)
{
        const json_t *value = json_object_get(body, "callback_url");
        *callback_url = json_string_value(value);
        char why[512];
        if (value != NULL &&
            (*callback_url == NULL || strlen(*callback_url) > SBX_CALLBACK_URL_MAX)) {
                *answer = bad_field(api, connection, "callback_url", "an http:// or https:// URL");
                return false;
        }
        if (*callback_url != NULL &&
            !sbx_webhooks_check_url(tenant, *callback_url, why, sizeof(why))) {
                *answer = bad_field(api, connection, "callback_url", why);
                return false;
        }
        return true;
}

/* Queues b as batch id of tenant and answers 202 (extra, stolen, joins the answer). */
static enum MHD_Result submit(struct sbx_api *api, struct MHD_Connection *connection,
                              const struct sbx_tenant *tenant, const struct sbx_audit_batch *batch,
                              struct batch_items *b, json_t *extra)
{
        if (b->n > tenant->tier->max_queued) {
                json_decref(extra);
                char message[128];
                snprintf(message, sizeof(message),
                         "more than the %llu executions the tier may have queued",
                         (unsigned long long)tenant->tier->max_queued);
                return bad_field(api, connection, batch->compare ? "cases" : "executions", message);
        }
        uint64_t position = 0, retry_after_s = 1;
        struct sbx_error err = {0};
        if (sbx_async_submit(api->async, tenant, batch, b->items, b->n, &position, &retry_after_s,
                             &err) < 0) {
                json_decref(extra);
                return sbx_http_respond_queue_refusal(api, connection, tenant, &err, retry_after_s,
                                                      batch->id);
        }
        char location[sizeof(BATCHES_PATH) + SBX_EXECUTION_ID_CHARS + 2];
        snprintf(location, sizeof(location), "%s/%s", BATCHES_PATH, batch->id);
        const struct sbx_http_header header = {MHD_HTTP_HEADER_LOCATION, location};
        json_t *answer = json_pack("{s:s, s:s, s:I, s:I}", "id", batch->id, "status",
                                   SBX_AUDIT_STATUS_QUEUED, "cases", (json_int_t)b->n,
                                   "queue_position", (json_int_t)position);
        if (answer != NULL && extra != NULL)
                json_object_update(answer, extra);
        json_decref(extra);
        return sbx_http_respond_json(api, connection, 202, JSON_CONTENT_TYPE, answer, &header, 1);
}

/* The cases of a bounded array body member, or NULL with *answer. */
static const json_t *bounded_array(struct sbx_api *api, struct MHD_Connection *connection,
                                   const json_t *body, const char *name, enum MHD_Result *answer)
{
        const json_t *array = json_object_get(body, name);
        if (!json_is_array(array) || json_array_size(array) == 0 ||
            json_array_size(array) > SBX_BATCH_MAX_CASES) {
                char message[96];
                snprintf(message, sizeof(message), "an array of 1 to %d items",
                         SBX_BATCH_MAX_CASES);
                *answer = bad_field(api, connection, name, message);
                return NULL;
        }
        return array;
}

/* POST {program, cases, compare}: every case valid, or 400. */
static enum MHD_Result create_cases(struct sbx_api *api, struct MHD_Connection *connection,
                                    const struct sbx_tenant *tenant, const json_t *body,
                                    const char *id)
{
        static const char *const top_fields[] = {"program", "cases", "compare", "callback_url"};
        const char *unknown = unknown_key(body, top_fields, SBX_ARRAY_SIZE(top_fields));
        if (unknown != NULL)
                return bad_field(api, connection, unknown, "unknown field");
        const json_t *program = json_object_get(body, "program");
        if (!json_is_object(program))
                return bad_field(api, connection, "program",
                                 "an object: the program's language "
                                 "and code or files");
        unknown = unknown_key(program, program_fields, SBX_ARRAY_SIZE(program_fields));
        if (unknown != NULL) {
                char field[160];
                snprintf(field, sizeof(field), "program.%.100s", unknown);
                return bad_field(api, connection, field,
                                 "unknown field (a case's stdin, args "
                                 "and limits go in cases)");
        }
        enum MHD_Result answer;
        const json_t *cases = bounded_array(api, connection, body, "cases", &answer);
        if (cases == NULL)
                return answer;
        const char *callback_url;
        if (!batch_callback(api, connection, tenant, body, &callback_url, &answer))
                return answer;
        enum sbx_compare compare = SBX_COMPARE_TRIM;
        const json_t *compare_value = json_object_get(body, "compare");
        if (compare_value != NULL && !sbx_compare_find(json_string_value(compare_value), &compare))
                return bad_field(api, connection, "compare", "one of exact, trim, tokens");

        _cleanup_(batch_items_free) struct batch_items b;
        if (batch_items_init(&b, json_array_size(cases)) < 0)
                return sbx_http_respond_problem(api, connection, 500, "out of memory", NULL, 0,
                                                NULL, 0);
        uint64_t now = sbx_wall_clock_ms();
        size_t index;
        const json_t *one;
        json_array_foreach(cases, index, one)
        {
                char field[96];
                snprintf(field, sizeof(field), "cases[%zu]", index);
                if (!json_is_object(one))
                        return bad_field(api, connection, field, "an object");
                unknown = unknown_key(one, case_fields, SBX_ARRAY_SIZE(case_fields));
                const json_t *expected = json_object_get(one, "expected_stdout");
                if (unknown != NULL || (expected != NULL && !json_is_string(expected))) {
                        snprintf(field, sizeof(field), "cases[%zu].%.40s", index,
                                 unknown ? unknown : "expected_stdout");
                        return bad_field(api, connection, field,
                                         unknown ? "unknown field" : "a string");
                }
                _cleanup_(json_decrefp) json_t *execution = json_deep_copy(program);
                if (execution == NULL)
                        return sbx_http_respond_problem(api, connection, 500, "out of memory", NULL,
                                                        0, NULL, 0);
                static const char *const carried[] = {"stdin", "args", "limits"};
                for (size_t k = 0; k < SBX_ARRAY_SIZE(carried); k++) {
                        json_t *value = json_object_get(one, carried[k]);
                        if (value != NULL)
                                json_object_set(execution, carried[k], value);
                }
                json_object_set_new(execution, "wait", json_false());
                struct sbx_settings *settings = NULL;
                struct sbx_problem problem;
                if (sbx_settings_build(execution, tenant, &settings, &problem) < 0)
                        return respond_problem_json(api, connection, case_problem(&problem, index));
                batch_items_add(&b, settings, index, expected, now);
        }
        _cleanup_(json_decrefp) json_t *requested =
                json_pack("{s:o, s:s, s:I}", "program", sbx_sessions_requested(program), "compare",
                          sbx_compare_name(compare), "cases", (json_int_t)b.n);
        const struct sbx_audit_batch batch = {
                .id = id,
                .tenant = tenant->name,
                .created_at_ms = (int64_t)now,
                .compare = sbx_compare_name(compare),
                .callback_url = callback_url,
                .requested = requested,
        };
        return submit(api, connection, tenant, &batch, &b, NULL);
}

/* POST {executions}: each on its own; the bad ones answered in rejected. */
static enum MHD_Result create_list(struct sbx_api *api, struct MHD_Connection *connection,
                                   const struct sbx_tenant *tenant, const json_t *body,
                                   const char *id)
{
        static const char *const top_fields[] = {"executions", "callback_url"};
        const char *unknown = unknown_key(body, top_fields, SBX_ARRAY_SIZE(top_fields));
        if (unknown != NULL)
                return bad_field(api, connection, unknown,
                                 "a list of executions comes alone (no program or cases)");
        enum MHD_Result answer;
        const json_t *executions = bounded_array(api, connection, body, "executions", &answer);
        if (executions == NULL)
                return answer;
        const char *callback_url;
        if (!batch_callback(api, connection, tenant, body, &callback_url, &answer))
                return answer;
        _cleanup_(batch_items_free) struct batch_items b;
        _cleanup_(json_decrefp) json_t *rejected = json_array();
        if (batch_items_init(&b, json_array_size(executions)) < 0 || rejected == NULL)
                return sbx_http_respond_problem(api, connection, 500, "out of memory", NULL, 0,
                                                NULL, 0);
        uint64_t now = sbx_wall_clock_ms();
        size_t index;
        const json_t *one;
        json_array_foreach(executions, index, one)
        {
                struct sbx_problem problem = {0};
                struct sbx_settings *settings = NULL;
                _cleanup_(json_decrefp) json_t *execution = json_deep_copy(one);
                const json_t *wait = json_object_get(one, "wait");
                if (!json_is_object(one)) {
                        sbx_problem_set(&problem, 400, "an execution is a JSON object");
                } else if (wait != NULL && !json_is_false(wait)) {
                        sbx_problem_add_error(&problem, "wait", "a batch's executions never wait");
                        sbx_problem_set(&problem, 400, "a batch's executions never wait");
                } else if (execution == NULL ||
                           json_object_set_new(execution, "wait", json_false()) < 0) {
                        sbx_problem_set(&problem, 500, "out of memory");
                } else if (sbx_settings_build(execution, tenant, &settings, &problem) == 0) {
                        char why[512];
                        if (settings->callback_url == NULL ||
                            sbx_webhooks_check_url(tenant, settings->callback_url, why,
                                                   sizeof(why))) {
                                batch_items_add(&b, settings, index, NULL, now);
                                continue;
                        }
                        sbx_settings_free(settings);
                        sbx_problem_add_error(&problem, "callback_url", "%s", why);
                        sbx_problem_set(&problem, 400, "%s", why);
                }
                json_t *problem_json = sbx_problem_to_json(&problem);
                json_array_append_new(rejected, json_pack("{s:I, s:o*}", "index", (json_int_t)index,
                                                          "problem", problem_json));
        }
        if (b.n == 0) {
                const struct sbx_problem_field field = {"executions", "none is valid"};
                json_t *problem = sbx_problem_new(400, sbx_problem_default_slug(400),
                                                  "no execution of the list is valid; each "
                                                  "one's problem is in rejected",
                                                  &field, 1);
                if (problem != NULL)
                        json_object_set(problem, "rejected", rejected);
                return respond_problem_json(api, connection, problem);
        }
        _cleanup_(json_decrefp) json_t *requested =
                json_pack("{s:I, s:I}", "executions", (json_int_t)json_array_size(executions),
                          "rejected", (json_int_t)json_array_size(rejected));
        const struct sbx_audit_batch batch = {
                .id = id,
                .tenant = tenant->name,
                .created_at_ms = (int64_t)now,
                .callback_url = callback_url,
                .requested = requested,
        };
        return submit(api, connection, tenant, &batch, &b,
                      json_pack("{s:O}", "rejected", rejected));
}

static enum MHD_Result create_batch(struct sbx_api *api, struct MHD_Connection *connection,
                                    const struct sbx_tenant *tenant, const void *body,
                                    size_t body_len, bool body_too_large)
{
        enum MHD_Result answer;
        _cleanup_(json_decrefp) json_t *parsed =
                sbx_sessions_parse_body(api, connection, body, body_len, body_too_large, &answer);
        if (parsed == NULL)
                return answer;
        char id[SBX_EXECUTION_ID_CHARS + 1];
        struct sbx_error err = {0};
        if (sbx_execution_id_new(id, &err) < 0)
                return sbx_http_respond_problem(api, connection, 500, err.message, NULL, 0, NULL,
                                                0);
        if (json_object_get(parsed, "executions") != NULL)
                return create_list(api, connection, tenant, parsed, id);
        return create_cases(api, connection, tenant, parsed, id);
}

static enum MHD_Result get_batch(struct sbx_api *api, struct MHD_Connection *connection,
                                 const struct sbx_tenant *tenant, const char *id)
{
        const char *wanted =
                MHD_lookup_connection_value(connection, MHD_GET_ARGUMENT_KIND, "fields");
        const char *fields[SBX_ARRAY_SIZE(result_fields)];
        size_t n_fields = 0;
        _cleanup_free_ char *copy = wanted ? strdup(wanted) : NULL;
        if (wanted != NULL && copy == NULL)
                return sbx_http_respond_problem(api, connection, 500, "out of memory", NULL, 0,
                                                NULL, 0);
        char *saved = NULL;
        for (char *name = copy ? strtok_r(copy, ",", &saved) : NULL; name != NULL;
             name = strtok_r(NULL, ",", &saved)) {
                if (!listed(result_fields, SBX_ARRAY_SIZE(result_fields), name))
                        return bad_field(api, connection, "fields",
                                         "names of a result's members: id, status, verdict, "
                                         "exit_code, signal, error, stdout, stderr, usage, "
                                         "timing");
                if (!listed(fields, n_fields, name))
                        fields[n_fields++] = name;
        }
        json_t *batch = NULL;
        struct sbx_error err = {0};
        int found = sbx_execution_id_valid(id)
                            ? sbx_audit_batch_fetch(api->audit, tenant->name, id,
                                                    wanted ? fields : NULL, n_fields, &batch, &err)
                            : 0;
        if (found < 0) {
                sbx_warn("batch %s: %s", id, err.message);
                return sbx_http_respond_store_failed(api, connection, "the audit store failed");
        }
        if (found == 0)
                return sbx_http_respond_problem(api, connection, 404, "no such batch", NULL, 0,
                                                NULL, 0);
        return sbx_http_respond_json(api, connection, 200, JSON_CONTENT_TYPE, batch, NULL, 0);
}

bool sbx_batches_route_reads_body(const char *url, const char *method)
{
        return strcmp(url, BATCHES_PATH) == 0 && strcmp(method, MHD_HTTP_METHOD_POST) == 0;
}

enum MHD_Result sbx_batches_route(struct sbx_api *api, struct MHD_Connection *connection,
                                  const char *url, const char *method,
                                  const struct sbx_config *tenants, const void *body,
                                  size_t body_len, bool body_too_large, bool *handled)
{
        *handled = false;
        bool collection = strcmp(url, BATCHES_PATH) == 0;
        const char *id = strncmp(url, BATCHES_PATH "/", strlen(BATCHES_PATH) + 1) == 0
                                 ? url + strlen(BATCHES_PATH) + 1
                                 : NULL;
        if (!collection && (id == NULL || id[0] == '\0' || strchr(id, '/') != NULL))
                return MHD_NO;
        *handled = true;
        bool read = strcmp(method, MHD_HTTP_METHOD_GET) == 0 ||
                    strcmp(method, MHD_HTTP_METHOD_HEAD) == 0;
        if (collection && strcmp(method, MHD_HTTP_METHOD_POST) != 0)
                return sbx_http_respond_method_not_allowed(api, connection, method, "POST");
        if (!collection && !read)
                return sbx_http_respond_method_not_allowed(api, connection, method, "GET, HEAD");
        const struct sbx_tenant *tenant = sbx_http_authenticate(connection, tenants);
        if (tenant == NULL)
                return sbx_http_respond_unauthorized(api, connection);
        if (collection)
                return create_batch(api, connection, tenant, body, body_len, body_too_large);
        return get_batch(api, connection, tenant, id);
}
