/* Webhook deliveries in the audit store (audit_deliveries.h). */
#include "service/audit_deliveries.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "model/request.h"
#include "service/audit_queue.h"
#include "service/audit_store.h"

int sbx_audit_delivery_insert_locked(struct sbx_audit *audit, const char *tenant, const char *kind,
                                     const char *target_id, const char *url, int64_t now_ms,
                                     struct sbx_error *err)
{
        char hex[SBX_EXECUTION_ID_CHARS + 1];
        if (sbx_execution_id_new(hex, err) < 0)
                return -1;
        char id[SBX_DELIVERY_ID_SIZE];
        snprintf(id, sizeof(id), "msg_%s", hex);
        sqlite3_stmt *statement = NULL;
        int rc = sqlite3_prepare_v2(audit->db,
                                    "INSERT INTO deliveries (id, tenant, kind, target_id, url, "
                                    "status, attempts, next_attempt_at, created_at) VALUES (?1, "
                                    "?2, ?3, ?4, ?5, 'pending', 0, ?6, ?6)",
                                    -1, &statement, NULL);
        if (rc == SQLITE_OK) {
                sqlite3_bind_text(statement, 1, id, -1, SQLITE_STATIC);
                sqlite3_bind_text(statement, 2, tenant, -1, SQLITE_STATIC);
                sqlite3_bind_text(statement, 3, kind, -1, SQLITE_STATIC);
                sqlite3_bind_text(statement, 4, target_id, -1, SQLITE_STATIC);
                sqlite3_bind_text(statement, 5, url, -1, SQLITE_STATIC);
                sqlite3_bind_int64(statement, 6, now_ms);
                rc = sqlite3_step(statement);
        }
        sqlite3_finalize(statement);
        if (rc != SQLITE_DONE)
                return sbx_error_set(err, 0, "audit: the delivery of %s: %s", target_id,
                                     sqlite3_errstr(rc));
        return 0;
}

static void copy_column(sqlite3_stmt *statement, int i, char *out, size_t size)
{
        const char *text = (const char *)sqlite3_column_text(statement, i);
        snprintf(out, size, "%s", text ? text : "");
}

int sbx_audit_delivery_claim(struct sbx_audit *audit, int64_t now_ms, int64_t lease_ms,
                             struct sbx_audit_delivery *out, struct sbx_error *err)
{
        pthread_mutex_lock(&audit->lock);
        sqlite3_stmt *select = NULL, *lease = NULL;
        int rc = sqlite3_prepare_v2(
                audit->db,
                "SELECT d.id, d.tenant, d.kind, d.target_id, d.url, d.attempts FROM deliveries d "
                "WHERE d.status = 'pending' AND d.next_attempt_at <= ?1 AND ("
                " (d.kind IN ('execution', 'judge0') AND (SELECT e.status FROM executions e "
                "WHERE e.id = "
                "d.target_id) NOT IN ('" SBX_AUDIT_STATUS_QUEUED "', '" SBX_AUDIT_STATUS_RUNNING
                "'))"
                " OR (d.kind = 'batch' AND NOT EXISTS (SELECT 1 FROM batch_cases c JOIN "
                "executions e ON e.id = c.execution_id WHERE c.batch_id = d.target_id AND "
                "e.status IN ('" SBX_AUDIT_STATUS_QUEUED "', '" SBX_AUDIT_STATUS_RUNNING "'))))"
                " ORDER BY d.next_attempt_at LIMIT 1",
                -1, &select, NULL);
        if (rc == SQLITE_OK)
                rc = sqlite3_prepare_v2(audit->db,
                                        "UPDATE deliveries SET next_attempt_at = ?2 WHERE id = ?1",
                                        -1, &lease, NULL);
        int found = 0;
        if (rc == SQLITE_OK) {
                sqlite3_bind_int64(select, 1, now_ms);
                rc = sqlite3_step(select);
                if (rc == SQLITE_ROW) {
                        copy_column(select, 0, out->id, sizeof(out->id));
                        copy_column(select, 1, out->tenant, sizeof(out->tenant));
                        copy_column(select, 2, out->kind, sizeof(out->kind));
                        copy_column(select, 3, out->target_id, sizeof(out->target_id));
                        copy_column(select, 4, out->url, sizeof(out->url));
                        out->attempts = (unsigned)sqlite3_column_int64(select, 5);
                        sqlite3_bind_text(lease, 1, out->id, -1, SQLITE_STATIC);
                        sqlite3_bind_int64(lease, 2, now_ms + lease_ms);
                        rc = sqlite3_step(lease) == SQLITE_DONE ? SQLITE_DONE : SQLITE_ERROR;
                        found = 1;
                }
        }
        if (rc != SQLITE_DONE)
                found = sbx_error_set(err, 0, "audit: claim a delivery: %s", sqlite3_errstr(rc));
        sqlite3_finalize(select);
        sqlite3_finalize(lease);
        pthread_mutex_unlock(&audit->lock);
        return found;
}

struct attempt_row {
        const char *id;
        const char *status;
        const char *error;
        int64_t next_attempt_ms;
        int64_t now_ms;
};

