/* Judge0 CE on sandboxd (compat_judge0.h).
 *
 * A submission becomes an asynchronous v1 execution, queued as every "wait": false one is (the
 * durable queue, its fairness and quotas: api/async.h); one with expected_output becomes a batch
 * of that one case compared as Judge0 compares (SBX_COMPARE_TRIM: each line's trailing
 * whitespace and trailing blank lines aside), so that its verdict is the store's. Its token is
 * the execution's id written as a UUID. ?wait=true waits for the end as Judge0 (1.14) does, and
 * GET reads the audit record back. The v1 outcome becomes Judge0's status id: ok is Accepted (or
 * Wrong Answer), timeout Time Limit Exceeded, compile_error Compilation Error (compile_output the
 * compiler's stdout and stderr), a signal Runtime Error (SIGSEGV, SIGFPE, SIGABRT, SIGXFSZ or
 * Other), a non-zero exit NZEC, output_limit and disk_full SIGXFSZ (a file size cap, as in
 * isolate), memory_limit Other (the OOM kill's SIGKILL: Judge0 has no memory status), and
 * internal_error or canceled Internal Error.
 *
 * Limits: cpu_time_limit + cpu_extra_time, wall_time_limit (seconds) become cpu_ms and wall_ms,
 * memory_limit (KB) memory_mb, max_processes_and_or_threads pids (plus the sandbox's init),
 * max_file_size (KB) output_bytes; each only when given (the tier's defaults otherwise) and
 * clamped to the tier. callback_url is Judge0's callback: a PUT of the submission, sent by the
 * webhook senders (api/webhooks.c, delivery kind SBX_JUDGE0_DELIVERY_KIND) under the same rules
 * as every webhook. What sandboxd does not do is refused with Judge0's own message for a
 * disabled option (compiler_options, additional_files, enable_network,
 * redirect_stderr_to_stdout, number_of_runs above 1), never silently ignored; stack_limit and the
 * per-process switches are accepted and not enforced. The audit log keeps code and stdin as
 * digests, so source_code, stdin and expected_output read back as null. */
#define _GNU_SOURCE
#include "api/compat_judge0.h"

#include <ctype.h>
#include <math.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/async.h"
#include "api/respond.h"
#include "api/webhooks.h"
#include "model/language.h"
#include "model/request.h"
#include "service/audit.h"
#include "service/audit_queue.h"
#include "service/settings.h"
#include "service/verdict.h"
#include "util/cleanup.h"
#include "util/time.h"

/* Judge0's error key: its clients read the reason from "error". */
#define JUDGE0_ERROR_MEMBER "error"
#define JUDGE0_TOKEN_HEADER "X-Auth-Token"
/* Submissions one POST or GET /submissions/batch may name (Judge0's default is 20). */
#define JUDGE0_BATCH_MAX 1000
/* A token: a UUID's 36 characters. */
#define TOKEN_CHARS 36
/* How long ?wait=true waits beyond the submission's own wall limits (its time in the queue). */
#define WAIT_QUEUE_SLACK_MS (60 * 1000)

/* ---- languages and statuses ---- */

/* A sandboxd language as Judge0 CE knows it: the id GET /languages lists, the other CE ids of
 * the same language (its older and newer versions, which clients hard-code) and its name around
 * the toolchain's version ("Python (" + "3.11.2" + ")"). In the order of Judge0's list (by
 * name). */
static const struct judge0_language {
        int id;
        const char *language;
        const char *name_prefix;
        int other_ids[4];
} judge0_languages[] = {
        {46, "bash", "Bash (", {0}},
        {50, "c", "C (GCC ", {48, 49, 103}},
        {54, "cpp", "C++ (GCC ", {52, 53, 105}},
        {60, "go", "Go (", {95, 106, 107}},
        {62, "java", "Java (OpenJDK ", {91}},
        {63, "javascript", "JavaScript (Node.js ", {93, 97, 102}},
        {71, "python", "Python (", {92, 100, 109}},
        {73, "rust", "Rust (", {108}},
        {74, "typescript", "TypeScript (", {94, 101}},
};

static const struct judge0_language *language_by_id(json_int_t id)
{
        for (size_t i = 0; i < SBX_ARRAY_SIZE(judge0_languages); i++) {
                const struct judge0_language *row = &judge0_languages[i];
                if (row->id == id)
                        return row;
                for (size_t k = 0; k < SBX_ARRAY_SIZE(row->other_ids); k++)
                        if (row->other_ids[k] != 0 && row->other_ids[k] == id)
                                return row;
        }
        return NULL;
}

static const struct judge0_language *language_by_name(const char *name)
{
        for (size_t i = 0; name != NULL && i < SBX_ARRAY_SIZE(judge0_languages); i++)
                if (strcmp(judge0_languages[i].language, name) == 0)
                        return &judge0_languages[i];
        return NULL;
}

/* {"id", "name"} of row, or NULL when its toolchain is not installed. */
static json_t *language_json(const struct judge0_language *row)
{
        char version[32];
        if (!sbx_compat_version(sbx_language_find(row->language), version))
                return NULL;
        char name[96];
        snprintf(name, sizeof(name), "%s%s)", row->name_prefix, version);
        return json_pack("{s:i, s:s}", "id", row->id, "name", name);
}

static const char *const status_descriptions[] = {
        [1] = "In Queue",
        [2] = "Processing",
        [3] = "Accepted",
        [4] = "Wrong Answer",
        [5] = "Time Limit Exceeded",
        [6] = "Compilation Error",
        [7] = "Runtime Error (SIGSEGV)",
        [8] = "Runtime Error (SIGXFSZ)",
        [9] = "Runtime Error (SIGFPE)",
        [10] = "Runtime Error (SIGABRT)",
        [11] = "Runtime Error (NZEC)",
        [12] = "Runtime Error (Other)",
        [13] = "Internal Error",
        [14] = "Exec Format Error",
};

