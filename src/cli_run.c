/* `sandboxd run`: one execution from the command line. It runs the request with the engine's own
 * execution (sbx_execute, or a warm-pool entry with --pooled): the functions an engine worker
 * calls for every RUN of the HTTP API, behind the same request check (sbx_request_check). What it
 * leaves out is the API process: no settings pipeline, tenant, quota or audit record. Prints the
 * program's output and a summary line, or the whole result as JSON. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "engine/execution.h"
#include "engine/templates.h"
#include "model/backend.h"
#include "model/language.h"
#include "model/result_json.h"
#include "util/cleanup.h"
#include "util/file.h"
#include "util/parse.h"

/* Bounds on what the CLI reads into memory: a program and its stdin, not a data set. */
#define MAX_PROGRAM_BYTES (16u * 1024u * 1024u)
#define MAX_STDIN_BYTES   (64u * 1024u * 1024u)

/* A value of limit as its option is written: 256M, 10s, 64, 0.5. */
static void format_limit_value(const struct sbx_limit_field *limit, uint64_t value, char *text,
                               size_t size)
{
        static const char suffixes[] = "KMG";
        switch (limit->cli) {
        case SBX_LIMIT_CLI_SIZE: {
                int suffix = -1;
                while (suffix < 2 && value != 0 && value % 1024 == 0) {
                        value /= 1024;
                        suffix++;
                }
                /* A one-character string, not "%.*s" into suffixes: gcc 12's printf warning
                 * pass crashes on that at -O0 with the sanitizers. */
                char unit[2] = {suffix >= 0 ? suffixes[suffix] : '\0', '\0'};
                snprintf(text, size, "%llu%s", (unsigned long long)value, unit);
                break;
        }
        case SBX_LIMIT_CLI_DURATION:
                if (value % 1000 == 0)
                        snprintf(text, size, "%llus", (unsigned long long)(value / 1000));
                else
                        snprintf(text, size, "%llums", (unsigned long long)value);
                break;
        case SBX_LIMIT_CLI_CORES:
                snprintf(text, size, "%g", (double)value / (double)limit->unit);
                break;
        case SBX_LIMIT_CLI_COUNT:
                snprintf(text, size, "%llu", (unsigned long long)value);
                break;
        }
}

static void run_usage(FILE *out)
{
        fprintf(out, "usage: sandboxd run [options] (FILE | -c CODE) [-- ARGS...]\n");
        fprintf(out, "  %-24slanguage (default: from FILE's extension, else python):\n",
                "--lang LANGUAGE");
        fprintf(out, "  %-24s%s\n", "", sbx_language_names());
        char option[64];
        static const char *const metavars[] = {
                [SBX_LIMIT_CLI_DURATION] = "DURATION",
                [SBX_LIMIT_CLI_SIZE] = "SIZE",
                [SBX_LIMIT_CLI_COUNT] = "N",
                [SBX_LIMIT_CLI_CORES] = "N",
        };
        for (size_t i = 0; i < SBX_LIMIT_COUNT; i++) {
                const struct sbx_limit_field *limit = &sbx_limit_fields[i];
                char fallback[32];
                format_limit_value(limit, limit->fallback, fallback, sizeof(fallback));
                snprintf(option, sizeof(option), "--%s %s", limit->option, metavars[limit->cli]);
                fprintf(out, "  %-24s%s (default %s)\n", option, limit->help, fallback);
        }
        fprintf(out, "  --compile-OPTION VALUE  any option above, for a compiled language's\n"
                     "                          compile stage (default: the run's, with at least\n"
                     "                          the language's compile wall clock, CPU time and\n"
                     "                          memory, 128 pids and 256M of disk)\n");
        fprintf(out, "  %-24sisolation boundary: %s (default %s)\n", "--backend NAME",
                sbx_backend_names(), SBX_BACKEND_DEFAULT);
        fprintf(out,
                "  --stdin FILE            feed FILE ('-' for this stdin) to the program\n"
                "  --file LOCAL[:NAME]     also put LOCAL into /workspace as NAME (default: its\n"
                "                          base name; executable when LOCAL is); repeatable\n"
                "  --json                  print the result as one JSON object\n"
                "  --pooled                run through a warm-pool entry made for this run,\n"
                "                          as the service does; the result says pooled: true\n"
                "  --template              with --pooled, python: the entry is forked from a\n"
                "                          template interpreter, as the service's are\n"
                "  --test-fail-step STEP   test only: force a setup step to fail\n"
                "  --test-without LAYER    test only: turn off seccomp, landlock, caps,\n"
                "                          no_new_privs, rlimits or netns\n");
}

