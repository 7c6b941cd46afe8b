#include "service/audit.h"
#include "service/audit_store.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <sqlite3.h>

#include "model/result_json.h"
#include "service/auth.h"
#include "util/cleanup.h"
#include "util/hex.h"
#include "util/log.h"
#include "util/time.h"

/* How long a write waits for a lock someone else holds (an operator's shell, a backup) before it
 * fails: long enough for any such reader, short next to a client's own timeout. */
#define AUDIT_BUSY_TIMEOUT_MS 5000

/* Schema migrations, oldest first: step i brings the schema from version i to version i + 1
 * (PRAGMA user_version). Steps are only ever appended, never edited: a database in the field
 * was built by exactly the steps up to its version. STRICT tables make SQLite reject a value of
 * the wrong type instead of storing it silently. */
static const char *const audit_migrations[] = {
        /* 1: the executions table, and the index GET /v1/executions/{id} and a per-tenant
         * history need. */
        "CREATE TABLE executions ("
        " id TEXT PRIMARY KEY NOT NULL,"
        " tenant TEXT NOT NULL,"
        " created_at INTEGER NOT NULL,"
        " finished_at INTEGER NOT NULL,"
        " language TEXT NOT NULL,"
        " status TEXT NOT NULL,"
        " exit_code INTEGER,"
        " signal INTEGER,"
        " error TEXT,"
        " requested TEXT,"
        " effective TEXT,"
        " clamped TEXT,"
        " usage TEXT,"
        " evidence TEXT,"
        " timing TEXT,"
        " stdout_bytes INTEGER NOT NULL,"
        " stderr_bytes INTEGER NOT NULL,"
        " stdout_sha256 TEXT NOT NULL,"
        " stderr_sha256 TEXT NOT NULL,"
        " stdout BLOB,"
        " stderr BLOB"
        ") STRICT;"
        "CREATE INDEX executions_by_tenant ON executions (tenant, created_at);",
        /* 2: rows are written when an execution begins (status 'running') and completed when
         * it ends, so the outcome columns may be NULL. SQLite cannot drop NOT NULL in place:
         * the table is rebuilt. The partial index finds the rows still running at start. */
        "CREATE TABLE executions_v2 ("
        " id TEXT PRIMARY KEY NOT NULL,"
        " tenant TEXT NOT NULL,"
        " created_at INTEGER NOT NULL,"
        " finished_at INTEGER,"
        " language TEXT NOT NULL,"
        " status TEXT NOT NULL,"
        " exit_code INTEGER,"
        " signal INTEGER,"
        " error TEXT,"
        " requested TEXT,"
        " effective TEXT,"
        " clamped TEXT,"
        " usage TEXT,"
        " evidence TEXT,"
        " timing TEXT,"
        " stdout_bytes INTEGER,"
        " stderr_bytes INTEGER,"
        " stdout_sha256 TEXT,"
        " stderr_sha256 TEXT,"
        " stdout BLOB,"
        " stderr BLOB"
        ") STRICT;"
        "INSERT INTO executions_v2 SELECT * FROM executions;"
        "DROP TABLE executions;"
        "ALTER TABLE executions_v2 RENAME TO executions;"
        "CREATE INDEX executions_by_tenant ON executions (tenant, created_at);"
        "CREATE INDEX executions_running ON executions (id) WHERE status = 'running';",
        /* 3: sessions (api/sessions.h), one row each: written when one opens, completed when
         * it ends. Their runs are rows of executions whose requested names the session. */
        "CREATE TABLE sessions ("
        " id TEXT PRIMARY KEY NOT NULL,"
        " tenant TEXT NOT NULL,"
        " language TEXT NOT NULL,"
        " created_at INTEGER NOT NULL,"
        " ended_at INTEGER,"
        " end_reason TEXT,"
        " requested TEXT,"
        " effective TEXT,"
        " clamped TEXT,"
        " evidence TEXT"
        ") STRICT;"
        "CREATE INDEX sessions_by_tenant ON sessions (tenant, created_at);",
        /* 4: RL episodes (api/episodes.c) are sessions of kind 'episode', whose end keeps a
         * summary (steps, total reward, CPU); their steps are counted in metrics, not rows. */
        ("ALTER TABLE sessions ADD COLUMN kind TEXT NOT NULL DEFAULT 'session';"
         "ALTER TABLE sessions ADD COLUMN summary TEXT;"),
        /* 5: the durable queue of asynchronous executions (audit_queue.c). An accepted one is
         * a row of executions with status 'queued' and a row here with what its run needs (the
         * body, code included, which executions keeps only as digests); the triggers drop that
         * row once the execution has an outcome or its record is removed. */
        "CREATE TABLE queue ("
        " id TEXT PRIMARY KEY NOT NULL,"
        " tenant TEXT NOT NULL,"
        " request TEXT NOT NULL,"
        " retry INTEGER NOT NULL,"
        " wall_ms INTEGER NOT NULL"
        ") STRICT;"
        "CREATE INDEX executions_queued ON executions (created_at) WHERE status = 'queued';"
        "CREATE TRIGGER queue_item_ended AFTER UPDATE OF status ON executions"
        " WHEN NEW.status NOT IN ('queued', 'running')"
        " BEGIN DELETE FROM queue WHERE id = NEW.id; END;"
        "CREATE TRIGGER queue_item_forgotten AFTER DELETE ON executions"
        " BEGIN DELETE FROM queue WHERE id = OLD.id; END;",
        /* 6: batches (api/batches.c): a batch's row, and one row per case naming its
         * execution (queued with the rest) and what its stdout must be. compare is NULL for a
         * plain list of executions. */
        "CREATE TABLE batches ("
        " id TEXT PRIMARY KEY NOT NULL,"
        " tenant TEXT NOT NULL,"
        " created_at INTEGER NOT NULL,"
        " compare TEXT,"
        " cases INTEGER NOT NULL,"
        " callback_url TEXT,"
        " requested TEXT"
        ") STRICT;"
        "CREATE INDEX batches_by_tenant ON batches (tenant, created_at);"
        "CREATE TABLE batch_cases ("
        " batch_id TEXT NOT NULL,"
        " idx INTEGER NOT NULL,"
        " execution_id TEXT NOT NULL UNIQUE,"
        " expected_stdout BLOB,"
        " PRIMARY KEY (batch_id, idx)"
        ") STRICT;",
        /* 7: webhook deliveries (api/webhooks.c), one per execution or batch that asked for a
         * callback, written with it (so a crash cannot lose one) and sent once it has ended. */
        "CREATE TABLE deliveries ("
        " id TEXT PRIMARY KEY NOT NULL,"
        " tenant TEXT NOT NULL,"
        " kind TEXT NOT NULL,"
        " target_id TEXT NOT NULL UNIQUE,"
        " url TEXT NOT NULL,"
        " status TEXT NOT NULL,"
        " attempts INTEGER NOT NULL,"
        " next_attempt_at INTEGER NOT NULL,"
        " last_error TEXT,"
        " created_at INTEGER NOT NULL,"
        " finished_at INTEGER"
        ") STRICT;"
        "CREATE INDEX deliveries_due ON deliveries (next_attempt_at) WHERE status = 'pending';"
        "CREATE INDEX deliveries_by_tenant ON deliveries (tenant, status, created_at);",
        /* 8: a compiled language's compile stage (status, exit_code, signal, stdout, stderr,
         * usage, cached, ...), so that a queued execution's compiler message outlives its run;
         * its output under the same rule as the run's. */
        "ALTER TABLE executions ADD COLUMN compile TEXT;",
};

