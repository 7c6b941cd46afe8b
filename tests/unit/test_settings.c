/* Unit tests for service/settings.h, step by step: validate (every refusal names its field by
 * JSON path), resolve language, defaults (built-in, then the tier's), clamp to the tier (request
 * fields recorded, defaults silent), cross-field checks (entrypoint, 403 for the tier), and freeze
 * (the settings own every byte: the body is freed before they are read; run under ASan). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "service/config.h"
#include "service/settings.h"

#define MIB (1024ull * 1024ull)

/* Tier "t": python and sh but not bash; defaults above (memory) and below (wall) the ceiling. */
static const char config_text[] =
        "[tier.t]\n"
        "max_memory_mb = 256\n"
        "max_wall_ms = 10000\n"
        "max_output_bytes = 2M\n"
        "default_wall_ms = 3000\n"
        "default_memory_mb = 512\n"
        "languages = python, sh\n"
        "[tenant.acme]\n"
        "tier = t\n"
        "token_sha256 = "
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad\n";

static struct sbx_config config;

static int setup(void **state)
{
        struct sbx_error err = {0};
        if (sbx_config_load_string(config_text, "t", &config, &err) != 0) {
                fprintf(stderr, "config: %s\n", err.message);
                return -1;
        }
        return 0;
}

static int teardown(void **state)
{
        sbx_config_free(&config);
        return 0;
}

/* Runs the pipeline on text (decoded as the HTTP layer does: NUL allowed in strings) for tenant
 * acme. The body is freed before returning, so every later read of the settings proves they own
 * their memory. */
static int build(const char *text, struct sbx_settings **out, struct sbx_problem *problem)
{
        json_error_t error;
        json_t *body = json_loads(text, JSON_ALLOW_NUL | JSON_REJECT_DUPLICATES, &error);
        if (body == NULL)
                fail_msg("test JSON does not parse: %s: %s", error.text, text);
        int r = sbx_settings_build(body, &config.tenants[0], out, problem);
        json_decref(body);
        return r;
}

static struct sbx_settings *build_ok(const char *text)
{
        struct sbx_settings *settings = NULL;
        struct sbx_problem problem;
        if (build(text, &settings, &problem) != 0)
                fail_msg("refused (%d %s): %s\n  body: %s", problem.status, problem.slug,
                         problem.detail, text);
        assert_non_null(settings);
        return settings;
}

static void print_problem(const struct sbx_problem *problem)
{
        fprintf(stderr, "  problem %u %s: %s\n", problem->status, problem->slug, problem->detail);
        for (size_t i = 0; i < problem->n_errors; i++)
                fprintf(stderr, "    %s: %s\n", problem->errors[i].field,
                        problem->errors[i].message);
}

/* The request is refused with status, and one of the errors names field with a message that
 * contains message. */
static void assert_refused(const char *text, int status, const char *field, const char *message)
{
        struct sbx_settings *settings = (struct sbx_settings *)0x1;
        struct sbx_problem problem;
        if (build(text, &settings, &problem) == 0) {
                sbx_settings_free(settings);
                fail_msg("accepted, expected %d on %s: %s", status, field, text);
        }
        assert_null(settings);
        if ((int)problem.status != status) {
                print_problem(&problem);
                fail_msg("status %u, expected %d: %s", problem.status, status, text);
        }
        assert_string_equal(problem.slug, status == 400 ? "invalid-request" : "forbidden");
        assert_true(problem.detail[0] != '\0');
        for (size_t i = 0; i < problem.n_errors; i++)
                if (strcmp(problem.errors[i].field, field) == 0 &&
                    strstr(problem.errors[i].message, message) != NULL)
                        return;
        print_problem(&problem);
        fail_msg("no error on '%s' saying '%s': %s", field, message, text);
}

/* A JSON string of n copies of c, for bodies of a given size. */
static char *repeat(char c, size_t n)
{
        char *text = malloc(n + 1);
        assert_non_null(text);
        memset(text, c, n);
        text[n] = '\0';
        return text;
}

