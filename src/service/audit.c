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
        /* 9: the node an execution ran on and a session lives on (PostgreSQL's store is a
         * fleet's: a node's start ends its own, not the others'). A node's own store leaves it
         * NULL. */
        ("ALTER TABLE executions ADD COLUMN node TEXT;"
         "ALTER TABLE sessions ADD COLUMN node TEXT;"),
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

/* Builds the statements from audit_columns and the column lists above, so that the statements,
 * the binding and the fetch loop share one column numbering: parameter ?N is column N-1. The
 * node is the parameter after the columns. */
static int audit_make_statements(struct sbx_audit *audit, struct sbx_error *err)
{
        char values[256] = ") VALUES (";
        snprintf(audit->begin_sql, sizeof(audit->begin_sql), "INSERT INTO executions (");
        bool fits = true;
        for (size_t i = 0; i < SBX_ARRAY_SIZE(begin_columns); i++) {
                fits &= append(audit->begin_sql, sizeof(audit->begin_sql), "%s, ",
                               audit_columns[begin_columns[i]].name);
                fits &= append(values, sizeof(values), "?%d, ", (int)begin_columns[i] + 1);
        }
        fits &= append(audit->begin_sql, sizeof(audit->begin_sql), "node%s?%d)", values,
                       COLUMN_COUNT + 1);

        snprintf(audit->finish_sql, sizeof(audit->finish_sql), "UPDATE executions SET ");
        for (size_t i = 0; i < SBX_ARRAY_SIZE(outcome_columns); i++)
                fits &= append(audit->finish_sql, sizeof(audit->finish_sql), "%s = ?%d%s",
                               audit_columns[outcome_columns[i]].name, (int)outcome_columns[i] + 1,
                               i + 1 < SBX_ARRAY_SIZE(outcome_columns) ? ", " : "");
        fits &= append(audit->finish_sql, sizeof(audit->finish_sql),
                       " WHERE id = ?1 AND status = '%s'", SBX_AUDIT_STATUS_RUNNING);

        snprintf(audit->select_sql, sizeof(audit->select_sql), "SELECT ");
        for (size_t i = 0; i < COLUMN_COUNT; i++)
                fits &= append(audit->select_sql, sizeof(audit->select_sql), "%s%s",
                               audit_columns[i].name, i + 1 < COLUMN_COUNT ? ", " : "");
        /* The same columns, the most recent first (rowid: the order of the inserts; the
         * PostgreSQL table has a column of that name). */
        snprintf(audit->recent_sql, sizeof(audit->recent_sql), "%s", audit->select_sql);
        fits &= append(audit->select_sql, sizeof(audit->select_sql),
                       " FROM executions WHERE tenant = ?1 AND id = ?2");
        fits &= append(audit->recent_sql, sizeof(audit->recent_sql),
                       " FROM executions WHERE tenant = ?1 AND created_at < ?2"
                       " ORDER BY created_at DESC, rowid DESC LIMIT ?3");
        if (!fits)
                return sbx_error_set(err, ENAMETOOLONG, "audit: a statement is too long");
        return 0;
}

/* An outcome a fleet's store did not take (PostgreSQL out of reach): the finish statement's
 * parameters, copied, to be written when it answers again (sbx_audit_write_kept). */
struct kept_outcome {
        struct kept_outcome *next;
        struct sbx_sql_value values[COLUMN_COUNT];
        void *copies[COLUMN_COUNT];
        size_t n;
};

static void kept_outcome_free(struct kept_outcome *kept)
{
        for (size_t i = 0; i < kept->n; i++)
                free(kept->copies[i]);
        free(kept);
}

static struct sbx_audit *audit_new(void)
{
        struct sbx_audit *audit = calloc(1, sizeof(*audit));
        if (audit == NULL)
                return NULL;
        pthread_mutex_init(&audit->coming_lock, NULL);
        pthread_mutex_init(&audit->kept_lock, NULL);
        sbx_cond_init_monotonic(&audit->outcome_written);
        return audit;
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
        struct sbx_audit *audit = audit_new();
        if (audit == NULL) {
                sbx_error_set(err, ENOMEM, "audit: allocate");
                return NULL;
        }
        audit->sql = sbx_sql_open_sqlite(path, audit_migrations, SBX_ARRAY_SIZE(audit_migrations),
                                         AUDIT_BUSY_TIMEOUT_MS, err);
        if (audit->sql == NULL || audit_make_statements(audit, err) < 0) {
                sbx_error_prefix(err, "%s", path);
                sbx_audit_close(audit);
                return NULL;
        }
        return audit;
}

