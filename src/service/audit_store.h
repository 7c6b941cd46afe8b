/* What the audit store's files share (audit.c, audit_queue.c, audit_deliveries.c): its database
 * (service/sql.h), this node's name in a fleet's, and the statements made at open. Not for anyone
 * else: the rest of the program uses audit.h, audit_queue.h and audit_deliveries.h. */
#pragma once

#include <pthread.h>

#include "service/audit.h"
#include "service/sql.h"
#include "util/error.h"

struct coming_outcome {
        struct coming_outcome *next;
        char *id;
};

struct sbx_audit {
        struct sbx_sql *sql;
        char *node; /* this node's name in a fleet's store; NULL in a node's own */
        /* The outcomes on their way, and the condition a fetch of one of them waits on. Their
         * own lock: a fetch waits without holding a connection. */
        pthread_mutex_t coming_lock;
        pthread_cond_t outcome_written;
        struct coming_outcome *coming;
        /* A fleet's store: the outcomes it did not take, to write when it answers again. */
        pthread_mutex_t kept_lock;
        struct kept_outcome *kept;
        size_t n_kept;
        /* The statements made from the column table at open (their addresses are their keys in
         * sql.h's cache). */
        char begin_sql[512];   /* INSERT of begin_columns and the node */
        char finish_sql[1024]; /* UPDATE of outcome_columns WHERE id = ?1 AND running */
        char select_sql[1024];
        char recent_sql[1024]; /* a tenant's executions, newest first (sbx_audit_recent) */
};

/* sbx_audit_begin's insert with status queued and no node, on conn (audit_queue.c's
 * transaction). */
int sbx_audit_begin_queued_on(struct sbx_audit *audit, struct sbx_sql_conn *conn,
                              const struct sbx_audit_record *record, struct sbx_error *err);

/* A pending delivery of target_id (kind "execution" or "batch") to url, on conn (audit_queue.c's
 * transaction). */
int sbx_audit_delivery_insert_on(struct sbx_sql_conn *conn, const char *tenant, const char *kind,
                                 const char *target_id, const char *url, int64_t now_ms,
                                 struct sbx_error *err);