static char *format(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *format(const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        int length = vsnprintf(NULL, 0, fmt, ap);
        va_end(ap);
        assert_true(length >= 0);
        char *text = malloc((size_t)length + 1);
        assert_non_null(text);
        va_start(ap, fmt);
        vsnprintf(text, (size_t)length + 1, fmt, ap);
        va_end(ap);
        return text;
}

/* ---- validate --------------------------------------------------------------------------- */

static void test_body_must_be_object(void **state)
{
        static const char *const bodies[] = {"[]", "\"x\"", "1", "null", "true"};
        for (size_t i = 0; i < sizeof(bodies) / sizeof(bodies[0]); i++) {
                struct sbx_settings *settings;
                struct sbx_problem problem;
                json_t *body = json_loads(bodies[i], JSON_DECODE_ANY, NULL);
                assert_non_null(body);
                assert_int_equal(sbx_settings_build(body, &config.tenants[0], &settings, &problem),
                                 -1);
                json_decref(body);
                assert_int_equal(problem.status, 400);
                assert_string_equal(problem.slug, "invalid-request");
                assert_non_null(strstr(problem.detail, "JSON object"));
        }
}

static void test_unknown_fields(void **state)
{
        assert_refused("{\"language\":\"sh\",\"code\":\"\",\"timeout\":5}", 400, "timeout",
                       "unknown field");
        assert_refused("{\"language\":\"sh\",\"code\":\"\",\"limits\":{\"memory\":5}}", 400,
                       "limits.memory", "unknown field");
        assert_refused("{\"language\":\"sh\",\"files\":[{\"path\":\"a\",\"content\":\"\"},"
                       "{\"path\":\"b\",\"content\":\"\",\"mode\":493}],\"entrypoint\":\"a\"}",
                       400, "files[1].mode", "unknown field");
        /* Test hooks are not part of the API. */
        assert_refused("{\"language\":\"sh\",\"code\":\"\",\"test\":{}}", 400, "test",
                       "unknown field");
}

static void test_wrong_types(void **state)
{
        assert_refused("{\"language\":5,\"code\":\"\"}", 400, "language", "must be a string");
        assert_refused("{\"language\":\"sh\",\"code\":5}", 400, "code", "must be a string");
        assert_refused("{\"language\":\"sh\",\"code\":null}", 400, "code", "must be a string");
        assert_refused("{\"language\":\"sh\",\"files\":\"x\",\"entrypoint\":\"a\"}", 400, "files",
                       "array");
        assert_refused("{\"language\":\"sh\",\"files\":[\"x\"],\"entrypoint\":\"a\"}", 400,
                       "files[0]", "must be an object");
        assert_refused("{\"language\":\"sh\",\"files\":[{\"path\":5,\"content\":\"\"}],"
                       "\"entrypoint\":\"a\"}",
                       400, "files[0].path", "must be a string");
        assert_refused("{\"language\":\"sh\",\"files\":[{\"path\":\"a\",\"content\":[]}],"
                       "\"entrypoint\":\"a\"}",
                       400, "files[0].content", "must be a string");
        assert_refused("{\"language\":\"sh\",\"files\":[{\"path\":\"a\",\"content\":\"\","
                       "\"executable\":\"yes\"}],\"entrypoint\":\"a\"}",
                       400, "files[0].executable", "must be a boolean");
        assert_refused("{\"language\":\"sh\",\"files\":[{\"path\":\"a\",\"content\":\"\"}],"
                       "\"entrypoint\":1}",
                       400, "entrypoint", "must be a string");
        assert_refused("{\"language\":\"sh\",\"code\":\"\",\"args\":\"-v\"}", 400, "args",
                       "array of strings");
        assert_refused("{\"language\":\"sh\",\"code\":\"\",\"args\":[\"a\",1]}", 400, "args[1]",
                       "must be a string");
        assert_refused("{\"language\":\"sh\",\"code\":\"\",\"env\":[]}", 400, "env",
                       "must be an object");
        assert_refused("{\"language\":\"sh\",\"code\":\"\",\"env\":{\"A\":1}}", 400, "env.A",
                       "must be a string");
        assert_refused("{\"language\":\"sh\",\"code\":\"\",\"stdin\":{}}", 400, "stdin",
                       "must be a string");
        assert_refused("{\"language\":\"sh\",\"code\":\"\",\"limits\":[]}", 400, "limits",
                       "must be an object");
        assert_refused("{\"language\":\"sh\",\"code\":\"\",\"network\":false}", 400, "network",
                       "must be a string");
        assert_refused("{\"language\":\"sh\",\"code\":\"\",\"backend\":1}", 400, "backend",
                       "must be a string");
}

static void test_limits_values(void **state)
{
        static const char *const bad[] = {"\"256\"", "1.5", "true", "null", "{}"};
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                char *text = format("{\"language\":\"sh\",\"code\":\"\",\"limits\":"
                                    "{\"memory_mb\":%s}}",
                                    bad[i]);
                assert_refused(text, 400, "limits.memory_mb", "must be an integer");
                free(text);
        }
        assert_refused("{\"language\":\"sh\",\"code\":\"\",\"limits\":{\"wall_ms\":0}}", 400,
                       "limits.wall_ms", "at least 1");
        assert_refused("{\"language\":\"sh\",\"code\":\"\",\"limits\":{\"pids\":-5}}", 400,
                       "limits.pids", "at least 2");
        /* The smallest a sandbox can run with: init and the program, a few MiB, stdio. */
        assert_refused("{\"language\":\"sh\",\"code\":\"\",\"limits\":{\"pids\":1}}", 400,
                       "limits.pids", "at least 2");
        assert_refused("{\"language\":\"sh\",\"code\":\"\",\"limits\":{\"memory_mb\":3}}", 400,
                       "limits.memory_mb", "at least 4");
        assert_refused("{\"language\":\"sh\",\"code\":\"\",\"limits\":{\"open_files\":7}}", 400,
                       "limits.open_files", "at least 8");
        /* Every field by name. */
        struct sbx_settings *settings =
                build_ok("{\"language\":\"sh\",\"code\":\"\",\"limits\":{\"wall_ms\":1,"
                         "\"cpu_ms\":2,\"memory_mb\":4,\"pids\":4,\"disk_mb\":5,"
                         "\"output_bytes\":6,\"open_files\":8}}");
        assert_int_equal(settings->limits.wall_ms, 1);
        assert_int_equal(settings->limits.cpu_ms, 2);
        assert_int_equal(settings->limits.memory_bytes, 4 * MIB);
        assert_int_equal(settings->limits.pids, 4);
        assert_int_equal(settings->limits.disk_bytes, 5 * MIB);
        assert_int_equal(settings->limits.output_bytes, 6);
        assert_int_equal(settings->limits.open_files, 8);
        assert_int_equal(settings->n_clamped, 0);
        sbx_settings_free(settings);
}