struct sbx_audit *sbx_audit_open_shared(struct sbx_pg *pg, const char *node, struct sbx_error *err)
{
        struct sbx_audit *audit = audit_new();
        if (audit == NULL || (audit->node = strdup(node)) == NULL) {
                sbx_error_set(err, ENOMEM, "audit: allocate");
                sbx_audit_close(audit);
                return NULL;
        }
        audit->sql = sbx_sql_open_pg(pg, err);
        if (audit->sql == NULL || audit_make_statements(audit, err) < 0) {
                sbx_audit_close(audit);
                return NULL;
        }
        return audit;
}

void sbx_audit_close(struct sbx_audit *audit)
{
        if (audit == NULL)
                return;
        sbx_sql_close(audit->sql);
        while (audit->coming != NULL) {
                struct coming_outcome *next = audit->coming->next;
                free(audit->coming->id);
                free(audit->coming);
                audit->coming = next;
        }
        while (audit->kept != NULL) {
                struct kept_outcome *next = audit->kept->next;
                kept_outcome_free(audit->kept);
                audit->kept = next;
        }
        if (audit->n_kept > 0)
                sbx_warn("audit: %zu outcome(s) the store never took are lost (the node's next "
                         "start ends their records as interrupted)",
                         audit->n_kept);
        pthread_mutex_destroy(&audit->kept_lock);
        pthread_cond_destroy(&audit->outcome_written);
        pthread_mutex_destroy(&audit->coming_lock);
        free(audit->node);
        free(audit);
}

bool sbx_audit_shared(const struct sbx_audit *audit)
{
        return sbx_sql_shared(audit->sql);
}

/* A JSON column's text (NULL: SQL NULL), owned by the caller; *failed when out of memory. */
static char *json_text(const json_t *value, bool *failed)
{
        if (value == NULL)
                return NULL;
        char *text = json_dumps(value, JSON_COMPACT | JSON_ENCODE_ANY);
        *failed |= text == NULL;
        return text;
}

/* The output digests sbx_audit_finish stores beside the record's own fields. */
struct outcome_digests {
        char stdout_sha256[SBX_AUDIT_SHA256_HEX_SIZE];
        char stderr_sha256[SBX_AUDIT_SHA256_HEX_SIZE];
};

/* The parameters of a write: value ?N+1 is column N's, a JSON column's text owned here. */
struct record_values {
        struct sbx_sql_value values[COLUMN_COUNT + 1]; /* the node last */
        char *owned[COLUMN_COUNT];
        bool failed; /* out of memory */
};

static void record_values_free(struct record_values *v)
{
        for (size_t i = 0; i < COLUMN_COUNT; i++)
                free(v->owned[i]);
}

static struct sbx_sql_value output_value(const void *data, size_t size, bool store)
{
        if (!store)
                return sbx_sql_blob(NULL, 0);
        /* Empty output is an empty blob, not "not stored". */
        return sbx_sql_blob(data != NULL ? data : "", size);
}

