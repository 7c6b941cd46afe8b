/* Quotas that hold across a fleet of nodes, kept in PostgreSQL ([store] url; the schema is
 * service/pg.c's): a tenant's concurrency counts its executions in flight on every node, its CPU
 * budget the CPU charged by every node within its window. service/quota.c asks here instead of its
 * own memory for a tenant's limits when a store is configured (sbx_quota_share); the server's
 * capacity stays the node's own.
 *
 *   reserve   one round trip: sandboxd_reserve decides and, when allowed, takes a lease
 *   release   one round trip: the lease is deleted and the CPU charged in one statement
 *
 * A lease counts while its node is alive: every node renews its row in sandboxd_nodes every
 * HEARTBEAT seconds from a thread of its own, for a time-to-live of a few heartbeats, so that
 * the leases of a node that died (kill -9, power) stop counting within that time, without anyone
 * cleaning up after it; a node that starts again under the same name first drops the leases of
 * its previous life, and the rows of a node gone for a day are deleted by any node. A release the
 * store could not take (PostgreSQL away) is kept and retried by that thread, so that an outage
 * leaks no lease. */
#pragma once

#include <stdint.h>

#include "service/config.h"
#include "service/pg.h"
#include "service/quota.h"
#include "util/error.h"

struct sbx_quota_pg;

/* Opens the store at store->url as the node called node (its name in leases), whose API the other
 * nodes reach at url (kept with its liveness), migrates its schema and starts the heartbeat.
 * Charges older than keep_charges_s (the longest window of any tier, at least a day) are deleted as
 * they go. */
int sbx_quota_pg_open(const struct sbx_store_config *store, const char *node, const char *url,
                      uint64_t keep_charges_s, struct sbx_quota_pg **out, struct sbx_error *err);

/* Stops the heartbeat (its pending releases tried once more) and closes the store. NULL is a
 * no-op. */
void sbx_quota_pg_close(struct sbx_quota_pg *fleet);

/* The tenant's own limits, fleet-wide: verdict ALLOWED with a lease (hand it to
 * sbx_quota_pg_release), or OVER_CONCURRENCY / OVER_CPU_BUDGET with the milliseconds after which
 * room frees. expected_ms: how long this execution is expected to run (for others'
 * Retry-After). -1 with err when the store cannot be reached or fails. */
int sbx_quota_pg_reserve(struct sbx_quota_pg *fleet, const struct sbx_tenant *tenant,
                         uint64_t expected_ms, enum sbx_quota_verdict *verdict,
                         uint64_t *retry_after_ms, uint64_t *lease, struct sbx_error *err);

/* Ends lease (0: none) and charges cpu_ms to the tenant called tenant_name. Never fails: what the
 * store cannot take now is retried by the heartbeat. */
void sbx_quota_pg_release(struct sbx_quota_pg *fleet, const char *tenant_name, uint64_t lease,
                          uint64_t cpu_ms);

/* Runs sql (a string literal) with its n text parameters (at most 3) on the heartbeat's thread,
 * at once, and again at each beat while the store does not take it: for a thread that must not
 * wait on the store (the engine client's, which every result passes through). what names it in
 * the log. Never fails; what is still pending when the store closes is lost, with a warning. */
void sbx_quota_pg_later(struct sbx_quota_pg *fleet, const char *sql, const char *what, int n,
                        const char *const *values);

/* The store's connections, for what else a node keeps there (service/placement_pg.h), and this
 * node's name in it. */
struct sbx_pg *sbx_quota_pg_store(struct sbx_quota_pg *fleet);
const char *sbx_quota_pg_node(const struct sbx_quota_pg *fleet);
