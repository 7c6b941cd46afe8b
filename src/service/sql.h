/* The SQL the audit store runs (audit.c, audit_queue.c, audit_deliveries.c), on either of its
 * two databases: SQLite (one node's <data_dir>/audit.db, the default) or PostgreSQL (a fleet's
 * shared store, [store] url; its connections are service/pg.h's). The store's code is written
 * once against this; its statements use the subset of SQL both understand, with parameters
 * written ?1, ?2, ... (turned into PostgreSQL's $1, $2, ... here), and a statement only one of
 * them knows is chosen with sbx_sql_shared(). The schemas are each database's own (the
 * migrations differ in types and triggers): SQLite's are audit.c's, PostgreSQL's pg.c's.
 *
 * A statement runs on a held connection: SQLite's one connection under its lock, or one of
 * PostgreSQL's pool. A transaction is BEGIN ... COMMIT on one held connection. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "service/pg.h"
#include "util/error.h"

struct sbx_sql;      /* a database */
struct sbx_sql_conn; /* a connection held by one thread */
struct sbx_sql_row;  /* the row a statement's row callback is handed */

/* One parameter. text and data NULL are SQL NULL, as is an integer with null set; a blob of
 * size 0 with data NULL is NULL, with any other data an empty blob. SBX_SQL_NULL is a NULL of
 * whatever type its place needs (PostgreSQL is told no type: not for `?N IS NULL`, whose
 * parameter needs one). */
enum sbx_sql_type { SBX_SQL_TEXT, SBX_SQL_INT, SBX_SQL_BLOB, SBX_SQL_NULL };

struct sbx_sql_value {
        enum sbx_sql_type type;
        bool null;
        int64_t integer;
        const char *text;
        const void *data;
        size_t size;
};

static inline struct sbx_sql_value sbx_sql_text(const char *text)
{
        return (struct sbx_sql_value){.type = SBX_SQL_TEXT, .null = text == NULL, .text = text};
}

static inline struct sbx_sql_value sbx_sql_null(void)
{
        return (struct sbx_sql_value){.type = SBX_SQL_NULL, .null = true};
}

static inline struct sbx_sql_value sbx_sql_int(int64_t integer)
{
        return (struct sbx_sql_value){.type = SBX_SQL_INT, .integer = integer};
}

/* An integer when present, else NULL. */
static inline struct sbx_sql_value sbx_sql_int_if(bool present, int64_t integer)
{
        return (struct sbx_sql_value){.type = SBX_SQL_INT, .null = !present, .integer = integer};
}

static inline struct sbx_sql_value sbx_sql_blob(const void *data, size_t size)
{
        return (struct sbx_sql_value){
                .type = SBX_SQL_BLOB, .null = data == NULL, .data = data, .size = size};
}

/* Opens (creating) the SQLite database at path, which the caller made (audit.c: mode 0600, no
 * symlink): WAL, synchronous=NORMAL, busy_timeout busy_ms, defensive, and the schema migrated by
 * PRAGMA user_version through migrations[0..n-1] (step i brings version i to i + 1), all in one
 * transaction. A database newer than n is refused. */
struct sbx_sql *sbx_sql_open_sqlite(const char *path, const char *const *migrations, size_t n,
                                    int busy_ms, struct sbx_error *err);

/* The store on PostgreSQL's connections (borrowed: they outlive it; pg.c migrated its schema). */
struct sbx_sql *sbx_sql_open_pg(struct sbx_pg *pg, struct sbx_error *err);

void sbx_sql_close(struct sbx_sql *sql);

/* Whether the database is a fleet's shared PostgreSQL (else a node's own SQLite). */
bool sbx_sql_shared(const struct sbx_sql *sql);

/* Holds a connection (waiting for one): every statement runs on one. Give it back with
 * sbx_sql_let_go; a transaction it began and did not end is rolled back then. */
struct sbx_sql_conn *sbx_sql_hold(struct sbx_sql *sql);
void sbx_sql_let_go(struct sbx_sql_conn *conn);

/* Runs one statement (sql must outlive the database: a string literal or a text made at open,
 * since its prepared form is kept by that pointer) with its n parameters. For each row it
 * returns, calls on_row (NULL: the rows are not wanted), which returns -1 with err to stop the
 * statement there. *changes (NULL: not wanted) gets the rows an INSERT, UPDATE or DELETE
 * changed. 0, or -1 with err naming what. */
int sbx_sql_run(struct sbx_sql_conn *conn, const char *sql, const struct sbx_sql_value *values,
                size_t n, int (*on_row)(void *ctx, struct sbx_sql_row *row, struct sbx_error *err),
                void *ctx, uint64_t *changes, const char *what, struct sbx_error *err);

/* sbx_sql_run for a text made for this run only (freed after it): its prepared form is not
 * kept. */
int sbx_sql_run_once(struct sbx_sql_conn *conn, const char *sql, const struct sbx_sql_value *values,
                     size_t n,
                     int (*on_row)(void *ctx, struct sbx_sql_row *row, struct sbx_error *err),
                     void *ctx, uint64_t *changes, const char *what, struct sbx_error *err);

/* sbx_sql_run on a connection held for it. */
int sbx_sql_exec(struct sbx_sql *sql, const char *text, const struct sbx_sql_value *values,
                 size_t n, int (*on_row)(void *ctx, struct sbx_sql_row *row, struct sbx_error *err),
                 void *ctx, uint64_t *changes, const char *what, struct sbx_error *err);

/* A transaction on conn: SQLite's takes the write lock at once (BEGIN IMMEDIATE). */
int sbx_sql_begin(struct sbx_sql_conn *conn, struct sbx_error *err);
int sbx_sql_commit(struct sbx_sql_conn *conn, struct sbx_error *err);
void sbx_sql_rollback(struct sbx_sql_conn *conn);

/* A row's columns: how many, each one's name, and the type of its value (for a column that is
 * NULL: any). */
int sbx_sql_column_count(struct sbx_sql_row *row);
const char *sbx_sql_column_name(struct sbx_sql_row *row, int i);
enum sbx_sql_type sbx_sql_column_type(struct sbx_sql_row *row, int i);

/* Column i of a row. A text's or blob's bytes stay valid until on_row returns; a blob or a text
 * that is NULL reads as NULL with size 0. */
bool sbx_sql_is_null(struct sbx_sql_row *row, int i);
int64_t sbx_sql_column_int(struct sbx_sql_row *row, int i);
const char *sbx_sql_column_text(struct sbx_sql_row *row, int i, size_t *size);
const void *sbx_sql_column_blob(struct sbx_sql_row *row, int i, size_t *size);