/* Judge0's status id of an audit record (status, signal) with its case's verdict (NULL: none). */
static int status_id(const char *status, json_int_t signal, const char *verdict)
{
        if (status == NULL || strcmp(status, SBX_AUDIT_STATUS_QUEUED) == 0)
                return 1;
        if (strcmp(status, SBX_AUDIT_STATUS_RUNNING) == 0)
                return 2;
        if (strcmp(status, "ok") == 0)
                return verdict != NULL && strcmp(verdict, "wrong_answer") == 0 ? 4 : 3;
        if (strcmp(status, "timeout") == 0)
                return 5;
        if (strcmp(status, "compile_error") == 0)
                return 6;
        if (strcmp(status, "exit_nonzero") == 0 || strcmp(status, "pids_limit") == 0)
                return 11;
        if (strcmp(status, "output_limit") == 0 || strcmp(status, "disk_full") == 0)
                return 8;
        if (strcmp(status, "signaled") == 0) {
                switch (signal) {
                case 11:
                        return 7;
                case 25:
                        return 8;
                case 8:
                        return 9;
                case 6:
                        return 10;
                default:
                        return 12;
                }
        }
        if (strcmp(status, "memory_limit") == 0)
                return 12;
        return 13; /* internal_error, canceled */
}

/* ---- tokens, base64, numbers, times ---- */

/* Execution id (32 hex digits) as a token: 8-4-4-4-12 with dashes. */
static void token_of(const char *id, char token[TOKEN_CHARS + 1])
{
        snprintf(token, TOKEN_CHARS + 1, "%.8s-%.4s-%.4s-%.4s-%.12s", id, id + 8, id + 12, id + 16,
                 id + 20);
}

/* A token (or a bare execution id) as the execution id; false when it is neither. */
static bool id_of(const char *token, char id[SBX_EXECUTION_ID_CHARS + 1])
{
        size_t n = 0;
        for (const char *p = token; *p != '\0'; p++) {
                if (*p == '-')
                        continue;
                if (n == SBX_EXECUTION_ID_CHARS)
                        return false;
                id[n++] = (char)tolower((unsigned char)*p);
        }
        id[n] = '\0';
        return sbx_execution_id_valid(id);
}

/* Seconds as Judge0 writes its decimal columns: "0.001", "0.01", "5.0". */
static json_t *decimal_seconds(json_int_t ms)
{
        char text[32];
        snprintf(text, sizeof(text), "%lld.%03lld", (long long)(ms / 1000), (long long)(ms % 1000));
        size_t length = strlen(text);
        while (text[length - 1] == '0' && text[length - 2] != '.')
                text[--length] = '\0';
        return json_string(text);
}

/* Milliseconds since the epoch as Rails writes times: "2026-12-03T13:35:46.123Z". */
static json_t *iso_time(const json_t *ms_value)
{
        if (!json_is_integer(ms_value))
                return json_null();
        json_int_t ms = json_integer_value(ms_value);
        time_t seconds = (time_t)(ms / 1000);
        struct tm tm;
        char text[48];
        if (gmtime_r(&seconds, &tm) == NULL)
                return json_null();
        size_t n = strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%S", &tm);
        snprintf(text + n, sizeof(text) - n, ".%03lldZ", (long long)(ms % 1000));
        return json_string(text);
}

/* ---- a submission: validation and translation ---- */

/* One submission on its way to the queue: its settings and expected output, or its errors. */
struct submission {
        struct sbx_settings *settings; /* NULL when refused */
        char *expected;                /* expected_output's bytes (owned), NULL: none */
        size_t expected_size;
        json_t *errors;             /* Judge0's {"field": ["message", ...]} (owned), NULL: valid */
        struct sbx_problem problem; /* the settings pipeline's refusal, when errors says so */
        bool problem_set;
};

static void submission_free(struct submission *s)
{
        sbx_settings_free(s->settings);
        free(s->expected);
        json_decref(s->errors);
}

/* Adds message under field to s->errors, as Rails collects validation errors. */
static void add_error(struct submission *s, const char *field, const char *message)
{
        if (s->errors == NULL)
                s->errors = json_object();
        json_t *list = json_object_get(s->errors, field);
        if (list == NULL) {
                list = json_array();
                json_object_set_new(s->errors, field, list);
        }
        json_array_append_new(list, json_string(message));
}

/* A number member (JSON number or numeric string, as Rails casts it) into *number: false (with
 * the error added) when it is neither; *given says whether it was there at all. */
static bool number_member(struct submission *s, const json_t *body, const char *field,
                          double minimum, double *number, bool *given)
{
        const json_t *value = json_object_get(body, field);
        *given = value != NULL && !json_is_null(value);
        if (!*given)
                return true;
        char *end = NULL;
        if (json_is_number(value))
                *number = json_number_value(value);
        else if (json_is_string(value))
                *number = strtod(json_string_value(value), &end);
        if ((!json_is_number(value) &&
             (end == NULL || *end != '\0' || end == json_string_value(value))) ||
            !isfinite(*number)) {
                add_error(s, field, "is not a number");
                return false;
        }
        if (*number < minimum) {
                char message[64];
                snprintf(message, sizeof(message), "must be greater than or equal to %g", minimum);
                add_error(s, field, message);
                return false;
        }
        return true;
}

/* A text member (source_code, stdin, expected_output): its bytes, decoded when the request is
 * base64_encoded; NULL when it is absent, null or not a string (the error added). */
static char *text_member(struct submission *s, const json_t *body, const char *field, bool base64,
                         size_t *size)
{
        const json_t *value = json_object_get(body, field);
        if (value == NULL || json_is_null(value))
                return NULL;
        if (!json_is_string(value)) {
                add_error(s, field, "must be a string");
                return NULL;
        }
        if (base64)
                return sbx_compat_base64_decode(json_string_value(value), json_string_length(value),
                                                size);
        *size = json_string_length(value);
        char *copy = malloc(*size + 1);
        if (copy != NULL) {
                memcpy(copy, json_string_value(value), *size);
                copy[*size] = '\0';
        }
        return copy;
}

/* Whether a switch Judge0 can turn off is asked for: a true boolean, or any non-empty value. */
static bool asked_for(const json_t *value)
{
        return value != NULL && !json_is_null(value) && !json_is_false(value) &&
               !(json_is_string(value) && json_string_length(value) == 0);
}

/* "a b  c" as ["a", "b", "c"]: Judge0 hands command_line_arguments to a shell; sandboxd takes
 * arguments as a list, split here at white space. */
static json_t *split_arguments(const char *text)
{
        json_t *args = json_array();
        for (const char *p = text; args != NULL && *p != '\0';) {
                p += strspn(p, " \t\n");
                size_t length = strcspn(p, " \t\n");
                if (length > 0)
                        json_array_append_new(args, json_stringn(p, length));
                p += length;
        }
        return args;
}