/* Sets the value of one column of record. */
static void set_column(struct record_values *v, enum column column,
                       const struct sbx_audit_record *r, const struct outcome_digests *digests)
{
        struct sbx_sql_value *value = &v->values[column];
        switch (column) {
        case COLUMN_ID:
                *value = sbx_sql_text(r->id);
                return;
        case COLUMN_TENANT:
                *value = sbx_sql_text(r->tenant);
                return;
        case COLUMN_CREATED_AT:
                *value = sbx_sql_int(r->created_at_ms);
                return;
        case COLUMN_FINISHED_AT:
                *value = sbx_sql_int(r->finished_at_ms);
                return;
        case COLUMN_LANGUAGE:
                *value = sbx_sql_text(r->language);
                return;
        case COLUMN_STATUS:
                *value = sbx_sql_text(r->status);
                return;
        case COLUMN_EXIT_CODE:
                *value = sbx_sql_int_if(r->exit_code >= 0, r->exit_code);
                return;
        case COLUMN_SIGNAL:
                *value = sbx_sql_int_if(r->signal > 0, r->signal);
                return;
        case COLUMN_ERROR:
                *value = sbx_sql_text(r->error);
                return;
        case COLUMN_REQUESTED:
        case COLUMN_EFFECTIVE:
        case COLUMN_CLAMPED:
        case COLUMN_USAGE:
        case COLUMN_EVIDENCE:
        case COLUMN_TIMING:
        case COLUMN_COMPILE: {
                const json_t *json = column == COLUMN_REQUESTED   ? r->requested
                                     : column == COLUMN_EFFECTIVE ? r->effective
                                     : column == COLUMN_CLAMPED   ? r->clamped
                                     : column == COLUMN_USAGE     ? r->usage
                                     : column == COLUMN_EVIDENCE  ? r->evidence
                                     : column == COLUMN_TIMING    ? r->timing
                                                                  : r->compile;
                v->owned[column] = json_text(json, &v->failed);
                *value = sbx_sql_text(v->owned[column]);
                return;
        }
        case COLUMN_STDOUT_BYTES:
                *value = sbx_sql_int((int64_t)r->stdout_size);
                return;
        case COLUMN_STDERR_BYTES:
                *value = sbx_sql_int((int64_t)r->stderr_size);
                return;
        case COLUMN_STDOUT_SHA256:
                *value = sbx_sql_text(digests->stdout_sha256);
                return;
        case COLUMN_STDERR_SHA256:
                *value = sbx_sql_text(digests->stderr_sha256);
                return;
        case COLUMN_STDOUT:
                *value = output_value(r->stdout_data, r->stdout_size, r->store_output);
                return;
        case COLUMN_STDERR:
                *value = output_value(r->stderr_data, r->stderr_size, r->store_output);
                return;
        case COLUMN_COUNT:
                return;
        }
}

/* Runs the write sql with the record's columns (every parameter up to the highest one used;
 * node, which may be NULL, as the last when node_too) on conn. The rows it changed, or -1 with err.
 */
/* Keeps a copy of the n values of a finish in audit's list (a warning when it cannot: the record
 * then stays running until the node's next start ends it as interrupted). */
static void keep_outcome(struct sbx_audit *audit, const struct sbx_sql_value *values, size_t n)
{
        struct kept_outcome *kept = calloc(1, sizeof(*kept));
        bool failed = kept == NULL || n > COLUMN_COUNT;
        for (size_t i = 0; !failed && i < n; i++) {
                kept->values[i] = values[i];
                kept->n = i + 1;
                if (values[i].null || values[i].type == SBX_SQL_INT)
                        continue;
                size_t size = values[i].type == SBX_SQL_TEXT ? strlen(values[i].text) + 1
                                                             : values[i].size;
                const void *from = values[i].type == SBX_SQL_TEXT ? (const void *)values[i].text
                                                                  : values[i].data;
                kept->copies[i] = malloc(size > 0 ? size : 1);
                failed = kept->copies[i] == NULL;
                if (!failed) {
                        memcpy(kept->copies[i], from, size);
                        kept->values[i].text = kept->copies[i];
                        kept->values[i].data = kept->copies[i];
                }
        }
        pthread_mutex_lock(&audit->kept_lock);
        if (!failed && audit->n_kept < SBX_AUDIT_KEPT_MAX) {
                kept->next = audit->kept;
                audit->kept = kept;
                audit->n_kept++;
                kept = NULL;
        }
        pthread_mutex_unlock(&audit->kept_lock);
        if (kept != NULL || failed) {
                sbx_warn("audit: an outcome the store did not take is not kept (out of memory, or "
                         "%d kept already)",
                         SBX_AUDIT_KEPT_MAX);
                if (kept != NULL)
                        kept_outcome_free(kept);
        }
}

