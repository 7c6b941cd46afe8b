/* The audit store's SQL on SQLite or PostgreSQL (sql.h). */
#include "service/sql.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>
#include <sqlite3.h>

#include "util/cleanup.h"
#include "util/log.h"

/* The statements a database keeps prepared (SQLite) or rewritten (PostgreSQL), found by the
 * address of their text: the store has a few dozen. One past it is prepared for its run only. */
#define SQL_CACHE_SIZE 64

/* The most parameters a statement takes (the executions' insert has the most). */
#define SQL_MAX_VALUES 32

/* PostgreSQL's type oids for the parameters (pg_type.h is the server's header). */
#define OID_BYTEA 17
#define OID_INT8  20
#define OID_TEXT  25

/* The most blob columns one row of the store has whose bytes are decoded at once. */
#define ROW_MAX_BLOBS 8

struct cached {
        const char *key;
        sqlite3_stmt *statement; /* SQLite */
        char *rewritten;         /* PostgreSQL: $N for ?N */
};

struct sbx_sql {
        bool shared;
        /* SQLite: one connection under lock, its statements kept prepared. */
        pthread_mutex_t lock;
        sqlite3 *db;
        /* PostgreSQL: the pool's. */
        struct sbx_pg *pg;
        pthread_mutex_t cache_lock;
        struct cached cache[SQL_CACHE_SIZE];
        size_t n_cached;
};

struct sbx_sql_conn {
        struct sbx_sql *sql;
        size_t slot;         /* PostgreSQL's connection */
        bool in_transaction; /* PostgreSQL: no statement is sent twice inside one */
};

struct sbx_sql_row {
        sqlite3_stmt *statement; /* SQLite's, else: */
        PGresult *result;
        int index;
        unsigned char *decoded[ROW_MAX_BLOBS]; /* bytea columns read so far */
};

static int sqlite_error(struct sbx_error *err, sqlite3 *db, const char *what)
{
        return sbx_error_set(err, 0, "audit: %s: %s", what,
                             db ? sqlite3_errmsg(db) : "out of memory");
}

/* ---- SQLite ---- */

/* The single integer a PRAGMA query answers, or -1 with err. */
static int pragma_integer(sqlite3 *db, const char *text, int64_t *value, struct sbx_error *err)
{
        sqlite3_stmt *statement = NULL;
        if (sqlite3_prepare_v2(db, text, -1, &statement, NULL) != SQLITE_OK)
                return sqlite_error(err, db, text);
        int rc = sqlite3_step(statement);
        if (rc == SQLITE_ROW)
                *value = sqlite3_column_int64(statement, 0);
        sqlite3_finalize(statement);
        if (rc != SQLITE_ROW)
                return sqlite_error(err, db, text);
        return 0;
}

/* WAL must be switched on outside a transaction, and SQLite answers with the mode it really
 * chose (it keeps "memory" or "delete" on file systems without shared memory), so check it. */
static int enable_wal(sqlite3 *db, struct sbx_error *err)
{
        sqlite3_stmt *statement = NULL;
        if (sqlite3_prepare_v2(db, "PRAGMA journal_mode=WAL", -1, &statement, NULL) != SQLITE_OK)
                return sqlite_error(err, db, "PRAGMA journal_mode=WAL");
        int rc = sqlite3_step(statement);
        const unsigned char *mode = rc == SQLITE_ROW ? sqlite3_column_text(statement, 0) : NULL;
        bool wal = mode != NULL && strcmp((const char *)mode, "wal") == 0;
        sqlite3_finalize(statement);
        if (rc != SQLITE_ROW)
                return sqlite_error(err, db, "PRAGMA journal_mode=WAL");
        if (!wal)
                return sbx_error_set(err, 0, "audit: the database refused WAL mode");
        return 0;
}

/* Brings the schema to version n. BEGIN IMMEDIATE takes the write lock before user_version is
 * read, so two processes opening the same file at once cannot both apply a step; all steps and
 * the new user_version commit together or not at all. */
