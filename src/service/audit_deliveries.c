/* Webhook deliveries in the audit store (audit_deliveries.h). */
#include "service/audit_deliveries.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "model/request.h"
#include "service/audit_queue.h"
#include "service/audit_store.h"
#include "util/cleanup.h"

int sbx_audit_delivery_insert_on(struct sbx_sql_conn *conn, const char *tenant, const char *kind,
                                 const char *target_id, const char *url, int64_t now_ms,
                                 struct sbx_error *err)
{
        char hex[SBX_EXECUTION_ID_CHARS + 1];
        if (sbx_execution_id_new(hex, err) < 0)
                return -1;
        char id[SBX_DELIVERY_ID_SIZE];
        snprintf(id, sizeof(id), "msg_%s", hex);
        const struct sbx_sql_value values[] = {
                sbx_sql_text(id),        sbx_sql_text(tenant), sbx_sql_text(kind),
                sbx_sql_text(target_id), sbx_sql_text(url),    sbx_sql_int(now_ms),
        };
        return sbx_sql_run(conn,
                           "INSERT INTO deliveries (id, tenant, kind, target_id, url, status, "
                           "attempts, next_attempt_at, created_at) VALUES (?1, ?2, ?3, ?4, ?5, "
                           "'pending', 0, ?6, ?6)",
                           values, SBX_ARRAY_SIZE(values), NULL, NULL, NULL, "insert a delivery",
                           err);
}

static void copy_column(struct sbx_sql_row *row, int i, char *out, size_t size)
{
        size_t length = 0;
        const char *text = sbx_sql_column_text(row, i, &length);
        snprintf(out, size, "%.*s", (int)length, text ? text : "");
}

static int claimed_row(void *ctx, struct sbx_sql_row *row, struct sbx_error *err)
{
        (void)err;
        struct sbx_audit_delivery *out = ctx;
        copy_column(row, 0, out->id, sizeof(out->id));
        copy_column(row, 1, out->tenant, sizeof(out->tenant));
        copy_column(row, 2, out->kind, sizeof(out->kind));
        copy_column(row, 3, out->target_id, sizeof(out->target_id));
        copy_column(row, 4, out->url, sizeof(out->url));
        out->attempts = (unsigned)sbx_sql_column_int(row, 5);
        return 0;
}

/* The delivery due first whose target has ended: a claim leases it by moving its next attempt
 * past the lease, in the same statement, so that no other sender (another node's, in a fleet)
 * claims it meanwhile; PostgreSQL's passes over a row another node is claiming. */
#define DUE_DELIVERY                                                                               \
        "SELECT d.id FROM deliveries d WHERE d.status = 'pending' AND d.next_attempt_at <= ?1 "    \
        "AND ((d.kind IN ('execution', 'judge0') AND (SELECT e.status FROM executions e WHERE "    \
        "e.id = d.target_id) NOT IN ('" SBX_AUDIT_STATUS_QUEUED "', '" SBX_AUDIT_STATUS_RUNNING    \
        "')) OR (d.kind = 'batch' AND NOT EXISTS (SELECT 1 FROM batch_cases c JOIN executions e "  \
        "ON e.id = c.execution_id WHERE c.batch_id = d.target_id AND e.status IN "                 \
        "('" SBX_AUDIT_STATUS_QUEUED "', '" SBX_AUDIT_STATUS_RUNNING "')))) ORDER BY "             \
        "d.next_attempt_at LIMIT 1"
#define CLAIM(due)                                                                                 \
        "UPDATE deliveries SET next_attempt_at = ?2 WHERE id = (" due ") AND status = 'pending' "  \
        "AND next_attempt_at <= ?1 RETURNING id, tenant, kind, target_id, url, attempts"

int sbx_audit_delivery_claim(struct sbx_audit *audit, int64_t now_ms, int64_t lease_ms,
                             struct sbx_audit_delivery *out, struct sbx_error *err)
{
        const struct sbx_sql_value values[] = {sbx_sql_int(now_ms), sbx_sql_int(now_ms + lease_ms)};
        uint64_t claimed = 0;
        const char *sql = sbx_sql_shared(audit->sql) ? CLAIM(DUE_DELIVERY " FOR UPDATE SKIP LOCKED")
                                                     : CLAIM(DUE_DELIVERY);
        if (sbx_sql_exec(audit->sql, sql, values, SBX_ARRAY_SIZE(values), claimed_row, out,
                         &claimed, "claim a delivery", err) < 0)
                return -1;
        return claimed > 0;
}