int sbx_audit_write_kept(struct sbx_audit *audit, uint64_t *written, struct sbx_error *err)
{
        *written = 0;
        pthread_mutex_lock(&audit->kept_lock);
        struct kept_outcome *list = audit->kept;
        audit->kept = NULL;
        audit->n_kept = 0;
        pthread_mutex_unlock(&audit->kept_lock);
        int rc = 0;
        while (list != NULL) {
                struct kept_outcome *kept = list;
                if (rc == 0 && sbx_sql_exec(audit->sql, audit->finish_sql, kept->values, kept->n,
                                            NULL, NULL, NULL, "finish a kept outcome", err) == 0) {
                        list = kept->next;
                        kept_outcome_free(kept);
                        (*written)++;
                        continue;
                }
                /* The store failed again: the rest wait for the next call. */
                rc = -1;
                list = kept->next;
                pthread_mutex_lock(&audit->kept_lock);
                kept->next = audit->kept;
                audit->kept = kept;
                audit->n_kept++;
                pthread_mutex_unlock(&audit->kept_lock);
        }
        return rc;
}

static int audit_write_on(struct sbx_sql_conn *conn, const char *sql, const enum column *columns,
                          size_t n_columns, const struct sbx_audit_record *record,
                          const struct outcome_digests *digests, bool node_too, const char *node,
                          struct sbx_audit *keep_in, const char *what, struct sbx_error *err)
{
        struct record_values v = {0};
        for (size_t i = 0; i < COLUMN_COUNT; i++)
                v.values[i] = sbx_sql_text(NULL);
        size_t n = 0;
        for (size_t i = 0; i < n_columns; i++) {
                set_column(&v, columns[i], record, digests);
                if ((size_t)columns[i] + 1 > n)
                        n = (size_t)columns[i] + 1;
        }
        if (node_too) {
                v.values[COLUMN_COUNT] = sbx_sql_text(node);
                n = COLUMN_COUNT + 1;
        }
        uint64_t changes = 0;
        int rc = -1;
        if (v.failed)
                sbx_error_set(err, ENOMEM, "audit: %s execution %s", what,
                              record->id ? record->id : "");
        else
                rc = sbx_sql_run(conn, sql, v.values, n, NULL, NULL, &changes, what, err);
        if (rc < 0 && !v.failed && keep_in != NULL)
                keep_outcome(keep_in, v.values, n);
        record_values_free(&v);
        if (rc < 0)
                return sbx_error_prefix(err, "execution %s", record->id ? record->id : "");
        return (int)changes;
}

/* audit_write_on a connection held for it; an outcome (finish) a fleet's store did not take is
 * kept to write later. */
static int audit_write(struct sbx_audit *audit, const char *sql, const enum column *columns,
                       size_t n_columns, const struct sbx_audit_record *record,
                       const struct outcome_digests *digests, bool node_too, const char *what,
                       struct sbx_error *err)
{
        bool keep = sql == audit->finish_sql && sbx_sql_shared(audit->sql);
        struct sbx_sql_conn *conn = sbx_sql_hold(audit->sql);
        int rc = audit_write_on(conn, sql, columns, n_columns, record, digests, node_too,
                                audit->node, keep ? audit : NULL, what, err);
        sbx_sql_let_go(conn);
        return rc;
}

int sbx_audit_begin(struct sbx_audit *audit, const struct sbx_audit_record *record,
                    struct sbx_error *err)
{
        if (record->id == NULL || record->tenant == NULL || record->language == NULL)
                return sbx_error_set(err, EINVAL, "audit: record lacks id, tenant or language");
        struct sbx_audit_record running = *record;
        running.status = SBX_AUDIT_STATUS_RUNNING;
        int rc = audit_write(audit, audit->begin_sql, begin_columns, SBX_ARRAY_SIZE(begin_columns),
                             &running, NULL, true, "begin", err);
        return rc < 0 ? -1 : 0;
}

int sbx_audit_begin_queued_on(struct sbx_audit *audit, struct sbx_sql_conn *conn,
                              const struct sbx_audit_record *record, struct sbx_error *err)
{
        if (record->id == NULL || record->tenant == NULL || record->language == NULL)
                return sbx_error_set(err, EINVAL, "audit: record lacks id, tenant or language");
        struct sbx_audit_record queued = *record;
        queued.status = SBX_AUDIT_STATUS_QUEUED;
        /* No node: whichever node takes it runs it. */
        int rc =
                audit_write_on(conn, audit->begin_sql, begin_columns, SBX_ARRAY_SIZE(begin_columns),
                               &queued, NULL, true, NULL, NULL, "queue", err);
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
        int rc = audit_write(audit, audit->finish_sql, columns, SBX_ARRAY_SIZE(columns), record,
                             &digests, false, "finish", err);
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
        const struct sbx_sql_value values[] = {sbx_sql_text(id)};
        uint64_t changes = 0;
        if (sbx_sql_exec(
                    audit->sql,
                    "DELETE FROM executions WHERE id = ?1 AND status = '" SBX_AUDIT_STATUS_RUNNING
                    "'",
                    values, SBX_ARRAY_SIZE(values), NULL, NULL, &changes, "forget", err) < 0)
                return -1;
        return changes > 0;
}