/* The v1 limits of the submission's limit members (into limits); false with errors added. */
static bool translate_limits(struct submission *s, const json_t *body, json_t *limits)
{
        double cpu = 0, extra = 0, wall = 0, memory = 0, ignored = 0, processes = 0, file = 0;
        bool cpu_given, extra_given, wall_given, memory_given, processes_given, file_given, given;
        bool ok = number_member(s, body, "cpu_time_limit", 0, &cpu, &cpu_given);
        ok &= number_member(s, body, "cpu_extra_time", 0, &extra, &extra_given);
        ok &= number_member(s, body, "wall_time_limit", 1, &wall, &wall_given);
        ok &= number_member(s, body, "memory_limit", 2048, &memory, &memory_given);
        ok &= number_member(s, body, "stack_limit", 0, &ignored, &given);
        ok &= number_member(s, body, "max_processes_and_or_threads", 1, &processes,
                            &processes_given);
        ok &= number_member(s, body, "max_file_size", 0, &file, &file_given);
        if (!ok)
                return false;
        /* Past a day every ceiling clamps it: keep the numbers in range. */
        const double most = 1e12;
        if (cpu_given) /* cpu_extra_time alone extends nothing: the default stays */
                json_object_set_new(
                        limits, "cpu_ms",
                        json_integer((json_int_t)fmin(most, ceil((cpu + extra) * 1000))));
        if (wall_given)
                json_object_set_new(limits, "wall_ms",
                                    json_integer((json_int_t)fmin(most, ceil(wall * 1000))));
        if (memory_given)
                json_object_set_new(limits, "memory_mb",
                                    json_integer((json_int_t)fmin(most, ceil(memory / 1024))));
        if (processes_given) /* the sandbox's init is a process too */
                json_object_set_new(limits, "pids",
                                    json_integer((json_int_t)fmin(most, processes) + 1));
        if (file_given && file > 0)
                json_object_set_new(limits, "output_bytes",
                                    json_integer((json_int_t)fmin(most, file * 1024)));
        return true;
}

/* Validates and translates one submission (body) for tenant into s: its settings, or errors
 * (Judge0's 422) or a problem (the settings pipeline's refusal). */
static void translate_submission(const json_t *body, const struct sbx_tenant *tenant, bool base64,
                                 struct submission *s)
{
        *s = (struct submission){0};
        if (!json_is_object(body)) {
                add_error(s, "submission", "must be an object");
                return;
        }
        size_t code_size = 0, stdin_size = 0;
        _cleanup_free_ char *code = text_member(s, body, "source_code", base64, &code_size);
        _cleanup_free_ char *stdin_data = text_member(s, body, "stdin", base64, &stdin_size);
        s->expected = text_member(s, body, "expected_output", base64, &s->expected_size);
        if (code == NULL || code_size == 0)
                add_error(s, "source_code", "can't be blank");

        const json_t *language_value = json_object_get(body, "language_id");
        const struct judge0_language *language = NULL;
        char message[96];
        if (language_value == NULL || json_is_null(language_value)) {
                add_error(s, "language_id", "can't be blank");
        } else {
                json_int_t id = json_is_integer(language_value) ? json_integer_value(language_value)
                                : json_is_string(language_value)
                                        ? strtoll(json_string_value(language_value), NULL, 10)
                                        : -1;
                language = language_by_id(id);
                if (language == NULL) {
                        snprintf(message, sizeof(message), "language with id %lld doesn't exist",
                                 (long long)id);
                        add_error(s, "language_id", message);
                }
        }
        /* Judge0's messages for options its configuration turned off: sandboxd has none of them
         * (its compile commands are fixed, its sandboxes have no network, ...). */
        static const struct {
                const char *field, *message;
        } refused[] = {
                {"compiler_options", "setting compiler options is not allowed"},
                {"additional_files", "setting additional files is not allowed"},
                {"enable_network", "enabling network is not allowed"},
                {"redirect_stderr_to_stdout", "this option cannot be enabled"},
        };
        for (size_t i = 0; i < SBX_ARRAY_SIZE(refused); i++)
                if (asked_for(json_object_get(body, refused[i].field)))
                        add_error(s, refused[i].field, refused[i].message);
        double runs = 1;
        bool runs_given;
        if (number_member(s, body, "number_of_runs", 1, &runs, &runs_given) && runs > 1)
                add_error(s, "number_of_runs", "must be less than or equal to 1");
        const json_t *callback = json_object_get(body, "callback_url");
        char why[512];
        if (callback != NULL && !json_is_null(callback) &&
            (!json_is_string(callback) || json_string_length(callback) > SBX_CALLBACK_URL_MAX))
                add_error(s, "callback_url", "is not a URL");
        else if (json_is_string(callback) &&
                 !sbx_webhooks_check_url(tenant, json_string_value(callback), why, sizeof(why)))
                add_error(s, "callback_url", why);
        const json_t *arguments = json_object_get(body, "command_line_arguments");
        if (arguments != NULL && !json_is_null(arguments) &&
            (!json_is_string(arguments) || json_string_length(arguments) > 512))
                add_error(s, "command_line_arguments", "is too long (maximum is 512 characters)");

        _cleanup_(json_decrefp) json_t *v1 = json_object();
        json_t *limits = json_object();
        if (v1 == NULL || json_object_set_new(v1, "limits", limits) < 0) {
                add_error(s, "submission", "out of memory");
                return;
        }
        bool limits_ok = translate_limits(s, body, limits);
        if (s->errors != NULL || !limits_ok || language == NULL)
                return;

        json_object_set_new(v1, "language", json_string(language->language));
        json_t *code_string = json_stringn(code, code_size);
        if (code_string != NULL) {
                json_object_set_new(v1, "code", code_string);
        } else {
                /* Not UTF-8 (a base64_encoded one may be any bytes): as a base64 file, in the
                 * one-line form a v1 file takes. */
                _cleanup_free_ char *encoded = sbx_compat_base64(code, code_size);
                const char *file_name = sbx_language_find(language->language)->file_name;
                json_object_set_new(v1, "files",
                                    json_pack("[{s:s, s:s, s:s}]", "path", file_name, "content",
                                              encoded, "encoding", "base64"));
                json_object_set_new(v1, "entrypoint", json_string(file_name));
        }
        if (stdin_data != NULL && stdin_size > 0) {
                json_t *stdin_string = json_stringn(stdin_data, stdin_size);
                if (stdin_string == NULL) {
                        add_error(s, "stdin", "must be UTF-8 text");
                        return;
                }
                json_object_set_new(v1, "stdin", stdin_string);
        }
        if (json_is_string(arguments) && json_string_length(arguments) > 0)
                json_object_set_new(v1, "args", split_arguments(json_string_value(arguments)));
        json_object_set_new(v1, "wait", json_false());
        if (json_is_string(callback))
                json_object_set(v1, "callback_url", (json_t *)callback);
        if (sbx_settings_build(v1, tenant, &s->settings, &s->problem) < 0) {
                s->settings = NULL;
                s->problem_set = true;
        }
}