static int read_named_file(const char *path, size_t max, char **data, size_t *len,
                           struct sbx_error *err)
{
        if (strcmp(path, "-") == 0)
                return sbx_read_all_fd(STDIN_FILENO, max, data, len, err);
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return sbx_error_set(err, errno, "%s", path);
        if (sbx_read_all_fd(fd, max, data, len, err) < 0)
                return sbx_error_prefix(err, "%s", path);
        return 0;
}

static const char *language_from_path(const char *path)
{
        const struct sbx_language *language = sbx_language_for_path(path);
        return language != NULL ? language->name : "python";
}

/* Files given with --file, read into memory. */
struct extra_files {
        struct sbx_file files[SBX_MAX_FILES];
        char *contents[SBX_MAX_FILES];
        char *names[SBX_MAX_FILES];
        size_t n_files;
};

static void extra_files_free(struct extra_files *extra)
{
        for (size_t i = 0; i < SBX_MAX_FILES; i++) {
                free(extra->contents[i]);
                free(extra->names[i]);
        }
}

/* Reads each "LOCAL[:NAME]" into extra: NAME defaults to LOCAL's base name; the file is
 * executable in the sandbox when LOCAL is executable here. */
static int load_extra_files(const char *const *args, size_t n, struct extra_files *extra,
                            struct sbx_error *err)
{
        for (size_t i = 0; i < n; i++) {
                _cleanup_free_ char *local = strdup(args[i]);
                if (local == NULL)
                        return sbx_error_set(err, ENOMEM, "allocate");
                char *colon = strrchr(local, ':');
                const char *name;
                if (colon != NULL) {
                        *colon = '\0';
                        name = colon + 1;
                } else {
                        const char *slash = strrchr(local, '/');
                        name = slash != NULL ? slash + 1 : local;
                }
                if (!sbx_request_path_valid(name))
                        return sbx_error_set(err, EINVAL, "%s: '%s' is not a valid name", args[i],
                                             name);
                struct stat st;
                if (stat(local, &st) < 0)
                        return sbx_error_set(err, errno, "%s", local);
                extra->names[i] = strdup(name);
                if (extra->names[i] == NULL)
                        return sbx_error_set(err, ENOMEM, "allocate");
                size_t size = 0;
                if (read_named_file(local, MAX_PROGRAM_BYTES, &extra->contents[i], &size, err) < 0)
                        return -1;
                extra->files[i] = (struct sbx_file){
                        .path = extra->names[i],
                        .data = extra->contents[i],
                        .size = size,
                        .executable = (st.st_mode & 0111) != 0,
                };
                extra->n_files = i + 1;
        }
        return 0;
}

static int parse_layer(const char *name, unsigned *layers)
{
        static const struct {
                const char *name;
                enum sbx_layer layer;
        } known[] = {
                {"seccomp", SBX_LAYER_SECCOMP}, {"landlock", SBX_LAYER_LANDLOCK},
                {"caps", SBX_LAYER_CAPS},       {"no_new_privs", SBX_LAYER_NO_NEW_PRIVS},
                {"rlimits", SBX_LAYER_RLIMITS}, {"netns", SBX_LAYER_NETNS},
        };
        for (size_t i = 0; i < SBX_ARRAY_SIZE(known); i++) {
                if (strcmp(known[i].name, name) == 0) {
                        *layers |= known[i].layer;
                        return 0;
                }
        }
        return -1;
}