_Static_assert(SBX_ARRAY_SIZE(audit_migrations) == SBX_AUDIT_SCHEMA_VERSION,
               "SBX_AUDIT_SCHEMA_VERSION must be the number of migration steps");

/* How a column is written and read back as JSON. */
enum column_kind {
        COLUMN_TEXT,
        COLUMN_INTEGER,
        COLUMN_JSON,   /* JSON text, embedded as a JSON value when read */
        COLUMN_OUTPUT, /* raw program output, read as a string with invalid UTF-8 replaced */
};

/* The columns in the order of the INSERT and SELECT statements (parameter ?N is column N-1). */
enum column {
        COLUMN_ID,
        COLUMN_TENANT,
        COLUMN_CREATED_AT,
        COLUMN_FINISHED_AT,
        COLUMN_LANGUAGE,
        COLUMN_STATUS,
        COLUMN_EXIT_CODE,
        COLUMN_SIGNAL,
        COLUMN_ERROR,
        COLUMN_REQUESTED,
        COLUMN_EFFECTIVE,
        COLUMN_CLAMPED,
        COLUMN_USAGE,
        COLUMN_EVIDENCE,
        COLUMN_TIMING,
        COLUMN_STDOUT_BYTES,
        COLUMN_STDERR_BYTES,
        COLUMN_STDOUT_SHA256,
        COLUMN_STDERR_SHA256,
        COLUMN_STDOUT,
        COLUMN_STDERR,
        COLUMN_COMPILE,
        COLUMN_COUNT,
};

static const struct {
        const char *name;
        enum column_kind kind;
} audit_columns[COLUMN_COUNT] = {
        [COLUMN_ID] = {"id", COLUMN_TEXT},
        [COLUMN_TENANT] = {"tenant", COLUMN_TEXT},
        [COLUMN_CREATED_AT] = {"created_at", COLUMN_INTEGER},
        [COLUMN_FINISHED_AT] = {"finished_at", COLUMN_INTEGER},
        [COLUMN_LANGUAGE] = {"language", COLUMN_TEXT},
        [COLUMN_STATUS] = {"status", COLUMN_TEXT},
        [COLUMN_EXIT_CODE] = {"exit_code", COLUMN_INTEGER},
        [COLUMN_SIGNAL] = {"signal", COLUMN_INTEGER},
        [COLUMN_ERROR] = {"error", COLUMN_TEXT},
        [COLUMN_REQUESTED] = {"requested", COLUMN_JSON},
        [COLUMN_EFFECTIVE] = {"effective", COLUMN_JSON},
        [COLUMN_CLAMPED] = {"clamped", COLUMN_JSON},
        [COLUMN_USAGE] = {"usage", COLUMN_JSON},
        [COLUMN_EVIDENCE] = {"evidence", COLUMN_JSON},
        [COLUMN_TIMING] = {"timing", COLUMN_JSON},
        [COLUMN_STDOUT_BYTES] = {"stdout_bytes", COLUMN_INTEGER},
        [COLUMN_STDERR_BYTES] = {"stderr_bytes", COLUMN_INTEGER},
        [COLUMN_STDOUT_SHA256] = {"stdout_sha256", COLUMN_TEXT},
        [COLUMN_STDERR_SHA256] = {"stderr_sha256", COLUMN_TEXT},
        [COLUMN_STDOUT] = {"stdout", COLUMN_OUTPUT},
        [COLUMN_STDERR] = {"stderr", COLUMN_OUTPUT},
        [COLUMN_COMPILE] = {"compile", COLUMN_JSON},
};

/* The columns each write statement sets, in the numbering of enum column (?N is column N-1). */
static const enum column begin_columns[] = {
        COLUMN_ID,     COLUMN_TENANT,    COLUMN_CREATED_AT, COLUMN_LANGUAGE,
        COLUMN_STATUS, COLUMN_REQUESTED, COLUMN_EFFECTIVE,  COLUMN_CLAMPED,
};
static const enum column outcome_columns[] = {
        COLUMN_FINISHED_AT,   COLUMN_STATUS,       COLUMN_EXIT_CODE,    COLUMN_SIGNAL,
        COLUMN_ERROR,         COLUMN_EFFECTIVE,    COLUMN_USAGE,        COLUMN_EVIDENCE,
        COLUMN_TIMING,        COLUMN_STDOUT_BYTES, COLUMN_STDERR_BYTES, COLUMN_STDOUT_SHA256,
        COLUMN_STDERR_SHA256, COLUMN_STDOUT,       COLUMN_STDERR,       COLUMN_COMPILE,
};

/* An id whose outcome is on its way (sbx_audit_outcome_coming). */
static int audit_sqlite_error(struct sbx_error *err, sqlite3 *db, const char *what)
{
        return sbx_error_set(err, 0, "audit: %s: %s", what,
                             db ? sqlite3_errmsg(db) : "out of memory");
}

