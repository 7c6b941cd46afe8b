/* Unit tests for api/openapi.h: the embedded document is JSON, is OpenAPI 3.1, has every path
 * and method of the API, every "$ref" in it resolves, and it agrees with the code it describes:
 * the status enum with sbx_status_name(), the result schema with the keys sbx_result_to_json()
 * really writes, the problem types with problem.c's slugs, and the schemas made from the records'
 * tables (model/) with those tables: every row present with its bounds, nothing else. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "api/openapi.h"
#include "model/backend.h"
#include "model/language.h"
#include "model/limits.h"
#include "model/result.h"
#include "model/result_json.h"
#include "service/problem.h"

static json_t *load_document(void)
{
        json_error_t error;
        json_t *document = json_loadb(sbx_openapi_json(), sbx_openapi_json_length(), 0, &error);
        if (document == NULL)
                fail_msg("openapi.json line %d column %d: %s", error.line, error.column,
                         error.text);
        return document;
}

static json_t *schema(json_t *document, const char *name)
{
        json_t *found = json_object_get(
                json_object_get(json_object_get(document, "components"), "schemas"), name);
        assert_non_null(found);
        return found;
}

static void test_parses_as_openapi_3_1(void **state)
{
        assert_int_equal(strlen(sbx_openapi_json()), sbx_openapi_json_length());
        json_t *document = load_document();
        assert_string_equal(json_string_value(json_object_get(document, "openapi")), "3.1.0");
        assert_non_null(json_object_get(json_object_get(document, "info"), "title"));
        json_decref(document);
}

static void test_every_path_and_method(void **state)
{
        static const struct {
                const char *path;
                const char *method;
                const char *statuses[12];
        } operations[] = {
                {"/v1/executions",
                 "post",
                 {"200", "202", "400", "401", "403", "413", "415", "429", "500", "503"}},
                {"/v1/executions", "get", {"200", "400", "401", "500", "503"}},
                {"/v1/executions/{id}", "get", {"200", "400", "401", "404", "500", "503"}},
                {"/v1/executions/{id}", "delete", {"200", "401", "404", "409", "500", "503"}},
                {"/v1/batches", "post", {"202", "400", "401", "403", "413", "429", "500", "503"}},
                {"/v1/batches/{id}", "get", {"200", "400", "401", "404", "500", "503"}},
                {"/v1/webhooks/deliveries", "get", {"200", "400", "401", "500", "503"}},
                {"/v1/webhooks/deliveries/{id}/retry", "post", {"202", "401", "404", "500", "503"}},
                {"/v1/languages", "get", {"200", "401", "500"}},
                {"/v1/sessions", "post", {"201", "400", "401", "403", "413", "429", "500", "503"}},
                {"/v1/sessions", "get", {"200", "401"}},
                {"/v1/sessions/{id}", "get", {"200", "401", "404", "421"}},
                {"/v1/sessions/{id}", "delete", {"204", "401", "404", "421", "409"}},
                {"/v1/sessions/{id}/run",
                 "post",
                 {"200", "400", "401", "404", "421", "409", "413", "429", "500", "503"}},
                {"/v1/sessions/{id}/files", "get", {"200", "400", "401", "404", "421", "409"}},
                {"/v1/sessions/{id}/files/{path}",
                 "put",
                 {"201", "400", "401", "404", "421", "409", "413"}},
                {"/v1/sessions/{id}/files/{path}",
                 "get",
                 {"200", "400", "401", "404", "421", "409", "413"}},
                {"/v1/sessions/{id}/files/{path}",
                 "delete",
                 {"204", "400", "401", "404", "421", "409"}},
                {"/v1/episodes",
                 "post",
                 {"201", "400", "401", "403", "413", "422", "429", "500", "503"}},
                {"/v1/episodes", "get", {"200", "401"}},
                {"/v1/episodes/step", "post", {"200", "400", "401", "413"}},
                {"/v1/episodes/{id}", "get", {"200", "401", "404", "421"}},
                {"/v1/episodes/{id}", "delete", {"204", "401", "404", "421", "409"}},
                {"/v1/episodes/{id}/step",
                 "post",
                 {"200", "400", "401", "404", "421", "409", "413", "429", "500", "503"}},
                {"/v1/episodes/{id}/reset",
                 "post",
                 {"200", "400", "401", "404", "421", "409", "413", "429", "500", "503"}},
                {"/v1/episodes/{id}/files", "get", {"200", "400", "401", "404", "421", "409"}},
                {"/v1/episodes/{id}/files/{path}",
                 "get",
                 {"200", "400", "401", "404", "421", "409"}},
                {"/v1/episodes/{id}/files/{path}",
                 "put",
                 {"201", "400", "401", "404", "421", "409", "413"}},
                {"/v1/episodes/{id}/files/{path}",
                 "delete",
                 {"204", "400", "401", "404", "421", "409"}},
                {"/health", "get", {"200", "503"}},
                {"/metrics", "get", {"200", "401"}},
                {"/v1/openapi.json", "get", {"200"}},
        };
        const size_t n_operations = sizeof(operations) / sizeof(operations[0]);
        json_t *document = load_document();
        json_t *paths = json_object_get(document, "paths");
        /* Every operation here, and no other: each path's methods (its "parameters" aside). */
        size_t documented = 0;
        const char *path;
        json_t *item;
        json_object_foreach(paths, path, item)
        {
                documented += json_object_size(item) -
                              (json_object_get(item, "parameters") != NULL ? 1 : 0);
        }
        assert_int_equal(documented, n_operations);
        for (size_t i = 0; i < n_operations; i++) {
                item = json_object_get(paths, operations[i].path);
                assert_non_null(item);
                json_t *responses =
                        json_object_get(json_object_get(item, operations[i].method), "responses");
                if (responses == NULL)
                        fail_msg("%s %s is not documented", operations[i].method,
                                 operations[i].path);
                size_t n = 0;
                for (; n < 12 && operations[i].statuses[n] != NULL; n++)
                        assert_non_null(json_object_get(responses, operations[i].statuses[n]));
                assert_int_equal(json_object_size(responses), n);
        }
        json_decref(document);
}