static void test_program_shape(void **state)
{
        assert_refused("{\"language\":\"sh\"}", 400, "code", "required");
        assert_refused("{\"code\":\"\"}", 400, "language", "required");
        assert_refused("{\"language\":\"sh\",\"code\":\"\",\"files\":[{\"path\":\"a\","
                       "\"content\":\"\"}],\"entrypoint\":\"a\"}",
                       400, "code", "not both");
        assert_refused("{\"language\":\"sh\",\"code\":\"\",\"entrypoint\":\"a\"}", 400,
                       "entrypoint", "only allowed with files");
        assert_refused("{\"language\":\"sh\",\"files\":[{\"path\":\"a\",\"content\":\"\"}]}", 400,
                       "entrypoint", "required with files");
        assert_refused("{\"language\":\"sh\",\"files\":[{\"content\":\"\"}],\"entrypoint\":\"a\"}",
                       400, "files[0].path", "required");
        assert_refused("{\"language\":\"sh\",\"files\":[{\"path\":\"a\"}],\"entrypoint\":\"a\"}",
                       400, "files[0].content", "required");
        assert_refused("{\"language\":\"sh\",\"files\":[],\"entrypoint\":\"a\"}", 400, "files",
                       "1 to 64 files");
        assert_refused("{\"language\":\"sh\",\"code\":\"\",\"network\":\"host\"}", 400, "network",
                       "only \"none\"");
        assert_refused("{\"language\":\"sh\",\"code\":\"\",\"backend\":\"firecracker\"}", 400,
                       "backend", "unknown backend 'firecracker' (known: native, gvisor, uml)");
        /* uml has no compile stage: a compiled language there is the request's fault. */
        assert_refused("{\"language\":\"c\",\"code\":\"\",\"backend\":\"uml\"}", 400, "backend",
                       "backend 'uml' does not run c");
}

static void assert_path_refused(const char *json_path, const char *message)
{
        char *text = format("{\"language\":\"sh\",\"files\":[{\"path\":\"%s\",\"content\":\"\"}],"
                            "\"entrypoint\":\"x\"}",
                            json_path);
        assert_refused(text, 400, "files[0].path", message);
        free(text);
}