int sbx_audit_sha256_hex(const void *data, size_t size, char hex[SBX_AUDIT_SHA256_HEX_SIZE],
                         struct sbx_error *err)
{
        static const unsigned char empty[1];
        uint8_t digest[SBX_SHA256_SIZE];
        if (sbx_auth_sha256(data ? data : empty, size, digest, err) < 0)
                return sbx_error_prefix(err, "audit");
        sbx_hex_encode(digest, SBX_SHA256_SIZE, hex);
        return 0;
}

/* Creates the database file with mode 0600 before SQLite sees it: SQLite would create it with
 * 0644, readable by every local user. O_NOFOLLOW: a symlink planted in the data directory must
 * not redirect the audit log. */
static int audit_create_file(const char *path, struct sbx_error *err)
{
        _cleanup_close_ int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0)
                return sbx_error_set(err, errno, "audit: open %s", path);
        struct stat st;
        if (fstat(fd, &st) < 0)
                return sbx_error_set(err, errno, "audit: stat %s", path);
        if (!S_ISREG(st.st_mode))
                return sbx_error_set(err, 0, "audit: %s is not a regular file", path);
        if ((st.st_mode & 07777) != 0600 && fchmod(fd, 0600) < 0)
                return sbx_error_set(err, errno, "audit: chmod 0600 %s", path);
        return 0;
}

/* The single integer a PRAGMA query answers (user_version), or -1 with err. */
static int audit_pragma_integer(sqlite3 *db, const char *sql, int64_t *value, struct sbx_error *err)
{
        sqlite3_stmt *statement = NULL;
        if (sqlite3_prepare_v2(db, sql, -1, &statement, NULL) != SQLITE_OK)
                return audit_sqlite_error(err, db, sql);
        int rc = sqlite3_step(statement);
        if (rc == SQLITE_ROW)
                *value = sqlite3_column_int64(statement, 0);
        sqlite3_finalize(statement);
        if (rc != SQLITE_ROW)
                return audit_sqlite_error(err, db, sql);
        return 0;
}

/* WAL must be switched on outside a transaction, and SQLite answers with the mode it really
 * chose (it keeps "memory" or "delete" on file systems without shared memory), so check it. */
static int audit_enable_wal(sqlite3 *db, struct sbx_error *err)
{
        sqlite3_stmt *statement = NULL;
        if (sqlite3_prepare_v2(db, "PRAGMA journal_mode=WAL", -1, &statement, NULL) != SQLITE_OK)
                return audit_sqlite_error(err, db, "PRAGMA journal_mode=WAL");
        int rc = sqlite3_step(statement);
        const unsigned char *mode = rc == SQLITE_ROW ? sqlite3_column_text(statement, 0) : NULL;
        bool wal = mode != NULL && strcmp((const char *)mode, "wal") == 0;
        sqlite3_finalize(statement);
        if (rc != SQLITE_ROW)
                return audit_sqlite_error(err, db, "PRAGMA journal_mode=WAL");
        if (!wal)
                return sbx_error_set(err, 0, "audit: the database refused WAL mode");
        return 0;
}

/* Brings the schema to SBX_AUDIT_SCHEMA_VERSION. BEGIN IMMEDIATE takes the write lock before
 * user_version is read, so two processes opening the same file at once cannot both apply a
 * step; all steps and the new user_version commit together or not at all. */
static int audit_migrate(sqlite3 *db, struct sbx_error *err)
{
        if (sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK)
                return audit_sqlite_error(err, db, "begin migration");
        int64_t version = 0;
        if (audit_pragma_integer(db, "PRAGMA user_version", &version, err) < 0)
                goto rollback;
        if (version < 0 || version > SBX_AUDIT_SCHEMA_VERSION) {
                sbx_error_set(err, 0,
                              "audit: schema version %lld is not one this sandboxd knows "
                              "(0 to %d): written by a newer version?",
                              (long long)version, SBX_AUDIT_SCHEMA_VERSION);
                goto rollback;
        }
        for (int64_t step = version; step < SBX_AUDIT_SCHEMA_VERSION; step++) {
                if (sqlite3_exec(db, audit_migrations[step], NULL, NULL, NULL) != SQLITE_OK) {
                        char what[64];
                        snprintf(what, sizeof(what), "migration to version %lld",
                                 (long long)step + 1);
                        audit_sqlite_error(err, db, what);
                        goto rollback;
                }
        }
        if (version < SBX_AUDIT_SCHEMA_VERSION) {
                char sql[64];
                snprintf(sql, sizeof(sql), "PRAGMA user_version = %d", SBX_AUDIT_SCHEMA_VERSION);
                if (sqlite3_exec(db, sql, NULL, NULL, NULL) != SQLITE_OK) {
                        audit_sqlite_error(err, db, sql);
                        goto rollback;
                }
                sbx_info("audit: schema migrated from version %lld to %d", (long long)version,
                         SBX_AUDIT_SCHEMA_VERSION);
        }
        if (sqlite3_exec(db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK) {
                audit_sqlite_error(err, db, "commit migration");
                goto rollback;
        }
        return 0;
rollback:
        sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
        return -1;
}

/* Appends printf-style text to buf (size bytes, NUL-terminated); false when it does not fit. */
static bool append(char *buf, size_t size, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));

static bool append(char *buf, size_t size, const char *fmt, ...)
{
        size_t len = strlen(buf);
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(buf + len, size - len, fmt, ap);
        va_end(ap);
        return n >= 0 && (size_t)n < size - len;
}

static int audit_prepare(struct sbx_audit *audit, const char *sql, sqlite3_stmt **statement,
                         struct sbx_error *err)
{
        /* PERSISTENT: the statements live as long as the connection. */
        if (sqlite3_prepare_v3(audit->db, sql, -1, SQLITE_PREPARE_PERSISTENT, statement, NULL) !=
            SQLITE_OK)
                return audit_sqlite_error(err, audit->db, sql);
        return 0;
}

/* Builds every statement from audit_columns and the column lists above, so that the statements,
 * the binding and the fetch loop share one column numbering: parameter ?N is column N-1. */
