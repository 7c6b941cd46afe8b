/* Unit tests for service/audit.h against a real SQLite file in a temporary directory: records
 * written in two steps (begin: running, with null outcome; finish: the outcome, once; forget;
 * interrupt what is still running), fetch (JSON columns embedded as values, NULLs as null, output
 * hashes), a record from a result (canceled), tenant isolation, persistence across reopen,
 * migration from version 1 and user_version, refusal of a newer schema, of a symlink and of a
 * non-database, file modes, concurrent writers, and the queue of asynchronous executions
 * (audit_queue.h). Each test gets its own directory and removes
 * it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <fcntl.h>
#include <pthread.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include "service/audit.h"
#include "service/audit_queue.h"

/* SHA-256 test vectors: FIPS 180-2 "abc" and the empty message. */
#define SHA256_EMPTY "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
#define SHA256_ABC   "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"

struct fixture {
        char directory[64];
        char path[128];
};

static int setup(void **state)
{
        struct fixture *f = calloc(1, sizeof(*f));
        if (f == NULL)
                return -1;
        snprintf(f->directory, sizeof(f->directory), "/tmp/sandboxd-test-audit-XXXXXX");
        if (mkdtemp(f->directory) == NULL) {
                free(f);
                return -1;
        }
        snprintf(f->path, sizeof(f->path), "%s/%s", f->directory, SBX_AUDIT_FILE_NAME);
        *state = f;
        return 0;
}

static int teardown(void **state)
{
        struct fixture *f = *state;
        static const char *const suffixes[] = {"", "-wal", "-shm", "-journal"};
        char path[160];
        for (size_t i = 0; i < sizeof(suffixes) / sizeof(suffixes[0]); i++) {
                snprintf(path, sizeof(path), "%s%s", f->path, suffixes[i]);
                unlink(path);
        }
        int rc = rmdir(f->directory);
        free(f);
        return rc;
}

static struct sbx_audit *open_store(const struct fixture *f)
{
        struct sbx_error err = {0};
        struct sbx_audit *audit = sbx_audit_open(f->directory, &err);
        if (audit == NULL)
                fail_msg("open: %s", err.message);
        return audit;
}

/* A complete record; the JSON values are owned by the caller of make_record(). */
struct sample {
        struct sbx_audit_record record;
        json_t *requested, *effective, *clamped, *usage, *evidence, *timing;
};

static void make_record(struct sample *s, const char *id, const char *tenant)
{
        memset(s, 0, sizeof(*s));
        s->requested = json_pack("{s:s, s:s, s:{s:i}}", "language", "python", "code", "print(1)",
                                 "limits", "memory_mb", 4096);
        s->effective = json_pack("{s:i, s:i}", "memory_mb", 256, "wall_ms", 10000);
        s->clamped = json_pack("[s]", "memory_mb");
        s->usage = json_pack("{s:i, s:i}", "cpu_ms", 12, "wall_ms", 15);
        s->evidence = json_pack("{s:i, s:b}", "oom_kills", 0, "wall_timeout", 0);
        s->timing = json_pack("{s:i, s:i}", "setup_us", 1200, "total_us", 13000);
        s->record = (struct sbx_audit_record){
                .id = id,
                .tenant = tenant,
                .created_at_ms = 1700000000000,
                .finished_at_ms = 1700000000015,
                .language = "python",
                .status = "ok",
                .exit_code = 0,
                .signal = 0,
                .requested = s->requested,
                .effective = s->effective,
                .clamped = s->clamped,
                .usage = s->usage,
                .evidence = s->evidence,
                .timing = s->timing,
                .stdout_data = "abc",
                .stdout_size = 3,
                .stderr_data = NULL,
                .stderr_size = 0,
        };
}

static void free_sample(struct sample *s)
{
        json_decref(s->requested);
        json_decref(s->effective);
        json_decref(s->clamped);
        json_decref(s->usage);
        json_decref(s->evidence);
        json_decref(s->timing);
}

/* Both steps: begin, then finish (which must complete the running record). */
static void record_ok(struct sbx_audit *audit, const struct sbx_audit_record *record)
{
        struct sbx_error err = {0};
        if (sbx_audit_begin(audit, record, &err) != 0)
                fail_msg("begin: %s", err.message);
        int rc = sbx_audit_finish(audit, record, &err);
        if (rc != 1)
                fail_msg("finish: %d %s", rc, err.message);
}

static json_t *fetch_found(struct sbx_audit *audit, const char *tenant, const char *id)
{
        struct sbx_error err = {0};
        json_t *row = NULL;
        int rc = sbx_audit_fetch(audit, tenant, id, &row, &err);
        if (rc != 1)
                fail_msg("fetch %s/%s: rc %d %s", tenant, id, rc, err.message);
        return row;
}

static int64_t user_version(const char *path)
{
        sqlite3 *db = NULL;
        assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL), SQLITE_OK);
        sqlite3_stmt *statement = NULL;
        assert_int_equal(sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &statement, NULL),
                         SQLITE_OK);
        assert_int_equal(sqlite3_step(statement), SQLITE_ROW);
        int64_t version = sqlite3_column_int64(statement, 0);
        sqlite3_finalize(statement);
        sqlite3_close(db);
        return version;
}

static void run_sql(const char *path, const char *sql)
{
        sqlite3 *db = NULL;
        assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL), SQLITE_OK);
        assert_int_equal(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
        sqlite3_close(db);
}

