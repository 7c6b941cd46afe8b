/* What the audit store's files share (audit.c, audit_queue.c): the connection, its lock and its
 * prepared statements. Not for anyone else: the rest of the program uses audit.h and
 * audit_queue.h. */
#pragma once

#include <pthread.h>

#include <sqlite3.h>

#include "service/audit.h"
#include "util/error.h"

struct coming_outcome {
        struct coming_outcome *next;
        char *id;
};

struct sbx_audit {
        pthread_mutex_t lock; /* serialises every use of db and of the statements */
        /* The outcomes on their way, and the condition a fetch of one of them waits on. Their
         * own lock: a fetch waits without holding the database's. */
        pthread_mutex_t coming_lock;
        pthread_cond_t outcome_written;
        struct coming_outcome *coming;
        sqlite3 *db;
        sqlite3_stmt *begin;     /* INSERT of begin_columns */
        sqlite3_stmt *finish;    /* UPDATE of outcome_columns WHERE id = ?1 AND running */
        sqlite3_stmt *forget;    /* DELETE WHERE id = ?1 AND running */
        sqlite3_stmt *interrupt; /* UPDATE status, error, finished_at of every running row */
        sqlite3_stmt *select;
        sqlite3_stmt *recent; /* a tenant's executions, newest first (sbx_audit_recent) */
};

/* Runs sql with the parameters bind sets, under the lock: the rows it changed, or -1 with err
 * (what names the statement in the message). */
int sbx_audit_statement(struct sbx_audit *audit, const char *sql, const char *what,
                        int (*bind)(sqlite3_stmt *, const void *), const void *ctx,
                        struct sbx_error *err);

/* sbx_audit_begin's insert with status queued, for audit_queue.c; the caller holds the lock. */
int sbx_audit_begin_queued_locked(struct sbx_audit *audit, const struct sbx_audit_record *record,
                                  struct sbx_error *err);

/* A pending delivery of target_id (kind "execution" or "batch") to url, for audit_queue.c's
 * transaction; the caller holds the lock. */
int sbx_audit_delivery_insert_locked(struct sbx_audit *audit, const char *tenant, const char *kind,
                                     const char *target_id, const char *url, int64_t now_ms,
                                     struct sbx_error *err);