static int audit_prepare_statements(struct sbx_audit *audit, struct sbx_error *err)
{
        char begin[512] = "INSERT INTO executions (";
        char values[256] = ") VALUES (";
        bool fits = true;
        for (size_t i = 0; i < SBX_ARRAY_SIZE(begin_columns); i++) {
                const char *separator = i + 1 < SBX_ARRAY_SIZE(begin_columns) ? ", " : "";
                fits &= append(begin, sizeof(begin), "%s%s", audit_columns[begin_columns[i]].name,
                               separator);
                fits &= append(values, sizeof(values), "?%d%s", (int)begin_columns[i] + 1,
                               separator);
        }
        fits &= append(begin, sizeof(begin), "%s)", values);

        char finish[1024] = "UPDATE executions SET ";
        for (size_t i = 0; i < SBX_ARRAY_SIZE(outcome_columns); i++)
                fits &= append(finish, sizeof(finish), "%s = ?%d%s",
                               audit_columns[outcome_columns[i]].name, (int)outcome_columns[i] + 1,
                               i + 1 < SBX_ARRAY_SIZE(outcome_columns) ? ", " : "");
        fits &= append(finish, sizeof(finish), " WHERE id = ?1 AND status = '%s'",
                       SBX_AUDIT_STATUS_RUNNING);

        char select[1024] = "SELECT ";
        for (size_t i = 0; i < COLUMN_COUNT; i++)
                fits &= append(select, sizeof(select), "%s%s", audit_columns[i].name,
                               i + 1 < COLUMN_COUNT ? ", " : "");
        /* The same columns, the most recent first: its own statement text, from select's. */
        char recent[1024];
        snprintf(recent, sizeof(recent), "%s", select);
        fits &= append(select, sizeof(select), " FROM executions WHERE tenant = ?1 AND id = ?2");
        fits &= append(recent, sizeof(recent),
                       " FROM executions WHERE tenant = ?1 AND created_at < ?2"
                       " ORDER BY created_at DESC, rowid DESC LIMIT ?3");
        if (!fits)
                return sbx_error_set(err, ENAMETOOLONG, "audit: a statement is too long");

        static const char forget[] =
                "DELETE FROM executions WHERE id = ?1 AND status = '" SBX_AUDIT_STATUS_RUNNING "'";
        static const char interrupt[] =
                "UPDATE executions SET status = 'internal_error', error = ?1, finished_at = ?2 "
                "WHERE status = '" SBX_AUDIT_STATUS_RUNNING "'";
        if (audit_prepare(audit, begin, &audit->begin, err) < 0 ||
            audit_prepare(audit, finish, &audit->finish, err) < 0 ||
            audit_prepare(audit, forget, &audit->forget, err) < 0 ||
            audit_prepare(audit, interrupt, &audit->interrupt, err) < 0 ||
            audit_prepare(audit, select, &audit->select, err) < 0 ||
            audit_prepare(audit, recent, &audit->recent, err) < 0)
                return -1;
        return 0;
}

struct sbx_audit *sbx_audit_open(const char *directory, struct sbx_error *err)
{
        char path[PATH_MAX];
        int n = snprintf(path, sizeof(path), "%s/%s", directory, SBX_AUDIT_FILE_NAME);
        if (n < 0 || (size_t)n >= sizeof(path)) {
                sbx_error_set(err, ENAMETOOLONG, "audit: path in %s", directory);
                return NULL;
        }
        if (audit_create_file(path, err) < 0)
                return NULL;

        struct sbx_audit *audit = calloc(1, sizeof(*audit));
        if (audit == NULL) {
                sbx_error_set(err, ENOMEM, "audit: allocate");
                return NULL;
        }
        pthread_mutex_init(&audit->lock, NULL);
        pthread_mutex_init(&audit->coming_lock, NULL);
        sbx_cond_init_monotonic(&audit->outcome_written);
        /* NOMUTEX: audit->lock already serialises every call, SQLite's own mutexes would only
         * add cost. NOFOLLOW: as in audit_create_file(). */
        if (sqlite3_open_v2(path, &audit->db,
                            SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_NOFOLLOW,
                            NULL) != SQLITE_OK) {
                audit_sqlite_error(err, audit->db, "open");
                sbx_error_prefix(err, "%s", path);
                sbx_audit_close(audit);
                return NULL;
        }
        sqlite3_extended_result_codes(audit->db, 1);
        /* DEFENSIVE: no SQL this process runs may corrupt the file on purpose (writable_schema,
         * raw page writes); the store only ever runs its own fixed statements anyway. */
        sqlite3_db_config(audit->db, SQLITE_DBCONFIG_DEFENSIVE, 1, NULL);
        sqlite3_busy_timeout(audit->db, AUDIT_BUSY_TIMEOUT_MS);
        int rc = audit_enable_wal(audit->db, err);
        if (rc == 0 &&
            sqlite3_exec(audit->db, "PRAGMA synchronous=NORMAL", NULL, NULL, NULL) != SQLITE_OK)
                rc = audit_sqlite_error(err, audit->db, "PRAGMA synchronous=NORMAL");
        if (rc == 0)
                rc = audit_migrate(audit->db, err);
        if (rc == 0)
                rc = audit_prepare_statements(audit, err);
        if (rc < 0) {
                sbx_error_prefix(err, "%s", path);
                sbx_audit_close(audit);
                return NULL;
        }
        return audit;
}

void sbx_audit_close(struct sbx_audit *audit)
{
        if (audit == NULL)
                return;
        sqlite3_finalize(audit->begin);
        sqlite3_finalize(audit->finish);
        sqlite3_finalize(audit->forget);
        sqlite3_finalize(audit->interrupt);
        sqlite3_finalize(audit->select);
        sqlite3_finalize(audit->recent);
        /* The last connection to close checkpoints the WAL into the database and removes it. */
        if (sqlite3_close(audit->db) != SQLITE_OK)
                sbx_warn("audit: close: %s", sqlite3_errmsg(audit->db));
        pthread_mutex_destroy(&audit->lock);
        while (audit->coming != NULL) {
                struct coming_outcome *next = audit->coming->next;
                free(audit->coming->id);
                free(audit->coming);
                audit->coming = next;
        }
        pthread_cond_destroy(&audit->outcome_written);
        pthread_mutex_destroy(&audit->coming_lock);
        free(audit);
}

