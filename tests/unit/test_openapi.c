/* Unit tests for api/openapi.h: the embedded document is JSON, is OpenAPI 3.1, has every path
 * and method of the API, every "$ref" in it resolves, and it agrees with the code it describes:
 * the status enum with sbx_status_name(), the result schema with the keys sbx_result_to_json()
 * really writes, the problem types with problem.c's slugs. */
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
#include "service/problem.h"
#include "model/result.h"
#include "model/result_json.h"

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
                const char *statuses[10];
        } operations[] = {
                {"/v1/executions",
                 "post",
                 {"200", "400", "401", "403", "413", "415", "429", "500", "503"}},
                {"/v1/executions/{id}", "get", {"200", "401", "404", "500"}},
                {"/health", "get", {"200", "503"}},
                {"/metrics", "get", {"200", "401"}},
                {"/v1/openapi.json", "get", {"200"}},
        };
        json_t *document = load_document();
        json_t *paths = json_object_get(document, "paths");
        assert_int_equal(json_object_size(paths), sizeof(operations) / sizeof(operations[0]));
        for (size_t i = 0; i < sizeof(operations) / sizeof(operations[0]); i++) {
                json_t *item = json_object_get(paths, operations[i].path);
                assert_non_null(item);
                /* One method per path: any other method answers 405. */
                assert_int_equal(json_object_size(item), 1);
                json_t *responses =
                        json_object_get(json_object_get(item, operations[i].method), "responses");
                assert_non_null(responses);
                size_t n = 0;
                for (; n < 10 && operations[i].statuses[n] != NULL; n++)
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
        json_t *object = sbx_result_to_json(&result);
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
                assert_int_equal(json_array_size(json_object_get(inner_schema, "required")),
                                 json_object_size(inner_properties));
                json_object_foreach(inner, key,
                                    value) if (json_object_get(inner_properties, key) == NULL)
                        fail_msg("%s.%s is not in the schema", nested[i].key, key);
        }
        json_decref(object);
        json_decref(document);
}

static void test_problem_types_match_problem_c(void **state)
{
        static const unsigned statuses[] = {400, 401, 403, 404, 405, 413, 415, 429, 500, 503};
        /* The 503 classes beside the default one. */
        static const char *const more_503[] = {SBX_PROBLEM_AT_CAPACITY, SBX_PROBLEM_SHUTTING_DOWN};
        json_t *document = load_document();
        json_t *types = json_object_get(
                json_object_get(json_object_get(schema(document, "Problem"), "properties"), "type"),
                "enum");
        assert_int_equal(json_array_size(types), sizeof(statuses) / sizeof(statuses[0]) + 2);
        for (size_t i = 0; i < sizeof(statuses) / sizeof(statuses[0]) + 2; i++) {
                size_t n = sizeof(statuses) / sizeof(statuses[0]);
                unsigned status = i < n ? statuses[i] : 503;
                const char *slug = i < n ? sbx_problem_default_slug(status) : more_503[i - n];
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
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