/* ---- the queue ---- */

/* Queues s (valid) for tenant, a batch of one case when it expects an output. 0, or -1 with err
 * and *retry_after_s (as sbx_async_submit). */
static int enqueue(struct sbx_api *api, const struct sbx_tenant *tenant, struct submission *s,
                   uint64_t *retry_after_s, struct sbx_error *err)
{
        uint64_t now = sbx_wall_clock_ms();
        _cleanup_(sbx_http_record_parts_free) struct sbx_http_record_parts parts;
        const struct sbx_audit_record record = sbx_http_record_of(s->settings, now, &parts);
        const struct sbx_async_item item = {
                .settings = s->settings,
                .record = &record,
                .expected_stdout = s->expected,
                .expected_size = s->expected_size,
                .callback_kind = SBX_JUDGE0_DELIVERY_KIND,
        };
        uint64_t position = 0;
        if (s->expected == NULL)
                return sbx_async_submit(api->async, tenant, NULL, &item, 1, &position,
                                        retry_after_s, err);
        char batch_id[SBX_EXECUTION_ID_CHARS + 1];
        if (sbx_execution_id_new(batch_id, err) < 0)
                return -1;
        _cleanup_(json_decrefp) json_t *requested =
                json_pack("{s:s, s:s}", "judge0", "submission", "compare",
                          sbx_compare_name(SBX_COMPARE_TRIM));
        const struct sbx_audit_batch batch = {
                .id = batch_id,
                .tenant = tenant->name,
                .created_at_ms = (int64_t)now,
                .compare = sbx_compare_name(SBX_COMPARE_TRIM),
                .requested = requested,
        };
        return sbx_async_submit(api->async, tenant, &batch, &item, 1, &position, retry_after_s,
                                err);
}

/* ---- a submission as Judge0 answers it ---- */

/* Judge0's fields, in the order it writes them (its table's columns, then status and
 * language). */
enum field {
        F_SOURCE_CODE,
        F_LANGUAGE_ID,
        F_STDIN,
        F_EXPECTED_OUTPUT,
        F_STDOUT,
        F_STATUS_ID,
        F_CREATED_AT,
        F_FINISHED_AT,
        F_TIME,
        F_MEMORY,
        F_STDERR,
        F_TOKEN,
        F_NUMBER_OF_RUNS,
        F_CPU_TIME_LIMIT,
        F_CPU_EXTRA_TIME,
        F_WALL_TIME_LIMIT,
        F_MEMORY_LIMIT,
        F_STACK_LIMIT,
        F_MAX_PROCESSES,
        F_PER_PROCESS_TIME,
        F_PER_PROCESS_MEMORY,
        F_MAX_FILE_SIZE,
        F_COMPILE_OUTPUT,
        F_EXIT_CODE,
        F_EXIT_SIGNAL,
        F_MESSAGE,
        F_WALL_TIME,
        F_COMPILER_OPTIONS,
        F_COMMAND_LINE_ARGUMENTS,
        F_REDIRECT_STDERR,
        F_CALLBACK_URL,
        F_ADDITIONAL_FILES,
        F_ENABLE_NETWORK,
        F_STATUS,
        F_LANGUAGE,
        F_COUNT,
};

static const char *const field_names[F_COUNT] = {
        "source_code",
        "language_id",
        "stdin",
        "expected_output",
        "stdout",
        "status_id",
        "created_at",
        "finished_at",
        "time",
        "memory",
        "stderr",
        "token",
        "number_of_runs",
        "cpu_time_limit",
        "cpu_extra_time",
        "wall_time_limit",
        "memory_limit",
        "stack_limit",
        "max_processes_and_or_threads",
        "enable_per_process_and_thread_time_limit",
        "enable_per_process_and_thread_memory_limit",
        "max_file_size",
        "compile_output",
        "exit_code",
        "exit_signal",
        "message",
        "wall_time",
        "compiler_options",
        "command_line_arguments",
        "redirect_stderr_to_stdout",
        "callback_url",
        "additional_files",
        "enable_network",
        "status",
        "language",
};

/* GET's default fields (Judge0's SubmissionSerializer.default_fields). */
static const enum field default_fields[] = {F_TOKEN,  F_TIME,           F_MEMORY,  F_STDOUT,
                                            F_STDERR, F_COMPILE_OUTPUT, F_MESSAGE, F_STATUS};

/* Which fields an answer carries. */
struct field_set {
        bool wanted[F_COUNT];
};

static void default_field_set(struct field_set *set)
{
        *set = (struct field_set){0};
        for (size_t i = 0; i < SBX_ARRAY_SIZE(default_fields); i++)
                set->wanted[default_fields[i]] = true;
}

/* ?fields= into set (absent or empty: the defaults; "*": all). false with the unknown names
 * listed in why as Judge0 words it ("invalid fields: [a, b]"). */
static bool parse_fields(const char *text, struct field_set *set, char *why, size_t why_size)
{
        default_field_set(set);
        if (text == NULL || text[0] == '\0')
                return true;
        *set = (struct field_set){0};
        int used = snprintf(why, why_size, "invalid fields: [");
        bool bad = false;
        for (const char *p = text;; p++) {
                size_t length = strcspn(p, ",");
                bool known = false;
                if (length == 1 && p[0] == '*') {
                        for (size_t i = 0; i < F_COUNT; i++)
                                set->wanted[i] = true;
                        known = true;
                }
                for (size_t i = 0; !known && i < F_COUNT; i++)
                        if (strlen(field_names[i]) == length &&
                            strncmp(field_names[i], p, length) == 0)
                                known = set->wanted[i] = true;
                if (!known && used > 0 && (size_t)used < why_size)
                        used += snprintf(why + used, why_size - (size_t)used, "%s%.*s",
                                         bad ? ", " : "", (int)length, p);
                bad |= !known;
                p += length;
                if (*p == '\0')
                        break;
        }
        if (used > 0 && (size_t)used < why_size)
                snprintf(why + used, why_size - (size_t)used, "]");
        return !bad;
}

