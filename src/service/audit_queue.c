/* The durable queue of asynchronous executions (audit_queue.h). */
#include "service/audit_queue.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "service/audit_store.h"
#include "model/result_json.h"
#include "service/verdict.h"
#include "util/cleanup.h"

/* Runs sql on the connection whose lock the caller holds (BEGIN, COMMIT, ROLLBACK). */
static int exec_locked(struct sbx_audit *audit, const char *sql, struct sbx_error *err)
{
        int rc = sqlite3_exec(audit->db, sql, NULL, NULL, NULL);
        if (rc != SQLITE_OK)
                return sbx_error_set(err, 0, "audit: %s: %s", sql, sqlite3_errstr(rc));
        return 0;
}

/* Prepares sql into *statement (the caller holds the lock); -1 with err. */
static int prepare_locked(struct sbx_audit *audit, const char *sql, sqlite3_stmt **statement,
                          struct sbx_error *err)
{
        int rc = sqlite3_prepare_v2(audit->db, sql, -1, statement, NULL);
        if (rc != SQLITE_OK)
                return sbx_error_set(err, 0, "audit: prepare: %s", sqlite3_errstr(rc));
        return 0;
}

/* Steps statement once to its end and resets it; -1 with err naming what. */
static int step_done(sqlite3_stmt *statement, const char *what, struct sbx_error *err)
{
        int rc = sqlite3_step(statement);
        sqlite3_reset(statement);
        sqlite3_clear_bindings(statement);
        if (rc != SQLITE_DONE)
                return sbx_error_set(err, 0, "audit: %s: %s", what, sqlite3_errstr(rc));
        return 0;
}

static int insert_batch(sqlite3_stmt *statement, const struct sbx_audit_batch *batch, size_t cases,
                        struct sbx_error *err)
{
        _cleanup_free_ char *requested =
                batch->requested ? json_dumps(batch->requested, JSON_COMPACT) : NULL;
        sqlite3_bind_text(statement, 1, batch->id, -1, SQLITE_STATIC);
        sqlite3_bind_text(statement, 2, batch->tenant, -1, SQLITE_STATIC);
        sqlite3_bind_int64(statement, 3, batch->created_at_ms);
        sqlite3_bind_text(statement, 4, batch->compare, -1, SQLITE_STATIC);
        sqlite3_bind_int64(statement, 5, (sqlite3_int64)cases);
        sqlite3_bind_text(statement, 6, batch->callback_url, -1, SQLITE_STATIC);
        sqlite3_bind_text(statement, 7, requested, -1, SQLITE_STATIC);
        return step_done(statement, "insert batch", err);
}

static int insert_item(struct sbx_audit *audit, sqlite3_stmt *queue, sqlite3_stmt *cases,
                       const struct sbx_audit_batch *batch, const struct sbx_audit_enqueued *item,
                       struct sbx_error *err)
{
        const struct sbx_audit_record *record = item->record;
        if (record->id == NULL || record->tenant == NULL || item->request == NULL)
                return sbx_error_set(err, EINVAL, "audit: a queued execution lacks id or request");
        sqlite3_bind_text(queue, 1, record->id, -1, SQLITE_STATIC);
        sqlite3_bind_text(queue, 2, record->tenant, -1, SQLITE_STATIC);
        sqlite3_bind_text(queue, 3, item->request, -1, SQLITE_STATIC);
        sqlite3_bind_int(queue, 4, item->retry);
        sqlite3_bind_int64(queue, 5, (sqlite3_int64)item->wall_ms);
        if (step_done(queue, "queue", err) < 0 ||
            sbx_audit_begin_queued_locked(audit, record, err) < 0)
                return -1;
        if (item->callback_url != NULL &&
            sbx_audit_delivery_insert_locked(
                    audit, record->tenant, item->callback_kind ? item->callback_kind : "execution",
                    record->id, item->callback_url, record->created_at_ms, err) < 0)
                return -1;
        if (batch == NULL)
                return 0;
        sqlite3_bind_text(cases, 1, batch->id, -1, SQLITE_STATIC);
        sqlite3_bind_int64(cases, 2, (sqlite3_int64)item->index);
        sqlite3_bind_text(cases, 3, record->id, -1, SQLITE_STATIC);
        if (item->expected_stdout != NULL)
                sqlite3_bind_blob64(cases, 4, item->expected_stdout, item->expected_size,
                                    SQLITE_STATIC);
        return step_done(cases, "insert case", err);
}

