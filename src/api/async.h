/* Asynchronous executions (DESIGN.md "Asynchronous work and webhooks"): a POST /v1/executions
 * with "wait": false (or Prefer: respond-async) is committed to the store's queue
 * (service/audit_queue.h) and answered 202 at once; runner threads of the API process take the
 * queued executions and run them through the engine like any other, and their records get the
 * outcome. GET /v1/executions/{id} shows them queued (with a position and an estimate), running,
 * or ended, and long-polls; DELETE cancels a queued or running one.
 *
 * Order: per tenant first come, first served; across tenants round-robin, each within its own
 * quota (max_concurrency, the CPU budget) and all within the server's capacity, so that one
 * tenant's thousands of queued executions never keep another's single one waiting behind them.
 * A tenant may have at most its tier's max_queued waiting (429 beyond).
 *
 * Nothing accepted is lost: the queue is in the store before the 202; after a restart the
 * queued ones run, those a crash interrupted are recorded so (or queued again with "retry":
 * true), and an engine that refuses or goes away before running one leaves it queued. */
#pragma once

#include <stdint.h>

#include "api/http.h"
#include "service/audit.h"
#include "service/audit_queue.h"
#include "service/settings.h"
#include "util/error.h"

struct sbx_async;

/* The queue of api (its engine, store, quota, config and metrics), loaded from the store, and
 * its runner threads started (as many as the server's max_sandboxes, up to
 * SBX_ASYNC_MAX_RUNNERS). NULL with err when memory, threads or the store fail. */
struct sbx_async *sbx_async_start(struct sbx_api *api, struct sbx_error *err);

#define SBX_ASYNC_MAX_RUNNERS 64

/* The API's drain (SIGTERM): no execution is taken from the queue any more (they stay queued in
 * the store), and those running may end until deadline_ms (monotonic), which the engine's own
 * grace bounds: before the engine client is shut down, so that their results are recorded. */
void sbx_async_drain(struct sbx_async *async, uint64_t deadline_ms);

/* Stops taking executions from the queue (they stay queued in the store for the next start),
 * lets those running end within the server's shutdown grace, cancels the rest, joins the
 * runners and frees everything. NULL is a no-op. */
void sbx_async_stop(struct sbx_async *async);

/* One execution to queue: its settings (a queued request), its audit record as sbx_audit_begin
 * takes it, and as a batch's case what its stdout must be (NULL: nothing). */
struct sbx_async_item {
        const struct sbx_settings *settings;
        const struct sbx_audit_record *record;
        size_t index; /* a batch's: its case's index in the request */
        const char *expected_stdout;
        size_t expected_size;
        /* Its webhook's delivery kind (audit_deliveries.h): NULL for "execution". */
        const char *callback_kind;
};

/* Accepts n executions of tenant, all or none, as batch's cases when batch is not NULL: commits
 * them to the store's queue and wakes the runners. A batch of a compiled language runs its first
 * case alone, so the others find its artifact in the compile cache. 0 with *position (the
 * first's place in the tenant's queue, 1: next); -1 with err: ENOSPC when they would pass the
 * tenant's max_queued (*retry_after_s then says when one should have left), else the store
 * failed. */
int sbx_async_submit(struct sbx_async *async, const struct sbx_tenant *tenant,
                     const struct sbx_audit_batch *batch, const struct sbx_async_item *items,
                     size_t n, uint64_t *position, uint64_t *retry_after_s, struct sbx_error *err);

/* What a queued execution of this process waits for: its place in its tenant's queue (1: next)
 * and an estimate of the milliseconds until it starts. false when id is not queued here. */
bool sbx_async_position(struct sbx_async *async, const char *id, uint64_t *position,
                        uint64_t *estimate_ms);

/* Waits until execution id is neither queued nor running here, at most timeout_ms (a
 * long-polling GET); returns at once for an id that is not. */
void sbx_async_wait(struct sbx_async *async, const char *id, uint64_t timeout_ms);

/* Cancels tenant's execution id: 1 when it was queued (its record now says canceled), 2 when it
 * was running (a CANCEL went to the engine; its record says canceled once it ended), 0 when it
 * is neither here, -1 with err when the store failed. */
int sbx_async_cancel(struct sbx_async *async, const char *tenant, const char *id,
                     struct sbx_error *err);