/* Reads limit's option value into limits, within the limit's range. */
static int parse_limit(const struct sbx_limit_field *limit, const char *text,
                       struct sbx_limits *limits, struct sbx_error *err)
{
        uint64_t value = 0;
        int rc = 0;
        switch (limit->cli) {
        case SBX_LIMIT_CLI_DURATION:
                rc = sbx_parse_duration_ms(text, &value, err);
                break;
        case SBX_LIMIT_CLI_SIZE:
                rc = sbx_parse_size(text, &value, err);
                break;
        case SBX_LIMIT_CLI_COUNT:
                rc = sbx_parse_u64(text, limit->max, &value, err);
                break;
        case SBX_LIMIT_CLI_CORES: {
                char *end;
                errno = 0;
                double cores = strtod(text, &end);
                double min = (double)limit->min / (double)limit->unit;
                double max = (double)limit->max / (double)limit->unit;
                if (errno != 0 || end == text || *end != '\0' || !(cores >= min && cores <= max))
                        return sbx_error_set(err, EINVAL,
                                             "'%s' is not a number of cores from %g to %g", text,
                                             min, max);
                value = (uint64_t)(cores * (double)limit->unit + 0.5);
                break;
        }
        }
        if (rc < 0)
                return -1;
        char bound[32];
        if (value < limit->min) {
                format_limit_value(limit, limit->min, bound, sizeof(bound));
                return sbx_error_set(err, EINVAL, "at least %s", bound);
        }
        if (value > limit->max) {
                format_limit_value(limit, limit->max, bound, sizeof(bound));
                return sbx_error_set(err, EINVAL, "at most %s", bound);
        }
        sbx_limit_set(limits, limit, value);
        return 0;
}

static void print_summary(const struct sbx_result *r)
{
        fprintf(stderr,
                "sandboxd: status=%s exit_code=%d wall=%.1fms cpu=%llums memory_peak=%.1fMiB "
                "setup=%.1fms",
                sbx_status_name(r->status), r->run.exited ? r->run.exit_code : -1,
                (double)r->run.wall_us / 1000.0,
                (unsigned long long)(r->evidence.cpu_usage_us / 1000),
                (double)r->evidence.memory_peak_bytes / (1024.0 * 1024.0),
                (double)r->timing.setup_us / 1000.0);
        if (r->signal != 0)
                fprintf(stderr, " signal=%d", r->signal);
        if (sbx_status_has_error(r->status))
                fprintf(stderr, " error=\"%s\"", r->error);
        fputc('\n', stderr);
}

enum {
        OPT_LANG = 256,
        OPT_STDIN,
        OPT_JSON,
        OPT_TEST_FAIL_STEP,
        OPT_TEST_WITHOUT,
        OPT_FILE,
        OPT_POOLED,
        OPT_TEMPLATE,
        OPT_BACKEND,
        OPT_LIMIT, /* OPT_LIMIT + i: --OPTION of sbx_limit_fields[i] */
        /* OPT_COMPILE_LIMIT + i: --compile-OPTION of sbx_limit_fields[i] */
        OPT_COMPILE_LIMIT = OPT_LIMIT + SBX_LIMIT_COUNT,
};

/* --compile-OPTION for each limit: "compile-" and the longest option name. */
#define COMPILE_OPTION_SIZE 32

static const struct option fixed_options[] = {
        {"lang", required_argument, NULL, OPT_LANG},
        {"stdin", required_argument, NULL, OPT_STDIN},
        {"json", no_argument, NULL, OPT_JSON},
        {"test-fail-step", required_argument, NULL, OPT_TEST_FAIL_STEP},
        {"test-without", required_argument, NULL, OPT_TEST_WITHOUT},
        {"file", required_argument, NULL, OPT_FILE},
        {"pooled", no_argument, NULL, OPT_POOLED},
        {"template", no_argument, NULL, OPT_TEMPLATE},
        {"backend", required_argument, NULL, OPT_BACKEND},
        {"help", no_argument, NULL, 'h'},
};