/* text as a field: null when empty (Judge0 stores no empty output), base64 when asked. */
static json_t *text_field(const char *text, size_t length, bool base64)
{
        if (text == NULL || length == 0)
                return json_null();
        return base64 ? sbx_compat_base64_lines(text, length) : json_stringn(text, length);
}

/* What isolate would have said of the run (Judge0's message). */
static json_t *message_of(const char *status, const json_t *record, bool base64)
{
        char text[SBX_ERROR_MESSAGE_MAX + 64] = "";
        const json_t *exit_code = json_object_get(record, "exit_code");
        const json_t *signal = json_object_get(record, "signal");
        if (status == NULL) {
                return json_null();
        } else if (strcmp(status, "timeout") == 0) {
                snprintf(text, sizeof(text), "Time limit exceeded");
        } else if (strcmp(status, "compile_error") == 0) {
                return json_null(); /* compile_output says it */
        } else if (strcmp(status, "internal_error") == 0 || strcmp(status, "canceled") == 0) {
                const char *error = json_string_value(json_object_get(record, "error"));
                snprintf(text, sizeof(text), "%s", error != NULL ? error : status);
        } else if (json_is_integer(signal)) {
                snprintf(text, sizeof(text), "Caught fatal signal %lld",
                         (long long)json_integer_value(signal));
        } else if (json_integer_value(exit_code) != 0) {
                snprintf(text, sizeof(text), "Exited with error status %lld",
                         (long long)json_integer_value(exit_code));
        } else if (strcmp(status, "output_limit") == 0 || strcmp(status, "disk_full") == 0) {
                snprintf(text, sizeof(text), "File size limit exceeded");
        }
        return text_field(text, strlen(text), base64);
}

/* The compile stage's stdout and stderr together (Judge0's compile_output), or null. */
static json_t *compile_output_of(const json_t *record, bool base64)
{
        const json_t *compile = json_object_get(record, "compile");
        const json_t *out = json_object_get(compile, "stdout"),
                     *err = json_object_get(compile, "stderr");
        size_t out_len = json_string_length(out), err_len = json_string_length(err);
        _cleanup_free_ char *both = malloc(out_len + err_len + 1);
        if (both == NULL)
                return NULL;
        memcpy(both, json_string_value(out) ? json_string_value(out) : "", out_len);
        memcpy(both + out_len, json_string_value(err) ? json_string_value(err) : "", err_len);
        return text_field(both, out_len + err_len, base64);
}

/* object's integer member name (milliseconds) as Judge0's decimal seconds, or null. */
static json_t *seconds_member(const json_t *object, const char *name)
{
        const json_t *value = json_object_get(object, name);
        return json_is_integer(value) ? decimal_seconds(json_integer_value(value)) : json_null();
}

/* object's integer member name times multiply, divided by divide (Judge0's units), or null. */
static json_t *scaled_member(const json_t *object, const char *name, json_int_t multiply,
                             json_int_t divide)
{
        const json_t *value = json_object_get(object, name);
        return json_is_integer(value) ? json_integer(json_integer_value(value) * multiply / divide)
                                      : json_null();
}

/* The audit record (with its case's verdict, NULL: none) as Judge0's submission, the fields of
 * set in Judge0's order. NULL when memory runs out. */
static json_t *render(const json_t *record, const char *verdict, const struct field_set *set,
                      bool base64)
{
        const char *status = json_string_value(json_object_get(record, "status"));
        const json_t *signal = json_object_get(record, "signal");
        int id = status_id(status, json_integer_value(signal), verdict);
        bool ran = id > 2 && id != 6;
        const json_t *usage = json_object_get(record, "usage");
        const json_t *effective = json_object_get(record, "effective");
        const struct judge0_language *language =
                language_by_name(json_string_value(json_object_get(record, "language")));
        char token[TOKEN_CHARS + 1];
        token_of(json_string_value(json_object_get(record, "id")), token);
        const json_t *requested = json_object_get(record, "requested");
        const json_t *stdout_value = json_object_get(record, "stdout");
        const json_t *stderr_value = json_object_get(record, "stderr");

        json_t *answer = json_object();
        for (size_t f = 0; answer != NULL && f < F_COUNT; f++) {
                if (!set->wanted[f])
                        continue;
                json_t *value = NULL;
                switch ((enum field)f) {
                case F_SOURCE_CODE: /* the audit log keeps digests of them only */
                case F_STDIN:
                case F_EXPECTED_OUTPUT:
                case F_STACK_LIMIT: /* not enforced */
                case F_COMPILER_OPTIONS:
                case F_ADDITIONAL_FILES:
                        value = json_null();
                        break;
                case F_LANGUAGE_ID:
                        value = language != NULL ? json_integer(language->id) : json_null();
                        break;
                case F_STDOUT:
                        value = text_field(json_string_value(stdout_value),
                                           json_string_length(stdout_value), base64);
                        break;
                case F_STDERR:
                        value = text_field(json_string_value(stderr_value),
                                           json_string_length(stderr_value), base64);
                        break;
                case F_STATUS_ID:
                        value = json_integer(id);
                        break;
                case F_CREATED_AT:
                        value = iso_time(json_object_get(record, "created_at"));
                        break;
                case F_FINISHED_AT:
                        value = id > 2 ? iso_time(json_object_get(record, "finished_at"))
                                       : json_null();
                        break;
                case F_TIME:
                        value = ran ? seconds_member(usage, "cpu_ms") : json_null();
                        break;
                case F_WALL_TIME:
                        value = ran ? seconds_member(usage, "wall_ms") : json_null();
                        break;
                case F_MEMORY:
                        value = ran ? scaled_member(usage, "memory_peak_bytes", 1, 1024)
                                    : json_null();
                        break;
                case F_TOKEN:
                        value = json_string(token);
                        break;
                case F_NUMBER_OF_RUNS:
                        value = json_integer(1);
                        break;
                case F_CPU_TIME_LIMIT:
                        value = seconds_member(effective, "cpu_ms");
                        break;
                case F_CPU_EXTRA_TIME:
                        value = json_string("0.0");
                        break;
                case F_WALL_TIME_LIMIT:
                        value = seconds_member(effective, "wall_ms");
                        break;
                case F_MEMORY_LIMIT:
                        value = scaled_member(effective, "memory_mb", 1024, 1);
                        break;
                case F_MAX_PROCESSES:
                        value = scaled_member(effective, "pids", 1, 1);
                        break;
                case F_MAX_FILE_SIZE:
                        value = scaled_member(effective, "output_bytes", 1, 1024);
                        break;
                case F_PER_PROCESS_TIME:
                case F_PER_PROCESS_MEMORY:
                case F_REDIRECT_STDERR:
                case F_ENABLE_NETWORK:
                        value = json_false();
                        break;
                case F_COMPILE_OUTPUT:
                        value = compile_output_of(record, base64);
                        break;
                case F_EXIT_CODE: {
                        /* isolate's: 0 after a signal, none after a compile error. */
                        const json_t *code = json_object_get(record, "exit_code");
                        value = !ran ? json_null()
                                     : json_integer(json_is_integer(code) ? json_integer_value(code)
                                                                          : 0);
                        break;
                }
                case F_EXIT_SIGNAL:
                        value = ran && json_is_integer(signal)
                                        ? json_integer(json_integer_value(signal))
                                        : json_null();
                        break;
                case F_MESSAGE:
                        value = id > 2 ? message_of(status, record, base64) : json_null();
                        break;
                case F_CALLBACK_URL: {
                        const json_t *url = json_object_get(requested, "callback_url");
                        value = json_is_string(url) ? json_incref((json_t *)url) : json_null();
                        break;
                }
                case F_COMMAND_LINE_ARGUMENTS: {
                        const json_t *args = json_object_get(requested, "args");
                        if (!json_is_array(args) || json_array_size(args) == 0) {
                                value = json_null();
                                break;
                        }
                        char joined[1024] = "";
                        size_t used = 0, index;
                        const json_t *arg;
                        json_array_foreach(args, index, arg)
                        {
                                if (used < sizeof(joined))
                                        used += (size_t)snprintf(
                                                joined + used, sizeof(joined) - used, "%s%s",
                                                index ? " " : "", json_string_value(arg));
                        }
                        value = json_string(joined);
                        break;
                }
                case F_STATUS:
                        value = json_pack("{s:i, s:s}", "id", id, "description",
                                          status_descriptions[id]);
                        break;
                case F_LANGUAGE:
                        value = language != NULL ? language_json(language) : json_null();
                        if (value == NULL)
                                value = json_null();
                        break;
                case F_COUNT:
                        break;
                }
                if (value == NULL || json_object_set_new(answer, field_names[f], value) < 0) {
                        json_decref(answer);
                        return NULL;
                }
        }
        return answer;
}

