/* Unit tests for service/problem.h: the RFC 9457 body of every error response, its type URIs, the
 * default slugs and the fixed title of each class, a problem built up field by field (cut at a
 * UTF-8 boundary, bounded), and the refusal of unusable arguments. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "service/problem.h"

static void test_full_problem(void **state)
{
        const struct sbx_problem_field errors[] = {
                {"limits.memory_mb", "must be an integer"},
                {"colour", "unknown field"},
        };
        json_t *problem =
                sbx_problem_new(400, "invalid-request", "2 fields are invalid", errors, 2);
        assert_non_null(problem);
        assert_string_equal(json_string_value(json_object_get(problem, "type")),
                            "https://sandboxd.dev/problems/invalid-request");
        assert_string_equal(json_string_value(json_object_get(problem, "title")),
                            "Invalid request");
        assert_int_equal(json_integer_value(json_object_get(problem, "status")), 400);
        assert_string_equal(json_string_value(json_object_get(problem, "detail")),
                            "2 fields are invalid");
        json_t *array = json_object_get(problem, "errors");
        assert_true(json_is_array(array));
        assert_int_equal(json_array_size(array), 2);
        assert_string_equal(json_string_value(json_object_get(json_array_get(array, 0), "field")),
                            "limits.memory_mb");
        assert_string_equal(json_string_value(json_object_get(json_array_get(array, 0), "message")),
                            "must be an integer");
        assert_string_equal(json_string_value(json_object_get(json_array_get(array, 1), "field")),
                            "colour");
        /* Exactly the five members: nothing else leaks into a client-visible body. */
        assert_int_equal(json_object_size(problem), 5);
        json_decref(problem);
}

static void test_without_fields_has_empty_errors(void **state)
{
        json_t *problem = sbx_problem_new(429, "quota-exceeded", "2 executions running", NULL, 0);
        assert_non_null(problem);
        json_t *array = json_object_get(problem, "errors");
        assert_true(json_is_array(array));
        assert_int_equal(json_array_size(array), 0);
        assert_string_equal(json_string_value(json_object_get(problem, "title")), "Quota exceeded");
        json_decref(problem);
}

static void test_missing_detail_is_the_title(void **state)
{
        json_t *problem = sbx_problem_new(404, "not-found", NULL, NULL, 0);
        assert_non_null(problem);
        assert_string_equal(json_string_value(json_object_get(problem, "title")), "Not found");
        /* detail falls back to the title, so the member is always a string. */
        assert_string_equal(json_string_value(json_object_get(problem, "detail")), "Not found");
        json_decref(problem);
}

/* A problem built up as the settings pipeline does: the class's own title (403's is "Forbidden"
 * wherever it comes from), errors in order, long text cut whole characters at a time, and no
 * more errors than the bound. */
static void test_built_up_problem(void **state)
{
        struct sbx_problem problem = {0};
        sbx_problem_add_error(&problem, "language", "language '%s' is not allowed", "bash");
        char long_message[400];
        memset(long_message, 'a', sizeof(long_message));
        memcpy(long_message + 254, "\xc3\xa9", 2); /* "é" across the 256-byte cut */
        long_message[sizeof(long_message) - 1] = '\0';
        sbx_problem_add_error(&problem, "env.X", "%s", long_message);
        for (int i = 0; i < 40; i++)
                sbx_problem_add_error(&problem, "args", "more");
        assert_int_equal(problem.n_errors, SBX_PROBLEM_MAX_ERRORS);
        sbx_problem_set(&problem, 403, "%s", "language 'bash' is not allowed");
        json_t *body = sbx_problem_to_json(&problem);
        assert_non_null(body); /* the cut left valid UTF-8 */
        assert_string_equal(json_string_value(json_object_get(body, "title")), "Forbidden");
        assert_string_equal(json_string_value(json_object_get(body, "type")),
                            "https://sandboxd.dev/problems/forbidden");
        json_t *errors = json_object_get(body, "errors");
        assert_int_equal(json_array_size(errors), SBX_PROBLEM_MAX_ERRORS);
        assert_string_equal(json_string_value(json_object_get(json_array_get(errors, 0), "field")),
                            "language");
        assert_int_equal(strlen(problem.errors[1].message), 254);
        json_decref(body);
}

static void test_default_slugs_and_titles(void **state)
{
        static const struct {
                unsigned status;
                const char *slug;
        } expected[] = {
                {400, "invalid-request"},    {401, "unauthorized"},
                {403, "forbidden"},          {404, "not-found"},
                {405, "method-not-allowed"}, {409, "conflict"},
                {413, "payload-too-large"},  {415, "unsupported-media-type"},
                {429, "quota-exceeded"},     {503, "engine-unavailable"},
                {500, "internal"},
        };
        for (size_t i = 0; i < sizeof(expected) / sizeof(expected[0]); i++) {
                assert_string_equal(sbx_problem_default_slug(expected[i].status), expected[i].slug);
                assert_true(strlen(sbx_problem_default_title(expected[i].status)) > 0);
        }
        /* A status without a class of its own is reported as internal, never as NULL. */
        assert_string_equal(sbx_problem_default_slug(418), "internal");
        assert_string_equal(sbx_problem_default_title(418), "Internal error");
        assert_string_equal(sbx_problem_default_slug(0), "internal");
}

static void test_serialises_as_json(void **state)
{
        const struct sbx_problem_field field = {"files[0].path", "must not contain \"..\""};
        json_t *problem = sbx_problem_new(400, "invalid-request", "bad path", &field, 1);
        assert_non_null(problem);
        char *text = json_dumps(problem, JSON_COMPACT);
        assert_non_null(text);
        json_error_t error;
        json_t *again = json_loads(text, 0, &error);
        assert_non_null(again);
        assert_true(json_equal(problem, again));
        assert_non_null(strstr(text, "\"status\":400"));
        free(text);
        json_decref(again);
        json_decref(problem);
}

static void test_unusable_arguments(void **state)
{
        assert_null(sbx_problem_new(400, NULL, "x", NULL, 0));
        /* A count without an array. */
        assert_null(sbx_problem_new(400, "invalid-request", "x", NULL, 1));
        /* Invalid UTF-8 anywhere makes the body unbuildable rather than invalid JSON. */
        assert_null(sbx_problem_new(400, "invalid-request", "bad \xff byte", NULL, 0));
        const struct sbx_problem_field field = {"name\xc3", "x"};
        assert_null(sbx_problem_new(400, "invalid-request", "x", &field, 1));
        /* NULL field members become empty strings rather than crashing. */
        const struct sbx_problem_field empty = {NULL, NULL};
        json_t *problem = sbx_problem_new(400, "invalid-request", "x", &empty, 1);
        assert_non_null(problem);
        assert_string_equal(
                json_string_value(json_object_get(
                        json_array_get(json_object_get(problem, "errors"), 0), "field")),
                "");
        json_decref(problem);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_full_problem),
                cmocka_unit_test(test_without_fields_has_empty_errors),
                cmocka_unit_test(test_missing_detail_is_the_title),
                cmocka_unit_test(test_built_up_problem),
                cmocka_unit_test(test_default_slugs_and_titles),
                cmocka_unit_test(test_serialises_as_json),
                cmocka_unit_test(test_unusable_arguments),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
