/* The durable queue of asynchronous executions (DESIGN.md "Asynchronous work and webhooks"), in
 * the audit store: an accepted execution is a row of executions with status queued, committed
 * before the client hears 202, and a row of the queue table with what its run needs (the body as
 * received, code included; executions keeps only digests of it). The queue row goes when the
 * execution has an outcome (a trigger), so a tenant's code is kept no longer than its run needs.
 *
 * The order of the queue in memory, its fairness and its dispatch are the API's (api/async.h);
 * this is what survives a kill -9 of any process: queued rows are run after a restart, rows that
 * were running are completed as interrupted (sbx_audit_interrupt_running), or queued again when
 * their request said retry. Thread-safe, as audit.h. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

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

/* Accepts an asynchronous execution: stores request (the validated body as JSON text), retry (may
 * run again after a crash) and its effective wall_ms, then its record (record as for
 * sbx_audit_begin) with status queued. A crash between the two leaves a queue row without a
 * record, which sbx_audit_queue_recover() removes: nothing was accepted. */
int sbx_audit_enqueue(struct sbx_audit *audit, const struct sbx_audit_record *record,
                      const char *request, bool retry, uint64_t wall_ms, struct sbx_error *err);

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

/* At the API process's start, before sbx_audit_interrupt_running(): removes queue rows whose
 * record never came, and queues again the running executions whose request said retry (*requeued
 * says how many); the rest of the running ones are the interrupt's. */
int sbx_audit_queue_recover(struct sbx_audit *audit, uint64_t *requeued, struct sbx_error *err);

/* Calls fn for every queued execution, oldest first, under the store's lock (fn must not use the
 * store); stops at fn's first -1, which it returns with err as fn left it. */
int sbx_audit_queue_each(struct sbx_audit *audit,
                         int (*fn)(void *ctx, const struct sbx_audit_queued *item), void *ctx,
                         struct sbx_error *err);
