/* The durable queue of asynchronous executions (audit_queue.h). */
#include "service/audit_queue.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "service/audit_store.h"

struct queue_row {
        const char *id;
        const char *tenant;
        const char *request;
        bool retry;
        uint64_t wall_ms;
};

static int bind_queue_row(sqlite3_stmt *statement, const void *ctx)
{
        const struct queue_row *row = ctx;
        int rc = sqlite3_bind_text(statement, 1, row->id, -1, SQLITE_STATIC);
        if (rc == SQLITE_OK)
                rc = sqlite3_bind_text(statement, 2, row->tenant, -1, SQLITE_STATIC);
        if (rc == SQLITE_OK)
                rc = sqlite3_bind_text(statement, 3, row->request, -1, SQLITE_STATIC);
        if (rc == SQLITE_OK)
                rc = sqlite3_bind_int(statement, 4, row->retry);
        if (rc == SQLITE_OK)
                rc = sqlite3_bind_int64(statement, 5, (sqlite3_int64)row->wall_ms);
        return rc;
}

int sbx_audit_enqueue(struct sbx_audit *audit, const struct sbx_audit_record *record,
                      const char *request, bool retry, uint64_t wall_ms, struct sbx_error *err)
{
        if (record->id == NULL || record->tenant == NULL || request == NULL)
                return sbx_error_set(err, EINVAL, "audit: a queued execution lacks id or request");
        const struct queue_row row = {record->id, record->tenant, request, retry, wall_ms};
        if (sbx_audit_statement(audit,
                                "INSERT INTO queue (id, tenant, request, retry, wall_ms) VALUES "
                                "(?1, ?2, ?3, ?4, ?5)",
                                "queue", bind_queue_row, &row, err) < 0)
                return -1;
        if (sbx_audit_begin_queued(audit, record, err) == 0)
                return 0;
        struct sbx_error ignored;
        sbx_audit_statement(audit, "DELETE FROM queue WHERE id = ?1", "unqueue", bind_queue_row,
                            &row, &ignored);
        return -1;
}

static int bind_id(sqlite3_stmt *statement, const void *ctx)
{
        return sqlite3_bind_text(statement, 1, ctx, -1, SQLITE_STATIC);
}

int sbx_audit_take(struct sbx_audit *audit, const char *id, char **request, struct sbx_error *err)
{
        *request = NULL;
        int rc = sbx_audit_statement(audit,
                                     "UPDATE executions SET status = '" SBX_AUDIT_STATUS_RUNNING
                                     "' WHERE id = ?1 AND status = '" SBX_AUDIT_STATUS_QUEUED "'",
                                     "take", bind_id, id, err);
        if (rc <= 0)
                return rc;
        pthread_mutex_lock(&audit->lock);
        sqlite3_stmt *statement = NULL;
        int step = sqlite3_prepare_v2(audit->db, "SELECT request FROM queue WHERE id = ?1", -1,
                                      &statement, NULL);
        if (step == SQLITE_OK)
                step = bind_id(statement, id);
        if (step == SQLITE_OK)
                step = sqlite3_step(statement);
        const char *text =
                step == SQLITE_ROW ? (const char *)sqlite3_column_text(statement, 0) : NULL;
        if (text != NULL)
                *request = strdup(text);
        sqlite3_finalize(statement);
        pthread_mutex_unlock(&audit->lock);
        if (*request == NULL)
                return sbx_error_set(err, step == SQLITE_ROW ? ENOMEM : ENOENT,
                                     "audit: the queued request of %s: %s", id,
                                     step == SQLITE_ROW ? "out of memory" : sqlite3_errstr(step));
        return 1;
}

int sbx_audit_requeue(struct sbx_audit *audit, const char *id, struct sbx_error *err)
{
        int rc = sbx_audit_statement(audit,
                                     "UPDATE executions SET status = '" SBX_AUDIT_STATUS_QUEUED
                                     "' WHERE id = ?1 AND status = '" SBX_AUDIT_STATUS_RUNNING
                                     "' AND id IN (SELECT id FROM queue)",
                                     "requeue", bind_id, id, err);
        return rc < 0 ? -1 : rc > 0;
}