static void test_record_and_fetch(void **state)
{
        struct fixture *f = *state;
        struct sbx_audit *audit = open_store(f);
        struct sample s;
        make_record(&s, "0123456789abcdef0123456789abcdef", "acme");
        record_ok(audit, &s.record);

        json_t *row = fetch_found(audit, "acme", "0123456789abcdef0123456789abcdef");
        assert_string_equal(json_string_value(json_object_get(row, "id")),
                            "0123456789abcdef0123456789abcdef");
        assert_string_equal(json_string_value(json_object_get(row, "tenant")), "acme");
        assert_int_equal(json_integer_value(json_object_get(row, "created_at")), 1700000000000);
        assert_int_equal(json_integer_value(json_object_get(row, "finished_at")), 1700000000015);
        assert_string_equal(json_string_value(json_object_get(row, "language")), "python");
        assert_string_equal(json_string_value(json_object_get(row, "status")), "ok");
        assert_true(json_is_integer(json_object_get(row, "exit_code")));
        assert_int_equal(json_integer_value(json_object_get(row, "exit_code")), 0);
        assert_true(json_is_null(json_object_get(row, "signal")));
        assert_true(json_is_null(json_object_get(row, "error")));
        /* JSON columns come back as values equal to what went in, not as strings. */
        assert_true(json_equal(json_object_get(row, "requested"), s.requested));
        assert_true(json_equal(json_object_get(row, "effective"), s.effective));
        assert_true(json_is_array(json_object_get(row, "clamped")));
        assert_true(json_equal(json_object_get(row, "clamped"), s.clamped));
        assert_true(json_equal(json_object_get(row, "usage"), s.usage));
        assert_true(json_equal(json_object_get(row, "evidence"), s.evidence));
        assert_true(json_equal(json_object_get(row, "timing"), s.timing));
        assert_int_equal(json_integer_value(json_object_get(row, "stdout_bytes")), 3);
        assert_int_equal(json_integer_value(json_object_get(row, "stderr_bytes")), 0);
        assert_string_equal(json_string_value(json_object_get(row, "stdout_sha256")), SHA256_ABC);
        assert_string_equal(json_string_value(json_object_get(row, "stderr_sha256")), SHA256_EMPTY);
        /* Output is not kept unless asked for. */
        assert_true(json_is_null(json_object_get(row, "stdout")));
        assert_true(json_is_null(json_object_get(row, "stderr")));
        /* No compile stage: null. */
        assert_true(json_is_null(json_object_get(row, "compile")));
        assert_int_equal(json_object_size(row), 22);
        json_decref(row);
        free_sample(&s);
        sbx_audit_close(audit);
}

static void test_other_tenant_and_unknown_id_are_not_found(void **state)
{
        struct fixture *f = *state;
        struct sbx_audit *audit = open_store(f);
        struct sample s;
        make_record(&s, "11111111111111111111111111111111", "acme");
        record_ok(audit, &s.record);
        struct sbx_error err = {0};
        json_t *row = json_null(); /* fetch must reset it to NULL */
        assert_int_equal(
                sbx_audit_fetch(audit, "beta", "11111111111111111111111111111111", &row, &err), 0);
        assert_null(row);
        assert_int_equal(
                sbx_audit_fetch(audit, "acme", "22222222222222222222222222222222", &row, &err), 0);
        assert_null(row);
        /* SQL in an id is just an id that does not exist. */
        assert_int_equal(sbx_audit_fetch(audit, "acme", "' OR '1'='1", &row, &err), 0);
        assert_int_equal(sbx_audit_fetch(audit, "acme' OR '1'='1", "x", &row, &err), 0);
        assert_int_equal(sbx_audit_fetch(audit, NULL, "x", &row, &err), 0);
        free_sample(&s);
        sbx_audit_close(audit);
}

/* A tenant's recent executions: newest first, bounded, paged by created_at, its own only, without
 * their output. */
static void test_recent_executions(void **state)
{
        struct fixture *f = *state;
        struct sbx_audit *audit = open_store(f);
        static const char *const ids[] = {"a0000000000000000000000000000000",
                                          "a1111111111111111111111111111111",
                                          "a2222222222222222222222222222222"};
        struct sample s[4];
        for (size_t i = 0; i < 3; i++) {
                make_record(&s[i], ids[i], "acme");
                s[i].record.created_at_ms += (int64_t)i;
                record_ok(audit, &s[i].record);
        }
        make_record(&s[3], "b0000000000000000000000000000000", "beta");
        s[3].record.created_at_ms += 10;
        record_ok(audit, &s[3].record);
        struct sbx_error err = {0};
        json_t *list = NULL;
        assert_int_equal(sbx_audit_recent(audit, "acme", INT64_MAX, 2, &list, &err), 0);
        assert_int_equal(json_array_size(list), 2);
        assert_string_equal(json_string_value(json_object_get(json_array_get(list, 0), "id")),
                            ids[2]);
        assert_string_equal(json_string_value(json_object_get(json_array_get(list, 1), "id")),
                            ids[1]);
        assert_null(json_object_get(json_array_get(list, 0), "stdout"));
        assert_string_equal(json_string_value(json_object_get(json_array_get(list, 0), "status")),
                            "ok");
        int64_t before = json_integer_value(json_object_get(json_array_get(list, 1), "created_at"));
        json_decref(list);
        assert_int_equal(sbx_audit_recent(audit, "acme", before, 10, &list, &err), 0);
        assert_int_equal(json_array_size(list), 1);
        assert_string_equal(json_string_value(json_object_get(json_array_get(list, 0), "id")),
                            ids[0]);
        json_decref(list);
        assert_int_equal(sbx_audit_recent(audit, "nobody", INT64_MAX, 10, &list, &err), 0);
        assert_int_equal(json_array_size(list), 0);
        json_decref(list);
        for (size_t i = 0; i < 4; i++)
                free_sample(&s[i]);
        sbx_audit_close(audit);
}