static int bind_text(sqlite3_stmt *statement, enum column column, const char *text)
{
        if (text == NULL)
                return sqlite3_bind_null(statement, (int)column + 1);
        /* STATIC: the record outlives the step; bindings are cleared right after it. */
        return sqlite3_bind_text(statement, (int)column + 1, text, -1, SQLITE_STATIC);
}

static int bind_json(sqlite3_stmt *statement, enum column column, const json_t *value)
{
        if (value == NULL)
                return sqlite3_bind_null(statement, (int)column + 1);
        char *text = json_dumps(value, JSON_COMPACT | JSON_ENCODE_ANY);
        if (text == NULL)
                return SQLITE_NOMEM;
        /* SQLite owns text from here and frees it, also when binding fails. */
        return sqlite3_bind_text(statement, (int)column + 1, text, -1, free);
}

static int bind_output(sqlite3_stmt *statement, enum column column, const void *data, size_t size,
                       bool store)
{
        if (!store)
                return sqlite3_bind_null(statement, (int)column + 1);
        /* A NULL pointer would bind SQL NULL; empty output is an empty blob, not "not stored". */
        if (size == 0 || data == NULL)
                return sqlite3_bind_zeroblob(statement, (int)column + 1, 0);
        return sqlite3_bind_blob64(statement, (int)column + 1, data, size, SQLITE_STATIC);
}

/* The output digests sbx_audit_finish stores beside the record's own fields. */
struct outcome_digests {
        char stdout_sha256[SBX_AUDIT_SHA256_HEX_SIZE];
        char stderr_sha256[SBX_AUDIT_SHA256_HEX_SIZE];
};

/* Binds one column of record to parameter ?column+1 of s; an SQLite result code. */
static int bind_column(sqlite3_stmt *s, enum column column, const struct sbx_audit_record *r,
                       const struct outcome_digests *digests)
{
        int parameter = (int)column + 1;
        switch (column) {
        case COLUMN_ID:
                return bind_text(s, column, r->id);
        case COLUMN_TENANT:
                return bind_text(s, column, r->tenant);
        case COLUMN_CREATED_AT:
                return sqlite3_bind_int64(s, parameter, r->created_at_ms);
        case COLUMN_FINISHED_AT:
                return sqlite3_bind_int64(s, parameter, r->finished_at_ms);
        case COLUMN_LANGUAGE:
                return bind_text(s, column, r->language);
        case COLUMN_STATUS:
                return bind_text(s, column, r->status);
        case COLUMN_EXIT_CODE:
                return r->exit_code >= 0 ? sqlite3_bind_int(s, parameter, r->exit_code)
                                         : sqlite3_bind_null(s, parameter);
        case COLUMN_SIGNAL:
                return r->signal > 0 ? sqlite3_bind_int(s, parameter, r->signal)
                                     : sqlite3_bind_null(s, parameter);
        case COLUMN_ERROR:
                return bind_text(s, column, r->error);
        case COLUMN_REQUESTED:
                return bind_json(s, column, r->requested);
        case COLUMN_EFFECTIVE:
                return bind_json(s, column, r->effective);
        case COLUMN_CLAMPED:
                return bind_json(s, column, r->clamped);
        case COLUMN_USAGE:
                return bind_json(s, column, r->usage);
        case COLUMN_EVIDENCE:
                return bind_json(s, column, r->evidence);
        case COLUMN_TIMING:
                return bind_json(s, column, r->timing);
        case COLUMN_STDOUT_BYTES:
                return sqlite3_bind_int64(s, parameter, (sqlite3_int64)r->stdout_size);
        case COLUMN_STDERR_BYTES:
                return sqlite3_bind_int64(s, parameter, (sqlite3_int64)r->stderr_size);
        case COLUMN_STDOUT_SHA256:
                return bind_text(s, column, digests->stdout_sha256);
        case COLUMN_STDERR_SHA256:
                return bind_text(s, column, digests->stderr_sha256);
        case COLUMN_STDOUT:
                return bind_output(s, column, r->stdout_data, r->stdout_size, r->store_output);
        case COLUMN_STDERR:
                return bind_output(s, column, r->stderr_data, r->stderr_size, r->store_output);
        case COLUMN_COMPILE:
                return bind_json(s, column, r->compile);
        case COLUMN_COUNT:
                break;
        }
        return SQLITE_MISUSE;
}

/* Binds the columns of statement s, steps it and resets it; the caller holds the lock. Returns
 * the number of rows it changed, or -1 with err (what names the statement in the message). */
static int audit_write_locked(struct sbx_audit *audit, sqlite3_stmt *s, const enum column *columns,
                              size_t n_columns, const struct sbx_audit_record *record,
                              const struct outcome_digests *digests, const char *what,
                              struct sbx_error *err)
{
        int rc = SQLITE_OK;
        for (size_t i = 0; i < n_columns && rc == SQLITE_OK; i++)
                rc = bind_column(s, columns[i], record, digests);
        if (rc == SQLITE_OK)
                rc = sqlite3_step(s);
        int result = rc == SQLITE_DONE ? sqlite3_changes(audit->db) : -1;
        if (rc != SQLITE_DONE)
                sbx_error_set(err, 0, "audit: %s execution %s: %s", what,
                              record->id ? record->id : "", sqlite3_errstr(rc));
        sqlite3_reset(s);
        sqlite3_clear_bindings(s);
        return result;
}

/* audit_write_locked under the lock. */
static int audit_write(struct sbx_audit *audit, sqlite3_stmt *s, const enum column *columns,
                       size_t n_columns, const struct sbx_audit_record *record,
                       const struct outcome_digests *digests, const char *what,
                       struct sbx_error *err)
{
        pthread_mutex_lock(&audit->lock);
        int result = audit_write_locked(audit, s, columns, n_columns, record, digests, what, err);
        pthread_mutex_unlock(&audit->lock);
        return result;
}