static void test_paths(void **state)
{
        static const char *const bad[] = {"/etc/passwd", "../x",  "a/../../x", "a//b",
                                          "a/./b",       ".",     "",          "a/",
                                          "a\\\\b",      "a\\tb", "caf\\u00e9"};
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
                assert_path_refused(bad[i], "relative path");
        assert_path_refused("a\\u0000b", "NUL");
        char *long_path = repeat('a', SBX_MAX_FILE_PATH + 1);
        assert_path_refused(long_path, "longer than 255 bytes");
        free(long_path);

        assert_refused("{\"language\":\"sh\",\"files\":[{\"path\":\"a\",\"content\":\"1\"},"
                       "{\"path\":\"a\",\"content\":\"2\"}],\"entrypoint\":\"a\"}",
                       400, "files[1].path", "same path as files[0]");
        assert_refused("{\"language\":\"sh\",\"files\":[{\"path\":\"d/x\",\"content\":\"\"},"
                       "{\"path\":\"d\",\"content\":\"\"}],\"entrypoint\":\"d\"}",
                       400, "files[1].path", "conflicts with files[0]");
        /* "ab" is not inside "a". */
        struct sbx_settings *settings =
                build_ok("{\"language\":\"sh\",\"files\":[{\"path\":\"a\",\"content\":\"\"},"
                         "{\"path\":\"ab/c\",\"content\":\"\"}],\"entrypoint\":\"a\"}");
        sbx_settings_free(settings);
}

static void test_bounds(void **state)
{
        /* File count. */
        size_t cap = 128 * 64;
        char *files = malloc(cap);
        assert_non_null(files);
        size_t used = 0;
        for (int i = 0; i <= SBX_MAX_FILES; i++)
                used += (size_t)snprintf(files + used, cap - used,
                                         "%s{\"path\":\"f%d\",\"content\":\"\"}", i ? "," : "", i);
        char *text = format("{\"language\":\"sh\",\"files\":[%s],\"entrypoint\":\"f0\"}", files);
        assert_refused(text, 400, "files", "1 to 64 files");
        free(text);
        free(files);

        /* Code and file contents: 4 MiB in all. */
        char *big = repeat('x', SBX_MAX_CODE_BYTES + 1);
        text = format("{\"language\":\"sh\",\"code\":\"%s\"}", big);
        assert_refused(text, 400, "code", "longer than 4194304 bytes");
        free(text);
        text = format("{\"language\":\"sh\",\"stdin\":\"%s\",\"code\":\"\"}", big);
        assert_refused(text, 400, "stdin", "longer than 4194304 bytes");
        free(text);
        big[SBX_MAX_CODE_BYTES / 2 + 1] = '\0';
        text = format("{\"language\":\"sh\",\"files\":[{\"path\":\"a\",\"content\":\"%s\"},"
                      "{\"path\":\"b\",\"content\":\"%s\"}],\"entrypoint\":\"a\"}",
                      big, big);
        assert_refused(text, 400, "files", "together are longer than 4194304 bytes");
        free(text);
        free(big);
        /* Exactly at the bound is fine. */
        big = repeat('x', SBX_MAX_CODE_BYTES);
        text = format("{\"language\":\"sh\",\"code\":\"%s\",\"stdin\":\"%s\"}", big, big);
        struct sbx_settings *settings = build_ok(text);
        assert_int_equal(settings->code_size, SBX_MAX_CODE_BYTES);
        assert_int_equal(settings->stdin_size, SBX_MAX_STDIN_BYTES);
        sbx_settings_free(settings);
        free(text);
        free(big);

        /* Arguments. */
        char args[SBX_MAX_ARGS * 4 + 8] = "";
        for (int i = 0; i <= SBX_MAX_ARGS; i++)
                strcat(args, i ? ",\"a\"" : "\"a\"");
        text = format("{\"language\":\"sh\",\"code\":\"\",\"args\":[%s]}", args);
        assert_refused(text, 400, "args", "more than 64 arguments");
        free(text);
        char *long_arg = repeat('a', SBX_MAX_ARG_BYTES + 1);
        text = format("{\"language\":\"sh\",\"code\":\"\",\"args\":[\"%s\"]}", long_arg);
        assert_refused(text, 400, "args[0]", "longer than 4096 bytes");
        free(text);
        free(long_arg);

        /* Environment. */
        char env[SBX_MAX_ENV * 16 + 8] = "";
        for (int i = 0; i <= SBX_MAX_ENV; i++) {
                char entry[16];
                snprintf(entry, sizeof(entry), "%s\"V%d\":\"\"", i ? "," : "", i);
                strcat(env, entry);
        }
        text = format("{\"language\":\"sh\",\"code\":\"\",\"env\":{%s}}", env);
        assert_refused(text, 400, "env", "more than 64 variables");
        free(text);
        char *long_value = repeat('v', SBX_MAX_ENV_BYTES - 2);
        text = format("{\"language\":\"sh\",\"code\":\"\",\"env\":{\"AB\":\"%s\"}}", long_value);
        assert_refused(text, 400, "env.AB", "fits 4096 bytes");
        free(text);
        text = format("{\"language\":\"sh\",\"code\":\"\",\"env\":{\"A\":\"%s\"}}", long_value);
        settings = build_ok(text); /* "A=" + value is exactly 4096 bytes */
        assert_int_equal(strlen(settings->env[0]), SBX_MAX_ENV_BYTES);
        sbx_settings_free(settings);
        free(text);
        free(long_value);
}