int sbx_audit_interrupt_running(struct sbx_audit *audit, const char *error, int64_t finished_at_ms,
                                uint64_t *count, struct sbx_error *err)
{
        *count = 0;
        /* A fleet's store: this node's own only (the others' are theirs, or the survivors' when
         * a node died: sbx_audit_reap). */
        const struct sbx_sql_value values[] = {sbx_sql_text(error), sbx_sql_int(finished_at_ms),
                                               sbx_sql_text(audit->node)};
        return sbx_sql_exec(audit->sql,
                            "UPDATE executions SET status = 'internal_error', error = ?1, "
                            "finished_at = ?2 WHERE status = '" SBX_AUDIT_STATUS_RUNNING
                            "' AND (?3 IS NULL OR node = ?3)",
                            values, SBX_ARRAY_SIZE(values), NULL, NULL, count,
                            "interrupt running executions", err);
}

/* Column i of row as a JSON value; NULL (not json null) on failure. */
static json_t *audit_column_json(struct sbx_sql_row *row, int i, struct sbx_error *err)
{
        if (sbx_sql_is_null(row, i))
                return json_null();
        json_t *value = NULL;
        size_t size = 0;
        switch (audit_columns[i].kind) {
        case COLUMN_INTEGER:
                value = json_integer(sbx_sql_column_int(row, i));
                break;
        case COLUMN_TEXT: {
                const char *text = sbx_sql_column_text(row, i, &size);
                value = json_stringn(text, size);
                break;
        }
        case COLUMN_JSON: {
                const char *text = sbx_sql_column_text(row, i, &size);
                json_error_t json_error;
                value = json_loadb(text, size, JSON_DECODE_ANY, &json_error);
                if (value == NULL)
                        sbx_error_set(err, 0, "audit: column %s is not JSON: %s",
                                      audit_columns[i].name, json_error.text);
                return value;
        }
        case COLUMN_OUTPUT: {
                const void *data = sbx_sql_column_blob(row, i, &size);
                /* Output is bytes; JSON strings are UTF-8 (as in the POST response). */
                value = sbx_json_string_from_bytes(data, size);
                break;
        }
        }
        if (value == NULL)
                sbx_error_set(err, 0, "audit: column %s: unreadable value or out of memory",
                              audit_columns[i].name);
        return value;
}