/* The verdict of execution id's case, when it is one (NULL: no case, or not judged). */
static const char *case_verdict(struct sbx_api *api, const char *tenant, const char *id,
                                char verdict[32])
{
        char batch_id[SBX_EXECUTION_ID_CHARS + 1];
        bool done = false;
        struct sbx_error err = {0};
        if (sbx_audit_case_batch(api->audit, id, batch_id, &done, &err) <= 0)
                return NULL;
        static const char *const fields[] = {"verdict"};
        json_t *batch = NULL;
        if (sbx_audit_batch_fetch(api->audit, tenant, batch_id, fields, 1, &batch, &err) <= 0)
                return NULL;
        const char *value = json_string_value(
                json_object_get(json_array_get(json_object_get(batch, "results"), 0), "verdict"));
        snprintf(verdict, 32, "%s", value != NULL ? value : "");
        json_decref(batch);
        return verdict[0] != '\0' ? verdict : NULL;
}

/* The submission of tenant with execution id as Judge0 answers it: 1 with *out, 0 when there is
 * none, -1 when the store failed. */
static int fetch_submission(struct sbx_api *api, const char *tenant, const char *id,
                            const struct field_set *set, bool base64, json_t **out)
{
        json_t *record = NULL;
        struct sbx_error err = {0};
        int found = sbx_audit_fetch(api->audit, tenant, id, &record, &err);
        if (found <= 0)
                return found;
        char verdict[32];
        *out = render(record, case_verdict(api, tenant, id, verdict), set, base64);
        json_decref(record);
        return *out != NULL ? 1 : -1;
}

int sbx_judge0_callback_body(struct sbx_api *api, const char *tenant, const char *id, json_t **out)
{
        struct field_set set;
        default_field_set(&set);
        return fetch_submission(api, tenant, id, &set, true, out);
}

/* ---- handlers ---- */

/* A Judge0 error of the request ({"error": why} in a problem body). */
static enum MHD_Result bad_request(struct sbx_api *api, struct MHD_Connection *connection,
                                   const char *why)
{
        return sbx_http_respond_problem(api, connection, 400, why, NULL, 0, NULL, 0);
}

/* Judge0's 422: its {"field": ["message"]} members in a problem body naming each field. */
static enum MHD_Result respond_errors(struct sbx_api *api, struct MHD_Connection *connection,
                                      const json_t *errors)
{
        struct sbx_problem_field fields[SBX_PROBLEM_MAX_ERRORS];
        size_t n = 0;
        const char *key;
        const json_t *messages;
        json_object_foreach((json_t *)errors, key, messages)
        {
                if (n < SBX_ARRAY_SIZE(fields))
                        fields[n++] = (struct sbx_problem_field){
                                key, json_string_value(json_array_get(messages, 0))};
        }
        char detail[256];
        snprintf(detail, sizeof(detail), "%s %s", n > 0 ? fields[0].field : "submission",
                 n > 0 ? fields[0].message : "is invalid");
        return sbx_http_respond_problem_of(api, connection, 422, "invalid-request", detail, fields,
                                           n, NULL, 0, json_deep_copy(errors));
}

static bool query_true(struct MHD_Connection *connection, const char *name)
{
        const char *value = MHD_lookup_connection_value(connection, MHD_GET_ARGUMENT_KIND, name);
        return value != NULL && strcmp(value, "true") == 0;
}

static enum MHD_Result respond_submission_refusal(struct sbx_api *api,
                                                  struct MHD_Connection *connection,
                                                  struct submission *s)
{
        if (s->problem_set)
                return sbx_http_respond_json(api, connection, s->problem.status,
                                             SBX_PROBLEM_CONTENT_TYPE,
                                             sbx_problem_to_json(&s->problem), NULL, 0);
        return respond_errors(api, connection, s->errors);
}