struct cancel_row {
        const char *tenant;
        const char *id;
        const char *why;
        int64_t finished_at_ms;
};

static int bind_cancel(sqlite3_stmt *statement, const void *ctx)
{
        const struct cancel_row *row = ctx;
        int rc = sqlite3_bind_text(statement, 1, row->id, -1, SQLITE_STATIC);
        if (rc == SQLITE_OK)
                rc = sqlite3_bind_text(statement, 2, row->tenant, -1, SQLITE_STATIC);
        if (rc == SQLITE_OK)
                rc = sqlite3_bind_text(statement, 3, row->why, -1, SQLITE_STATIC);
        if (rc == SQLITE_OK)
                rc = sqlite3_bind_int64(statement, 4, row->finished_at_ms);
        return rc;
}

int sbx_audit_cancel_queued(struct sbx_audit *audit, const char *tenant, const char *id,
                            const char *why, int64_t finished_at_ms, struct sbx_error *err)
{
        const struct cancel_row row = {tenant, id, why, finished_at_ms};
        int rc = sbx_audit_statement(audit,
                                     "UPDATE executions SET status = 'canceled', error = ?3, "
                                     "finished_at = ?4 WHERE id = ?1 AND tenant = ?2 AND status = "
                                     "'" SBX_AUDIT_STATUS_QUEUED "'",
                                     "cancel", bind_cancel, &row, err);
        return rc < 0 ? -1 : rc > 0;
}

static int bind_nothing(sqlite3_stmt *statement, const void *ctx)
{
        (void)statement;
        (void)ctx;
        return SQLITE_OK;
}

int sbx_audit_queue_recover(struct sbx_audit *audit, uint64_t *requeued, struct sbx_error *err)
{
        *requeued = 0;
        if (sbx_audit_statement(audit,
                                "DELETE FROM queue WHERE id NOT IN (SELECT id FROM executions)",
                                "drop unrecorded queue rows", bind_nothing, NULL, err) < 0)
                return -1;
        int rc = sbx_audit_statement(audit,
                                     "UPDATE executions SET status = '" SBX_AUDIT_STATUS_QUEUED
                                     "' WHERE status = '" SBX_AUDIT_STATUS_RUNNING
                                     "' AND id IN (SELECT id FROM queue WHERE retry = 1)",
                                     "queue again", bind_nothing, NULL, err);
        if (rc < 0)
                return -1;
        *requeued = (uint64_t)rc;
        return 0;
}

int sbx_audit_queue_each(struct sbx_audit *audit,
                         int (*fn)(void *ctx, const struct sbx_audit_queued *item), void *ctx,
                         struct sbx_error *err)
{
        pthread_mutex_lock(&audit->lock);
        sqlite3_stmt *statement = NULL;
        int rc = sqlite3_prepare_v2(audit->db,
                                    "SELECT e.id, e.tenant, e.created_at, q.wall_ms FROM "
                                    "executions e JOIN queue q ON q.id = e.id WHERE e.status = "
                                    "'" SBX_AUDIT_STATUS_QUEUED "' ORDER BY e.created_at, e.rowid",
                                    -1, &statement, NULL);
        int result = 0;
        while (rc == SQLITE_OK || rc == SQLITE_ROW) {
                rc = sqlite3_step(statement);
                if (rc != SQLITE_ROW)
                        break;
                const struct sbx_audit_queued item = {
                        .id = (const char *)sqlite3_column_text(statement, 0),
                        .tenant = (const char *)sqlite3_column_text(statement, 1),
                        .created_at_ms = sqlite3_column_int64(statement, 2),
                        .wall_ms = (uint64_t)sqlite3_column_int64(statement, 3),
                };
                if (item.id == NULL || item.tenant == NULL)
                        continue;
                if (fn(ctx, &item) < 0) {
                        result = -1;
                        rc = SQLITE_DONE;
                        break;
                }
        }
        if (rc != SQLITE_DONE)
                result = sbx_error_set(err, 0, "audit: read the queue: %s", sqlite3_errstr(rc));
        sqlite3_finalize(statement);
        pthread_mutex_unlock(&audit->lock);
        return result;
}