/* The fixed options, one per limit and one per compile limit (names written into
 * compile_names), and the terminating zero entry. */
static void build_options(struct option *options, char (*compile_names)[COMPILE_OPTION_SIZE])
{
        size_t n = 0;
        for (size_t i = 0; i < SBX_ARRAY_SIZE(fixed_options); i++)
                options[n++] = fixed_options[i];
        for (size_t i = 0; i < SBX_LIMIT_COUNT; i++) {
                options[n++] = (struct option){sbx_limit_fields[i].option, required_argument, NULL,
                                               OPT_LIMIT + (int)i};
                snprintf(compile_names[i], COMPILE_OPTION_SIZE, "compile-%s",
                         sbx_limit_fields[i].option);
                options[n++] = (struct option){compile_names[i], required_argument, NULL,
                                               OPT_COMPILE_LIMIT + (int)i};
        }
        options[n] = (struct option){0};
}

/* The compile stage's limits: the language's defaults for the run's limits, with the
 * --compile-OPTION values given (set: which) in their place. -1 when some were given for a
 * language that does not compile (the API's 400 for compile_limits there). */
static int apply_compile_limits(struct sbx_request *request, const struct sbx_limits *given,
                                const bool *set)
{
        const struct sbx_language *language = sbx_language_find(request->language);
        bool any = false;
        for (size_t i = 0; i < SBX_LIMIT_COUNT; i++)
                any = any || set[i];
        if (!any)
                return 0;
        if (!sbx_language_compiles(language))
                return -1;
        sbx_language_compile_limits(language, &request->limits, &request->compile_limits);
        for (size_t i = 0; i < SBX_LIMIT_COUNT; i++)
                if (set[i])
                        sbx_limit_set(&request->compile_limits, &sbx_limit_fields[i],
                                      sbx_limit_get(given, &sbx_limit_fields[i]));
        return 0;
}