int sbx_audit_enqueue(struct sbx_audit *audit, const struct sbx_audit_batch *batch,
                      const struct sbx_audit_enqueued *items, size_t n, struct sbx_error *err)
{
        pthread_mutex_lock(&audit->lock);
        sqlite3_stmt *queue = NULL, *cases = NULL, *batches = NULL;
        int rc = exec_locked(audit, "BEGIN IMMEDIATE", err);
        if (rc == 0)
                rc = prepare_locked(audit,
                                    "INSERT INTO queue (id, tenant, request, retry, wall_ms) "
                                    "VALUES (?1, ?2, ?3, ?4, ?5)",
                                    &queue, err);
        if (rc == 0 && batch != NULL)
                rc = prepare_locked(audit,
                                    "INSERT INTO batch_cases (batch_id, idx, execution_id, "
                                    "expected_stdout) VALUES (?1, ?2, ?3, ?4)",
                                    &cases, err);
        if (rc == 0 && batch != NULL)
                rc = prepare_locked(audit,
                                    "INSERT INTO batches (id, tenant, created_at, compare, cases, "
                                    "callback_url, requested) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                                    &batches, err);
        if (rc == 0 && batch != NULL)
                rc = insert_batch(batches, batch, n, err);
        if (rc == 0 && batch != NULL && batch->callback_url != NULL)
                rc = sbx_audit_delivery_insert_locked(audit, batch->tenant, "batch", batch->id,
                                                      batch->callback_url, batch->created_at_ms,
                                                      err);
        for (size_t i = 0; rc == 0 && i < n; i++)
                rc = insert_item(audit, queue, cases, batch, &items[i], err);
        sqlite3_finalize(queue);
        sqlite3_finalize(cases);
        sqlite3_finalize(batches);
        if (rc == 0)
                rc = exec_locked(audit, "COMMIT", err);
        if (rc < 0 && !sqlite3_get_autocommit(audit->db)) {
                struct sbx_error ignored;
                exec_locked(audit, "ROLLBACK", &ignored);
        }
        pthread_mutex_unlock(&audit->lock);
        return rc;
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

int sbx_audit_queued_request(struct sbx_audit *audit, const char *id, bool *retry,
                             struct sbx_error *err)
{
        *retry = false;
        pthread_mutex_lock(&audit->lock);
        sqlite3_stmt *statement = NULL;
        int rc = sqlite3_prepare_v2(audit->db, "SELECT retry FROM queue WHERE id = ?1", -1,
                                    &statement, NULL);
        if (rc == SQLITE_OK) {
                bind_id(statement, id);
                rc = sqlite3_step(statement);
        }
        int found = rc == SQLITE_ROW ? 1 : 0;
        if (found)
                *retry = sqlite3_column_int(statement, 0) != 0;
        else if (rc != SQLITE_DONE)
                found = sbx_error_set(err, 0, "audit: the queue row of %s: %s", id,
                                      sqlite3_errstr(rc));
        sqlite3_finalize(statement);
        pthread_mutex_unlock(&audit->lock);
        return found;
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

int sbx_audit_case_batch(struct sbx_audit *audit, const char *id,
                         char batch_id[SBX_EXECUTION_ID_CHARS + 1], bool *done,
                         struct sbx_error *err)
{
        *done = false;
        pthread_mutex_lock(&audit->lock);
        sqlite3_stmt *statement = NULL;
        int rc = prepare_locked(audit,
                                "SELECT c.batch_id, (SELECT count(*) FROM batch_cases o JOIN "
                                "executions e ON e.id = o.execution_id WHERE o.batch_id = "
                                "c.batch_id AND e.status IN ('" SBX_AUDIT_STATUS_QUEUED
                                "', '" SBX_AUDIT_STATUS_RUNNING "')) FROM batch_cases c WHERE "
                                "c.execution_id = ?1",
                                &statement, err);
        int found = rc;
        if (rc == 0) {
                sqlite3_bind_text(statement, 1, id, -1, SQLITE_STATIC);
                int step = sqlite3_step(statement);
                const char *batch =
                        step == SQLITE_ROW ? (const char *)sqlite3_column_text(statement, 0) : NULL;
                if (batch != NULL) {
                        snprintf(batch_id, SBX_EXECUTION_ID_CHARS + 1, "%s", batch);
                        *done = sqlite3_column_int64(statement, 1) == 0;
                        found = 1;
                } else if (step != SQLITE_ROW && step != SQLITE_DONE) {
                        found = sbx_error_set(err, 0, "audit: the batch of %s: %s", id,
                                              sqlite3_errstr(step));
                }
        }
        sqlite3_finalize(statement);
        pthread_mutex_unlock(&audit->lock);
        return found;
}

/* Column i of statement as a JSON value of the text it holds (a JSON column), null when NULL. */
static json_t *json_column(sqlite3_stmt *statement, int i)
{
        const char *text = (const char *)sqlite3_column_text(statement, i);
        json_t *value = text ? json_loads(text, JSON_DECODE_ANY, NULL) : NULL;
        return value ? value : json_null();
}

/* Column i as a JSON string of its bytes (invalid UTF-8 replaced), null when NULL. */
static json_t *output_column(sqlite3_stmt *statement, int i)
{
        if (sqlite3_column_type(statement, i) == SQLITE_NULL)
                return json_null();
        const char *data = sqlite3_column_blob(statement, i);
        int size = sqlite3_column_bytes(statement, i);
        return sbx_json_string_from_bytes(data, (size_t)(size > 0 ? size : 0));
}

static bool field_wanted(const char *const *fields, size_t n_fields, const char *name)
{
        if (fields == NULL)
                return true;
        for (size_t i = 0; i < n_fields; i++)
                if (strcmp(fields[i], name) == 0)
                        return true;
        return false;
}

/* The verdict of one case row: pending, from its status, or from its output. */
static const char *case_verdict(sqlite3_stmt *row, enum sbx_compare compare, bool judged)
{
        const char *status = (const char *)sqlite3_column_text(row, 2);
        if (status == NULL || strcmp(status, SBX_AUDIT_STATUS_QUEUED) == 0 ||
            strcmp(status, SBX_AUDIT_STATUS_RUNNING) == 0)
                return "pending";
        if (strcmp(status, sbx_status_name(SBX_STATUS_OK)) != 0)
                return status;
        if (!judged || sqlite3_column_type(row, 9) == SQLITE_NULL)
                return "accepted"; /* a list of executions, or a case that expects nothing */
        if (sqlite3_column_type(row, 6) == SQLITE_NULL)
                return "unjudged"; /* its output was not kept (a result from the spool) */
        const char *out = sqlite3_column_blob(row, 6);
        size_t out_len = (size_t)sqlite3_column_bytes(row, 6);
        const char *want = sqlite3_column_blob(row, 9);
        size_t want_len = (size_t)sqlite3_column_bytes(row, 9);
        return sbx_verdict(SBX_STATUS_OK, compare, out ? out : "", out_len, want ? want : "",
                           want_len);
}

int sbx_audit_batch_fetch(struct sbx_audit *audit, const char *tenant, const char *id,
                          const char *const *fields, size_t n_fields, json_t **out,
                          struct sbx_error *err)
{
        *out = NULL;
        pthread_mutex_lock(&audit->lock);
        sqlite3_stmt *head = NULL, *rows = NULL;
        int rc = prepare_locked(audit,
                                "SELECT created_at, compare, cases, callback_url FROM batches "
                                "WHERE id = ?1 AND tenant = ?2",
                                &head, err);
        if (rc == 0)
                rc = prepare_locked(audit,
                                    "SELECT c.idx, c.execution_id, e.status, e.exit_code, "
                                    "e.signal, e.error, e.stdout, e.stderr, e.usage, "
                                    "c.expected_stdout, e.timing FROM batch_cases c JOIN "
                                    "executions e ON e.id = c.execution_id WHERE c.batch_id = ?1 "
                                    "ORDER BY c.idx",
                                    &rows, err);
        json_t *batch = NULL;
        if (rc == 0) {
                sqlite3_bind_text(head, 1, id, -1, SQLITE_STATIC);
                sqlite3_bind_text(head, 2, tenant, -1, SQLITE_STATIC);
                int step = sqlite3_step(head);
                if (step == SQLITE_ROW) {
                        const char *compare = (const char *)sqlite3_column_text(head, 1);
                        const char *callback = (const char *)sqlite3_column_text(head, 3);
                        batch = json_pack("{s:s, s:I, s:s?, s:s?, s:I}", "id", id, "created_at",
                                          (json_int_t)sqlite3_column_int64(head, 0), "compare",
                                          compare, "callback_url", callback, "cases",
                                          (json_int_t)sqlite3_column_int64(head, 2));
                        if (batch == NULL)
                                rc = sbx_error_set(err, ENOMEM, "audit: batch %s", id);
                } else if (step != SQLITE_DONE) {
                        rc = sbx_error_set(err, 0, "audit: batch %s: %s", id, sqlite3_errstr(step));
                }
        }
        if (rc == 0 && batch != NULL) {
                enum sbx_compare compare = SBX_COMPARE_EXACT;
                bool judged = sbx_compare_find(json_string_value(json_object_get(batch, "compare")),
                                               &compare);
                json_t *summary = json_object(), *results = json_array();
                json_object_set_new(batch, "summary", summary);
                json_object_set_new(batch, "results", results);
                bool done = true;
                sqlite3_bind_text(rows, 1, id, -1, SQLITE_STATIC);
                int step;
                while ((step = sqlite3_step(rows)) == SQLITE_ROW) {
                        const char *verdict = case_verdict(rows, compare, judged);
                        done &= strcmp(verdict, "pending") != 0;
                        json_int_t count = json_integer_value(json_object_get(summary, verdict));
                        json_object_set_new(summary, verdict, json_integer(count + 1));
                        json_t *result = json_pack("{s:I}", "index",
                                                   (json_int_t)sqlite3_column_int64(rows, 0));
                        static const struct {
                                const char *name;
                                int column; /* -1: the verdict */
                                enum { TEXT, INTEGER, JSON, OUTPUT } kind;
                        } members[] = {
                                {"id", 1, TEXT},        {"status", 2, TEXT},
                                {"verdict", -1, TEXT},  {"exit_code", 3, INTEGER},
                                {"signal", 4, INTEGER}, {"error", 5, TEXT},
                                {"stdout", 6, OUTPUT},  {"stderr", 7, OUTPUT},
                                {"usage", 8, JSON},     {"timing", 10, JSON},
                        };
                        for (size_t m = 0; result != NULL && m < SBX_ARRAY_SIZE(members); m++) {
                                if (!field_wanted(fields, n_fields, members[m].name))
                                        continue;
                                int c = members[m].column;
                                json_t *value;
                                if (c < 0)
                                        value = json_string(verdict);
                                else if (sqlite3_column_type(rows, c) == SQLITE_NULL)
                                        value = json_null();
                                else if (members[m].kind == TEXT)
                                        value = json_string(
                                                (const char *)sqlite3_column_text(rows, c));
                                else if (members[m].kind == INTEGER)
                                        value = json_integer(sqlite3_column_int64(rows, c));
                                else if (members[m].kind == JSON)
                                        value = json_column(rows, c);
                                else
                                        value = output_column(rows, c);
                                json_object_set_new(result, members[m].name, value);
                        }
                        if (result == NULL || json_array_append_new(results, result) < 0) {
                                rc = sbx_error_set(err, ENOMEM, "audit: batch %s", id);
                                break;
                        }
                }
                if (rc == 0 && step != SQLITE_DONE)
                        rc = sbx_error_set(err, 0, "audit: batch %s: %s", id, sqlite3_errstr(step));
                json_object_set_new(batch, "done", json_boolean(done));
        }
        sqlite3_finalize(head);
        sqlite3_finalize(rows);
        pthread_mutex_unlock(&audit->lock);
        if (rc < 0) {
                json_decref(batch);
                return -1;
        }
        *out = batch;
        return batch != NULL;
}
