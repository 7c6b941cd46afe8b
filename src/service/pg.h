/* The PostgreSQL store's connections (libpq) and its schema, for the state a fleet of nodes shares
 * ([store] url; service/quota_pg.h is what keeps its state there).
 *
 * A fixed number of connections, each used by one thread at a time: a query takes a free one
 * (waiting for one when all are busy), runs one statement, and gives it back. A connection the
 * server dropped (PostgreSQL restarted, the network cut) is reset and the statement tried once
 * more on the new one; when the server cannot be reached the query fails with err, and the next
 * query tries again, so that nothing but the requests made meanwhile notices an outage.
 *
 * The schema is versioned: sbx_pg_open applies, in one transaction under an advisory lock (nodes
 * starting together wait for each other), every migration newer than the version the database
 * records in sandboxd_schema. A database whose version is newer than this build knows is
 * refused. */
#pragma once

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>

#include "util/error.h"

struct sbx_pg;

/* Connects to url (a libpq connection URI; connect_timeout 5 s unless it says otherwise) with
 * `connections` connections, at least 1, and migrates the schema. */
int sbx_pg_open(const char *url, size_t connections, struct sbx_pg **out, struct sbx_error *err);

/* Closes every connection. NULL is a no-op. No query may be running. */
void sbx_pg_close(struct sbx_pg *pg);

/* Runs sql with n text parameters (NULL: SQL NULL) and returns its result, which the caller
 * PQclear()s: PGRES_TUPLES_OK or PGRES_COMMAND_OK. NULL with err on any failure (the server's
 * message then in err). */
PGresult *sbx_pg_query(struct sbx_pg *pg, const char *sql, int n, const char *const *values,
                       struct sbx_error *err);

/* A connection held by one thread for several statements (a transaction: service/sql.c): its
 * slot, to hand to sbx_pg_exec_on and back to sbx_pg_let_go. Waits while every one is busy. */
size_t sbx_pg_hold(struct sbx_pg *pg);
void sbx_pg_let_go(struct sbx_pg *pg, size_t slot);

/* PQexecParams on the held connection slot (its arguments as libpq's), the result as
 * sbx_pg_query's. A connection the server dropped is reset first; when may_retry (not inside a
 * transaction, which the drop ended) a statement that failed on it is sent once more. */
PGresult *sbx_pg_exec_on(struct sbx_pg *pg, size_t slot, const char *sql, int n, const Oid *types,
                         const char *const *values, const int *lengths, const int *formats,
                         bool may_retry, struct sbx_error *err);

/* The schema version this build migrates to. */
int sbx_pg_schema_version(void);

/* A connection of its own that LISTENs to channel (the queue's: service/audit.h), for one thread
 * that waits for other nodes' NOTIFYs. */
struct sbx_pg_listener;
int sbx_pg_listen(const char *url, const char *channel, struct sbx_pg_listener **out,
                  struct sbx_error *err);

/* Waits at most timeout_ms for a notification: 1 when one or more came (all taken), 0 when none
 * did, -1 with err when the connection failed (the next call connects again). */
int sbx_pg_listener_wait(struct sbx_pg_listener *listener, int timeout_ms, struct sbx_error *err);

/* NULL is a no-op. */
void sbx_pg_listener_close(struct sbx_pg_listener *listener);