int cli_run(int argc, char **argv)
{
        struct sbx_request request = {.cancel_fd = -1};
        sbx_limits_default(&request.limits);
        const char *code_arg = NULL;
        /* --file arguments, then the program itself: SBX_MAX_FILES in all. */
        const char *file_args[SBX_MAX_FILES - 1];
        size_t n_file_args = 0;
        const char *stdin_path = NULL;
        bool json = false;
        bool pooled = false;
        bool template = false;
        struct sbx_error err = {0};

        struct sbx_limits compile_given = {0};
        bool compile_set[SBX_LIMIT_COUNT] = {false};
        char compile_names[SBX_LIMIT_COUNT][COMPILE_OPTION_SIZE];
        struct option options[SBX_ARRAY_SIZE(fixed_options) + 2 * SBX_LIMIT_COUNT + 1];
        build_options(options, compile_names);
        optind = 1;
        opterr = 0;
        int opt;
        /* "+": stop at the first non-option (the FILE); "--" ends the options too. */
        while ((opt = getopt_long(argc, argv, "+c:h", options, NULL)) != -1) {
                int rc = 0;
                if (opt >= OPT_LIMIT && opt < OPT_LIMIT + (int)SBX_LIMIT_COUNT) {
                        rc = parse_limit(&sbx_limit_fields[opt - OPT_LIMIT], optarg,
                                         &request.limits, &err);
                        opt = OPT_LIMIT;
                } else if (opt >= OPT_COMPILE_LIMIT &&
                           opt < OPT_COMPILE_LIMIT + (int)SBX_LIMIT_COUNT) {
                        rc = parse_limit(&sbx_limit_fields[opt - OPT_COMPILE_LIMIT], optarg,
                                         &compile_given, &err);
                        compile_set[opt - OPT_COMPILE_LIMIT] = true;
                        opt = OPT_LIMIT;
                }
                switch (opt) {
                case 'c':
                        code_arg = optarg;
                        break;
                case 'h':
                        run_usage(stdout);
                        return 0;
                case OPT_LANG:
                        request.language = optarg;
                        break;
                case OPT_LIMIT:
                        break;
                case OPT_STDIN:
                        stdin_path = optarg;
                        break;
                case OPT_JSON:
                        json = true;
                        break;
                case OPT_TEST_FAIL_STEP:
                        request.test.fail_step = optarg;
                        break;
                case OPT_POOLED:
                        pooled = true;
                        break;
                case OPT_TEMPLATE:
                        template = true;
                        break;
                case OPT_BACKEND:
                        request.backend = sbx_backend_name_find(optarg);
                        if (request.backend == NULL)
                                rc = sbx_error_set(&err, EINVAL, "unknown backend '%s' (known: %s)",
                                                   optarg, sbx_backend_names());
                        break;
                case OPT_FILE:
                        if (n_file_args == SBX_ARRAY_SIZE(file_args))
                                rc = sbx_error_set(&err, E2BIG, "at most %zu files",
                                                   SBX_ARRAY_SIZE(file_args));
                        else
                                file_args[n_file_args++] = optarg;
                        break;
                case OPT_TEST_WITHOUT:
                        if (parse_layer(optarg, &request.test.disabled_layers) < 0)
                                rc = sbx_error_set(&err, EINVAL, "unknown layer '%s'", optarg);
                        break;
                case '?':
                default:
                        fprintf(stderr, "sandboxd run: unknown or incomplete option '%s'\n",
                                argv[optind - 1]);
                        run_usage(stderr);
                        return CLI_EXIT_USAGE;
                }
                if (rc < 0) {
                        fprintf(stderr, "sandboxd run: %s: %s\n", argv[optind - 1], err.message);
                        return CLI_EXIT_USAGE;
                }
        }

        const char *file_path = NULL;
        if (code_arg == NULL) {
                if (optind >= argc || strcmp(argv[optind], "--") == 0) {
                        fprintf(stderr, "sandboxd run: give a FILE or -c CODE\n");
                        run_usage(stderr);
                        return CLI_EXIT_USAGE;
                }
                file_path = argv[optind++];
        }
        if (optind < argc && strcmp(argv[optind], "--") == 0)
                optind++;
        request.args = (const char *const *)(argv + optind);
        request.n_args = (size_t)(argc - optind);

        if (request.language == NULL)
                request.language = file_path ? language_from_path(file_path) : "python";
        if (sbx_language_find(request.language) == NULL) {
                fprintf(stderr, "sandboxd run: unknown language '%s' (known: %s)\n",
                        request.language, sbx_language_names());
                return CLI_EXIT_USAGE;
        }
        if (request.backend != NULL &&
            !sbx_backend_runs_language(request.backend, sbx_language_find(request.language))) {
                fprintf(stderr,
                        "sandboxd run: the %s backend does not run %s (it has no compile stage)\n",
                        request.backend, request.language);
                return CLI_EXIT_USAGE;
        }
        if (apply_compile_limits(&request, &compile_given, compile_set) < 0) {
                fprintf(stderr, "sandboxd run: --compile-*: %s has no compile stage\n",
                        request.language);
                return CLI_EXIT_USAGE;
        }

        _cleanup_free_ char *program = NULL;
        size_t program_len = 0;
        if (file_path != NULL) {
                if (read_named_file(file_path, MAX_PROGRAM_BYTES, &program, &program_len, &err) <
                    0) {
                        fprintf(stderr, "sandboxd run: %s\n", err.message);
                        return CLI_EXIT_NOINPUT;
                }
                request.code = program;
                request.code_size = program_len;
        } else {
                request.code = code_arg;
                request.code_size = strlen(code_arg);
        }
        _cleanup_(extra_files_free) struct extra_files extra = {0};
        if (n_file_args > 0) {
                if (load_extra_files(file_args, n_file_args, &extra, &err) < 0) {
                        fprintf(stderr, "sandboxd run: --file %s\n", err.message);
                        return CLI_EXIT_NOINPUT;
                }
                /* The program joins them as the last file, and runs as the entrypoint. */
                const char *name = sbx_language_find(request.language)->file_name;
                extra.files[extra.n_files++] = (struct sbx_file){
                        .path = name, .data = request.code, .size = request.code_size};
                request.files = extra.files;
                request.n_files = extra.n_files;
                request.entrypoint = name;
                request.code = NULL;
                request.code_size = 0;
        }
        _cleanup_free_ char *stdin_data = NULL;
        if (stdin_path != NULL) {
                if (read_named_file(stdin_path, MAX_STDIN_BYTES, &stdin_data, &request.stdin_size,
                                    &err) < 0) {
                        fprintf(stderr, "sandboxd run: --stdin: %s\n", err.message);
                        return CLI_EXIT_NOINPUT;
                }
                request.stdin_data = stdin_data;
        }

        const struct sbx_backend *backend = sbx_backend_find(request.backend);
        if (backend->reconcile(&err) < 0)
                fprintf(stderr, "sandboxd run: warning: reconcile: %s\n", err.message);

        struct sbx_result result;
        int rc;
        if (template && !pooled) {
                fprintf(stderr, "sandboxd run: --template needs --pooled\n");
                return CLI_EXIT_USAGE;
        }
        if (pooled) {
                /* The entry is made here, so this is as slow as a cold run: it checks that a
                 * pooled execution behaves exactly like a cold one. */
                struct sbx_pool_entry *entry = NULL;
                /* An entry made for this run from a template may carry its test hooks: the
                 * hostile suite's controls lift a layer on that path too. */
                struct sbx_request hookless = request;
                if (template)
                        hookless.test = (struct sbx_test_hooks){0};
                if (!sbx_pool_request_eligible(&hookless)) {
                        fprintf(stderr, "sandboxd run: --pooled: this request cannot use a warm "
                                        "pool (language on its backend, disk size, test flags, "
                                        "PYTHON* env, or on uml over 256 KiB of input)\n");
                        return CLI_EXIT_USAGE;
                }
                if (template && (strcmp(request.language, "python") != 0 ||
                                 strcmp(backend->name, "native") != 0)) {
                        fprintf(stderr, "sandboxd run: --template: python on the native backend "
                                        "only\n");
                        return CLI_EXIT_USAGE;
                }
                struct sbx_template process = {.pid = 0, .fd = -1, .stderr_fd = -1};
                rc = template ? sbx_template_start(&process, &err) : 0;
                if (rc == 0)
                        /* A uml entry made for this run boots with its memory cap. */
                        rc = sbx_pool_entry_create(request.language, request.backend,
                                                   request.limits.memory_bytes, process.fd,
                                                   template ? &request.test : NULL, &entry, &err);
                if (rc == 0)
                        rc = sbx_pool_entry_execute(entry, &request, &result, &err);
                sbx_template_stop(&process);
        } else {
                rc = sbx_execute(&request, &result, &err);
        }
        if (rc < 0) {
                fprintf(stderr, "sandboxd run: %s\n", err.message);
                return CLI_EXIT_USAGE;
        }
        int exit_code = sbx_result_cli_exit_code(&result);
        if (json) {
                json_t *object = sbx_result_to_json(&result);
                if (object == NULL || json_dumpf(object, stdout, JSON_COMPACT) < 0) {
                        fprintf(stderr, "sandboxd run: cannot encode the result\n");
                        exit_code = CLI_EXIT_SOFTWARE;
                }
                fputc('\n', stdout);
                json_decref(object);
        } else {
                /* The compiler's own output (diagnostics, warnings) comes first, on stderr. */
                const struct sbx_result *compile = result.compile;
                if (compile != NULL) {
                        (void)sbx_write_all(STDERR_FILENO, compile->run.out.data,
                                            compile->run.out.len);
                        (void)sbx_write_all(STDERR_FILENO, compile->run.err.data,
                                            compile->run.err.len);
                }
                (void)sbx_write_all(STDOUT_FILENO, result.run.out.data, result.run.out.len);
                (void)sbx_write_all(STDERR_FILENO, result.run.err.data, result.run.err.len);
                print_summary(&result);
        }
        sbx_result_free(&result);
        fflush(stdout);
        return exit_code;
}