static void test_env_names(void **state)
{
        static const char *const bad[] = {"LD_PRELOAD", "LD_LIBRARY_PATH",
                                          "PATH",       "HOME",
                                          "TMPDIR",     "LANG",
                                          "1A",         "A-B",
                                          "A=B",        "",
                                          "\\u00e9"};
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                char *text = format("{\"language\":\"sh\",\"code\":\"\",\"env\":{\"%s\":\"v\"}}",
                                    bad[i]);
                char field[64];
                snprintf(field, sizeof(field), "env.%s", bad[i]);
                if (strcmp(bad[i], "\\u00e9") == 0)
                        snprintf(field, sizeof(field), "env.\xc3\xa9");
                assert_refused(text, 400, field, "not allowed");
                free(text);
        }
        char *long_name = repeat('N', 65);
        char *text =
                format("{\"language\":\"sh\",\"code\":\"\",\"env\":{\"%s\":\"v\"}}", long_name);
        char field[80];
        snprintf(field, sizeof(field), "env.%s", long_name);
        assert_refused(text, 400, field, "not allowed");
        free(text);
        free(long_name);
        assert_refused("{\"language\":\"sh\",\"code\":\"\",\"env\":{\"A\":\"x\\u0000y\"}}", 400,
                       "env.A", "NUL");

        struct sbx_settings *settings =
                build_ok("{\"language\":\"sh\",\"code\":\"\",\"env\":{\"LD\":\"1\",\"_x9\":"
                         "\"a=b c\",\"PATHX\":\"\"}}");
        assert_int_equal(settings->n_env, 3);
        assert_string_equal(settings->env[0], "LD=1");
        assert_string_equal(settings->env[1], "_x9=a=b c");
        assert_string_equal(settings->env[2], "PATHX=");
        sbx_settings_free(settings);
}

static void test_nul_in_text_fields(void **state)
{
        assert_refused("{\"language\":\"sh\\u0000x\",\"code\":\"\"}", 400, "language", "NUL");
        assert_refused("{\"language\":\"sh\",\"code\":\"\",\"args\":[\"a\\u0000b\"]}", 400,
                       "args[0]", "NUL");
        assert_refused("{\"language\":\"sh\",\"files\":[{\"path\":\"a\",\"content\":\"\"}],"
                       "\"entrypoint\":\"a\\u0000b\"}",
                       400, "entrypoint", "NUL");
        assert_refused("{\"language\":\"sh\",\"code\":\"\",\"backend\":\"native\\u0000\"}", 400,
                       "backend", "NUL");
}

static void test_many_errors(void **state)
{
        struct sbx_settings *settings;
        struct sbx_problem problem;
        assert_int_equal(build("{\"language\":1,\"code\":2,\"args\":3}", &settings, &problem), -1);
        assert_int_equal(problem.status, 400);
        assert_int_equal(problem.n_errors, 3);
        assert_non_null(strstr(problem.detail, "3 problems"));

        /* Past SBX_PROBLEM_MAX_ERRORS the list stops growing; the count still says how many. */
        char body[1024] = "{\"language\":\"sh\",\"code\":\"\"";
        for (int i = 0; i < 20; i++) {
                char field[32];
                snprintf(field, sizeof(field), ",\"x%d\":0", i);
                strcat(body, field);
        }
        strcat(body, "}");
        assert_int_equal(build(body, &settings, &problem), -1);
        assert_int_equal(problem.n_errors, SBX_PROBLEM_MAX_ERRORS);
        assert_non_null(strstr(problem.detail, "20 problems"));

        /* A long unknown field of 2-byte characters is cut on a character boundary, so the
         * field still makes a JSON string (jansson refuses invalid UTF-8). */
        char long_name[2 * 200 * 6 + 1] = "";
        for (int i = 0; i < 200; i++)
                strcat(long_name, "\\u00e9");
        char *text = format("{\"language\":\"sh\",\"code\":\"\",\"%s\":1}", long_name);
        assert_int_equal(build(text, &settings, &problem), -1);
        free(text);
        assert_int_equal(problem.n_errors, 1);
        json_t *field = json_string(problem.errors[0].field);
        assert_non_null(field);
        json_decref(field);
        json_t *detail = json_string(problem.detail);
        assert_non_null(detail);
        json_decref(detail);
        assert_true(strlen(problem.errors[0].field) >= 120);
}