static json_t *audit_row_json(struct sbx_sql_row *row, struct sbx_error *err)
{
        json_t *object = json_object();
        if (object == NULL) {
                sbx_error_set(err, ENOMEM, "audit: allocate record");
                return NULL;
        }
        for (int i = 0; i < COLUMN_COUNT; i++) {
                json_t *value = audit_column_json(row, i, err);
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

static int fetched_row(void *ctx, struct sbx_sql_row *row, struct sbx_error *err)
{
        json_t **out = ctx;
        *out = audit_row_json(row, err);
        return *out != NULL ? 0 : -1;
}

int sbx_audit_fetch(struct sbx_audit *audit, const char *tenant, const char *id, json_t **out,
                    struct sbx_error *err)
{
        *out = NULL;
        if (tenant == NULL || id == NULL)
                return 0;
        wait_for_outcome(audit, id);
        const struct sbx_sql_value values[] = {sbx_sql_text(tenant), sbx_sql_text(id)};
        if (sbx_sql_exec(audit->sql, audit->select_sql, values, SBX_ARRAY_SIZE(values), fetched_row,
                         out, NULL, "fetch execution", err) < 0) {
                json_decref(*out);
                *out = NULL;
                return -1;
        }
        return *out != NULL;
}

static int recent_row(void *ctx, struct sbx_sql_row *row, struct sbx_error *err)
{
        json_t *list = ctx;
        json_t *record = audit_row_json(row, err);
        if (record == NULL)
                return -1;
        json_object_del(record, "stdout");
        json_object_del(record, "stderr");
        json_object_del(record, "compile");
        if (json_array_append_new(list, record) < 0)
                return sbx_error_set(err, ENOMEM, "audit: recent executions");
        return 0;
}

int sbx_audit_recent(struct sbx_audit *audit, const char *tenant, int64_t before_ms, unsigned limit,
                     json_t **out, struct sbx_error *err)
{
        *out = json_array();
        if (*out == NULL)
                return sbx_error_set(err, ENOMEM, "audit: out of memory");
        const struct sbx_sql_value values[] = {sbx_sql_text(tenant), sbx_sql_int(before_ms),
                                               sbx_sql_int(limit)};
        if (sbx_sql_exec(audit->sql, audit->recent_sql, values, SBX_ARRAY_SIZE(values), recent_row,
                         *out, NULL, "recent executions", err) < 0) {
                json_decref(*out);
                *out = NULL;
                return -1;
        }
        return 0;
}

/* ---- Sessions ---- */

int sbx_audit_session_begin(struct sbx_audit *audit, const struct sbx_audit_session *session,
                            struct sbx_error *err)
{
        if (session->id == NULL || session->tenant == NULL || session->language == NULL)
                return sbx_error_set(err, EINVAL, "audit: a session needs id, tenant, language");
        bool failed = false;
        _cleanup_free_ char *requested = json_text(session->requested, &failed);
        _cleanup_free_ char *effective = json_text(session->effective, &failed);
        _cleanup_free_ char *clamped = json_text(session->clamped, &failed);
        if (failed)
                return sbx_error_set(err, ENOMEM, "audit: begin session");
        const struct sbx_sql_value values[] = {
                sbx_sql_text(session->id),
                sbx_sql_text(session->tenant),
                sbx_sql_text(session->language),
                sbx_sql_int(session->created_at_ms),
                sbx_sql_text(requested),
                sbx_sql_text(effective),
                sbx_sql_text(clamped),
                sbx_sql_text(session->kind ? session->kind : "session"),
                sbx_sql_text(audit->node),
        };
        return sbx_sql_exec(audit->sql,
                            "INSERT INTO sessions (id, tenant, language, created_at, requested, "
                            "effective, clamped, kind, node) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, "
                            "?8, ?9)",
                            values, SBX_ARRAY_SIZE(values), NULL, NULL, NULL, "begin session", err);
}

int sbx_audit_session_end(struct sbx_audit *audit, const struct sbx_audit_session *session,
                          struct sbx_error *err)
{
        if (session->id == NULL || session->end_reason == NULL)
                return sbx_error_set(err, EINVAL, "audit: a session's end needs id and reason");
        bool failed = false;
        _cleanup_free_ char *evidence = json_text(session->evidence, &failed);
        _cleanup_free_ char *summary = json_text(session->summary, &failed);
        if (failed)
                return sbx_error_set(err, ENOMEM, "audit: end session");
        const struct sbx_sql_value values[] = {
                sbx_sql_text(session->id),
                sbx_sql_int(session->ended_at_ms),
                sbx_sql_text(session->end_reason),
                sbx_sql_text(evidence),
                sbx_sql_text(summary),
        };
        uint64_t changes = 0;
        if (sbx_sql_exec(audit->sql,
                         "UPDATE sessions SET ended_at = ?2, end_reason = ?3, evidence = ?4, "
                         "summary = ?5 WHERE id = ?1 AND ended_at IS NULL",
                         values, SBX_ARRAY_SIZE(values), NULL, NULL, &changes, "end session",
                         err) < 0)
                return -1;
        return changes > 0;
}

int sbx_audit_end_open_sessions(struct sbx_audit *audit, const char *reason, int64_t ended_at_ms,
                                uint64_t *count, struct sbx_error *err)
{
        *count = 0;
        const struct sbx_sql_value values[] = {sbx_sql_int(ended_at_ms), sbx_sql_text(reason),
                                               sbx_sql_text(audit->node)};
        return sbx_sql_exec(audit->sql,
                            "UPDATE sessions SET ended_at = ?1, end_reason = ?2 WHERE ended_at IS "
                            "NULL AND (?3 IS NULL OR node = ?3)",
                            values, SBX_ARRAY_SIZE(values), NULL, NULL, count, "end open sessions",
                            err);
}