static int sqlite_migrate(sqlite3 *db, const char *const *migrations, size_t n,
                          struct sbx_error *err)
{
        if (sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK)
                return sqlite_error(err, db, "begin migration");
        int64_t version = 0;
        if (pragma_integer(db, "PRAGMA user_version", &version, err) < 0)
                goto rollback;
        if (version < 0 || (uint64_t)version > n) {
                sbx_error_set(err, 0,
                              "audit: schema version %lld is not one this sandboxd knows "
                              "(0 to %zu): written by a newer version?",
                              (long long)version, n);
                goto rollback;
        }
        for (size_t step = (size_t)version; step < n; step++) {
                if (sqlite3_exec(db, migrations[step], NULL, NULL, NULL) != SQLITE_OK) {
                        char what[64];
                        snprintf(what, sizeof(what), "migration to version %zu", step + 1);
                        sqlite_error(err, db, what);
                        goto rollback;
                }
        }
        if ((uint64_t)version < n) {
                char text[64];
                snprintf(text, sizeof(text), "PRAGMA user_version = %zu", n);
                if (sqlite3_exec(db, text, NULL, NULL, NULL) != SQLITE_OK) {
                        sqlite_error(err, db, text);
                        goto rollback;
                }
                sbx_info("audit: schema migrated from version %lld to %zu", (long long)version, n);
        }
        if (sqlite3_exec(db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK) {
                sqlite_error(err, db, "commit migration");
                goto rollback;
        }
        return 0;
rollback:
        sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
        return -1;
}

static struct sbx_sql *sql_new(void)
{
        struct sbx_sql *sql = calloc(1, sizeof(*sql));
        if (sql == NULL)
                return NULL;
        pthread_mutex_init(&sql->lock, NULL);
        pthread_mutex_init(&sql->cache_lock, NULL);
        return sql;
}

struct sbx_sql *sbx_sql_open_sqlite(const char *path, const char *const *migrations, size_t n,
                                    int busy_ms, struct sbx_error *err)
{
        struct sbx_sql *sql = sql_new();
        if (sql == NULL) {
                sbx_error_set(err, ENOMEM, "audit: allocate");
                return NULL;
        }
        /* NOMUTEX: sql->lock already serialises every use, SQLite's own mutexes would only add
         * cost. NOFOLLOW: a symlink planted in the data directory must not redirect the log. */
        if (sqlite3_open_v2(path, &sql->db,
                            SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_NOFOLLOW,
                            NULL) != SQLITE_OK) {
                sqlite_error(err, sql->db, "open");
                sbx_sql_close(sql);
                return NULL;
        }
        sqlite3_extended_result_codes(sql->db, 1);
        /* DEFENSIVE: no SQL this process runs may corrupt the file on purpose (writable_schema,
         * raw page writes); the store only ever runs its own fixed statements anyway. */
        sqlite3_db_config(sql->db, SQLITE_DBCONFIG_DEFENSIVE, 1, NULL);
        sqlite3_busy_timeout(sql->db, busy_ms);
        int rc = enable_wal(sql->db, err);
        if (rc == 0 &&
            sqlite3_exec(sql->db, "PRAGMA synchronous=NORMAL", NULL, NULL, NULL) != SQLITE_OK)
                rc = sqlite_error(err, sql->db, "PRAGMA synchronous=NORMAL");
        if (rc == 0)
                rc = sqlite_migrate(sql->db, migrations, n, err);
        if (rc < 0) {
                sbx_sql_close(sql);
                return NULL;
        }
        return sql;
}

struct sbx_sql *sbx_sql_open_pg(struct sbx_pg *pg, struct sbx_error *err)
{
        struct sbx_sql *sql = sql_new();
        if (sql == NULL) {
                sbx_error_set(err, ENOMEM, "audit: allocate");
                return NULL;
        }
        sql->shared = true;
        sql->pg = pg;
        return sql;
}

void sbx_sql_close(struct sbx_sql *sql)
{
        if (sql == NULL)
                return;
        for (size_t i = 0; i < sql->n_cached; i++) {
                sqlite3_finalize(sql->cache[i].statement);
                free(sql->cache[i].rewritten);
        }
        /* The last connection to close checkpoints the WAL into the database and removes it. */
        if (sql->db != NULL && sqlite3_close(sql->db) != SQLITE_OK)
                sbx_warn("audit: close: %s", sqlite3_errmsg(sql->db));
        pthread_mutex_destroy(&sql->cache_lock);
        pthread_mutex_destroy(&sql->lock);
        free(sql);
}

bool sbx_sql_shared(const struct sbx_sql *sql)
{
        return sql->shared;
}

struct sbx_sql_conn *sbx_sql_hold(struct sbx_sql *sql)
{
        struct sbx_sql_conn *conn = calloc(1, sizeof(*conn));
        if (conn == NULL)
                return NULL;
        conn->sql = sql;
        if (sql->shared)
                conn->slot = sbx_pg_hold(sql->pg);
        else
                pthread_mutex_lock(&sql->lock);
        return conn;
}

void sbx_sql_let_go(struct sbx_sql_conn *conn)
{
        if (conn == NULL)
                return;
        if (conn->in_transaction)
                sbx_sql_rollback(conn);
        if (conn->sql->shared)
                sbx_pg_let_go(conn->sql->pg, conn->slot);
        else
                pthread_mutex_unlock(&conn->sql->lock);
        free(conn);
}

/* PostgreSQL's form of text: $N for each ?N outside a quoted literal. */
static char *rewrite_parameters(const char *text)
{
        char *out = malloc(strlen(text) + 1);
        if (out == NULL)
                return NULL;
        bool quoted = false;
        size_t j = 0;
        for (const char *p = text; *p != '\0'; p++) {
                if (*p == '\'')
                        quoted = !quoted;
                out[j++] = !quoted && *p == '?' && p[1] >= '0' && p[1] <= '9' ? '$' : *p;
        }
        out[j] = '\0';
        return out;
}

/* The cached form of text: its prepared statement (SQLite: *statement, with *owned true when it
 * is not kept, !keep or the cache full, and is the caller's to finalize) or its rewritten text
 * (PostgreSQL; *rewritten_owned, the caller's to free, when not kept). */
static int cached_form(struct sbx_sql *sql, const char *text, bool keep, sqlite3_stmt **statement,
                       bool *owned, const char **rewritten, char **rewritten_owned,
                       struct sbx_error *err)
{
        *owned = false;
        *rewritten_owned = NULL;
        pthread_mutex_lock(&sql->cache_lock);
        for (size_t i = 0; keep && i < sql->n_cached; i++)
                if (sql->cache[i].key == text) {
                        *statement = sql->cache[i].statement;
                        *rewritten = sql->cache[i].rewritten;
                        pthread_mutex_unlock(&sql->cache_lock);
                        return 0;
                }
        struct cached made = {.key = text};
        int rc = 0;
        if (sql->shared) {
                made.rewritten = rewrite_parameters(text);
                if (made.rewritten == NULL)
                        rc = sbx_error_set(err, ENOMEM, "audit: a statement");
        } else {
                /* PERSISTENT: the statements live as long as the connection. */
                if (sqlite3_prepare_v3(sql->db, text, -1, SQLITE_PREPARE_PERSISTENT,
                                       &made.statement, NULL) != SQLITE_OK)
                        rc = sqlite_error(err, sql->db, text);
        }
        if (rc == 0 && keep && sql->n_cached < SQL_CACHE_SIZE) {
                sql->cache[sql->n_cached++] = made;
        } else if (rc == 0) {
                *owned = made.statement != NULL;
                *rewritten_owned = made.rewritten;
        }
        pthread_mutex_unlock(&sql->cache_lock);
        *statement = made.statement;
        *rewritten = made.rewritten;
        return rc;
}

static int sqlite_bind(sqlite3_stmt *s, int index, const struct sbx_sql_value *v)
{
        if (v->null)
                return sqlite3_bind_null(s, index);
        switch (v->type) {
        case SBX_SQL_TEXT:
                /* STATIC: the values outlive the step; bindings are cleared right after it. */
                return sqlite3_bind_text(s, index, v->text, -1, SQLITE_STATIC);
        case SBX_SQL_INT:
                return sqlite3_bind_int64(s, index, v->integer);
        case SBX_SQL_BLOB:
                if (v->size == 0)
                        return sqlite3_bind_zeroblob(s, index, 0);
                return sqlite3_bind_blob64(s, index, v->data, v->size, SQLITE_STATIC);
        case SBX_SQL_NULL:
                break;
        }
        return SQLITE_MISUSE;
}

static int sqlite_run(struct sbx_sql_conn *conn, sqlite3_stmt *s,
                      const struct sbx_sql_value *values, size_t n,
                      int (*on_row)(void *, struct sbx_sql_row *, struct sbx_error *), void *ctx,
                      uint64_t *changes, const char *what, struct sbx_error *err)
{
        int rc = SQLITE_OK;
        for (size_t i = 0; i < n && rc == SQLITE_OK; i++)
                rc = sqlite_bind(s, (int)i + 1, &values[i]);
        int result = 0;
        struct sbx_sql_row row = {.statement = s};
        while (rc == SQLITE_OK && (rc = sqlite3_step(s)) == SQLITE_ROW) {
                if (on_row != NULL && on_row(ctx, &row, err) < 0) {
                        result = -1;
                        break;
                }
                rc = SQLITE_OK;
        }
        if (result == 0 && rc != SQLITE_DONE)
                result = sbx_error_set(err, 0, "audit: %s: %s", what, sqlite3_errstr(rc));
        if (result == 0 && changes != NULL)
                *changes = (uint64_t)sqlite3_changes(conn->sql->db);
        sqlite3_reset(s);
        sqlite3_clear_bindings(s);
        return result;
}

/* ---- PostgreSQL ---- */

static int pg_run(struct sbx_sql_conn *conn, const char *text, const struct sbx_sql_value *values,
                  size_t n, int (*on_row)(void *, struct sbx_sql_row *, struct sbx_error *),
                  void *ctx, uint64_t *changes, const char *what, struct sbx_error *err)
{
        if (n > SQL_MAX_VALUES)
                return sbx_error_set(err, E2BIG, "audit: %s: too many parameters", what);
        Oid types[SQL_MAX_VALUES];
        const char *texts[SQL_MAX_VALUES];
        int lengths[SQL_MAX_VALUES];
        int formats[SQL_MAX_VALUES];
        char integers[SQL_MAX_VALUES][24];
        for (size_t i = 0; i < n; i++) {
                const struct sbx_sql_value *v = &values[i];
                lengths[i] = 0;
                formats[i] = 0;
                texts[i] = NULL;
                switch (v->type) {
                case SBX_SQL_TEXT:
                        types[i] = OID_TEXT;
                        texts[i] = v->null ? NULL : v->text;
                        break;
                case SBX_SQL_INT:
                        types[i] = OID_INT8;
                        snprintf(integers[i], sizeof(integers[i]), "%" PRId64, v->integer);
                        texts[i] = v->null ? NULL : integers[i];
                        break;
                case SBX_SQL_BLOB:
                        /* Binary: the bytes as they are, no escaping. */
                        types[i] = OID_BYTEA;
                        formats[i] = 1;
                        if (v->size > INT32_MAX)
                                return sbx_error_set(err, EFBIG, "audit: %s: a blob over 2 GiB",
                                                     what);
                        lengths[i] = (int)v->size;
                        texts[i] = v->null ? NULL : v->size == 0 ? "" : (const char *)v->data;
                        break;
                case SBX_SQL_NULL:
                        types[i] = 0; /* the server infers it from the parameter's place */
                        break;
                }
        }
        PGresult *result = sbx_pg_exec_on(conn->sql->pg, conn->slot, text, (int)n, types, texts,
                                          lengths, formats, !conn->in_transaction, err);
        if (result == NULL)
                return sbx_error_prefix(err, "audit: %s", what);
        int rc = 0;
        int rows = PQntuples(result);
        for (int r = 0; r < rows && on_row != NULL && rc == 0; r++) {
                struct sbx_sql_row row = {.result = result, .index = r};
                rc = on_row(ctx, &row, err);
                for (size_t b = 0; b < ROW_MAX_BLOBS; b++)
                        PQfreemem(row.decoded[b]);
        }
        if (rc == 0 && changes != NULL) {
                const char *count = PQcmdTuples(result);
                *changes = count[0] != '\0' ? strtoull(count, NULL, 10) : 0;
        }
        PQclear(result);
        return rc < 0 ? -1 : 0;
}

/* ---- Either ---- */

static int run(struct sbx_sql_conn *conn, const char *text, bool keep,
               const struct sbx_sql_value *values, size_t n,
               int (*on_row)(void *, struct sbx_sql_row *, struct sbx_error *), void *ctx,
               uint64_t *changes, const char *what, struct sbx_error *err)
{
        if (conn == NULL)
                return sbx_error_set(err, ENOMEM, "audit: %s", what);
        sqlite3_stmt *statement = NULL;
        bool owned = false;
        const char *rewritten = NULL;
        _cleanup_free_ char *rewritten_owned = NULL;
        if (cached_form(conn->sql, text, keep, &statement, &owned, &rewritten, &rewritten_owned,
                        err) < 0)
                return sbx_error_prefix(err, "%s", what);
        int rc;
        if (conn->sql->shared)
                rc = pg_run(conn, rewritten, values, n, on_row, ctx, changes, what, err);
        else
                rc = sqlite_run(conn, statement, values, n, on_row, ctx, changes, what, err);
        if (owned)
                sqlite3_finalize(statement);
        return rc;
}

int sbx_sql_run(struct sbx_sql_conn *conn, const char *text, const struct sbx_sql_value *values,
                size_t n, int (*on_row)(void *, struct sbx_sql_row *, struct sbx_error *),
                void *ctx, uint64_t *changes, const char *what, struct sbx_error *err)
{
        return run(conn, text, true, values, n, on_row, ctx, changes, what, err);
}

int sbx_sql_run_once(struct sbx_sql_conn *conn, const char *text,
                     const struct sbx_sql_value *values, size_t n,
                     int (*on_row)(void *, struct sbx_sql_row *, struct sbx_error *), void *ctx,
                     uint64_t *changes, const char *what, struct sbx_error *err)
{
        return run(conn, text, false, values, n, on_row, ctx, changes, what, err);
}

int sbx_sql_exec(struct sbx_sql *sql, const char *text, const struct sbx_sql_value *values,
                 size_t n, int (*on_row)(void *, struct sbx_sql_row *, struct sbx_error *),
                 void *ctx, uint64_t *changes, const char *what, struct sbx_error *err)
{
        struct sbx_sql_conn *conn = sbx_sql_hold(sql);
        int rc = sbx_sql_run(conn, text, values, n, on_row, ctx, changes, what, err);
        sbx_sql_let_go(conn);
        return rc;
}

int sbx_sql_begin(struct sbx_sql_conn *conn, struct sbx_error *err)
{
        const char *text = conn->sql->shared ? "BEGIN" : "BEGIN IMMEDIATE";
        if (sbx_sql_run(conn, text, NULL, 0, NULL, NULL, NULL, "begin", err) < 0)
                return -1;
        conn->in_transaction = true;
        return 0;
}

int sbx_sql_commit(struct sbx_sql_conn *conn, struct sbx_error *err)
{
        int rc = sbx_sql_run(conn, "COMMIT", NULL, 0, NULL, NULL, NULL, "commit", err);
        if (rc == 0)
                conn->in_transaction = false;
        return rc;
}

void sbx_sql_rollback(struct sbx_sql_conn *conn)
{
        struct sbx_error ignored = {0};
        conn->in_transaction = false;
        sbx_sql_run(conn, "ROLLBACK", NULL, 0, NULL, NULL, NULL, "rollback", &ignored);
}

int sbx_sql_column_count(struct sbx_sql_row *row)
{
        if (row->statement != NULL)
                return sqlite3_column_count(row->statement);
        return PQnfields(row->result);
}

const char *sbx_sql_column_name(struct sbx_sql_row *row, int i)
{
        if (row->statement != NULL)
                return sqlite3_column_name(row->statement, i);
        return PQfname(row->result, i);
}

enum sbx_sql_type sbx_sql_column_type(struct sbx_sql_row *row, int i)
{
        if (row->statement != NULL) {
                int type = sqlite3_column_type(row->statement, i);
                return type == SQLITE_INTEGER ? SBX_SQL_INT
                       : type == SQLITE_BLOB  ? SBX_SQL_BLOB
                                              : SBX_SQL_TEXT;
        }
        Oid type = PQftype(row->result, i);
        return type == OID_INT8 ? SBX_SQL_INT : type == OID_BYTEA ? SBX_SQL_BLOB : SBX_SQL_TEXT;
}

bool sbx_sql_is_null(struct sbx_sql_row *row, int i)
{
        if (row->statement != NULL)
                return sqlite3_column_type(row->statement, i) == SQLITE_NULL;
        return PQgetisnull(row->result, row->index, i);
}

int64_t sbx_sql_column_int(struct sbx_sql_row *row, int i)
{
        if (row->statement != NULL)
                return sqlite3_column_int64(row->statement, i);
        return strtoll(PQgetvalue(row->result, row->index, i), NULL, 10);
}

const char *sbx_sql_column_text(struct sbx_sql_row *row, int i, size_t *size)
{
        *size = 0;
        if (sbx_sql_is_null(row, i))
                return NULL;
        if (row->statement != NULL) {
                /* The pointer first, then the size: reading the pointer may convert the value. */
                const char *text = (const char *)sqlite3_column_text(row->statement, i);
                *size = (size_t)sqlite3_column_bytes(row->statement, i);
                return text;
        }
        *size = (size_t)PQgetlength(row->result, row->index, i);
        return PQgetvalue(row->result, row->index, i);
}

const void *sbx_sql_column_blob(struct sbx_sql_row *row, int i, size_t *size)
{
        *size = 0;
        if (sbx_sql_is_null(row, i))
                return NULL;
        if (row->statement != NULL) {
                const void *data = sqlite3_column_blob(row->statement, i);
                *size = (size_t)sqlite3_column_bytes(row->statement, i);
                return data != NULL ? data : "";
        }
        if (PQftype(row->result, i) != OID_BYTEA)
                return sbx_sql_column_text(row, i, size);
        /* Text results give bytea in hex; decoded here, freed when the row's callback returns. */
        for (size_t b = 0; b < ROW_MAX_BLOBS; b++)
                if (row->decoded[b] == NULL) {
                        row->decoded[b] = PQunescapeBytea(
                                (const unsigned char *)PQgetvalue(row->result, row->index, i),
                                size);
                        return row->decoded[b];
                }
        return NULL;
}