static enum MHD_Result create_submission(struct sbx_api *api, struct MHD_Connection *connection,
                                         const struct sbx_tenant *tenant,
                                         const struct sbx_compat_request *request)
{
        struct field_set set;
        char why[256];
        if (!parse_fields(MHD_lookup_connection_value(connection, MHD_GET_ARGUMENT_KIND, "fields"),
                          &set, why, sizeof(why)))
                return bad_request(api, connection, why);
        enum MHD_Result answered = MHD_NO;
        _cleanup_(json_decrefp) json_t *body = sbx_compat_body(api, connection, request, &answered);
        if (body == NULL)
                return answered;
        bool base64 = query_true(connection, "base64_encoded");
        _cleanup_(submission_free) struct submission s;
        translate_submission(body, tenant, base64, &s);
        if (s.settings == NULL)
                return respond_submission_refusal(api, connection, &s);
        uint64_t retry_after_s = 1;
        struct sbx_error err = {0};
        if (enqueue(api, tenant, &s, &retry_after_s, &err) < 0)
                return sbx_http_respond_queue_refusal(api, connection, tenant, &err, retry_after_s,
                                                      s.settings->id);
        char token[TOKEN_CHARS + 1];
        token_of(s.settings->id, token);
        if (!query_true(connection, "wait"))
                return sbx_http_respond_json(api, connection, 201, JSON_CONTENT_TYPE,
                                             json_pack("{s:s}", "token", token), NULL, 0);
        /* As Judge0 1.14 does: queued like every other, waited for (and the drain waits for
         * this answer). */
        sbx_http_hold_in_flight(request->in_flight);
        sbx_async_wait(api->async, s.settings->id,
                       s.settings->limits.wall_ms + s.settings->compile_limits.wall_ms +
                               WAIT_QUEUE_SLACK_MS);
        json_t *answer = NULL;
        if (fetch_submission(api, tenant->name, s.settings->id, &set, base64, &answer) <= 0)
                return sbx_http_respond_store_failed(
                        api, connection, "the audit store failed to read the submission");
        return sbx_http_respond_json(api, connection, 201, JSON_CONTENT_TYPE, answer, NULL, 0);
}

static enum MHD_Result create_batch(struct sbx_api *api, struct MHD_Connection *connection,
                                    const struct sbx_tenant *tenant,
                                    const struct sbx_compat_request *request)
{
        enum MHD_Result answered = MHD_NO;
        _cleanup_(json_decrefp) json_t *body = sbx_compat_body(api, connection, request, &answered);
        if (body == NULL)
                return answered;
        const json_t *list = json_object_get(body, "submissions");
        if (!json_is_array(list) || json_array_size(list) == 0)
                return bad_request(api, connection,
                                   "there should be at least one submission in a batch");
        if (json_array_size(list) > JUDGE0_BATCH_MAX) {
                char why[128];
                snprintf(why, sizeof(why),
                         "number of submissions in a batch should be less than or equal to %d",
                         JUDGE0_BATCH_MAX);
                return bad_request(api, connection, why);
        }
        bool base64 = query_true(connection, "base64_encoded");
        _cleanup_(json_decrefp) json_t *answer = json_array();
        bool any_valid = false;
        size_t index;
        const json_t *item;
        json_array_foreach(list, index, item)
        {
                _cleanup_(submission_free) struct submission s;
                translate_submission(item, tenant, base64, &s);
                json_t *entry = NULL;
                if (s.settings == NULL) {
                        entry = s.errors != NULL
                                        ? json_incref(s.errors)
                                        : json_pack("{s:[s]}", "submission", s.problem.detail);
                } else {
                        uint64_t retry_after_s = 1;
                        struct sbx_error err = {0};
                        if (enqueue(api, tenant, &s, &retry_after_s, &err) < 0)
                                return sbx_http_respond_queue_refusal(api, connection, tenant, &err,
                                                                      retry_after_s,
                                                                      s.settings->id);
                        char token[TOKEN_CHARS + 1];
                        token_of(s.settings->id, token);
                        entry = json_pack("{s:s}", "token", token);
                        any_valid = true;
                }
                if (entry == NULL || json_array_append_new(answer, entry) < 0)
                        return sbx_http_respond_problem(api, connection, 500, "out of memory", NULL,
                                                        0, NULL, 0);
        }
        /* Judge0 answers the list either way: 201 when one was valid, else 422. */
        return sbx_http_respond_json(api, connection, any_valid ? 201 : 422, JSON_CONTENT_TYPE,
                                     json_incref(answer), NULL, 0);
}

static enum MHD_Result get_submission(struct sbx_api *api, struct MHD_Connection *connection,
                                      const struct sbx_tenant *tenant, const char *token)
{
        struct field_set set;
        char why[256];
        if (!parse_fields(MHD_lookup_connection_value(connection, MHD_GET_ARGUMENT_KIND, "fields"),
                          &set, why, sizeof(why)))
                return bad_request(api, connection, why);
        char id[SBX_EXECUTION_ID_CHARS + 1];
        json_t *answer = NULL;
        int found = id_of(token, id)
                            ? fetch_submission(api, tenant->name, id, &set,
                                               query_true(connection, "base64_encoded"), &answer)
                            : 0;
        if (found < 0)
                return sbx_http_respond_store_failed(api, connection, "the audit store failed");
        if (found == 0)
                return sbx_http_respond_problem(api, connection, 404, "Not Found", NULL, 0, NULL,
                                                0);
        return sbx_http_respond_json(api, connection, 200, JSON_CONTENT_TYPE, answer, NULL, 0);
}

static enum MHD_Result get_batch(struct sbx_api *api, struct MHD_Connection *connection,
                                 const struct sbx_tenant *tenant)
{
        struct field_set set;
        char why[256];
        if (!parse_fields(MHD_lookup_connection_value(connection, MHD_GET_ARGUMENT_KIND, "fields"),
                          &set, why, sizeof(why)))
                return bad_request(api, connection, why);
        const char *tokens =
                MHD_lookup_connection_value(connection, MHD_GET_ARGUMENT_KIND, "tokens");
        if (tokens == NULL || tokens[0] == '\0')
                return bad_request(api, connection,
                                   "there should be at least one submission in a batch");
        bool base64 = query_true(connection, "base64_encoded");
        _cleanup_(json_decrefp) json_t *list = json_array();
        size_t count = 0;
        for (const char *p = tokens;; p++) {
                size_t length = strcspn(p, ",");
                if (++count > JUDGE0_BATCH_MAX) {
                        snprintf(why, sizeof(why),
                                 "number of submissions in a batch should be less than or equal "
                                 "to %d",
                                 JUDGE0_BATCH_MAX);
                        return bad_request(api, connection, why);
                }
                char token[TOKEN_CHARS + 8], id[SBX_EXECUTION_ID_CHARS + 1];
                snprintf(token, sizeof(token), "%.*s", (int)(length < TOKEN_CHARS + 4 ? length : 0),
                         p);
                json_t *entry = NULL;
                int found = id_of(token, id)
                                    ? fetch_submission(api, tenant->name, id, &set, base64, &entry)
                                    : 0;
                if (found < 0)
                        return sbx_http_respond_store_failed(api, connection,
                                                             "the audit store failed");
                json_array_append_new(list, found > 0 ? entry : json_null());
                p += length;
                if (*p == '\0')
                        break;
        }
        return sbx_http_respond_json(api, connection, 200, JSON_CONTENT_TYPE,
                                     json_pack("{s:O}", "submissions", list), NULL, 0);
}