/* Resolves a local reference ("#/components/schemas/Problem") by JSON pointer (RFC 6901). */
static json_t *resolve(json_t *document, const char *ref)
{
        if (strncmp(ref, "#/", 2) != 0)
                return NULL;
        json_t *node = document;
        char token[256];
        for (const char *p = ref + 2; node != NULL && *p != '\0';) {
                size_t len = 0;
                for (; *p != '\0' && *p != '/'; p++) {
                        assert_true(len + 1 < sizeof(token));
                        if (p[0] == '~' && p[1] == '1')
                                token[len++] = '/', p++;
                        else if (p[0] == '~' && p[1] == '0')
                                token[len++] = '~', p++;
                        else
                                token[len++] = *p;
                }
                token[len] = '\0';
                if (*p == '/')
                        p++;
                node = json_object_get(node, token);
        }
        return node;
}

static size_t check_refs(json_t *document, json_t *node)
{
        size_t count = 0;
        if (json_is_object(node)) {
                const char *key;
                json_t *value;
                json_object_foreach(node, key, value)
                {
                        if (strcmp(key, "$ref") == 0) {
                                assert_true(json_is_string(value));
                                if (resolve(document, json_string_value(value)) == NULL)
                                        fail_msg("unresolved $ref %s", json_string_value(value));
                                count++;
                        } else {
                                count += check_refs(document, value);
                        }
                }
        } else if (json_is_array(node)) {
                size_t i;
                json_t *value;
                json_array_foreach(node, i, value) count += check_refs(document, value);
        }
        return count;
}

static void test_every_ref_resolves(void **state)
{
        json_t *document = load_document();
        assert_true(check_refs(document, document) > 20);
        assert_null(resolve(document, "#/components/schemas/NoSuchSchema"));
        json_decref(document);
}

static void test_status_enum_matches_the_engine(void **state)
{
        json_t *document = load_document();
        json_t *values = json_object_get(schema(document, "Status"), "enum");
        assert_int_equal(json_array_size(values), SBX_STATUS_COUNT);
        for (int status = 0; status < (int)SBX_STATUS_COUNT; status++)
                assert_string_equal(json_string_value(json_array_get(values, (size_t)status)),
                                    sbx_status_name((enum sbx_status)status));
        json_decref(document);
}

/* Whether the array holds the string. */
static bool array_has(json_t *array, const char *text)
{
        size_t i;
        json_t *value;
        json_array_foreach(array, i,
                           value) if (strcmp(json_string_value(value), text) == 0) return true;
        return false;
}

/* The result schema names exactly the keys sbx_result_to_json() writes, plus "clamped" (added by
 * the API) and "error" (internal_error and canceled only): neither side can gain a field
 * alone. */
