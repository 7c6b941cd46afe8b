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
        assert_null(sbx_backend_name_find("firecracker"));
        assert_null(sbx_backend_name_find(""));
        assert_null(sbx_backend_find("firecracker"));
        assert_string_equal(sbx_backend_names(), "native, gvisor, uml");
        /* UML has no compile stage: interpreted languages only; gVisor compiles in a fresh
         * sandbox. Their pools are Python's loader's, and exec entries (sh, bash). */
        assert_true(sbx_backend_runs_language("gvisor", sbx_language_find("python")));
        assert_true(sbx_backend_runs_language("gvisor", sbx_language_find("c")));
        assert_false(sbx_backend_pools_language("gvisor", sbx_language_find("c")));
        assert_true(sbx_backend_runs_language("uml", sbx_language_find("bash")));
        assert_false(sbx_backend_runs_language("uml", sbx_language_find("go")));
        assert_true(sbx_backend_runs_language("native", sbx_language_find("c")));
        assert_true(sbx_backend_pools_language("gvisor", sbx_language_find("python")));
        assert_true(sbx_backend_pools_language("uml", sbx_language_find("python")));
        assert_true(sbx_backend_pools_language("uml", sbx_language_find("bash")));
        assert_true(sbx_backend_pools_language("uml", sbx_language_find("sh")));
        assert_false(sbx_backend_pools_language("uml", sbx_language_find("javascript")));
        assert_false(sbx_backend_pools_language("uml", sbx_language_find("c")));
        assert_true(sbx_backend_pools_language("gvisor", sbx_language_find("bash")));
        assert_false(sbx_backend_pools_language("gvisor", sbx_language_find("javascript")));
}

static void test_language_names_from_the_table(void **state)
{
        (void)state;
        assert_string_equal(sbx_language_names(),
                            "python, bash, sh, javascript, typescript, c, cpp, go, rust, java");
        assert_int_equal(sbx_language_count(), 10);
        assert_null(sbx_language_at(sbx_language_count()));
        assert_string_equal(sbx_language_find("python")->loader, "python");
        assert_string_equal(sbx_language_find("typescript")->loader, "node");
        assert_null(sbx_language_find("bash")->loader);
        /* Each row is whole: a compiled language names its artifact and its compile limits. */
        for (size_t i = 0; i < sbx_language_count(); i++) {
                const struct sbx_language *language = sbx_language_at(i);
                assert_non_null(language->file_name);
                assert_true(language->interpreter != NULL || sbx_language_compiles(language));
                if (sbx_language_compiles(language)) {
                        assert_non_null(language->artifact);
                        assert_true(language->compile_wall_ms >= 1000);
                        assert_true(language->compile_memory_bytes >= 256 * SBX_LIMIT_MIB);
                }
                /* The default entrypoint's extension is the language's own. */
                if (language->extensions[0] != '\0')
                        assert_ptr_equal(sbx_language_for_path(language->file_name), language);
        }
}

static void test_language_aliases_and_extensions(void **state)
{
        (void)state;
        assert_string_equal(sbx_language_find("js")->name, "javascript");
        assert_string_equal(sbx_language_find("node")->name, "javascript");
        assert_string_equal(sbx_language_find("c++")->name, "cpp");
        assert_string_equal(sbx_language_find("golang")->name, "go");
        assert_string_equal(sbx_language_find("ts")->name, "typescript");
        /* Whole words only: no prefix, no part of an alias list, no empty name. */
        assert_null(sbx_language_find("j"));
        assert_null(sbx_language_find("js node"));
        assert_null(sbx_language_find(""));
        assert_null(sbx_language_find("ruby"));
        assert_string_equal(sbx_language_for_path("src/app.mjs")->name, "javascript");
        assert_string_equal(sbx_language_for_path("a.cc")->name, "cpp");
        assert_string_equal(sbx_language_for_path("Main.java")->name, "java");
        assert_string_equal(sbx_language_for_path("x.sh")->name, "bash");
        assert_null(sbx_language_for_path("notes.txt"));
        assert_null(sbx_language_for_path("dir.c/file"));
        assert_null(sbx_language_for_path("trailing."));
        assert_null(sbx_language_for_path(".c"));
}

static void test_compile_limits_are_at_least_the_runs(void **state)
{
        (void)state;
        struct sbx_limits run, compile;
        sbx_limits_default(&run);
        const struct sbx_language *rust = sbx_language_find("rust");
        sbx_language_compile_limits(rust, &run, &compile);
        assert_int_equal(compile.memory_bytes, rust->compile_memory_bytes);
        assert_int_equal(compile.wall_ms, rust->compile_wall_ms);
        assert_int_equal(compile.output_bytes, run.output_bytes);
        assert_true(compile.pids >= 128 && compile.disk_bytes >= 256 * SBX_LIMIT_MIB);
        /* A run allowed more than the compile's defaults keeps it for its compile too. */
        run.memory_bytes = 4096 * SBX_LIMIT_MIB;
        run.wall_ms = 120 * 1000;
        sbx_language_compile_limits(rust, &run, &compile);
        assert_int_equal(compile.memory_bytes, run.memory_bytes);
        assert_int_equal(compile.wall_ms, run.wall_ms);
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
                cmocka_unit_test(test_language_aliases_and_extensions),
                cmocka_unit_test(test_compile_limits_are_at_least_the_runs),
                cmocka_unit_test(test_request_check),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
