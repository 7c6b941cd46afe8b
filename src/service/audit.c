#include "service/audit.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <sqlite3.h>

#include "engine/result_json.h"
#include "service/auth.h"
#include "util/cleanup.h"
#include "util/hex.h"
#include "util/log.h"

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
};

struct sbx_audit {
        pthread_mutex_t lock; /* serialises every use of db and of the statements */
        sqlite3 *db;
        sqlite3_stmt *insert;
        sqlite3_stmt *select;
};

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

/* Builds "INSERT ... VALUES (?1, ...)" and "SELECT ... WHERE tenant = ?1 AND id = ?2" from
 * audit_columns, so both statements and the fetch loop share one column order. */
static int audit_prepare_statements(struct sbx_audit *audit, struct sbx_error *err)
{
        char insert[1024] = "INSERT INTO executions (";
        char select[1024] = "SELECT ";
        for (size_t i = 0; i < COLUMN_COUNT; i++) {
                const char *separator = i + 1 < COLUMN_COUNT ? ", " : "";
                size_t len = strlen(select);
                snprintf(select + len, sizeof(select) - len, "%s%s", audit_columns[i].name,
                         separator);
                len = strlen(insert);
                snprintf(insert + len, sizeof(insert) - len, "%s%s", audit_columns[i].name,
                         separator);
        }
        size_t len = strlen(insert);
        snprintf(insert + len, sizeof(insert) - len, ") VALUES (");
        for (size_t i = 0; i < COLUMN_COUNT; i++) {
                len = strlen(insert);
                snprintf(insert + len, sizeof(insert) - len, "?%zu%s", i + 1,
                         i + 1 < COLUMN_COUNT ? ", " : ")");
        }
        len = strlen(select);
        snprintf(select + len, sizeof(select) - len,
                 " FROM executions WHERE tenant = ?1 AND id = ?2");

        /* PERSISTENT: both statements live as long as the connection. */
        if (sqlite3_prepare_v3(audit->db, insert, -1, SQLITE_PREPARE_PERSISTENT, &audit->insert,
                               NULL) != SQLITE_OK)
                return audit_sqlite_error(err, audit->db, "prepare insert");
        if (sqlite3_prepare_v3(audit->db, select, -1, SQLITE_PREPARE_PERSISTENT, &audit->select,
                               NULL) != SQLITE_OK)
                return audit_sqlite_error(err, audit->db, "prepare select");
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
        sqlite3_finalize(audit->insert);
        sqlite3_finalize(audit->select);
        /* The last connection to close checkpoints the WAL into the database and removes it. */
        if (sqlite3_close(audit->db) != SQLITE_OK)
                sbx_warn("audit: close: %s", sqlite3_errmsg(audit->db));
        pthread_mutex_destroy(&audit->lock);
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

/* Binds every column of record to the insert statement; the first SQLite error code, or
 * SQLITE_OK. */
static int audit_bind_record(sqlite3_stmt *s, const struct sbx_audit_record *r,
                             const char *stdout_sha256, const char *stderr_sha256)
{
        int rc = SQLITE_OK;
#define BIND(call)                                                                                 \
        do {                                                                                       \
                if (rc == SQLITE_OK)                                                               \
                        rc = (call);                                                               \
        } while (0)
        BIND(bind_text(s, COLUMN_ID, r->id));
        BIND(bind_text(s, COLUMN_TENANT, r->tenant));
        BIND(sqlite3_bind_int64(s, COLUMN_CREATED_AT + 1, r->created_at_ms));
        BIND(sqlite3_bind_int64(s, COLUMN_FINISHED_AT + 1, r->finished_at_ms));
        BIND(bind_text(s, COLUMN_LANGUAGE, r->language));
        BIND(bind_text(s, COLUMN_STATUS, r->status));
        BIND(r->exit_code >= 0 ? sqlite3_bind_int(s, COLUMN_EXIT_CODE + 1, r->exit_code)
                               : sqlite3_bind_null(s, COLUMN_EXIT_CODE + 1));
        BIND(r->signal > 0 ? sqlite3_bind_int(s, COLUMN_SIGNAL + 1, r->signal)
                           : sqlite3_bind_null(s, COLUMN_SIGNAL + 1));
        BIND(bind_text(s, COLUMN_ERROR, r->error));
        BIND(bind_json(s, COLUMN_REQUESTED, r->requested));
        BIND(bind_json(s, COLUMN_EFFECTIVE, r->effective));
        BIND(bind_json(s, COLUMN_CLAMPED, r->clamped));
        BIND(bind_json(s, COLUMN_USAGE, r->usage));
        BIND(bind_json(s, COLUMN_EVIDENCE, r->evidence));
        BIND(bind_json(s, COLUMN_TIMING, r->timing));
        BIND(sqlite3_bind_int64(s, COLUMN_STDOUT_BYTES + 1, (sqlite3_int64)r->stdout_size));
        BIND(sqlite3_bind_int64(s, COLUMN_STDERR_BYTES + 1, (sqlite3_int64)r->stderr_size));
        BIND(bind_text(s, COLUMN_STDOUT_SHA256, stdout_sha256));
        BIND(bind_text(s, COLUMN_STDERR_SHA256, stderr_sha256));
        BIND(bind_output(s, COLUMN_STDOUT, r->stdout_data, r->stdout_size, r->store_output));
        BIND(bind_output(s, COLUMN_STDERR, r->stderr_data, r->stderr_size, r->store_output));
#undef BIND
        return rc;
}

int sbx_audit_record_execution(struct sbx_audit *audit, const struct sbx_audit_record *record,
                               struct sbx_error *err)
{
        if (record->id == NULL || record->tenant == NULL || record->language == NULL ||
            record->status == NULL)
                return sbx_error_set(err, EINVAL,
                                     "audit: record lacks id, tenant, language or "
                                     "status");
        char stdout_sha256[SBX_AUDIT_SHA256_HEX_SIZE], stderr_sha256[SBX_AUDIT_SHA256_HEX_SIZE];
        if (sbx_audit_sha256_hex(record->stdout_data, record->stdout_size, stdout_sha256, err) <
                    0 ||
            sbx_audit_sha256_hex(record->stderr_data, record->stderr_size, stderr_sha256, err) < 0)
                return -1;

        pthread_mutex_lock(&audit->lock);
        int rc = audit_bind_record(audit->insert, record, stdout_sha256, stderr_sha256);
        if (rc == SQLITE_OK)
                rc = sqlite3_step(audit->insert);
        int result = 0;
        if (rc != SQLITE_DONE)
                result = sbx_error_set(err, 0, "audit: insert execution %s: %s", record->id,
                                       sqlite3_errstr(rc));
        sqlite3_reset(audit->insert);
        sqlite3_clear_bindings(audit->insert);
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