static void test_result_schema_matches_the_serializer(void **state)
{
        json_t *document = load_document();
        json_t *result_schema = schema(document, "ExecutionResult");
        json_t *properties = json_object_get(result_schema, "properties");
        json_t *required = json_object_get(result_schema, "required");
        assert_true(json_is_false(json_object_get(result_schema, "additionalProperties")));

        struct sbx_result result;
        memset(&result, 0, sizeof(result));
        memcpy(result.id, "0123456789abcdef0123456789abcdef", 33);
        result.status = SBX_STATUS_INTERNAL_ERROR;
        snprintf(result.error, sizeof(result.error), "setup step 'mount': test");
        /* A backend without a guest kernel's: no evidence.guest; then one with it (uml). */
        json_t *object = sbx_result_to_json(&result);
        assert_non_null(object);
        assert_null(json_object_get(json_object_get(object, "evidence"), "guest"));
        json_decref(object);
        result.guest.known = true;
        object = sbx_result_to_json(&result);
        assert_non_null(object);
        assert_int_equal(json_object_set_new(object, "clamped", json_array()), 0);
        assert_int_equal(json_object_size(object), json_object_size(properties));
        const char *key;
        json_t *value;
        json_object_foreach(object, key, value)
        {
                if (json_object_get(properties, key) == NULL)
                        fail_msg("result key %s is not in the schema", key);
                assert_true(strcmp(key, "error") == 0 || array_has(required, key));
        }
        assert_false(array_has(required, "error"));
        assert_int_equal(json_array_size(required), json_object_size(properties) - 1);

        /* The nested objects, one level down, likewise. */
        static const struct {
                const char *key;
                const char *schema;
        } nested[] = {{"usage", "Usage"},
                      {"limits", "EffectiveLimits"},
                      {"evidence", "Evidence"},
                      {"timing", "Timing"},
                      {"truncated", "Truncated"}};
        for (size_t i = 0; i < sizeof(nested) / sizeof(nested[0]); i++) {
                json_t *inner = json_object_get(object, nested[i].key);
                json_t *inner_schema = schema(document, nested[i].schema);
                json_t *inner_properties = json_object_get(inner_schema, "properties");
                assert_int_equal(json_object_size(inner), json_object_size(inner_properties));
                /* All required, but evidence.guest (the uml backend's alone). */
                size_t optional = strcmp(nested[i].key, "evidence") == 0;
                assert_int_equal(json_array_size(json_object_get(inner_schema, "required")),
                                 json_object_size(inner_properties) - optional);
                json_object_foreach(inner, key,
                                    value) if (json_object_get(inner_properties, key) == NULL)
                        fail_msg("%s.%s is not in the schema", nested[i].key, key);
        }
        json_decref(object);
        json_decref(document);
}

static void test_problem_types_match_problem_c(void **state)
{
        static const unsigned statuses[] = {400, 401, 403, 404, 405, 409,
                                            413, 415, 421, 429, 500, 503};
        /* The classes beside a status's default one. */
        static const struct {
                unsigned status;
                const char *slug;
        } more[] = {{503, SBX_PROBLEM_AT_CAPACITY},
                    {503, SBX_PROBLEM_SHUTTING_DOWN},
                    {503, SBX_PROBLEM_STORE_UNAVAILABLE},
                    {404, "node-gone"}};
        json_t *document = load_document();
        json_t *types = json_object_get(
                json_object_get(json_object_get(schema(document, "Problem"), "properties"), "type"),
                "enum");
        size_t n_more = sizeof(more) / sizeof(more[0]);
        assert_int_equal(json_array_size(types), sizeof(statuses) / sizeof(statuses[0]) + n_more);
        for (size_t i = 0; i < sizeof(statuses) / sizeof(statuses[0]) + n_more; i++) {
                size_t n = sizeof(statuses) / sizeof(statuses[0]);
                unsigned status = i < n ? statuses[i] : more[i - n].status;
                const char *slug = i < n ? sbx_problem_default_slug(status) : more[i - n].slug;
                json_t *problem = sbx_problem_new(status, slug, "detail", NULL, 0);
                assert_non_null(problem);
                assert_true(array_has(types, json_string_value(json_object_get(problem, "type"))));
                /* Each class has a title of its own ("Internal error" is only 500's). */
                if (status != 500)
                        assert_string_not_equal(
                                json_string_value(json_object_get(problem, "title")),
                                "Internal error");
                json_decref(problem);
        }
        json_decref(document);
}