int sbx_audit_begin(struct sbx_audit *audit, const struct sbx_audit_record *record,
                    struct sbx_error *err)
{
        if (record->id == NULL || record->tenant == NULL || record->language == NULL)
                return sbx_error_set(err, EINVAL, "audit: record lacks id, tenant or language");
        struct sbx_audit_record running = *record;
        running.status = SBX_AUDIT_STATUS_RUNNING;
        int rc = audit_write(audit, audit->begin, begin_columns, SBX_ARRAY_SIZE(begin_columns),
                             &running, NULL, "begin", err);
        return rc < 0 ? -1 : 0;
}

int sbx_audit_begin_queued_locked(struct sbx_audit *audit, const struct sbx_audit_record *record,
                                  struct sbx_error *err)
{
        if (record->id == NULL || record->tenant == NULL || record->language == NULL)
                return sbx_error_set(err, EINVAL, "audit: record lacks id, tenant or language");
        struct sbx_audit_record queued = *record;
        queued.status = SBX_AUDIT_STATUS_QUEUED;
        int rc = audit_write_locked(audit, audit->begin, begin_columns,
                                    SBX_ARRAY_SIZE(begin_columns), &queued, NULL, "queue", err);
        return rc < 0 ? -1 : 0;
}

int sbx_audit_outcome_coming(struct sbx_audit *audit, const char *id, struct sbx_error *err)
{
        struct coming_outcome *coming = malloc(sizeof(*coming));
        char *copy = strdup(id);
        if (coming == NULL || copy == NULL) {
                free(coming);
                free(copy);
                return sbx_error_set(err, ENOMEM, "audit: outcome of %s", id);
        }
        pthread_mutex_lock(&audit->coming_lock);
        *coming = (struct coming_outcome){.next = audit->coming, .id = copy};
        audit->coming = coming;
        pthread_mutex_unlock(&audit->coming_lock);
        return 0;
}

/* Called with coming_lock held. */
static struct coming_outcome **find_coming(struct sbx_audit *audit, const char *id)
{
        struct coming_outcome **p = &audit->coming;
        while (*p != NULL && strcmp((*p)->id, id) != 0)
                p = &(*p)->next;
        return p;
}

static void outcome_arrived(struct sbx_audit *audit, const char *id)
{
        pthread_mutex_lock(&audit->coming_lock);
        struct coming_outcome **p = find_coming(audit, id);
        struct coming_outcome *coming = *p;
        if (coming != NULL) {
                *p = coming->next;
                pthread_cond_broadcast(&audit->outcome_written);
        }
        pthread_mutex_unlock(&audit->coming_lock);
        if (coming != NULL) {
                free(coming->id);
                free(coming);
        }
}

static void wait_for_outcome(struct sbx_audit *audit, const char *id)
{
        struct timespec deadline;
        clock_gettime(CLOCK_MONOTONIC, &deadline);
        deadline.tv_sec += SBX_AUDIT_OUTCOME_WAIT_MS / 1000;
        pthread_mutex_lock(&audit->coming_lock);
        while (*find_coming(audit, id) != NULL &&
               pthread_cond_timedwait(&audit->outcome_written, &audit->coming_lock, &deadline) !=
                       ETIMEDOUT)
                ;
        pthread_mutex_unlock(&audit->coming_lock);
}

static int audit_finish_written(struct sbx_audit *audit, const struct sbx_audit_record *record,
                                struct sbx_error *err)
{
        if (record->id == NULL || record->status == NULL)
                return sbx_error_set(err, EINVAL, "audit: outcome lacks id or status");
        struct outcome_digests digests;
        if (sbx_audit_sha256_hex(record->stdout_data, record->stdout_size, digests.stdout_sha256,
                                 err) < 0 ||
            sbx_audit_sha256_hex(record->stderr_data, record->stderr_size, digests.stderr_sha256,
                                 err) < 0)
                return -1;
        /* The id is ?1 in the WHERE clause: bound with the outcome. */
        enum column columns[SBX_ARRAY_SIZE(outcome_columns) + 1];
        memcpy(columns, outcome_columns, sizeof(outcome_columns));
        columns[SBX_ARRAY_SIZE(outcome_columns)] = COLUMN_ID;
        int rc = audit_write(audit, audit->finish, columns, SBX_ARRAY_SIZE(columns), record,
                             &digests, "finish", err);
        return rc < 0 ? -1 : rc > 0;
}

int sbx_audit_finish(struct sbx_audit *audit, const struct sbx_audit_record *record,
                     struct sbx_error *err)
{
        int rc = audit_finish_written(audit, record, err);
        if (record->id != NULL)
                outcome_arrived(audit, record->id);
        return rc;
}

int sbx_audit_finish_result(struct sbx_audit *audit, const struct sbx_result *result,
                            const json_t *result_json, int64_t finished_at_ms, bool store_output,
                            struct sbx_error *err)
{
        _cleanup_(json_decrefp) json_t *made = NULL;
        if (result_json == NULL) {
                made = sbx_result_to_json(result);
                if (made == NULL)
                        return sbx_error_set(err, ENOMEM, "audit: result %s as JSON", result->id);
                result_json = made;
        }
        bool exited = !sbx_status_has_error(result->status) && result->run.exited;
        /* The compile stage as the response has it; its output only when the run's is kept. */
        _cleanup_(json_decrefp) json_t *compile = NULL;
        if (json_is_object(json_object_get(result_json, "compile"))) {
                compile = json_deep_copy(json_object_get(result_json, "compile"));
                if (compile == NULL)
                        return sbx_error_set(err, ENOMEM, "audit: result %s as JSON", result->id);
                if (!store_output) {
                        json_object_set_new(compile, "stdout", json_null());
                        json_object_set_new(compile, "stderr", json_null());
                }
        }
        const struct sbx_audit_record record = {
                .id = result->id,
                .effective = json_object_get(result_json, "limits"),
                .finished_at_ms = finished_at_ms,
                .status = sbx_status_name(result->status),
                .exit_code = exited ? result->run.exit_code : -1,
                .signal = exited || sbx_status_has_error(result->status) ? 0 : result->run.signal,
                .error = sbx_status_has_error(result->status) ? result->error : NULL,
                .usage = json_object_get(result_json, "usage"),
                .evidence = json_object_get(result_json, "evidence"),
                .timing = json_object_get(result_json, "timing"),
                .stdout_data = result->run.out.data,
                .stdout_size = result->run.out.len,
                .stderr_data = result->run.err.data,
                .stderr_size = result->run.err.len,
                .store_output = store_output,
                .compile = compile,
        };
        return sbx_audit_finish(audit, &record, err);
}