/* ---- resolve language ------------------------------------------------------------------- */

static void test_unknown_language(void **state)
{
        assert_refused("{\"language\":\"ruby\",\"code\":\"\"}", 400, "language",
                       "unknown language 'ruby' (known: python, bash, sh, javascript");
        assert_refused("{\"language\":\"\",\"code\":\"\"}", 400, "language", "unknown language");
        assert_refused("{\"language\":\"Python\",\"code\":\"\"}", 400, "language",
                       "unknown language");
}

/* ---- defaults and clamp ----------------------------------------------------------------- */

static void test_defaults(void **state)
{
        struct sbx_settings *settings = build_ok("{\"language\":\"python\",\"code\":\"print(1)\"}");
        struct sbx_limits builtin;
        sbx_limits_default(&builtin);
        /* Tier default under the ceiling: used. */
        assert_int_equal(settings->limits.wall_ms, 3000);
        /* Tier default (512 MiB) over the ceiling (256 MiB): lowered, not reported. */
        assert_int_equal(settings->limits.memory_bytes, 256 * MIB);
        assert_int_equal(settings->n_clamped, 0);
        /* No tier default: the built-in ones. */
        assert_int_equal(settings->limits.cpu_ms, builtin.cpu_ms);
        assert_int_equal(settings->limits.pids, builtin.pids);
        assert_int_equal(settings->limits.disk_bytes, builtin.disk_bytes);
        assert_int_equal(settings->limits.output_bytes, builtin.output_bytes);
        assert_int_equal(settings->limits.open_files, builtin.open_files);
        assert_int_equal(settings->limits.cpu_millicores, builtin.cpu_millicores);
        assert_string_equal(settings->backend, "native");
        assert_string_equal(settings->language, "python");
        assert_string_equal(settings->tenant, "acme");
        assert_int_equal(settings->n_args, 0);
        assert_int_equal(settings->n_env, 0);
        assert_int_equal(settings->n_files, 0);
        assert_null(settings->stdin_data);
        assert_int_equal(settings->stdin_size, 0);
        sbx_settings_free(settings);
}

static void test_clamp(void **state)
{
        struct sbx_settings *settings = build_ok(
                "{\"language\":\"sh\",\"code\":\"\",\"limits\":{\"memory_mb\":1024,"
                "\"wall_ms\":20000,\"output_bytes\":99999999,\"pids\":10,\"cpu_ms\":10000}}");
        assert_int_equal(settings->limits.memory_bytes, 256 * MIB);
        assert_int_equal(settings->limits.wall_ms, 10000);
        assert_int_equal(settings->limits.output_bytes, 2 * MIB);
        assert_int_equal(settings->limits.pids, 10);      /* under the ceiling: kept */
        assert_int_equal(settings->limits.cpu_ms, 10000); /* at the ceiling: not clamped */
        /* In sbx_limit_fields order. */
        assert_int_equal(settings->n_clamped, 3);
        assert_string_equal(settings->clamped[0], "wall_ms");
        assert_string_equal(settings->clamped[1], "memory_mb");
        assert_string_equal(settings->clamped[2], "output_bytes");
        sbx_settings_free(settings);

        /* A value whose byte count overflows is clamped, not wrapped around. */
        settings = build_ok("{\"language\":\"sh\",\"code\":\"\",\"limits\":"
                            "{\"memory_mb\":9223372036854775807,\"disk_mb\":17592186044416}}");
        assert_int_equal(settings->limits.memory_bytes, 256 * MIB);
        assert_int_equal(settings->limits.disk_bytes, 64 * MIB);
        assert_int_equal(settings->n_clamped, 2);
        assert_string_equal(settings->clamped[0], "memory_mb");
        assert_string_equal(settings->clamped[1], "disk_mb");
        sbx_settings_free(settings);

        /* The request's value beats the tier default. */
        settings = build_ok("{\"language\":\"sh\",\"code\":\"\",\"limits\":{\"wall_ms\":7000,"
                            "\"memory_mb\":64}}");
        assert_int_equal(settings->limits.wall_ms, 7000);
        assert_int_equal(settings->limits.memory_bytes, 64 * MIB);
        assert_int_equal(settings->n_clamped, 0);
        sbx_settings_free(settings);
}