int sbx_audit_delivery_attempted(struct sbx_audit *audit, const char *id, bool delivered,
                                 const char *error, int64_t next_attempt_ms, int64_t now_ms,
                                 struct sbx_error *err)
{
        const char *status = delivered ? "delivered" : next_attempt_ms < 0 ? "failed" : "pending";
        const struct sbx_sql_value values[] = {
                sbx_sql_text(id),
                sbx_sql_text(status),
                sbx_sql_text(delivered ? NULL : error),
                sbx_sql_int(next_attempt_ms < 0 ? now_ms : next_attempt_ms),
                sbx_sql_int(now_ms),
        };
        uint64_t changes = 0;
        if (sbx_sql_exec(audit->sql,
                         "UPDATE deliveries SET status = ?2, last_error = ?3, attempts = attempts "
                         "+ 1, next_attempt_at = ?4, finished_at = CASE WHEN ?2 = 'pending' THEN "
                         "NULL ELSE ?5 END WHERE id = ?1 AND status = 'pending'",
                         values, SBX_ARRAY_SIZE(values), NULL, NULL, &changes,
                         "record a delivery attempt", err) < 0)
                return -1;
        return changes > 0;
}

static int listed_row(void *ctx, struct sbx_sql_row *row, struct sbx_error *err)
{
        static const struct {
                const char *name;
                bool integer;
        } columns[] = {
                {"id", false},
                {"kind", false},
                {"target_id", false},
                {"url", false},
                {"status", false},
                {"attempts", true},
                {"next_attempt_at", true},
                {"last_error", false},
                {"created_at", true},
                {"finished_at", true},
        };
        json_t *object = json_object();
        for (int i = 0; object != NULL && i < (int)SBX_ARRAY_SIZE(columns); i++) {
                size_t size = 0;
                const char *text = sbx_sql_column_text(row, i, &size);
                json_t *value = text == NULL         ? json_null()
                                : columns[i].integer ? json_integer(sbx_sql_column_int(row, i))
                                                     : json_stringn(text, size);
                json_object_set_new(object, columns[i].name, value);
        }
        if (object == NULL || json_array_append_new(ctx, object) < 0)
                return sbx_error_set(err, ENOMEM, "audit: deliveries");
        return 0;
}

int sbx_audit_deliveries_list(struct sbx_audit *audit, const char *tenant, const char *status,
                              unsigned limit, json_t **out, struct sbx_error *err)
{
        *out = json_array();
        if (*out == NULL)
                return sbx_error_set(err, ENOMEM, "audit: deliveries");
        const struct sbx_sql_value values[] = {sbx_sql_text(tenant), sbx_sql_text(status),
                                               sbx_sql_int(limit)};
        if (sbx_sql_exec(audit->sql,
                         "SELECT id, kind, target_id, url, status, attempts, next_attempt_at, "
                         "last_error, created_at, finished_at FROM deliveries WHERE tenant = ?1 "
                         "AND (?2 IS NULL OR status = ?2) ORDER BY created_at DESC, rowid DESC "
                         "LIMIT ?3",
                         values, SBX_ARRAY_SIZE(values), listed_row, *out, NULL, "list deliveries",
                         err) < 0) {
                json_decref(*out);
                *out = NULL;
                return -1;
        }
        return 0;
}

int sbx_audit_delivery_retry(struct sbx_audit *audit, const char *tenant, const char *id,
                             int64_t now_ms, struct sbx_error *err)
{
        const struct sbx_sql_value values[] = {sbx_sql_text(id), sbx_sql_text(tenant),
                                               sbx_sql_int(now_ms)};
        uint64_t changes = 0;
        if (sbx_sql_exec(audit->sql,
                         "UPDATE deliveries SET status = 'pending', attempts = 0, next_attempt_at "
                         "= ?3, finished_at = NULL WHERE id = ?1 AND tenant = ?2 AND status = "
                         "'failed'",
                         values, SBX_ARRAY_SIZE(values), NULL, NULL, &changes, "retry a delivery",
                         err) < 0)
                return -1;
        return changes > 0;
}