static void test_security_and_headers(void **state)
{
        json_t *document = load_document();
        json_t *bearer = resolve(document, "#/components/securitySchemes/bearer");
        assert_string_equal(json_string_value(json_object_get(bearer, "type")), "http");
        assert_string_equal(json_string_value(json_object_get(bearer, "scheme")), "bearer");
        assert_non_null(resolve(document, "#/components/responses/QuotaExceeded/headers/"
                                          "Retry-After"));
        assert_non_null(resolve(document, "#/components/responses/Unavailable/headers/"
                                          "Retry-After"));
        assert_non_null(resolve(document, "#/components/responses/Unauthorized/headers/"
                                          "WWW-Authenticate"));
        assert_non_null(resolve(document, "#/components/responses/MethodNotAllowed/headers/"
                                          "Allow"));
        assert_non_null(resolve(document, "#/paths/~1metrics/get/responses/200/content/"
                                          "text~1plain"));
        /* The executions endpoints need a token; health, metrics and the document do not. */
        assert_null(resolve(document, "#/paths/~1v1~1executions/post/security"));
        json_t *open = resolve(document, "#/paths/~1health/get/security");
        assert_true(json_is_array(open) && json_array_size(open) == 0);
        json_t *request = schema(document, "ExecutionRequest");
        assert_true(json_is_false(json_object_get(request, "additionalProperties")));
        assert_true(json_is_false(
                json_object_get(schema(document, "RequestLimits"), "additionalProperties")));
        json_decref(document);
}

/* The names of the object schema's properties, in order, are exactly names[0..n). */
static void expect_properties(json_t *object_schema, const char *const *names, size_t n)
{
        json_t *properties = json_object_get(object_schema, "properties");
        assert_int_equal(json_object_size(properties), n);
        assert_true(json_is_false(json_object_get(object_schema, "additionalProperties")));
        size_t i = 0;
        const char *key;
        json_t *value;
        json_object_foreach(properties, key, value)
        {
                assert_string_equal(key, names[i]);
                i++;
        }
}

/* array is exactly the strings names[0..n), in order. */
static void expect_strings(json_t *array, const char *const *names, size_t n)
{
        assert_int_equal(json_array_size(array), n);
        for (size_t i = 0; i < n; i++)
                assert_string_equal(json_string_value(json_array_get(array, i)), names[i]);
}

static void test_limit_schemas_match_the_limits_table(void **state)
{
        json_t *document = load_document();
        const char *settable[SBX_LIMIT_COUNT], *all[SBX_LIMIT_COUNT];
        size_t n_settable = 0;
        for (size_t i = 0; i < SBX_LIMIT_COUNT; i++) {
                all[i] = sbx_limit_fields[i].name;
                if (sbx_limit_fields[i].kind == SBX_LIMIT_SETTABLE)
                        settable[n_settable++] = sbx_limit_fields[i].name;
        }

        /* A request may set each settable limit, from its minimum up; there is no maximum (a
         * value over the tier's ceiling is clamped, not refused). */
        json_t *request = schema(document, "RequestLimits");
        expect_properties(request, settable, n_settable);
        for (size_t i = 0; i < SBX_LIMIT_COUNT; i++) {
                const struct sbx_limit_field *limit = &sbx_limit_fields[i];
                if (limit->kind != SBX_LIMIT_SETTABLE)
                        continue;
                json_t *property =
                        json_object_get(json_object_get(request, "properties"), limit->name);
                assert_string_equal(json_string_value(json_object_get(property, "type")),
                                    "integer");
                assert_int_equal(json_integer_value(json_object_get(property, "minimum")),
                                 sbx_limit_api_min(limit));
                assert_null(json_object_get(property, "maximum"));
        }
        expect_strings(json_object_get(schema(document, "LimitName"), "enum"), settable,
                       n_settable);

        /* A result reports every limit, all of them required. */
        json_t *effective = schema(document, "EffectiveLimits");
        expect_properties(effective, all, SBX_LIMIT_COUNT);
        expect_strings(json_object_get(effective, "required"), all, SBX_LIMIT_COUNT);
        for (size_t i = 0; i < SBX_LIMIT_COUNT; i++) {
                json_t *property =
                        json_object_get(json_object_get(effective, "properties"), all[i]);
                assert_string_equal(json_string_value(json_object_get(property, "type")),
                                    sbx_limit_fields[i].kind == SBX_LIMIT_CORES ? "number"
                                                                                : "integer");
        }

        /* And what sbx_limits_to_json writes is that. */
        struct sbx_limits limits;
        sbx_limits_default(&limits);
        json_t *written = sbx_limits_to_json(&limits);
        assert_int_equal(json_object_size(written), SBX_LIMIT_COUNT);
        for (size_t i = 0; i < SBX_LIMIT_COUNT; i++)
                assert_non_null(json_object_get(written, all[i]));
        json_decref(written);
        json_decref(document);
}