int sbx_audit_forget(struct sbx_audit *audit, const char *id, struct sbx_error *err)
{
        const struct sbx_audit_record record = {.id = id};
        static const enum column columns[] = {COLUMN_ID};
        int rc = audit_write(audit, audit->forget, columns, 1, &record, NULL, "forget", err);
        return rc < 0 ? -1 : rc > 0;
}

int sbx_audit_interrupt_running(struct sbx_audit *audit, const char *error, int64_t finished_at_ms,
                                uint64_t *count, struct sbx_error *err)
{
        *count = 0;
        pthread_mutex_lock(&audit->lock);
        int rc = sqlite3_bind_text(audit->interrupt, 1, error, -1, SQLITE_STATIC);
        if (rc == SQLITE_OK)
                rc = sqlite3_bind_int64(audit->interrupt, 2, finished_at_ms);
        if (rc == SQLITE_OK)
                rc = sqlite3_step(audit->interrupt);
        int result = 0;
        if (rc == SQLITE_DONE)
                *count = (uint64_t)sqlite3_changes(audit->db);
        else
                result = sbx_error_set(err, 0, "audit: interrupt running executions: %s",
                                       sqlite3_errstr(rc));
        sqlite3_reset(audit->interrupt);
        sqlite3_clear_bindings(audit->interrupt);
        pthread_mutex_unlock(&audit->lock);
        return result;
}

/* Column i of the current row of statement as a JSON value; NULL (not json null) on failure. */
static json_t *audit_column_json(sqlite3_stmt *statement, int i, struct sbx_error *err)
{
        if (sqlite3_column_type(statement, i) == SQLITE_NULL)
                return json_null();
        json_t *value = NULL;
        /* Each kind reads the pointer first, then the size: the order sqlite3_column_bytes()
         * requires, since reading the pointer may convert the value. */
        switch (audit_columns[i].kind) {
        case COLUMN_INTEGER:
                value = json_integer(sqlite3_column_int64(statement, i));
                break;
        case COLUMN_TEXT: {
                const unsigned char *text = sqlite3_column_text(statement, i);
                value = json_stringn((const char *)text,
                                     (size_t)sqlite3_column_bytes(statement, i));
                break;
        }
        case COLUMN_JSON: {
                const unsigned char *text = sqlite3_column_text(statement, i);
                size_t size = (size_t)sqlite3_column_bytes(statement, i);
                json_error_t json_error;
                value = json_loadb((const char *)text, size, JSON_DECODE_ANY, &json_error);
                if (value == NULL)
                        sbx_error_set(err, 0, "audit: column %s is not JSON: %s",
                                      audit_columns[i].name, json_error.text);
                return value;
        }
        case COLUMN_OUTPUT: {
                const void *data = sqlite3_column_blob(statement, i);
                /* Output is bytes; JSON strings are UTF-8 (as in the POST response). */
                value = sbx_json_string_from_bytes(data,
                                                   (size_t)sqlite3_column_bytes(statement, i));
                break;
        }
        }
        if (value == NULL)
                sbx_error_set(err, 0, "audit: column %s: unreadable value or out of memory",
                              audit_columns[i].name);
        return value;
}

static json_t *audit_row_json(sqlite3_stmt *statement, struct sbx_error *err)
{
        json_t *object = json_object();
        if (object == NULL) {
                sbx_error_set(err, ENOMEM, "audit: allocate record");
                return NULL;
        }
        for (int i = 0; i < COLUMN_COUNT; i++) {
                json_t *value = audit_column_json(statement, i, err);
                if (value == NULL ||
                    json_object_set_new(object, audit_columns[i].name, value) < 0) {
                        json_decref(object);
                        if (value != NULL)
                                sbx_error_set(err, ENOMEM, "audit: allocate record");
                        return NULL;
                }
        }
        return object;
}

int sbx_audit_fetch(struct sbx_audit *audit, const char *tenant, const char *id, json_t **out,
                    struct sbx_error *err)
{
        *out = NULL;
        if (tenant == NULL || id == NULL)
                return 0;
        wait_for_outcome(audit, id);
        pthread_mutex_lock(&audit->lock);
        int result = 0;
        int rc = sqlite3_bind_text(audit->select, 1, tenant, -1, SQLITE_STATIC);
        if (rc == SQLITE_OK)
                rc = sqlite3_bind_text(audit->select, 2, id, -1, SQLITE_STATIC);
        if (rc == SQLITE_OK)
                rc = sqlite3_step(audit->select);
        if (rc == SQLITE_ROW) {
                *out = audit_row_json(audit->select, err);
                result = *out != NULL ? 1 : -1;
        } else if (rc != SQLITE_DONE) {
                result = sbx_error_set(err, 0, "audit: fetch execution %s: %s", id,
                                       sqlite3_errstr(rc));
        }
        sqlite3_reset(audit->select);
        sqlite3_clear_bindings(audit->select);
        pthread_mutex_unlock(&audit->lock);
        return result;
}

int sbx_audit_recent(struct sbx_audit *audit, const char *tenant, int64_t before_ms, unsigned limit,
                     json_t **out, struct sbx_error *err)
{
        *out = json_array();
        if (*out == NULL)
                return sbx_error_set(err, ENOMEM, "audit: out of memory");
        pthread_mutex_lock(&audit->lock);
        sqlite3_stmt *s = audit->recent;
        int rc = sqlite3_bind_text(s, 1, tenant, -1, SQLITE_STATIC);
        if (rc == SQLITE_OK)
                rc = sqlite3_bind_int64(s, 2, before_ms);
        if (rc == SQLITE_OK)
                rc = sqlite3_bind_int64(s, 3, limit);
        int result = 0;
        while (rc == SQLITE_OK && (rc = sqlite3_step(s)) == SQLITE_ROW) {
                json_t *row = audit_row_json(s, err);
                if (row == NULL) {
                        result = -1;
                        break;
                }
                json_object_del(row, "stdout");
                json_object_del(row, "stderr");
                json_object_del(row, "compile");
                json_array_append_new(*out, row);
                rc = SQLITE_OK;
        }
        if (result == 0 && rc != SQLITE_DONE)
                result = sbx_error_set(err, 0, "audit: recent executions: %s", sqlite3_errstr(rc));
        sqlite3_reset(s);
        sqlite3_clear_bindings(s);
        pthread_mutex_unlock(&audit->lock);
        if (result < 0) {
                json_decref(*out);
                *out = NULL;
        }
        return result;
}