static void test_nulls_errors_and_stored_output(void **state)
{
        struct fixture *f = *state;
        struct sbx_audit *audit = open_store(f);
        struct sbx_audit_record record = {
                .id = "33333333333333333333333333333333",
                .tenant = "acme",
                .language = "bash",
                .status = "internal_error",
                .exit_code = -1,
                .signal = 0,
                .error = "setup step 'pivot_root': forced",
                .stdout_data = "ok\xff\xfe\n",
                .stdout_size = 5,
                .stderr_data = NULL,
                .stderr_size = 0,
                .store_output = true,
        };
        record_ok(audit, &record);
        json_t *row = fetch_found(audit, "acme", record.id);
        assert_true(json_is_null(json_object_get(row, "exit_code")));
        assert_true(json_is_null(json_object_get(row, "requested")));
        assert_true(json_is_null(json_object_get(row, "timing")));
        assert_string_equal(json_string_value(json_object_get(row, "error")),
                            "setup step 'pivot_root': forced");
        /* Invalid UTF-8 in stored output reads back as U+FFFD per byte; empty stays "". */
        assert_string_equal(json_string_value(json_object_get(row, "stdout")),
                            "ok\xEF\xBF\xBD\xEF\xBF\xBD\n");
        assert_true(json_is_string(json_object_get(row, "stderr")));
        assert_string_equal(json_string_value(json_object_get(row, "stderr")), "");
        assert_int_equal(json_integer_value(json_object_get(row, "stdout_bytes")), 5);
        json_decref(row);

        /* A signal is stored, exit code NULL. */
        record.id = "44444444444444444444444444444444";
        record.status = "signaled";
        record.error = NULL;
        record.signal = 9;
        record.store_output = false;
        record_ok(audit, &record);
        row = fetch_found(audit, "acme", record.id);
        assert_int_equal(json_integer_value(json_object_get(row, "signal")), 9);
        assert_true(json_is_null(json_object_get(row, "stdout")));
        json_decref(row);
        sbx_audit_close(audit);
}

static void test_bad_records_are_refused(void **state)
{
        struct fixture *f = *state;
        struct sbx_audit *audit = open_store(f);
        struct sample s;
        make_record(&s, "55555555555555555555555555555555", "acme");
        record_ok(audit, &s.record);
        struct sbx_error err = {0};
        /* The id is the primary key. */
        assert_int_equal(sbx_audit_begin(audit, &s.record, &err), -1);
        assert_non_null(strstr(err.message, "55555555555555555555555555555555"));
        s.record.id = "66666666666666666666666666666666";
        s.record.tenant = NULL;
        assert_int_equal(sbx_audit_begin(audit, &s.record, &err), -1);
        /* An outcome needs a status. */
        s.record.status = NULL;
        assert_int_equal(sbx_audit_finish(audit, &s.record, &err), -1);
        s.record.status = "ok";
        /* The store is still usable after failures (statements were reset). */
        s.record.tenant = "acme";
        record_ok(audit, &s.record);
        json_decref(fetch_found(audit, "acme", "66666666666666666666666666666666"));
        free_sample(&s);
        sbx_audit_close(audit);
}