static int bind_attempt(sqlite3_stmt *statement, const void *ctx)
{
        const struct attempt_row *row = ctx;
        sqlite3_bind_text(statement, 1, row->id, -1, SQLITE_STATIC);
        sqlite3_bind_text(statement, 2, row->status, -1, SQLITE_STATIC);
        sqlite3_bind_text(statement, 3, row->error, -1, SQLITE_STATIC);
        sqlite3_bind_int64(statement, 4, row->next_attempt_ms);
        return sqlite3_bind_int64(statement, 5, row->now_ms);
}

int sbx_audit_delivery_attempted(struct sbx_audit *audit, const char *id, bool delivered,
                                 const char *error, int64_t next_attempt_ms, int64_t now_ms,
                                 struct sbx_error *err)
{
        const char *status = delivered ? "delivered" : next_attempt_ms < 0 ? "failed" : "pending";
        const struct attempt_row row = {id, status, delivered ? NULL : error,
                                        next_attempt_ms < 0 ? now_ms : next_attempt_ms, now_ms};
        int rc = sbx_audit_statement(audit,
                                     "UPDATE deliveries SET status = ?2, last_error = ?3, "
                                     "attempts = attempts + 1, next_attempt_at = ?4, finished_at "
                                     "= CASE WHEN ?2 = 'pending' THEN NULL ELSE ?5 END WHERE id = "
                                     "?1 AND status = 'pending'",
                                     "record a delivery attempt", bind_attempt, &row, err);
        return rc < 0 ? -1 : rc > 0;
}

int sbx_audit_deliveries_list(struct sbx_audit *audit, const char *tenant, const char *status,
                              unsigned limit, json_t **out, struct sbx_error *err)
{
        *out = json_array();
        if (*out == NULL)
                return sbx_error_set(err, ENOMEM, "audit: deliveries");
        pthread_mutex_lock(&audit->lock);
        sqlite3_stmt *statement = NULL;
        int rc = sqlite3_prepare_v2(audit->db,
                                    "SELECT id, kind, target_id, url, status, attempts, "
                                    "next_attempt_at, last_error, created_at, finished_at FROM "
                                    "deliveries WHERE tenant = ?1 AND (?2 IS NULL OR status = ?2) "
                                    "ORDER BY created_at DESC, rowid DESC LIMIT ?3",
                                    -1, &statement, NULL);
        if (rc == SQLITE_OK) {
                sqlite3_bind_text(statement, 1, tenant, -1, SQLITE_STATIC);
                sqlite3_bind_text(statement, 2, status, -1, SQLITE_STATIC);
                sqlite3_bind_int64(statement, 3, limit);
                while ((rc = sqlite3_step(statement)) == SQLITE_ROW) {
                        static const char *const names[] = {
                                "id",         "kind",       "target_id",       "url",
                                "status",     "attempts",   "next_attempt_at", "last_error",
                                "created_at", "finished_at"};
                        json_t *row = json_object();
                        for (int i = 0; row != NULL && i < 10; i++) {
                                json_t *value;
                                switch (sqlite3_column_type(statement, i)) {
                                case SQLITE_NULL:
                                        value = json_null();
                                        break;
                                case SQLITE_INTEGER:
                                        value = json_integer(sqlite3_column_int64(statement, i));
                                        break;
                                default:
                                        value = json_string(
                                                (const char *)sqlite3_column_text(statement, i));
                                        break;
                                }
                                json_object_set_new(row, names[i], value);
                        }
                        if (row == NULL || json_array_append_new(*out, row) < 0) {
                                rc = SQLITE_NOMEM;
                                break;
                        }
                }
        }
        sqlite3_finalize(statement);
        pthread_mutex_unlock(&audit->lock);
        if (rc != SQLITE_DONE) {
                json_decref(*out);
                *out = NULL;
                return sbx_error_set(err, 0, "audit: list deliveries: %s", sqlite3_errstr(rc));
        }
        return 0;
}

struct retry_row {
        const char *tenant;
        const char *id;
        int64_t now_ms;
};

static int bind_retry(sqlite3_stmt *statement, const void *ctx)
{
        const struct retry_row *row = ctx;
        sqlite3_bind_text(statement, 1, row->id, -1, SQLITE_STATIC);
        sqlite3_bind_text(statement, 2, row->tenant, -1, SQLITE_STATIC);
        return sqlite3_bind_int64(statement, 3, row->now_ms);
}

int sbx_audit_delivery_retry(struct sbx_audit *audit, const char *tenant, const char *id,
                             int64_t now_ms, struct sbx_error *err)
{
        const struct retry_row row = {tenant, id, now_ms};
        int rc = sbx_audit_statement(audit,
                                     "UPDATE deliveries SET status = 'pending', attempts = 0, "
                                     "next_attempt_at = ?3, finished_at = NULL WHERE id = ?1 AND "
                                     "tenant = ?2 AND status = 'failed'",
                                     "retry a delivery", bind_retry, &row, err);
        return rc < 0 ? -1 : rc > 0;
}
