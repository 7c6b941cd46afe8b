/* Unit tests for model/: the vocabulary both processes share. The backend names the API process
 * knows (model/backend.h) against the backends the engine has (sandbox/backend.c), the language
 * names derived from the language table, and the one request check (sbx_request_check). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "model/backend.h"
#include "model/language.h"
#include "model/request.h"
#include "sandbox/sandbox.h"

static void test_backend_names_have_backends(void **state)
{
        (void)state;
        assert_true(sbx_backend_count() > 0);
        for (size_t i = 0; i < sbx_backend_count(); i++) {
                const char *name = sbx_backend_name_at(i);
                const struct sbx_backend *backend = sbx_backend_find(name);
                assert_non_null(backend);
                assert_string_equal(backend->name, name);
                assert_ptr_equal(sbx_backend_name_find(name), name);
                assert_non_null(strstr(sbx_backend_names(), name));
        }
        assert_string_equal(sbx_backend_find(NULL)->name, SBX_BACKEND_DEFAULT);
        assert_null(sbx_backend_name_find("gvisor"));
        assert_null(sbx_backend_name_find(""));
        assert_null(sbx_backend_find("gvisor"));
}

static void test_language_names_from_the_table(void **state)
{
        (void)state;
        assert_string_equal(sbx_language_names(), "python, bash, sh");
        assert_int_equal(sbx_language_count(), 3);
        assert_null(sbx_language_at(sbx_language_count()));
        assert_true(sbx_language_find("python")->pooled);
        assert_false(sbx_language_find("bash")->pooled);
}

static struct sbx_request valid_request(void)
{
        struct sbx_request request = {.language = "python", .code = "print(1)", .code_size = 8};
        sbx_limits_default(&request.limits);
        return request;
}

static void expect_refused(const struct sbx_request *request, const char *needle)
{
        struct sbx_error err = {0};
        assert_int_equal(sbx_request_check(request, &err), -1);
        assert_int_equal(err.code, EINVAL);
        if (strstr(err.message, needle) == NULL)
                fail_msg("'%s' does not mention '%s'", err.message, needle);
}

static void test_request_check(void **state)
{
        (void)state;
        struct sbx_request request = valid_request();
        struct sbx_error err = {0};
        assert_int_equal(sbx_request_check(&request, &err), 0);

        struct sbx_file files[] = {{.path = "a.py"}, {.path = "lib/b.py"}};
        struct sbx_request with_files = valid_request();
        with_files.code = NULL;
        with_files.files = files;
        with_files.n_files = 2;
        with_files.entrypoint = "lib/b.py";
        assert_int_equal(sbx_request_check(&with_files, &err), 0);

        struct sbx_request bad = with_files;
        bad.entrypoint = "c.py";
        expect_refused(&bad, "entrypoint");
        bad.entrypoint = NULL;
        expect_refused(&bad, "neither code nor files");
        bad = with_files;
        bad.code = "x";
        expect_refused(&bad, "code together with files");
        struct sbx_file dotdot[] = {{.path = "../x"}};
        bad = with_files;
        bad.files = dotdot;
        bad.n_files = 1;
        bad.entrypoint = "../x";
        expect_refused(&bad, "files[0].path");
        bad = with_files;
        bad.n_files = SBX_MAX_FILES + 1;
        expect_refused(&bad, "n_files");

        const char *env[] = {"OK=1", "LD_PRELOAD=/x"};
        bad = valid_request();
        bad.env = env;
        bad.n_env = 2;
        expect_refused(&bad, "env[1]");
        bad.n_env = 1;
        assert_int_equal(sbx_request_check(&bad, &err), 0);

        bad = valid_request();
        bad.limits.wall_ms = 0;
        expect_refused(&bad, "limits.");
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_backend_names_have_backends),
                cmocka_unit_test(test_language_names_from_the_table),
                cmocka_unit_test(test_request_check),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
