/* Quotas, checked before an execution starts and charged after it ends. Per tenant:
 *
 *   concurrency  executions in flight <= tier.max_concurrency
 *   CPU budget   CPU charged by executions that finished within the last tier.cpu_window_s
 *                seconds < tier.cpu_budget_ms (charged with the CPU each really used)
 *
 * and for the whole server, capacity: executions in flight <= max_in_flight (the engine's
 * max_sandboxes, so that the API never sends the engine more than it accepts).
 *
 * Over any, the request is refused at once (no silent queueing) with the seconds after which
 * room frees. For the budget that is the moment enough charge leaves the window. For
 * concurrency and capacity it is when the first of the executions in flight is expected to end:
 * each is expected to take as long as the recent executions did (a moving average of the wall
 * time of those released, the tenant's own for concurrency, everyone's for capacity), but never
 * past its own wall deadline, and an execution already over that time is expected to end now.
 * Without any history the deadlines are the estimate. Retry-After is at least 1 second: 0 would
 * invite a client to retry in a tight loop.
 *
 * With a fleet's store (sbx_quota_share) the tenant's limits are the store's, counted over every
 * node, and the tracker keeps the node's own executions (capacity, estimates, usage).
 *
 * The clock is a parameter (ms on any monotonic clock), so tests can drive time. Thread-safe:
 * one mutex around all state; every call is a few comparisons. Charges finishing within the same
 * second are merged, which bounds a tenant's memory by the window's length in seconds. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "service/config.h"
#include "util/error.h"

enum sbx_quota_verdict {
        SBX_QUOTA_ALLOWED,
        SBX_QUOTA_OVER_CONCURRENCY,
        SBX_QUOTA_OVER_CPU_BUDGET,
        SBX_QUOTA_OVER_CAPACITY,     /* the server runs max_in_flight executions: HTTP 503 */
        SBX_QUOTA_STORE_UNAVAILABLE, /* the fleet's store cannot be reached: HTTP 503 */
};

struct sbx_quota_decision {
        enum sbx_quota_verdict verdict;
        uint64_t retry_after_s; /* refused: whole seconds until capacity frees, at least 1 */
        uint64_t reservation;   /* allowed: hand back to sbx_quota_release() */
};

/* What a tenant uses at a moment, for metrics and tests. */
struct sbx_quota_usage {
        uint64_t in_flight;
        uint64_t cpu_ms_in_window;
};

struct sbx_quota;
struct sbx_quota_pg;

/* A quota tracker with no tenant state yet, or NULL when memory runs out. max_in_flight bounds
 * the executions in flight over all tenants; 0 for no bound. */
struct sbx_quota *sbx_quota_new(uint64_t max_in_flight);

/* From now on the tenants' own limits are checked and charged fleet-wide in fleet (quota_pg.h),
 * which must outlive the tracker's use; the server's capacity stays this tracker's. Call it
 * before any reservation. */
void sbx_quota_share(struct sbx_quota *quota, struct sbx_quota_pg *fleet);

/* Frees the tracker. NULL is a no-op. */
void sbx_quota_free(struct sbx_quota *quota);

/* Decides whether tenant (its tier gives the limits) may start an execution whose wall deadline
 * is wall_ms after now_ms; the tenant's own limits are checked before the server's capacity.
 * When allowed, the execution counts as in flight until released. Returns -1 only when memory
 * runs out (nothing reserved then). */
int sbx_quota_reserve(struct sbx_quota *quota, const struct sbx_tenant *tenant, uint64_t wall_ms,
                      uint64_t now_ms, struct sbx_quota_decision *decision, struct sbx_error *err);

/* Ends the reservation and charges the cpu_ms the execution really used, as finished at now_ms;
 * its wall time joins the estimates when it ran (ran false: it was refused before it started).
 * Call it exactly once per allowed reservation, also when the execution failed. An unknown
 * reservation only charges. */
void sbx_quota_release(struct sbx_quota *quota, const struct sbx_tenant *tenant,
                       uint64_t reservation, bool ran, uint64_t cpu_ms, uint64_t now_ms);

/* Charges cpu_ms that no reservation covers (a session's background processes, between its
 * runs) to the tenant named tenant_name, at now_ms. */
void sbx_quota_charge(struct sbx_quota *quota, const char *tenant_name, uint64_t cpu_ms,
                      uint64_t now_ms);

/* Seconds until the server is expected to have room for one more execution (see above), at
 * least 1: for a refusal by the engine itself, which the capacity check should have prevented. */
uint64_t sbx_quota_capacity_retry_after(struct sbx_quota *quota, uint64_t now_ms);

/* The tenant's usage at now_ms. */
void sbx_quota_usage(struct sbx_quota *quota, const struct sbx_tenant *tenant, uint64_t now_ms,
                     struct sbx_quota_usage *usage);

/* What a refusal with the verdict says, without numbers: "the tenant used its CPU budget for the
 * window", ... */
const char *sbx_quota_verdict_text(enum sbx_quota_verdict verdict);

/* The problem type of a server's refusal (HTTP 503): at-capacity or store-unavailable; NULL for
 * a refusal by the tenant's own limits (429 quota-exceeded) and for ALLOWED. */
const char *sbx_quota_verdict_slug(enum sbx_quota_verdict verdict);

/* Whether the verdict is the server's refusal (HTTP 503), not the tenant's (429). */
static inline bool sbx_quota_verdict_is_server(enum sbx_quota_verdict verdict)
{
        return sbx_quota_verdict_slug(verdict) != NULL;
}

/* The verdict's metric label: "allowed", "concurrency", "cpu_budget", "capacity" or "store". */
const char *sbx_quota_verdict_name(enum sbx_quota_verdict verdict);