/* GET /languages (all: /languages/all, with is_archived). */
static json_t *languages_json(const struct sbx_tier *tier, bool all)
{
        json_t *list = json_array();
        for (size_t i = 0; list != NULL && i < SBX_ARRAY_SIZE(judge0_languages); i++) {
                if (!sbx_tier_allows_language(tier, judge0_languages[i].language))
                        continue;
                json_t *entry = language_json(&judge0_languages[i]);
                if (entry == NULL)
                        continue;
                if (all)
                        json_object_set_new(entry, "is_archived", json_false());
                json_array_append_new(list, entry);
        }
        return list;
}

/* GET /languages/{id}: Judge0's details, sandboxd's commands. */
static enum MHD_Result get_language(struct sbx_api *api, struct MHD_Connection *connection,
                                    const char *id_text)
{
        char *end;
        long long id = strtoll(id_text, &end, 10);
        const struct judge0_language *row =
                *end == '\0' && end != id_text ? language_by_id(id) : NULL;
        json_t *entry = row != NULL ? language_json(row) : NULL;
        if (entry == NULL)
                return sbx_http_respond_problem(api, connection, 404, "Not Found", NULL, 0, NULL,
                                                0);
        const struct sbx_language *language = sbx_language_find(row->language);
        char run[256];
        if (language->interpreter != NULL)
                snprintf(run, sizeof(run), "%s %s", language->interpreter, language->file_name);
        else
                snprintf(run, sizeof(run), "./%s", language->artifact);
        json_object_set_new(entry, "is_archived", json_false());
        json_object_set_new(entry, "source_file", json_string(language->file_name));
        json_object_set_new(entry, "compile_cmd",
                            language->compile != NULL ? json_string(language->compile)
                                                      : json_null());
        json_object_set_new(entry, "run_cmd", json_string(run));
        return sbx_http_respond_json(api, connection, 200, JSON_CONTENT_TYPE, entry, NULL, 0);
}

static json_t *statuses_json(void)
{
        json_t *list = json_array();
        for (int id = 1; list != NULL && id < (int)SBX_ARRAY_SIZE(status_descriptions); id++)
                json_array_append_new(list, json_pack("{s:i, s:s}", "id", id, "description",
                                                      status_descriptions[id]));
        return list;
}

/* ---- routing ---- */

#define SUBMISSIONS "/submissions"
#define LANGUAGES   "/languages"

bool sbx_judge0_route_matches(const char *url)
{
        return strcmp(url, SUBMISSIONS) == 0 || strncmp(url, SUBMISSIONS "/", 13) == 0 ||
               strcmp(url, LANGUAGES) == 0 || strncmp(url, LANGUAGES "/", 11) == 0 ||
               strcmp(url, "/statuses") == 0;
}

bool sbx_judge0_route_reads_body(const char *url, const char *method)
{
        return strcmp(method, MHD_HTTP_METHOD_POST) == 0 &&
               (strcmp(url, SUBMISSIONS) == 0 || strcmp(url, SUBMISSIONS "/batch") == 0);
}

static enum MHD_Result route(struct sbx_api *api, struct MHD_Connection *connection,
                             const char *url, const char *method,
                             const struct sbx_compat_request *request)
{
        bool read = strcmp(method, MHD_HTTP_METHOD_GET) == 0 ||
                    strcmp(method, MHD_HTTP_METHOD_HEAD) == 0;
        bool post = strcmp(method, MHD_HTTP_METHOD_POST) == 0;
        bool submissions = strcmp(url, SUBMISSIONS) == 0;
        bool batch = strcmp(url, SUBMISSIONS "/batch") == 0;
        const char *allow = submissions ? "POST" : batch ? "GET, HEAD, POST" : "GET, HEAD";
        if ((submissions && !post) || (batch && !post && !read) ||
            (!submissions && !batch && !read))
                return sbx_http_respond_method_not_allowed(api, connection, method, allow);
        enum MHD_Result answered = MHD_NO;
        const struct sbx_tenant *tenant =
                sbx_compat_authenticate(api, connection, request->tenants, SBX_COMPAT_JUDGE0,
                                        JUDGE0_TOKEN_HEADER, &answered);
        if (tenant == NULL)
                return answered;
        if (submissions)
                return create_submission(api, connection, tenant, request);
        if (batch)
                return post ? create_batch(api, connection, tenant, request)
                            : get_batch(api, connection, tenant);
        if (strncmp(url, SUBMISSIONS "/", 13) == 0 && strchr(url + 13, '/') == NULL)
                return get_submission(api, connection, tenant, url + 13);
        json_t *list = NULL;
        if (strcmp(url, "/statuses") == 0)
                list = statuses_json();
        else if (strcmp(url, LANGUAGES) == 0 || strcmp(url, LANGUAGES "/all") == 0)
                list = languages_json(tenant->tier, strcmp(url, LANGUAGES "/all") == 0);
        else if (strncmp(url, LANGUAGES "/", 11) == 0 && strchr(url + 11, '/') == NULL)
                return get_language(api, connection, url + 11);
        else
                return sbx_http_respond_problem(api, connection, 404, "no such resource", NULL, 0,
                                                NULL, 0);
        if (list == NULL)
                return sbx_http_respond_problem(api, connection, 500, "out of memory", NULL, 0,
                                                NULL, 0);
        return sbx_http_respond_json(api, connection, 200, JSON_CONTENT_TYPE, list, NULL, 0);
}

enum MHD_Result sbx_judge0_route(struct sbx_api *api, struct MHD_Connection *connection,
                                 const char *url, const char *method,
                                 const struct sbx_compat_request *request, bool *handled)
{
        *handled = sbx_judge0_route_matches(url);
        if (!*handled)
                return MHD_NO;
        sbx_http_set_problem_echo(JUDGE0_ERROR_MEMBER);
        enum MHD_Result answered = route(api, connection, url, method, request);
        sbx_http_set_problem_echo(NULL);
        return answered;
}
