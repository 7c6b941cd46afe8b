/* The durable queue of asynchronous executions (audit_queue.h). */
#include "service/audit_queue.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "model/result_json.h"
#include "service/audit_store.h"
#include "service/verdict.h"
#include "util/cleanup.h"
#include "util/log.h"

static int insert_batch(struct sbx_sql_conn *conn, const struct sbx_audit_batch *batch,
                        size_t cases, struct sbx_error *err)
{
        _cleanup_free_ char *requested =
                batch->requested ? json_dumps(batch->requested, JSON_COMPACT) : NULL;
        if (batch->requested != NULL && requested == NULL)
                return sbx_error_set(err, ENOMEM, "audit: insert batch");
        const struct sbx_sql_value values[] = {
                sbx_sql_text(batch->id),           sbx_sql_text(batch->tenant),
                sbx_sql_int(batch->created_at_ms), sbx_sql_text(batch->compare),
                sbx_sql_int((int64_t)cases),       sbx_sql_text(batch->callback_url),
                sbx_sql_text(requested),
        };
        return sbx_sql_run(conn,
                           "INSERT INTO batches (id, tenant, created_at, compare, cases, "
                           "callback_url, requested) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                           values, SBX_ARRAY_SIZE(values), NULL, NULL, NULL, "insert batch", err);
}

static int insert_item(struct sbx_audit *audit, struct sbx_sql_conn *conn,
                       const struct sbx_audit_batch *batch, const struct sbx_audit_enqueued *item,
                       struct sbx_error *err)
{
        const struct sbx_audit_record *record = item->record;
        if (record->id == NULL || record->tenant == NULL || item->request == NULL)
                return sbx_error_set(err, EINVAL, "audit: a queued execution lacks id or request");
        const struct sbx_sql_value queued[] = {
                sbx_sql_text(record->id),
                sbx_sql_text(record->tenant),
                sbx_sql_text(item->request),
                sbx_sql_int(item->retry),
                sbx_sql_int((int64_t)item->wall_ms),
        };
        if (sbx_sql_run(conn,
                        "INSERT INTO queue (id, tenant, request, retry, wall_ms) VALUES (?1, ?2, "
                        "?3, ?4, ?5)",
                        queued, SBX_ARRAY_SIZE(queued), NULL, NULL, NULL, "queue", err) < 0 ||
            sbx_audit_begin_queued_on(audit, conn, record, err) < 0)
                return -1;
        if (item->callback_url != NULL &&
            sbx_audit_delivery_insert_on(
                    conn, record->tenant, item->callback_kind ? item->callback_kind : "execution",
                    record->id, item->callback_url, record->created_at_ms, err) < 0)
                return -1;
        if (batch == NULL)
                return 0;
        const struct sbx_sql_value a_case[] = {
                sbx_sql_text(batch->id),
                sbx_sql_int((int64_t)item->index),
                sbx_sql_text(record->id),
                sbx_sql_blob(item->expected_stdout, item->expected_size),
        };
        return sbx_sql_run(conn,
                           "INSERT INTO batch_cases (batch_id, idx, execution_id, "
                           "expected_stdout) VALUES (?1, ?2, ?3, ?4)",
                           a_case, SBX_ARRAY_SIZE(a_case), NULL, NULL, NULL, "insert case", err);
}

int sbx_audit_enqueue(struct sbx_audit *audit, const struct sbx_audit_batch *batch,
                      const struct sbx_audit_enqueued *items, size_t n, struct sbx_error *err)
{
        struct sbx_sql_conn *conn = sbx_sql_hold(audit->sql);
        if (conn == NULL)
                return sbx_error_set(err, ENOMEM, "audit: enqueue");
        int rc = sbx_sql_begin(conn, err);
        if (rc == 0 && batch != NULL)
                rc = insert_batch(conn, batch, n, err);
        if (rc == 0 && batch != NULL && batch->callback_url != NULL)
                rc = sbx_audit_delivery_insert_on(conn, batch->tenant, "batch", batch->id,
                                                  batch->callback_url, batch->created_at_ms, err);
        for (size_t i = 0; rc == 0 && i < n; i++)
                rc = insert_item(audit, conn, batch, &items[i], err);
        /* A fleet's other nodes hear of it (they LISTEN: api/async.c), at the commit. */
        if (rc == 0 && sbx_sql_shared(audit->sql))
                rc = sbx_sql_run(conn, "NOTIFY " SBX_AUDIT_QUEUE_CHANNEL, NULL, 0, NULL, NULL, NULL,
                                 "notify", err);
        if (rc == 0)
                rc = sbx_sql_commit(conn, err);
        sbx_sql_let_go(conn); /* rolls back what did not commit */
        return rc;
}

static int copy_text(void *ctx, struct sbx_sql_row *row, struct sbx_error *err)
{
        char **text = ctx;
        size_t size = 0;
        const char *value = sbx_sql_column_text(row, 0, &size);
        if (value != NULL && (*text = strndup(value, size)) == NULL)
                return sbx_error_set(err, ENOMEM, "audit: out of memory");
        return 0;
}

/* Queued execution ?1 taken to running on node ?2: one conditional update. */
#define TAKE(lock)                                                                                 \
        "UPDATE executions SET status = '" SBX_AUDIT_STATUS_RUNNING "', node = ?2 WHERE id = "     \
        "(SELECT id FROM executions WHERE id = ?1 AND status = '" SBX_AUDIT_STATUS_QUEUED "'" lock \
        ")"

int sbx_audit_take(struct sbx_audit *audit, const char *id, char **request, struct sbx_error *err)
{
        *request = NULL;
        const struct sbx_sql_value values[] = {sbx_sql_text(id), sbx_sql_text(audit->node)};
        struct sbx_sql_conn *conn = sbx_sql_hold(audit->sql);
        uint64_t taken = 0;
        /* In a fleet's store the row another node is taking this moment is passed over, not
         * waited for (it is that node's). */
        const char *take = sbx_sql_shared(audit->sql) ? TAKE(" FOR UPDATE SKIP LOCKED") : TAKE("");
        int rc = sbx_sql_run(conn, take, values, SBX_ARRAY_SIZE(values), NULL, NULL, &taken, "take",
                             err);
        if (rc == 0 && taken > 0)
                rc = sbx_sql_run(conn, "SELECT request FROM queue WHERE id = ?1", values, 1,
                                 copy_text, request, NULL, "the queued request", err);
        sbx_sql_let_go(conn);
        if (rc < 0 || taken == 0)
                return rc;
        if (*request == NULL)
                return sbx_error_set(err, ENOENT, "audit: the queued request of %s is gone", id);
        return 1;
}

static int read_retry(void *ctx, struct sbx_sql_row *row, struct sbx_error *err)
{
        (void)err;
        int *retry = ctx;
        *retry = sbx_sql_column_int(row, 0) != 0;
        return 0;
}

int sbx_audit_queued_request(struct sbx_audit *audit, const char *id, bool *retry,
                             struct sbx_error *err)
{
        int found = -1; /* none: no row */
        const struct sbx_sql_value values[] = {sbx_sql_text(id)};
        if (sbx_sql_exec(audit->sql, "SELECT retry FROM queue WHERE id = ?1", values, 1, read_retry,
                         &found, NULL, "the queue row", err) < 0)
                return -1;
        *retry = found == 1;
        return found >= 0;
}

int sbx_audit_requeue(struct sbx_audit *audit, const char *id, struct sbx_error *err)
{
        const struct sbx_sql_value values[] = {sbx_sql_text(id)};
        uint64_t changes = 0;
        if (sbx_sql_exec(audit->sql,
                         "UPDATE executions SET status = '" SBX_AUDIT_STATUS_QUEUED
                         "', node = NULL WHERE id = ?1 AND status = '" SBX_AUDIT_STATUS_RUNNING
                         "' AND id IN (SELECT id FROM queue)",
                         values, 1, NULL, NULL, &changes, "requeue", err) < 0)
                return -1;
        return changes > 0;
}

int sbx_audit_cancel_queued(struct sbx_audit *audit, const char *tenant, const char *id,
                            const char *why, int64_t finished_at_ms, struct sbx_error *err)
{
        const struct sbx_sql_value values[] = {sbx_sql_text(id), sbx_sql_text(tenant),
                                               sbx_sql_text(why), sbx_sql_int(finished_at_ms)};
        uint64_t changes = 0;
        if (sbx_sql_exec(audit->sql,
                         "UPDATE executions SET status = 'canceled', error = ?3, finished_at = ?4 "
                         "WHERE id = ?1 AND tenant = ?2 AND status = '" SBX_AUDIT_STATUS_QUEUED "'",
                         values, SBX_ARRAY_SIZE(values), NULL, NULL, &changes, "cancel", err) < 0)
                return -1;
        return changes > 0;
}

int sbx_audit_queue_recover(struct sbx_audit *audit, uint64_t *requeued, struct sbx_error *err)
{
        *requeued = 0;
        /* A fleet's store: this node's own (the survivors take a dead node's: sbx_audit_reap). */
        const struct sbx_sql_value values[] = {sbx_sql_text(audit->node)};
        return sbx_sql_exec(audit->sql,
                            "UPDATE executions SET status = '" SBX_AUDIT_STATUS_QUEUED
                            "', node = NULL WHERE status = '" SBX_AUDIT_STATUS_RUNNING
                            "' AND (?1 IS NULL OR node = ?1) AND id IN (SELECT id FROM queue "
                            "WHERE retry = 1)",
                            values, 1, NULL, NULL, requeued, "queue again", err);
}

struct each_context {
        int (*fn)(void *ctx, const struct sbx_audit_queued *item);
        void *ctx;
};

static int each_row(void *ctx, struct sbx_sql_row *row, struct sbx_error *err)
{
        const struct each_context *each = ctx;
        size_t size = 0;
        const struct sbx_audit_queued item = {
                .id = sbx_sql_column_text(row, 0, &size),
                .tenant = sbx_sql_column_text(row, 1, &size),
                .created_at_ms = sbx_sql_column_int(row, 2),
                .wall_ms = (uint64_t)sbx_sql_column_int(row, 3),
        };
        if (item.id == NULL || item.tenant == NULL)
                return 0;
        if (each->fn(each->ctx, &item) < 0) {
                if (err->message[0] == '\0')
                        sbx_error_set(err, ENOMEM, "audit: read the queue");
                return -1;
        }
        return 0;
}

int sbx_audit_queue_each(struct sbx_audit *audit,
                         int (*fn)(void *ctx, const struct sbx_audit_queued *item), void *ctx,
                         struct sbx_error *err)
{
        struct each_context each = {fn, ctx};
        return sbx_sql_exec(audit->sql,
                            "SELECT e.id, e.tenant, e.created_at, q.wall_ms FROM executions e JOIN "
                            "queue q ON q.id = e.id WHERE e.status = '" SBX_AUDIT_STATUS_QUEUED
                            "' ORDER BY e.created_at, e.rowid",
                            NULL, 0, each_row, &each, NULL, "read the queue", err);
}

struct case_batch {
        char *batch_id;
        bool *done;
        int found;
};

static int case_row(void *ctx, struct sbx_sql_row *row, struct sbx_error *err)
{
        (void)err;
        struct case_batch *found = ctx;
        size_t size = 0;
        const char *batch = sbx_sql_column_text(row, 0, &size);
        if (batch == NULL)
                return 0;
        snprintf(found->batch_id, SBX_EXECUTION_ID_CHARS + 1, "%.*s", (int)size, batch);
        *found->done = sbx_sql_column_int(row, 1) == 0;
        found->found = 1;
        return 0;
}

int sbx_audit_case_batch(struct sbx_audit *audit, const char *id,
                         char batch_id[SBX_EXECUTION_ID_CHARS + 1], bool *done,
                         struct sbx_error *err)
{
        *done = false;
        struct case_batch found = {batch_id, done, 0};
        const struct sbx_sql_value values[] = {sbx_sql_text(id)};
        if (sbx_sql_exec(audit->sql,
                         "SELECT c.batch_id, (SELECT count(*) FROM batch_cases o JOIN executions e "
                         "ON e.id = o.execution_id WHERE o.batch_id = c.batch_id AND e.status IN "
                         "('" SBX_AUDIT_STATUS_QUEUED "', '" SBX_AUDIT_STATUS_RUNNING
                         "')) FROM batch_cases c WHERE c.execution_id = ?1",
                         values, 1, case_row, &found, NULL, "the batch of a case", err) < 0)
                return -1;
        return found.found;
}

/* Column i as a JSON value of the text it holds (a JSON column), null when NULL. */
static json_t *json_column(struct sbx_sql_row *row, int i)
{
        size_t size = 0;
        const char *text = sbx_sql_column_text(row, i, &size);
        json_t *value = text ? json_loadb(text, size, JSON_DECODE_ANY, NULL) : NULL;
        return value ? value : json_null();
}

/* Column i as a JSON string of its bytes (invalid UTF-8 replaced), null when NULL. */
static json_t *output_column(struct sbx_sql_row *row, int i)
{
        size_t size = 0;
        const char *data = sbx_sql_column_blob(row, i, &size);
        return data != NULL ? sbx_json_string_from_bytes(data, size) : json_null();
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
static const char *case_verdict(struct sbx_sql_row *row, enum sbx_compare compare, bool judged)
{
        size_t size = 0;
        const char *status = sbx_sql_column_text(row, 2, &size);
        if (status == NULL || strcmp(status, SBX_AUDIT_STATUS_QUEUED) == 0 ||
            strcmp(status, SBX_AUDIT_STATUS_RUNNING) == 0)
                return "pending";
        if (strcmp(status, sbx_status_name(SBX_STATUS_OK)) != 0)
                return status;
        if (!judged || sbx_sql_is_null(row, 9))
                return "accepted"; /* a list of executions, or a case that expects nothing */
        if (sbx_sql_is_null(row, 6))
                return "unjudged"; /* its output was not kept (a result from the spool) */
        size_t out_len = 0, want_len = 0;
        const char *out = sbx_sql_column_blob(row, 6, &out_len);
        const char *want = sbx_sql_column_blob(row, 9, &want_len);
        return sbx_verdict(SBX_STATUS_OK, compare, out ? out : "", out_len, want ? want : "",
                           want_len);
}

struct batch_fetch {
        const char *id;
        const char *const *fields;
        size_t n_fields;
        json_t *batch;
        enum sbx_compare compare;
        bool judged;
        bool done;
};

static int batch_head(void *ctx, struct sbx_sql_row *row, struct sbx_error *err)
{
        struct batch_fetch *f = ctx;
        size_t size = 0;
        const char *compare = sbx_sql_column_text(row, 1, &size);
        const char *callback = sbx_sql_column_text(row, 3, &size);
        f->batch = json_pack("{s:s, s:I, s:s?, s:s?, s:I, s:{}, s:[]}", "id", f->id, "created_at",
                             (json_int_t)sbx_sql_column_int(row, 0), "compare", compare,
                             "callback_url", callback, "cases",
                             (json_int_t)sbx_sql_column_int(row, 2), "summary", "results");
        if (f->batch == NULL)
                return sbx_error_set(err, ENOMEM, "audit: batch %s", f->id);
        f->compare = SBX_COMPARE_EXACT;
        f->judged = sbx_compare_find(compare, &f->compare);
        return 0;
}

static int batch_case(void *ctx, struct sbx_sql_row *row, struct sbx_error *err)
{
        struct batch_fetch *f = ctx;
        const char *verdict = case_verdict(row, f->compare, f->judged);
        f->done &= strcmp(verdict, "pending") != 0;
        json_t *summary = json_object_get(f->batch, "summary");
        json_int_t count = json_integer_value(json_object_get(summary, verdict));
        json_object_set_new(summary, verdict, json_integer(count + 1));
        json_t *result = json_pack("{s:I}", "index", (json_int_t)sbx_sql_column_int(row, 0));
        static const struct {
                const char *name;
                int column; /* -1: the verdict */
                enum { TEXT, INTEGER, JSON, OUTPUT } kind;
        } members[] = {
                {"id", 1, TEXT},           {"status", 2, TEXT},    {"verdict", -1, TEXT},
                {"exit_code", 3, INTEGER}, {"signal", 4, INTEGER}, {"error", 5, TEXT},
                {"stdout", 6, OUTPUT},     {"stderr", 7, OUTPUT},  {"usage", 8, JSON},
                {"timing", 10, JSON},
        };
        for (size_t m = 0; result != NULL && m < SBX_ARRAY_SIZE(members); m++) {
                if (!field_wanted(f->fields, f->n_fields, members[m].name))
                        continue;
                int c = members[m].column;
                size_t size = 0;
                json_t *value;
                if (c < 0)
                        value = json_string(verdict);
                else if (sbx_sql_is_null(row, c))
                        value = json_null();
                else if (members[m].kind == TEXT) {
                        const char *text = sbx_sql_column_text(row, c, &size);
                        value = json_stringn(text, size);
                } else if (members[m].kind == INTEGER)
                        value = json_integer(sbx_sql_column_int(row, c));
                else if (members[m].kind == JSON)
                        value = json_column(row, c);
                else
                        value = output_column(row, c);
                json_object_set_new(result, members[m].name, value);
        }
        if (result == NULL ||
            json_array_append_new(json_object_get(f->batch, "results"), result) < 0)
                return sbx_error_set(err, ENOMEM, "audit: batch %s", f->id);
        return 0;
}

int sbx_audit_batch_fetch(struct sbx_audit *audit, const char *tenant, const char *id,
                          const char *const *fields, size_t n_fields, json_t **out,
                          struct sbx_error *err)
{
        *out = NULL;
        struct batch_fetch f = {.id = id, .fields = fields, .n_fields = n_fields, .done = true};
        const struct sbx_sql_value values[] = {sbx_sql_text(id), sbx_sql_text(tenant)};
        /* One connection, so that SQLite's lock holds over both reads, as a fetch always has. */
        struct sbx_sql_conn *conn = sbx_sql_hold(audit->sql);
        int rc = sbx_sql_run(conn,
                             "SELECT created_at, compare, cases, callback_url FROM batches WHERE "
                             "id = ?1 AND tenant = ?2",
                             values, SBX_ARRAY_SIZE(values), batch_head, &f, NULL, "batch", err);
        if (rc == 0 && f.batch != NULL)
                rc = sbx_sql_run(conn,
                                 "SELECT c.idx, c.execution_id, e.status, e.exit_code, e.signal, "
                                 "e.error, e.stdout, e.stderr, e.usage, c.expected_stdout, "
                                 "e.timing FROM batch_cases c JOIN executions e ON e.id = "
                                 "c.execution_id WHERE c.batch_id = ?1 ORDER BY c.idx",
                                 values, 1, batch_case, &f, NULL, "a batch's cases", err);
        sbx_sql_let_go(conn);
        if (rc < 0) {
                json_decref(f.batch);
                return -1;
        }
        if (f.batch != NULL)
                json_object_set_new(f.batch, "done", json_boolean(f.done));
        *out = f.batch;
        return f.batch != NULL;
}

/* (The statements below take the same three parameters, whether or not they use each: a
 * parameter PostgreSQL is told the type of need not appear.)
 *
 * A row's node is dead: it has no liveness fresher than the grace (a node gone for a day has no
 * row at all). */
#define NODE_DEAD(alias)                                                                           \
        alias ".node IS NOT NULL AND NOT EXISTS (SELECT 1 FROM sandboxd_nodes n WHERE n.name "     \
              "= " alias ".node AND n.alive_until > now() - interval '1 second' * ?3)"

int sbx_audit_reap(struct sbx_audit *audit, const char *error, int64_t finished_at_ms,
                   uint64_t *requeued, uint64_t *interrupted, struct sbx_error *err)
{
        *requeued = *interrupted = 0;
        if (!sbx_sql_shared(audit->sql))
                return 0;
        const struct sbx_sql_value values[] = {sbx_sql_text(error), sbx_sql_int(finished_at_ms),
                                               sbx_sql_int(SBX_AUDIT_REAP_GRACE_S)};
        uint64_t sessions = 0;
        struct sbx_sql_conn *conn = sbx_sql_hold(audit->sql);
        int rc = sbx_sql_run(conn,
                             "UPDATE executions e SET status = '" SBX_AUDIT_STATUS_QUEUED
                             "', node = NULL WHERE e.status = '" SBX_AUDIT_STATUS_RUNNING
                             "' AND " NODE_DEAD("e") " AND e.id IN (SELECT id FROM queue WHERE "
                                                     "retry = 1)",
                             values, SBX_ARRAY_SIZE(values), NULL, NULL, requeued,
                             "queue a dead node's executions again", err);
        if (rc == 0)
                rc = sbx_sql_run(conn,
                                 "UPDATE executions e SET status = 'internal_error', error = ?1, "
                                 "finished_at = ?2 WHERE e.status = '" SBX_AUDIT_STATUS_RUNNING
                                 "' AND " NODE_DEAD("e"),
                                 values, SBX_ARRAY_SIZE(values), NULL, NULL, interrupted,
                                 "end a dead node's executions", err);
        if (rc == 0)
                rc = sbx_sql_run(conn,
                                 "UPDATE sessions s SET ended_at = ?2, end_reason = 'node_died' "
                                 "WHERE s.ended_at IS NULL AND " NODE_DEAD("s"),
                                 values, SBX_ARRAY_SIZE(values), NULL, NULL, &sessions,
                                 "end a dead node's sessions", err);
        sbx_sql_let_go(conn);
        if (rc == 0 && *requeued + *interrupted + sessions > 0)
                sbx_info("audit: a dead node's executions: %" PRIu64 " queued again, %" PRIu64
                         " ended; %" PRIu64 " of its sessions ended",
                         *requeued, *interrupted, sessions);
        return rc;
}