/* ---- cross-field checks ----------------------------------------------------------------- */

static void test_entrypoint_among_files(void **state)
{
        assert_refused("{\"language\":\"sh\",\"files\":[{\"path\":\"a.sh\",\"content\":\"\"}],"
                       "\"entrypoint\":\"b.sh\"}",
                       400, "entrypoint", "one of the files");
        assert_refused("{\"language\":\"sh\",\"files\":[{\"path\":\"d/a.sh\",\"content\":\"\"}],"
                       "\"entrypoint\":\"d\"}",
                       400, "entrypoint", "one of the files");
}

static void test_tier_permissions(void **state)
{
        assert_refused("{\"language\":\"bash\",\"code\":\"\"}", 403, "language",
                       "language 'bash' is not allowed for tier 't'");
        /* A bad request is a 400 even when it would also be forbidden. */
        assert_refused("{\"language\":\"bash\",\"code\":\"\",\"limits\":{\"pids\":0}}", 400,
                       "limits.pids", "at least 2");

        /* No config can offer a tier without native today; build one by hand. */
        struct sbx_tier tier = *config.tenants[0].tier;
        tier.n_backends = 0;
        struct sbx_tenant tenant = config.tenants[0];
        tenant.tier = &tier;
        json_t *body =
                json_pack("{s:s, s:s, s:s}", "language", "sh", "code", "", "backend", "native");
        struct sbx_settings *settings;
        struct sbx_problem problem;
        assert_int_equal(sbx_settings_build(body, &tenant, &settings, &problem), -1);
        assert_int_equal(problem.status, 403);
        assert_string_equal(problem.slug, "forbidden");
        assert_int_equal(problem.n_errors, 1);
        assert_string_equal(problem.errors[0].field, "backend");
        assert_non_null(strstr(problem.errors[0].message, "backend 'native' is not allowed"));
        /* The default backend is checked too. */
        json_object_del(body, "backend");
        assert_int_equal(sbx_settings_build(body, &tenant, &settings, &problem), -1);
        assert_int_equal(problem.status, 403);
        json_decref(body);
}

/* ---- freeze ----------------------------------------------------------------------------- */

static void test_files_mode(void **state)
{
        struct sbx_settings *settings = build_ok(
                "{\"language\":\"python\",\"files\":["
                "{\"path\":\"main.py\",\"content\":\"import lib\\n\"},"
                "{\"path\":\"pkg/lib.py\",\"content\":\"\\u0000\\u0001x\",\"executable\":true},"
                "{\"path\":\"data.bin\",\"content\":\"\",\"executable\":false}],"
                "\"entrypoint\":\"pkg/lib.py\",\"args\":[\"-v\",\"\"]}");
        assert_null(settings->code);
        assert_int_equal(settings->code_size, 0);
        assert_int_equal(settings->n_files, 3);
        assert_string_equal(settings->files[0].path, "main.py");
        assert_int_equal(settings->files[0].size, 11);
        assert_memory_equal(settings->files[0].data, "import lib\n", 11);
        assert_false(settings->files[0].executable);
        assert_string_equal(settings->files[1].path, "pkg/lib.py");
        assert_int_equal(settings->files[1].size, 3);
        assert_memory_equal(settings->files[1].data, "\0\1x", 3);
        assert_true(settings->files[1].executable);
        assert_int_equal(settings->files[2].size, 0);
        assert_string_equal(settings->entrypoint, "pkg/lib.py");
        assert_int_equal(settings->n_args, 2);
        assert_string_equal(settings->args[0], "-v");
        assert_string_equal(settings->args[1], "");

        struct sbx_request request;
        sbx_settings_to_request(settings, &request);
        assert_string_equal(request.language, "python");
        assert_null(request.code);
        assert_ptr_equal(request.files, settings->files);
        assert_int_equal(request.n_files, 3);
        assert_string_equal(request.entrypoint, "pkg/lib.py");
        assert_int_equal(request.n_args, 2);
        assert_string_equal(request.args[0], "-v");
        assert_string_equal(request.backend, "native");
        assert_memory_equal(&request.limits, &settings->limits, sizeof(request.limits));
        assert_null(request.test.fail_step);
        assert_int_equal(request.test.disabled_layers, 0);
        sbx_settings_free(settings);
}