/* ---- Sessions ---- */

/* Binds value (may be NULL) as compact JSON text to parameter index of statement. */
static int bind_session_json(sqlite3_stmt *statement, int index, const json_t *value)
{
        if (value == NULL)
                return sqlite3_bind_null(statement, index);
        char *text = json_dumps(value, JSON_COMPACT | JSON_ENCODE_ANY);
        if (text == NULL)
                return SQLITE_NOMEM;
        return sqlite3_bind_text(statement, index, text, -1, free);
}

int sbx_audit_statement(struct sbx_audit *audit, const char *sql, const char *what,
                        int (*bind)(sqlite3_stmt *, const void *), const void *ctx,
                        struct sbx_error *err)
{
        pthread_mutex_lock(&audit->lock);
        sqlite3_stmt *statement = NULL;
        int rc = sqlite3_prepare_v2(audit->db, sql, -1, &statement, NULL);
        if (rc == SQLITE_OK)
                rc = bind(statement, ctx);
        if (rc == SQLITE_OK)
                rc = sqlite3_step(statement);
        int changes = rc == SQLITE_DONE ? sqlite3_changes(audit->db) : -1;
        if (rc != SQLITE_DONE)
                sbx_error_set(err, 0, "audit: %s: %s", what, sqlite3_errstr(rc));
        sqlite3_finalize(statement);
        pthread_mutex_unlock(&audit->lock);
        return changes;
}

static int bind_session_begin(sqlite3_stmt *statement, const void *ctx)
{
        const struct sbx_audit_session *session = ctx;
        int rc = sqlite3_bind_text(statement, 1, session->id, -1, SQLITE_STATIC);
        if (rc == SQLITE_OK)
                rc = sqlite3_bind_text(statement, 2, session->tenant, -1, SQLITE_STATIC);
        if (rc == SQLITE_OK)
                rc = sqlite3_bind_text(statement, 3, session->language, -1, SQLITE_STATIC);
        if (rc == SQLITE_OK)
                rc = sqlite3_bind_int64(statement, 4, session->created_at_ms);
        if (rc == SQLITE_OK)
                rc = bind_session_json(statement, 5, session->requested);
        if (rc == SQLITE_OK)
                rc = bind_session_json(statement, 6, session->effective);
        if (rc == SQLITE_OK)
                rc = bind_session_json(statement, 7, session->clamped);
        if (rc == SQLITE_OK)
                rc = sqlite3_bind_text(statement, 8, session->kind ? session->kind : "session", -1,
                                       SQLITE_STATIC);
        return rc;
}

int sbx_audit_session_begin(struct sbx_audit *audit, const struct sbx_audit_session *session,
                            struct sbx_error *err)
{
        if (session->id == NULL || session->tenant == NULL || session->language == NULL)
                return sbx_error_set(err, EINVAL, "audit: a session needs id, tenant, language");
        int rc = sbx_audit_statement(audit,
                                     "INSERT INTO sessions (id, tenant, language, created_at, "
                                     "requested, effective, clamped, kind) VALUES (?1, ?2, ?3, ?4, "
                                     "?5, ?6, ?7, ?8)",
                                     "begin session", bind_session_begin, session, err);
        return rc < 0 ? -1 : 0;
}

static int bind_session_end(sqlite3_stmt *statement, const void *ctx)
{
        const struct sbx_audit_session *session = ctx;
        int rc = sqlite3_bind_text(statement, 1, session->id, -1, SQLITE_STATIC);
        if (rc == SQLITE_OK)
                rc = sqlite3_bind_int64(statement, 2, session->ended_at_ms);
        if (rc == SQLITE_OK)
                rc = sqlite3_bind_text(statement, 3, session->end_reason, -1, SQLITE_STATIC);
        if (rc == SQLITE_OK)
                rc = bind_session_json(statement, 4, session->evidence);
        if (rc == SQLITE_OK)
                rc = bind_session_json(statement, 5, session->summary);
        return rc;
}

int sbx_audit_session_end(struct sbx_audit *audit, const struct sbx_audit_session *session,
                          struct sbx_error *err)
{
        if (session->id == NULL || session->end_reason == NULL)
                return sbx_error_set(err, EINVAL, "audit: a session's end needs id and reason");
        int rc = sbx_audit_statement(audit,
                                     "UPDATE sessions SET ended_at = ?2, end_reason = ?3, "
                                     "evidence = ?4, summary = ?5 WHERE id = ?1 AND ended_at IS "
                                     "NULL",
                                     "end session", bind_session_end, session, err);
        return rc < 0 ? -1 : rc > 0;
}

static int bind_interrupted(sqlite3_stmt *statement, const void *ctx)
{
        const struct sbx_audit_session *session = ctx;
        int rc = sqlite3_bind_int64(statement, 1, session->ended_at_ms);
        if (rc == SQLITE_OK)
                rc = sqlite3_bind_text(statement, 2, session->end_reason, -1, SQLITE_STATIC);
        return rc;
}

int sbx_audit_end_open_sessions(struct sbx_audit *audit, const char *reason, int64_t ended_at_ms,
                                uint64_t *count, struct sbx_error *err)
{
        const struct sbx_audit_session ended = {.ended_at_ms = ended_at_ms, .end_reason = reason};
        int rc = sbx_audit_statement(audit,
                                     "UPDATE sessions SET ended_at = ?1, end_reason = ?2 WHERE "
                                     "ended_at IS NULL",
                                     "end open sessions", bind_interrupted, &ended, err);
        *count = rc > 0 ? (uint64_t)rc : 0;
        return rc < 0 ? -1 : 0;
}