static void test_reopen_keeps_data_and_migration_is_idempotent(void **state)
{
        struct fixture *f = *state;
        struct sbx_audit *audit = open_store(f);
        struct sample s;
        make_record(&s, "77777777777777777777777777777777", "acme");
        record_ok(audit, &s.record);
        sbx_audit_close(audit);
        assert_int_equal(user_version(f->path), SBX_AUDIT_SCHEMA_VERSION);

        for (int i = 0; i < 3; i++) {
                audit = open_store(f);
                json_t *row = fetch_found(audit, "acme", "77777777777777777777777777777777");
                assert_true(json_equal(json_object_get(row, "requested"), s.requested));
                json_decref(row);
                sbx_audit_close(audit);
                assert_int_equal(user_version(f->path), SBX_AUDIT_SCHEMA_VERSION);
        }
        /* Migrations ran once: one table, its two indexes, and the journal is WAL. */
        sqlite3 *db = NULL;
        assert_int_equal(sqlite3_open_v2(f->path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
        sqlite3_stmt *statement = NULL;
        assert_int_equal(sqlite3_prepare_v2(db,
                                            "SELECT count(*) FROM sqlite_schema WHERE name IN "
                                            "('executions', 'executions_by_tenant', "
                                            "'executions_running')",
                                            -1, &statement, NULL),
                         SQLITE_OK);
        assert_int_equal(sqlite3_step(statement), SQLITE_ROW);
        assert_int_equal(sqlite3_column_int(statement, 0), 3);
        sqlite3_finalize(statement);
        /* Nothing else: the table's primary key index is the one more (no executions_v2), the
         * sessions table (version 3) with its primary key and tenant index, and the queue
         * (version 5) with its primary key, the queued rows' index and its two triggers, and
         * the batches (version 6): two tables, their primary keys, the cases' unique execution
         * and the batches' tenant index, and the deliveries (version 7): a table, its primary
         * key, its unique target and two indexes. */
        assert_int_equal(
                sqlite3_prepare_v2(db, "SELECT count(*) FROM sqlite_schema", -1, &statement, NULL),
                SQLITE_OK);
        assert_int_equal(sqlite3_step(statement), SQLITE_ROW);
        assert_int_equal(sqlite3_column_int(statement, 0), 23);
        sqlite3_finalize(statement);
        assert_int_equal(sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &statement, NULL),
                         SQLITE_OK);
        assert_int_equal(sqlite3_step(statement), SQLITE_ROW);
        assert_string_equal((const char *)sqlite3_column_text(statement, 0), "wal");
        sqlite3_finalize(statement);
        sqlite3_close(db);
        free_sample(&s);
}

static const char *string_of(json_t *row, const char *key)
{
        return json_string_value(json_object_get(row, key));
}

/* begin: a running record with the request and no outcome; finish completes it once; a second
 * outcome changes nothing. */
static void test_two_steps(void **state)
{
        struct fixture *f = *state;
        struct sbx_audit *audit = open_store(f);
        struct sample s;
        make_record(&s, "88888888888888888888888888888888", "acme");
        struct sbx_error err = {0};
        assert_int_equal(sbx_audit_begin(audit, &s.record, &err), 0);
        json_t *row = fetch_found(audit, "acme", s.record.id);
        assert_string_equal(string_of(row, "status"), SBX_AUDIT_STATUS_RUNNING);
        assert_true(json_equal(json_object_get(row, "requested"), s.requested));
        assert_true(json_equal(json_object_get(row, "effective"), s.effective));
        assert_true(json_equal(json_object_get(row, "clamped"), s.clamped));
        static const char *const outcome[] = {"finished_at",  "exit_code", "usage",
                                              "evidence",     "timing",    "stdout_bytes",
                                              "stdout_sha256"};
        for (size_t i = 0; i < sizeof(outcome) / sizeof(outcome[0]); i++)
                if (!json_is_null(json_object_get(row, outcome[i])))
                        fail_msg("a running record has %s", outcome[i]);
        json_decref(row);

        assert_int_equal(sbx_audit_finish(audit, &s.record, &err), 1);
        row = fetch_found(audit, "acme", s.record.id);
        assert_string_equal(string_of(row, "status"), "ok");
        assert_int_equal(json_integer_value(json_object_get(row, "finished_at")), 1700000000015);
        assert_string_equal(string_of(row, "stdout_sha256"), SHA256_ABC);
        json_decref(row);

        /* The first outcome stands; a finished record cannot be forgotten. */
        s.record.status = "timeout";
        assert_int_equal(sbx_audit_finish(audit, &s.record, &err), 0);
        assert_int_equal(sbx_audit_forget(audit, s.record.id, &err), 0);
        row = fetch_found(audit, "acme", s.record.id);
        assert_string_equal(string_of(row, "status"), "ok");
        json_decref(row);
        /* Finishing an id never begun changes nothing either. */
        s.record.id = "99999999999999999999999999999999";
        assert_int_equal(sbx_audit_finish(audit, &s.record, &err), 0);
        free_sample(&s);
        sbx_audit_close(audit);
}

/* A refused execution's record goes; what still runs at start becomes internal_error. */
static void test_forget_and_interrupt(void **state)
{
        struct fixture *f = *state;
        struct sbx_audit *audit = open_store(f);
        struct sample s;
        make_record(&s, "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "acme");
        struct sbx_error err = {0};
        assert_int_equal(sbx_audit_begin(audit, &s.record, &err), 0);
        assert_int_equal(sbx_audit_forget(audit, s.record.id, &err), 1);
        json_t *row = NULL;
        assert_int_equal(sbx_audit_fetch(audit, "acme", s.record.id, &row, &err), 0);
        assert_int_equal(sbx_audit_forget(audit, s.record.id, &err), 0);

        static const char *const ids[] = {"bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb",
                                          "cccccccccccccccccccccccccccccccc",
                                          "dddddddddddddddddddddddddddddddd"};
        for (size_t i = 0; i < 3; i++) {
                s.record.id = ids[i];
                assert_int_equal(sbx_audit_begin(audit, &s.record, &err), 0);
        }
        s.record.id = ids[0];
        assert_int_equal(sbx_audit_finish(audit, &s.record, &err), 1);
        uint64_t count = 0;
        assert_int_equal(sbx_audit_interrupt_running(audit, "interrupted: test", 1700000009999,
                                                     &count, &err),
                         0);
        assert_int_equal(count, 2);
        row = fetch_found(audit, "acme", ids[0]);
        assert_string_equal(string_of(row, "status"), "ok");
        json_decref(row);
        for (size_t i = 1; i < 3; i++) {
                row = fetch_found(audit, "acme", ids[i]);
                assert_string_equal(string_of(row, "status"), "internal_error");
                assert_string_equal(string_of(row, "error"), "interrupted: test");
                assert_int_equal(json_integer_value(json_object_get(row, "finished_at")),
                                 1700000009999);
                json_decref(row);
        }
        assert_int_equal(sbx_audit_interrupt_running(audit, "again", 1, &count, &err), 0);
        assert_int_equal(count, 0);
        free_sample(&s);
        sbx_audit_close(audit);
}

/* The outcome of a struct sbx_result: a canceled execution keeps its usage and says why. */
static void test_finish_from_result(void **state)
{
        struct fixture *f = *state;
        struct sbx_audit *audit = open_store(f);
        struct sample s;
        make_record(&s, "eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee", "acme");
        struct sbx_error err = {0};
        assert_int_equal(sbx_audit_begin(audit, &s.record, &err), 0);
        struct sbx_result result = {
                .status = SBX_STATUS_CANCELED,
                .exit_code = -1,
                .run = {.exited = true, .exit_code = 3, .wall_us = 2500000},
                .evidence = {.cpu_usage_us = 7000},
                .limits = {.wall_ms = 5000, .memory_bytes = 64 << 20},
        };
        snprintf(result.id, sizeof(result.id), "%s", s.record.id);
        snprintf(result.error, sizeof(result.error), "canceled before the program ended");
        assert_int_equal(sbx_audit_finish_result(audit, &result, NULL, 1700000001000, false, &err),
                         1);
        json_t *row = fetch_found(audit, "acme", s.record.id);
        assert_string_equal(string_of(row, "status"), "canceled");
        assert_string_equal(string_of(row, "error"), "canceled before the program ended");
        /* Canceled: no exit code is reported, even if the program had exited. */
        assert_true(json_is_null(json_object_get(row, "exit_code")));
        assert_int_equal(
                json_integer_value(json_object_get(json_object_get(row, "usage"), "cpu_ms")), 7);
        assert_int_equal(
                json_integer_value(json_object_get(json_object_get(row, "effective"), "memory_mb")),
                64);
        json_decref(row);
        free_sample(&s);
        sbx_audit_close(audit);
}

/* A version-1 store (every column NOT NULL, no running rows) keeps its rows through migration
 * 2, and takes running rows afterwards. */
static void test_migration_from_version_1(void **state)
{
        struct fixture *f = *state;
        int fd = open(f->path, O_WRONLY | O_CREAT | O_EXCL, 0600);
        assert_true(fd >= 0);
        close(fd);
        run_sql(f->path,
                "CREATE TABLE executions (id TEXT PRIMARY KEY NOT NULL, tenant TEXT NOT NULL,"
                " created_at INTEGER NOT NULL, finished_at INTEGER NOT NULL, language TEXT NOT "
                "NULL,"
                " status TEXT NOT NULL, exit_code INTEGER, signal INTEGER, error TEXT,"
                " requested TEXT, effective TEXT, clamped TEXT, usage TEXT, evidence TEXT,"
                " timing TEXT, stdout_bytes INTEGER NOT NULL, stderr_bytes INTEGER NOT NULL,"
                " stdout_sha256 TEXT NOT NULL, stderr_sha256 TEXT NOT NULL, stdout BLOB,"
                " stderr BLOB) STRICT;"
                "CREATE INDEX executions_by_tenant ON executions (tenant, created_at);"
                "INSERT INTO executions VALUES ('ffffffffffffffffffffffffffffffff', 'acme', 1, 2,"
                " 'python', 'ok', 0, NULL, NULL, '{}', '{}', '[]', '{}', '{}', '{}', 3, 0, 'x',"
                " 'y', NULL, NULL);"
                "PRAGMA user_version = 1;");
        struct sbx_audit *audit = open_store(f);
        assert_int_equal(user_version(f->path), SBX_AUDIT_SCHEMA_VERSION);
        json_t *row = fetch_found(audit, "acme", "ffffffffffffffffffffffffffffffff");
        assert_string_equal(string_of(row, "status"), "ok");
        assert_int_equal(json_integer_value(json_object_get(row, "stdout_bytes")), 3);
        json_decref(row);
        struct sample s;
        make_record(&s, "12121212121212121212121212121212", "acme");
        struct sbx_error err = {0};
        assert_int_equal(sbx_audit_begin(audit, &s.record, &err), 0);
        free_sample(&s);
        sbx_audit_close(audit);
}

static void test_newer_schema_is_refused(void **state)
{
        struct fixture *f = *state;
        sbx_audit_close(open_store(f));
        run_sql(f->path, "PRAGMA user_version = 99");
        struct sbx_error err = {0};
        assert_null(sbx_audit_open(f->directory, &err));
        assert_non_null(strstr(err.message, "schema version 99"));
        /* Refusing changed nothing. */
        assert_int_equal(user_version(f->path), 99);
}

static void test_failed_migration_changes_nothing(void **state)
{
        struct fixture *f = *state;
        /* A version-0 database where step 1 cannot run (its table name is taken): the whole
         * migration rolls back, so no half-migrated schema is left behind. */
        int fd = open(f->path, O_WRONLY | O_CREAT | O_EXCL, 0600);
        assert_true(fd >= 0);
        close(fd);
        run_sql(f->path, "CREATE TABLE executions (something TEXT)");
        struct sbx_error err = {0};
        assert_null(sbx_audit_open(f->directory, &err));
        assert_non_null(strstr(err.message, "migration to version 1"));
        assert_int_equal(user_version(f->path), 0);
        sqlite3 *db = NULL;
        assert_int_equal(sqlite3_open_v2(f->path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
        sqlite3_stmt *statement = NULL;
        assert_int_equal(sqlite3_prepare_v2(db,
                                            "SELECT count(*) FROM sqlite_schema WHERE name = "
                                            "'executions_by_tenant'",
                                            -1, &statement, NULL),
                         SQLITE_OK);
        assert_int_equal(sqlite3_step(statement), SQLITE_ROW);
        assert_int_equal(sqlite3_column_int(statement, 0), 0);
        sqlite3_finalize(statement);
        sqlite3_close(db);
}

static void test_file_modes(void **state)
{
        struct fixture *f = *state;
        struct sbx_audit *audit = open_store(f);
        struct stat st;
        static const char *const suffixes[] = {"", "-wal", "-shm"};
        char path[160];
        for (size_t i = 0; i < sizeof(suffixes) / sizeof(suffixes[0]); i++) {
                snprintf(path, sizeof(path), "%s%s", f->path, suffixes[i]);
                assert_int_equal(stat(path, &st), 0);
                assert_int_equal(st.st_mode & 07777, 0600);
        }
        sbx_audit_close(audit);
        /* A file someone made readable is narrowed again at open. */
        assert_int_equal(chmod(f->path, 0644), 0);
        sbx_audit_close(open_store(f));
        assert_int_equal(stat(f->path, &st), 0);
        assert_int_equal(st.st_mode & 07777, 0600);
}

static void test_unusable_files_are_refused(void **state)
{
        struct fixture *f = *state;
        struct sbx_error err = {0};
        /* A symlink planted where the database goes is not followed. */
        assert_int_equal(symlink("/etc/passwd", f->path), 0);
        assert_null(sbx_audit_open(f->directory, &err));
        assert_non_null(strstr(err.message, SBX_AUDIT_FILE_NAME));
        assert_int_equal(unlink(f->path), 0);
        /* Neither is a file that is not a database. */
        int fd = open(f->path, O_WRONLY | O_CREAT | O_EXCL, 0600);
        assert_true(fd >= 0);
        assert_int_equal(write(fd, "not a database, just text that is long enough......", 51), 51);
        close(fd);
        assert_null(sbx_audit_open(f->directory, &err));
        assert_int_equal(unlink(f->path), 0);
        /* Nor a directory that does not exist. */
        char missing[128];
        snprintf(missing, sizeof(missing), "%s/missing", f->directory);
        assert_null(sbx_audit_open(missing, &err));
}

static void test_sha256_hex(void **state)
{
        char hex[SBX_AUDIT_SHA256_HEX_SIZE];
        struct sbx_error err = {0};
        assert_int_equal(sbx_audit_sha256_hex("abc", 3, hex, &err), 0);
        assert_string_equal(hex, SHA256_ABC);
        assert_int_equal(sbx_audit_sha256_hex(NULL, 0, hex, &err), 0);
        assert_string_equal(hex, SHA256_EMPTY);
        assert_int_equal(sbx_audit_sha256_hex("", 0, hex, &err), 0);
        assert_string_equal(hex, SHA256_EMPTY);
}

#define WRITERS            4
#define RECORDS_PER_WRITER 50

struct writer {
        struct sbx_audit *audit;
        int number;
        int failures;
};

static void *write_records(void *arg)
{
        struct writer *w = arg;
        for (int i = 0; i < RECORDS_PER_WRITER; i++) {
                char id[33];
                snprintf(id, sizeof(id), "%016x%016x", (unsigned)w->number, (unsigned)i);
                struct sbx_audit_record record = {.id = id,
                                                  .tenant = "acme",
                                                  .language = "sh",
                                                  .status = "ok",
                                                  .stdout_data = id,
                                                  .stdout_size = 32};
                struct sbx_error err;
                json_t *row = NULL;
                if (sbx_audit_begin(w->audit, &record, &err) != 0 ||
                    sbx_audit_finish(w->audit, &record, &err) != 1 ||
                    sbx_audit_fetch(w->audit, "acme", id, &row, &err) != 1)
                        w->failures++;
                json_decref(row);
        }
        return NULL;
}

static void test_concurrent_writers(void **state)
{
        struct fixture *f = *state;
        struct sbx_audit *audit = open_store(f);
        pthread_t threads[WRITERS];
        struct writer writers[WRITERS];
        for (int i = 0; i < WRITERS; i++) {
                writers[i] = (struct writer){.audit = audit, .number = i};
                assert_int_equal(pthread_create(&threads[i], NULL, write_records, &writers[i]), 0);
        }
        for (int i = 0; i < WRITERS; i++) {
                pthread_join(threads[i], NULL);
                assert_int_equal(writers[i].failures, 0);
        }
        sbx_audit_close(audit);
}

/* A session's row: begun, ended once (the first end stands), and the ones left open ended. */
static void test_session_rows(void **state)
{
        struct fixture *f = *state;
        struct sbx_error err = {0};
        struct sbx_audit *audit = open_store(f);
        json_t *limits = json_pack("{s:i}", "memory_mb", 256);
        json_t *clamped = json_array();
        const struct sbx_audit_session opened = {.id = "a1",
                                                 .tenant = "acme",
                                                 .language = "python",
                                                 .created_at_ms = 1000,
                                                 .effective = limits,
                                                 .clamped = clamped};
        assert_int_equal(sbx_audit_session_begin(audit, &opened, &err), 0);
        const struct sbx_audit_session second = {
                .id = "b2", .tenant = "acme", .language = "bash", .created_at_ms = 1001};
        assert_int_equal(sbx_audit_session_begin(audit, &second, &err), 0);
        assert_int_equal(sbx_audit_session_begin(audit, &opened, &err), -1); /* same id */
        json_t *evidence = json_pack("{s:i}", "oom_kills", 1);
        const struct sbx_audit_session ended = {
                .id = "a1", .ended_at_ms = 2000, .end_reason = "deleted", .evidence = evidence};
        assert_int_equal(sbx_audit_session_end(audit, &ended, &err), 1);
        const struct sbx_audit_session again = {
                .id = "a1", .ended_at_ms = 3000, .end_reason = "idle_timeout"};
        assert_int_equal(sbx_audit_session_end(audit, &again, &err), 0);
        uint64_t count = 0;
        assert_int_equal(sbx_audit_end_open_sessions(audit, "interrupted", 4000, &count, &err), 0);
        assert_int_equal(count, 1);
        sqlite3 *db = NULL;
        assert_int_equal(sqlite3_open_v2(f->path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
        sqlite3_stmt *statement = NULL;
        assert_int_equal(sqlite3_prepare_v2(db,
                                            "SELECT id, end_reason, ended_at, evidence FROM "
                                            "sessions ORDER BY id",
                                            -1, &statement, NULL),
                         SQLITE_OK);
        assert_int_equal(sqlite3_step(statement), SQLITE_ROW);
        assert_string_equal((const char *)sqlite3_column_text(statement, 1), "deleted");
        assert_int_equal(sqlite3_column_int64(statement, 2), 2000);
        assert_string_equal((const char *)sqlite3_column_text(statement, 3), "{\"oom_kills\":1}");
        assert_int_equal(sqlite3_step(statement), SQLITE_ROW);
        assert_string_equal((const char *)sqlite3_column_text(statement, 1), "interrupted");
        sqlite3_finalize(statement);
        sqlite3_close(db);
        sbx_audit_close(audit);
        json_decref(limits);
        json_decref(clamped);
        json_decref(evidence);
}

/* Collects the queued ids in order (sbx_audit_queue_each). */
struct queued_ids {
        char ids[8][SBX_EXECUTION_ID_CHARS + 1];
        uint64_t wall_ms[8];
        size_t n;
};

static int collect_queued(void *ctx, const struct sbx_audit_queued *item)
{
        struct queued_ids *seen = ctx;
        if (seen->n == 8)
                return -1;
        snprintf(seen->ids[seen->n], sizeof(seen->ids[0]), "%s", item->id);
        seen->wall_ms[seen->n++] = item->wall_ms;
        return 0;
}

static const char *record_status(struct sbx_audit *audit, const char *id, char *out)
{
        json_t *row = fetch_found(audit, "acme", id);
        snprintf(out, 32, "%s", json_string_value(json_object_get(row, "status")));
        json_decref(row);
        return out;
}

static int queue_rows(const char *path)
{
        sqlite3 *db = NULL;
        sqlite3_stmt *statement = NULL;
        assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
        assert_int_equal(sqlite3_prepare_v2(db, "SELECT count(*) FROM queue", -1, &statement, NULL),
                         SQLITE_OK);
        assert_int_equal(sqlite3_step(statement), SQLITE_ROW);
        int n = sqlite3_column_int(statement, 0);
        sqlite3_finalize(statement);
        sqlite3_close(db);
        return n;
}

/* Queued, taken with its request, back to queued, run, canceled; the queue's rows go with the
 * outcome; after a "crash", a retrying running one is queued again and the others are the
 * interrupt's. */
static void test_the_queue_of_asynchronous_executions(void **state)
{
        struct fixture *f = *state;
        struct sbx_audit *audit = open_store(f);
        static const char *const ids[] = {"a0000000000000000000000000000000",
                                          "b0000000000000000000000000000000",
                                          "c0000000000000000000000000000000"};
        struct sample s[3];
        struct sbx_error err = {0};
        for (size_t i = 0; i < 3; i++) {
                make_record(&s[i], ids[i], "acme");
                s[i].record.created_at_ms += (int64_t)i;
                char request[64];
                snprintf(request, sizeof(request), "{\"code\": \"print(%zu)\"}", i);
                const struct sbx_audit_enqueued item = {
                        .record = &s[i].record,
                        .request = request,
                        .retry = i == 1,
                        .wall_ms = 1000 * (i + 1),
                };
                assert_int_equal(sbx_audit_enqueue(audit, NULL, &item, 1, &err), 0);
        }
        char status[32];
        assert_string_equal(record_status(audit, ids[0], status), "queued");
        struct queued_ids seen = {0};
        assert_int_equal(sbx_audit_queue_each(audit, collect_queued, &seen, &err), 0);
        assert_int_equal(seen.n, 3);
        assert_string_equal(seen.ids[0], ids[0]);
        assert_string_equal(seen.ids[2], ids[2]);
        assert_int_equal(seen.wall_ms[1], 2000);

        char *request = NULL;
        assert_int_equal(sbx_audit_take(audit, ids[0], &request, &err), 1);
        assert_string_equal(request, "{\"code\": \"print(0)\"}");
        free(request);
        assert_string_equal(record_status(audit, ids[0], status), "running");
        /* Taken once only. */
        assert_int_equal(sbx_audit_take(audit, ids[0], &request, &err), 0);
        assert_null(request);
        /* The engine refused it: queued again, and taken again. */
        assert_int_equal(sbx_audit_requeue(audit, ids[0], &err), 1);
        assert_string_equal(record_status(audit, ids[0], status), "queued");
        assert_int_equal(sbx_audit_take(audit, ids[0], &request, &err), 1);
        free(request);
        /* Its outcome removes what the queue kept of it (the code). */
        assert_int_equal(queue_rows(f->path), 3);
        assert_int_equal(sbx_audit_finish(audit, &s[0].record, &err), 1);
        assert_int_equal(queue_rows(f->path), 2);
        assert_string_equal(record_status(audit, ids[0], status), "ok");

        /* Canceled while queued: only by its tenant, only while queued. */
        assert_int_equal(sbx_audit_cancel_queued(audit, "other", ids[2], "no", 5, &err), 0);
        assert_int_equal(sbx_audit_cancel_queued(audit, "acme", ids[2], "by its tenant", 5, &err),
                         1);
        assert_int_equal(sbx_audit_cancel_queued(audit, "acme", ids[2], "again", 6, &err), 0);
        assert_string_equal(record_status(audit, ids[2], status), "canceled");
        assert_int_equal(queue_rows(f->path), 1);

        /* A crash while ids[1] (retry) runs. */
        assert_int_equal(sbx_audit_take(audit, ids[1], &request, &err), 1);
        free(request);
        sbx_audit_close(audit);
        audit = open_store(f);
        uint64_t requeued = 0, interrupted = 0;
        assert_int_equal(sbx_audit_queue_recover(audit, &requeued, &err), 0);
        assert_int_equal(requeued, 1);
        assert_int_equal(sbx_audit_interrupt_running(audit, "interrupted", 7, &interrupted, &err),
                         0);
        assert_int_equal(interrupted, 0);
        assert_string_equal(record_status(audit, ids[1], status), "queued");
        assert_int_equal(queue_rows(f->path), 1);
        seen = (struct queued_ids){0};
        assert_int_equal(sbx_audit_queue_each(audit, collect_queued, &seen, &err), 0);
        assert_int_equal(seen.n, 1);
        assert_string_equal(seen.ids[0], ids[1]);
        for (size_t i = 0; i < 3; i++)
                free_sample(&s[i]);
        sbx_audit_close(audit);
}

/* A batch's cases, queued all or none, judged when fetched: accepted, wrong_answer, the run's own
 * status, pending while queued; fields trims each result; another tenant sees nothing. */
static void test_a_batch_of_cases(void **state)
{
        struct fixture *f = *state;
        struct sbx_audit *audit = open_store(f);
        static const char *const ids[] = {
                "e0000000000000000000000000000000", "e1000000000000000000000000000000",
                "e2000000000000000000000000000000", "e3000000000000000000000000000000"};
        static const char *const outputs[] = {"4 \n", "5\n", "4\n", NULL};
        static const char *const statuses[] = {"ok", "ok", "timeout", NULL};
        struct sample s[4];
        struct sbx_audit_enqueued items[4];
        for (size_t i = 0; i < 4; i++) {
                make_record(&s[i], ids[i], "acme");
                items[i] = (struct sbx_audit_enqueued){.record = &s[i].record,
                                                       .request = "{}",
                                                       .wall_ms = 1000,
                                                       .index = i,
                                                       .expected_stdout = "4\n",
                                                       .expected_size = 2};
        }
        const struct sbx_audit_batch batch = {.id = "b1000000000000000000000000000000",
                                              .tenant = "acme",
                                              .created_at_ms = 1700000000000,
                                              .compare = "trim"};
        struct sbx_error err = {0};
        assert_int_equal(sbx_audit_enqueue(audit, &batch, items, 4, &err), 0);
        /* The same ids again: all or none, nothing of the second try stays. */
        const struct sbx_audit_batch again = {
                .id = "b2000000000000000000000000000000", .tenant = "acme", .compare = "exact"};
        assert_int_equal(sbx_audit_enqueue(audit, &again, items, 4, &err), -1);
        json_t *answer = NULL;
        assert_int_equal(sbx_audit_batch_fetch(audit, "acme", again.id, NULL, 0, &answer, &err), 0);
        for (size_t i = 0; i < 3; i++) {
                char *request = NULL;
                assert_int_equal(sbx_audit_take(audit, ids[i], &request, &err), 1);
                free(request);
                s[i].record.status = statuses[i];
                s[i].record.stdout_data = outputs[i];
                s[i].record.stdout_size = strlen(outputs[i]);
                s[i].record.store_output = true;
                assert_int_equal(sbx_audit_finish(audit, &s[i].record, &err), 1);
        }
        char batch_id[SBX_EXECUTION_ID_CHARS + 1];
        bool done = true;
        assert_int_equal(sbx_audit_case_batch(audit, ids[0], batch_id, &done, &err), 1);
        assert_string_equal(batch_id, batch.id);
        assert_false(done); /* ids[3] is still queued */
        assert_int_equal(sbx_audit_batch_fetch(audit, "other", batch.id, NULL, 0, &answer, &err),
                         0);
        assert_int_equal(sbx_audit_batch_fetch(audit, "acme", batch.id, NULL, 0, &answer, &err), 1);
        assert_int_equal(json_integer_value(json_object_get(answer, "cases")), 4);
        assert_false(json_is_true(json_object_get(answer, "done")));
        json_t *summary = json_object_get(answer, "summary");
        assert_int_equal(json_integer_value(json_object_get(summary, "accepted")), 1);
        assert_int_equal(json_integer_value(json_object_get(summary, "wrong_answer")), 1);
        assert_int_equal(json_integer_value(json_object_get(summary, "timeout")), 1);
        assert_int_equal(json_integer_value(json_object_get(summary, "pending")), 1);
        json_t *results = json_object_get(answer, "results");
        static const char *const verdicts[] = {"accepted", "wrong_answer", "timeout", "pending"};
        for (size_t i = 0; i < 4; i++) {
                json_t *result = json_array_get(results, i);
                assert_int_equal(json_integer_value(json_object_get(result, "index")), (int)i);
                assert_string_equal(json_string_value(json_object_get(result, "verdict")),
                                    verdicts[i]);
                assert_string_equal(json_string_value(json_object_get(result, "id")), ids[i]);
        }
        assert_string_equal(
                json_string_value(json_object_get(json_array_get(results, 0), "stdout")), "4 \n");
        json_decref(answer);
        static const char *const fields[] = {"verdict"};
        assert_int_equal(sbx_audit_batch_fetch(audit, "acme", batch.id, fields, 1, &answer, &err),
                         1);
        json_t *first = json_array_get(json_object_get(answer, "results"), 0);
        assert_int_equal(json_object_size(first), 2); /* index and verdict */
        json_decref(answer);
        /* The last one ends: the batch is done. */
        char *request = NULL;
        assert_int_equal(sbx_audit_take(audit, ids[3], &request, &err), 1);
        free(request);
        assert_int_equal(sbx_audit_finish(audit, &s[3].record, &err), 1);
        assert_int_equal(sbx_audit_case_batch(audit, ids[3], batch_id, &done, &err), 1);
        assert_true(done);
        assert_int_equal(sbx_audit_case_batch(audit, "ffffffffffffffffffffffffffffffff", batch_id,
                                              &done, &err),
                         0);
        for (size_t i = 0; i < 4; i++)
                free_sample(&s[i]);
        sbx_audit_close(audit);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup_teardown(test_record_and_fetch, setup, teardown),
                cmocka_unit_test_setup_teardown(test_session_rows, setup, teardown),
                cmocka_unit_test_setup_teardown(test_recent_executions, setup, teardown),
                cmocka_unit_test_setup_teardown(test_other_tenant_and_unknown_id_are_not_found,
                                                setup, teardown),
                cmocka_unit_test_setup_teardown(test_nulls_errors_and_stored_output, setup,
                                                teardown),
                cmocka_unit_test_setup_teardown(test_bad_records_are_refused, setup, teardown),
                cmocka_unit_test_setup_teardown(test_reopen_keeps_data_and_migration_is_idempotent,
                                                setup, teardown),
                cmocka_unit_test_setup_teardown(test_two_steps, setup, teardown),
                cmocka_unit_test_setup_teardown(test_forget_and_interrupt, setup, teardown),
                cmocka_unit_test_setup_teardown(test_finish_from_result, setup, teardown),
                cmocka_unit_test_setup_teardown(test_migration_from_version_1, setup, teardown),
                cmocka_unit_test_setup_teardown(test_newer_schema_is_refused, setup, teardown),
                cmocka_unit_test_setup_teardown(test_failed_migration_changes_nothing, setup,
                                                teardown),
                cmocka_unit_test_setup_teardown(test_file_modes, setup, teardown),
                cmocka_unit_test_setup_teardown(test_unusable_files_are_refused, setup, teardown),
                cmocka_unit_test(test_sha256_hex),
                cmocka_unit_test_setup_teardown(test_concurrent_writers, setup, teardown),
                cmocka_unit_test_setup_teardown(test_the_queue_of_asynchronous_executions, setup,
                                                teardown),
                cmocka_unit_test_setup_teardown(test_a_batch_of_cases, setup, teardown),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