/* record is exactly members (all required), and then optional, when not NULL: a property that is
 * not required. */
static void expect_record(json_t *record, const struct sbx_json_member *members, size_t n,
                          const char *optional)
{
        const char *names[32];
        assert_true(n < 32);
        for (size_t i = 0; i < n; i++)
                names[i] = members[i].name;
        names[n] = optional;
        expect_properties(record, names, n + (optional != NULL));
        expect_strings(json_object_get(record, "required"), names, n);
        for (size_t i = 0; i < n; i++) {
                json_t *property = json_object_get(json_object_get(record, "properties"), names[i]);
                assert_string_equal(json_string_value(json_object_get(property, "type")),
                                    members[i].boolean ? "boolean" : "integer");
        }
}

static void test_record_schemas_match_the_records(void **state)
{
        json_t *document = load_document();
        expect_record(schema(document, "Usage"), sbx_usage_json_members, sbx_usage_json_count,
                      NULL);
        json_t *evidence = schema(document, "Evidence");
        expect_record(evidence, sbx_evidence_json_members, sbx_evidence_json_count, "guest");
        expect_record(json_object_get(json_object_get(evidence, "properties"), "guest"),
                      sbx_guest_evidence_json_members, sbx_guest_evidence_json_count, NULL);
        expect_record(schema(document, "Timing"), sbx_timing_json_members, sbx_timing_json_count,
                      NULL);
        json_decref(document);
}

static void test_language_and_backend_enums_match_the_tables(void **state)
{
        json_t *document = load_document();
        /* Every language's name, then every alias, in table order: each a request may use. */
        const char *languages[64], *backends[16];
        char aliases[16][64];
        size_t n_languages = 0, n_aliases = 0;
        assert_true(sbx_language_count() <= 16 && sbx_backend_count() <= 16);
        for (size_t i = 0; i < sbx_language_count(); i++)
                languages[n_languages++] = sbx_language_at(i)->name;
        for (size_t i = 0; i < sbx_language_count(); i++) {
                snprintf(aliases[i], sizeof(aliases[i]), "%s", sbx_language_at(i)->aliases);
                char *saveptr = NULL;
                for (char *alias = strtok_r(aliases[i], " ", &saveptr); alias != NULL;
                     alias = strtok_r(NULL, " ", &saveptr))
                        languages[n_languages++] = alias;
                n_aliases++;
        }
        assert_int_equal(n_aliases, sbx_language_count());
        for (size_t i = 0; i < sbx_backend_count(); i++)
                backends[i] = sbx_backend_name_at(i);
        json_t *request = json_object_get(schema(document, "ExecutionRequest"), "properties");
        expect_strings(json_object_get(json_object_get(request, "language"), "enum"), languages,
                       n_languages);
        assert_true(n_languages > sbx_language_count()); /* "js" is a name a request may use */
        expect_strings(json_object_get(json_object_get(request, "backend"), "enum"), backends,
                       sbx_backend_count());
        json_t *result = json_object_get(schema(document, "ExecutionResult"), "properties");
        expect_strings(json_object_get(json_object_get(result, "backend"), "enum"), backends,
                       sbx_backend_count());
        json_decref(document);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_parses_as_openapi_3_1),
                cmocka_unit_test(test_every_path_and_method),
                cmocka_unit_test(test_every_ref_resolves),
                cmocka_unit_test(test_status_enum_matches_the_engine),
                cmocka_unit_test(test_result_schema_matches_the_serializer),
                cmocka_unit_test(test_problem_types_match_problem_c),
                cmocka_unit_test(test_security_and_headers),
                cmocka_unit_test(test_limit_schemas_match_the_limits_table),
                cmocka_unit_test(test_record_schemas_match_the_records),
                cmocka_unit_test(test_language_and_backend_enums_match_the_tables),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