static void test_code_and_stdin_keep_nul(void **state)
{
        struct sbx_settings *settings =
                build_ok("{\"language\":\"sh\",\"code\":\"echo a\\u0000b\",\"stdin\":"
                         "\"\\u0000in\\u0000\",\"network\":\"none\",\"backend\":\"native\","
                         "\"env\":{\"X\":\"1\"}}");
        assert_int_equal(settings->code_size, 8);
        assert_memory_equal(settings->code, "echo a\0b", 8);
        assert_int_equal(settings->stdin_size, 4);
        assert_memory_equal(settings->stdin_data, "\0in\0", 4);

        struct sbx_request request;
        sbx_settings_to_request(settings, &request);
        assert_ptr_equal(request.code, settings->code);
        assert_int_equal(request.code_size, 8);
        assert_ptr_equal(request.stdin_data, settings->stdin_data);
        assert_int_equal(request.stdin_size, 4);
        assert_int_equal(request.n_env, 1);
        assert_string_equal(request.env[0], "X=1");
        assert_int_equal(request.n_files, 0);
        sbx_settings_free(settings);

        /* An empty program and empty stdin are still "given". */
        settings = build_ok("{\"language\":\"sh\",\"code\":\"\",\"stdin\":\"\"}");
        assert_non_null(settings->code);
        assert_int_equal(settings->code_size, 0);
        assert_non_null(settings->stdin_data);
        assert_int_equal(settings->stdin_size, 0);
        sbx_settings_free(settings);
}

static bool is_hex(const char *text, size_t length)
{
        return strlen(text) == length && strspn(text, "0123456789abcdef") == length;
}

static void test_freeze_owns_everything(void **state)
{
        static const char text[] = "{\"language\":\"sh\",\"code\":\"echo hi\",\"args\":[\"1\"],"
                                   "\"env\":{\"K\":\"v\"},\"stdin\":\"in\","
                                   "\"limits\":{\"memory_mb\":999}}";
        /* build() frees the body before returning; ASan reports any read of it below. */
        struct sbx_settings *first = build_ok(text);
        struct sbx_settings *second = build_ok(text);
        assert_true(is_hex(first->id, SBX_EXECUTION_ID_CHARS));
        assert_true(is_hex(second->id, SBX_EXECUTION_ID_CHARS));
        assert_string_not_equal(first->id, second->id);
        assert_memory_equal(first->code, "echo hi", 8);
        assert_string_equal(first->args[0], "1");
        assert_string_equal(first->env[0], "K=v");
        assert_memory_equal(first->stdin_data, "in", 3);
        assert_string_equal(first->tenant, "acme");
        assert_int_equal(first->n_clamped, 1);
        assert_string_equal(first->clamped[0], "memory_mb");

        /* The audit copy is the body as sent, with the requested (unclamped) value. */
        json_t *original = json_loads(text, 0, NULL);
        assert_true(json_equal(first->requested, original));
        assert_int_equal(json_integer_value(json_object_get(
                                 json_object_get(first->requested, "limits"), "memory_mb")),
                         999);
        json_decref(original);
        sbx_settings_free(first);
        sbx_settings_free(second);
        sbx_settings_free(NULL);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_body_must_be_object),
                cmocka_unit_test(test_unknown_fields),
                cmocka_unit_test(test_wrong_types),
                cmocka_unit_test(test_limits_values),
                cmocka_unit_test(test_program_shape),
                cmocka_unit_test(test_paths),
                cmocka_unit_test(test_bounds),
                cmocka_unit_test(test_env_names),
                cmocka_unit_test(test_nul_in_text_fields),
                cmocka_unit_test(test_many_errors),
                cmocka_unit_test(test_unknown_language),
                cmocka_unit_test(test_defaults),
                cmocka_unit_test(test_clamp),
                cmocka_unit_test(test_entrypoint_among_files),
                cmocka_unit_test(test_tier_permissions),
                cmocka_unit_test(test_files_mode),
                cmocka_unit_test(test_code_and_stdin_keep_nul),
                cmocka_unit_test(test_freeze_owns_everything),
        };
        return cmocka_run_group_tests(tests, setup, teardown);
}
