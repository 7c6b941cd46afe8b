/* The durable queue of asynchronous executions (DESIGN.md "Asynchronous work and webhooks"), in
 * the audit store: an accepted execution is a row of executions with status queued, committed
 * before the client hears 202, and a row of the queue table with what its run needs (the body as
 * received, code included; executions keeps only digests of it). The queue row goes when the
 * execution has an outcome (a trigger), so a tenant's code is kept no longer than its run needs.
 *
 * The order of the queue in memory, its fairness and its dispatch are the API's (api/async.h);
 * this is what survives a kill -9 of any process, batches of test cases included: queued rows are
 * run after a restart, rows that were running are completed as interrupted
 * (sbx_audit_interrupt_running), or queued again when their request said retry. In a fleet's
 * store the queue is every node's: a queued row is run by the node that takes it first
 * (sbx_audit_take), and a dead node's running rows are the survivors' to end or queue again
 * (sbx_audit_reap). Thread-safe, as audit.h. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "protocol/protocol.h"
#include "service/audit.h"
#include "util/error.h"

/* One queued execution, as sbx_audit_queue_each() hands it over (valid for the call). */
struct sbx_audit_queued {
        const char *id;
        const char *tenant;
        int64_t created_at_ms;
        uint64_t wall_ms; /* its effective wall limit: for the quota's reservation */
};

/* One asynchronous execution to accept: record as sbx_audit_begin takes it, request the
 * validated body as JSON text (what its run needs), retry (it may run again after a crash), its
 * effective wall_ms; as a batch's case also its expected stdout (NULL: nothing expected). */
struct sbx_audit_enqueued {
        const struct sbx_audit_record *record;
        const char *request;
        bool retry;
        uint64_t wall_ms;
        size_t index;              /* a batch's case: its index in the request */
        const char *callback_url;  /* NULL, or where its webhook goes (audit_deliveries.h) */
        const char *callback_kind; /* its delivery's kind: NULL for "execution" */
        const char *expected_stdout;
        size_t expected_size;
};

/* A batch (api/batches.c): its cases are executions queued with it, in one transaction. */
struct sbx_audit_batch {
        const char *id;
        const char *tenant;
        int64_t created_at_ms;
        const char *compare;      /* a verdict.h name; NULL for a plain list of executions */
        const char *callback_url; /* NULL: none */
        const json_t *requested;  /* the batch as received, code and data as digests */
};

/* Accepts n asynchronous executions, all or none (one transaction): each one's queue row (its
 * request), then its record with status queued, and its delivery when it has a callback_url;
 * with batch (NULL: none), the batch's row (and its delivery) and each one's case row (its
 * index). */
int sbx_audit_enqueue(struct sbx_audit *audit, const struct sbx_audit_batch *batch,
                      const struct sbx_audit_enqueued *items, size_t n, struct sbx_error *err);

/* Takes queued execution id to running and gives its request text (*request, caller frees): 1;
 * 0 when it is no longer queued (canceled meanwhile); -1 with err. */
int sbx_audit_take(struct sbx_audit *audit, const char *id, char **request, struct sbx_error *err);

/* Puts running execution id back to queued: the engine refused its run, nothing ran. 1 when it
 * did, 0 when id was not running, -1 with err. */
int sbx_audit_requeue(struct sbx_audit *audit, const char *id, struct sbx_error *err);

/* Ends queued execution id of tenant as canceled with why, finished at finished_at_ms: 1 when it
 * did, 0 when id is not a queued execution of tenant, -1 with err. */
int sbx_audit_cancel_queued(struct sbx_audit *audit, const char *tenant, const char *id,
                            const char *why, int64_t finished_at_ms, struct sbx_error *err);

/* Whether execution id is an asynchronous one whose run has not ended (its queue row is there):
 * 1 with *retry (its request said "retry": true), 0 when it is not, -1 with err. */
int sbx_audit_queued_request(struct sbx_audit *audit, const char *id, bool *retry,
                             struct sbx_error *err);

/* At the API process's start, before sbx_audit_interrupt_running(): queues again the running
 * executions whose request said retry (*requeued says how many); the rest of the running ones
 * are the interrupt's. */
int sbx_audit_queue_recover(struct sbx_audit *audit, uint64_t *requeued, struct sbx_error *err);

/* Calls fn for every queued execution, oldest first, on a held connection (fn must not use the
 * store); stops at fn's first -1, which it returns with err as fn left it. */
int sbx_audit_queue_each(struct sbx_audit *audit,
                         int (*fn)(void *ctx, const struct sbx_audit_queued *item), void *ctx,
                         struct sbx_error *err);

/* The batch id of tenant as its answer (caller owns it): {id, created_at, compare, callback_url,
 * cases, done, summary: {verdict: count}, results: [{index, id, status, verdict, exit_code,
 * signal, error, stdout, stderr, usage, timing}]} where a case still queued or running has the
 * verdict "pending" and a case's verdict comes from service/verdict.h (a case whose output was not
 * kept and whose run was ok: "unjudged"). fields (NULL: all) names the members each result keeps
 * (index always). 1 with *out, 0 when tenant has no such batch, -1 with err. */
int sbx_audit_batch_fetch(struct sbx_audit *audit, const char *tenant, const char *id,
                          const char *const *fields, size_t n_fields, json_t **out,
                          struct sbx_error *err);

/* Whether execution id is a batch's case, and if so (1) its batch's id (batch_id) and whether
 * none of the batch's cases is queued or running any more (*done). 0 when it is no case. */
int sbx_audit_case_batch(struct sbx_audit *audit, const char *id,
                         char batch_id[SBX_EXECUTION_ID_CHARS + 1], bool *done,
                         struct sbx_error *err);

/* How long after its liveness lapsed a fleet node's executions and sessions are taken for dead
 * (sbx_audit_reap): a node that lost the store for longer than its time-to-live renews it within
 * a heartbeat of the store's return (at most 5 s: [store] lease_ttl_s is at most 25), and must not
 * find its running executions ended. */
#define SBX_AUDIT_REAP_GRACE_S 5

/* A fleet's store (nothing in a node's own): ends what the nodes whose liveness lapsed over
 * SBX_AUDIT_REAP_GRACE_S ago (service/quota_pg.h) left running, as a node's own start does with
 * its own: the executions whose request said retry queued again (*requeued), the others completed
 * as internal_error with error (*interrupted), their open sessions ended as "node_died". */
int sbx_audit_reap(struct sbx_audit *audit, const char *error, int64_t finished_at_ms,
                   uint64_t *requeued, uint64_t *interrupted, struct sbx_error *err);
