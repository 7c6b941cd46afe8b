#include "service/quota_pg.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "service/pg.h"
#include "util/cleanup.h"
#include "util/log.h"
#include "util/time.h"

/* A node renews its liveness every heartbeat; its leases count for the TTL ([store]
 * lease_ttl_s, 10 s unless set) after the last renewal. The TTL is HEARTBEATS_PER_TTL
 * heartbeats, so that one slow renewal does not drop a live node's leases, and short, so that a
 * dead node's executions stop holding its tenants' slots soon. */
#define HEARTBEATS_PER_TTL 5
/* What no longer counts is deleted at start and every PRUNE_BEATS heartbeats: charges older than
 * the longest window, the nodes, with their leases, whose liveness lapsed more than GONE_AFTER_S
 * ago (their leases stopped counting then; a node that comes back after that long starts afresh
 * anyway), and the placements past their sessions' longest life (service/placement_pg.h). */
#define PRUNE_BEATS  30
#define GONE_AFTER_S 86400

/* A statement the store must take, but not now: a release it did not take (PostgreSQL away), or
 * what a thread that must not wait on the store handed over (sbx_quota_pg_later). The
 * heartbeat's thread runs it, and keeps it for its next beat while the store does not take it. */
#define PENDING_VALUES_MAX 3
struct pending {
        struct pending *next;
        const char *sql; /* a string literal */
        const char *what;
        int n;
        char *values[PENDING_VALUES_MAX];
};

struct sbx_quota_pg {
        struct sbx_pg *pg;
        char *node;
        char *url; /* where the other nodes reach this one's API (api/forward.h) */
        uint64_t ttl_s;
        uint64_t keep_charges_s;
        pthread_t heartbeat;
        bool heartbeat_started;
        pthread_mutex_t lock; /* stopping, pending, handed */
        pthread_cond_t wake;
        bool stopping;
        struct pending *pending; /* run at each beat */
        struct pending *handed;  /* run as soon as the heartbeat wakes */
};

/* Runs sql with its text parameters and drops the result; -1 with err on failure. */
static int run(struct sbx_pg *pg, const char *sql, int n, const char *const *values,
               struct sbx_error *err)
{
        PGresult *result = sbx_pg_query(pg, sql, n, values, err);
        if (result == NULL)
                return -1;
        PQclear(result);
        return 0;
}

static int renew(struct sbx_quota_pg *fleet, struct sbx_error *err)
{
        char ttl[24];
        snprintf(ttl, sizeof(ttl), "%" PRIu64, fleet->ttl_s);
        const char *values[] = {fleet->node, ttl, fleet->url};
        return run(fleet->pg,
                   "INSERT INTO sandboxd_nodes (name, alive_until, url) "
                   "VALUES ($1, clock_timestamp() + $2 * interval '1 second', $3) "
                   "ON CONFLICT (name) DO UPDATE SET alive_until = excluded.alive_until, "
                   "url = excluded.url",
                   3, values, err);
}

/* Deletes lease $1 (0: none) and charges the CPU $3 to tenant $2 in one statement (a
 * data-modifying WITH runs whether or not the rest reads it). */
static const char release_sql[] = "WITH ended AS (DELETE FROM sandboxd_leases WHERE id = $1) "
                                  "INSERT INTO sandboxd_charges (tenant, at, cpu_ms) "
                                  "SELECT $2, clock_timestamp(), $3 WHERE $3::bigint > 0";

static void pending_free(struct pending *item)
{
        for (int i = 0; i < item->n; i++)
                free(item->values[i]);
        free(item);
}

static struct pending *pending_new(const char *sql, const char *what, int n,
                                   const char *const *values)
{
        struct pending *item = calloc(1, sizeof(*item));
        if (item == NULL || n > PENDING_VALUES_MAX) {
                free(item);
                return NULL;
        }
        *item = (struct pending){.sql = sql, .what = what};
        for (; item->n < n; item->n++)
                if ((item->values[item->n] = strdup(values[item->n])) == NULL) {
                        pending_free(item);
                        return NULL;
                }
        return item;
}

/* Runs each statement of list once: those the store does not take go back to the pending ones
 * (the next beat's). The number that ran. */
static size_t run_list(struct sbx_quota_pg *fleet, struct pending *list)
{
        size_t ran = 0;
        struct pending *keep = NULL;
        while (list != NULL) {
                struct pending *item = list;
                list = list->next;
                struct sbx_error err = {0};
                if (run(fleet->pg, item->sql, item->n, (const char *const *)item->values, &err) ==
                    0) {
                        pending_free(item);
                        ran++;
                } else {
                        sbx_debug("store: %s kept for later: %s", item->what, err.message);
                        item->next = keep;
                        keep = item;
                }
        }
        if (keep != NULL) {
                pthread_mutex_lock(&fleet->lock);
                struct pending **end = &keep;
                while (*end != NULL)
                        end = &(*end)->next;
                *end = fleet->pending;
                fleet->pending = keep;
                pthread_mutex_unlock(&fleet->lock);
        }
        return ran;
}

/* Takes the list at *head (under the lock) and runs it. */
static size_t run_taken(struct sbx_quota_pg *fleet, struct pending **head)
{
        pthread_mutex_lock(&fleet->lock);
        struct pending *list = *head;
        *head = NULL;
        pthread_mutex_unlock(&fleet->lock);
        return run_list(fleet, list);
}

static void prune(struct sbx_quota_pg *fleet)
{
        char keep[24], gone[24];
        snprintf(keep, sizeof(keep), "%" PRIu64, fleet->keep_charges_s);
        snprintf(gone, sizeof(gone), "%d", GONE_AFTER_S);
        const char *charges[] = {keep};
        const char *nodes[] = {gone};
        struct sbx_error err = {0};
        if (run(fleet->pg,
                "DELETE FROM sandboxd_charges WHERE at < clock_timestamp() - $1 * interval "
                "'1 second'",
                1, charges, &err) < 0 ||
            run(fleet->pg,
                "WITH gone AS (DELETE FROM sandboxd_nodes WHERE alive_until < clock_timestamp() - "
                "$1 * interval '1 second' RETURNING name) "
                "DELETE FROM sandboxd_leases WHERE node IN (SELECT name FROM gone)",
                1, nodes, &err) < 0 ||
            /* A session outlives no placement's until (its longest life). */
            run(fleet->pg, "DELETE FROM sandboxd_placements WHERE until < clock_timestamp()", 0,
                NULL, &err) < 0)
                sbx_debug("store: pruning: %s", err.message);
}

static void *heartbeat_main(void *arg)
{
        struct sbx_quota_pg *fleet = arg;
        bool reachable = true;
        for (unsigned beat = 1;; beat++) {
                struct timespec until =
                        sbx_monotonic_after(fleet->ttl_s * 1000 / HEARTBEATS_PER_TTL);
                pthread_mutex_lock(&fleet->lock);
                while (!fleet->stopping &&
                       pthread_cond_timedwait(&fleet->wake, &fleet->lock, &until) != ETIMEDOUT)
                        if (fleet->handed != NULL) { /* then back to waiting for the beat */
                                pthread_mutex_unlock(&fleet->lock);
                                run_taken(fleet, &fleet->handed);
                                pthread_mutex_lock(&fleet->lock);
                        }
                bool stopping = fleet->stopping;
                pthread_mutex_unlock(&fleet->lock);
                if (stopping)
                        return NULL;
                struct sbx_error err = {0};
                if (renew(fleet, &err) < 0) {
                        if (reachable)
                                sbx_warn("store: cannot renew this node's leases: %s", err.message);
                        reachable = false;
                        continue;
                }
                if (!reachable)
                        sbx_info("store: PostgreSQL is reachable again");
                reachable = true;
                run_taken(fleet, &fleet->handed);
                size_t retried = run_taken(fleet, &fleet->pending);
                if (retried > 0)
                        sbx_info("store: %zu statement(s) kept during an outage reached "
                                 "PostgreSQL",
                                 retried);
                if (beat % PRUNE_BEATS == 0)
                        prune(fleet);
        }
}

int sbx_quota_pg_open(const struct sbx_store_config *store, const char *node, const char *url,
                      uint64_t keep_charges_s, struct sbx_quota_pg **out, struct sbx_error *err)
{
        *out = NULL;
        struct sbx_quota_pg *fleet = calloc(1, sizeof(*fleet));
        if (fleet == NULL || (fleet->node = strdup(node)) == NULL ||
            (fleet->url = strdup(url)) == NULL) {
                if (fleet != NULL)
                        free(fleet->node);
                free(fleet);
                return sbx_error_set(err, ENOMEM, "store");
        }
        fleet->keep_charges_s = keep_charges_s < 86400 ? 86400 : keep_charges_s;
        fleet->ttl_s = store->lease_ttl_s > 0 ? store->lease_ttl_s : 10;
        pthread_mutex_init(&fleet->lock, NULL);
        sbx_cond_init_monotonic(&fleet->wake);
        const char *values[] = {node};
        if (sbx_pg_open(store->url, store->connections, &fleet->pg, err) < 0 ||
            renew(fleet, err) < 0 ||
            /* Its previous life's executions and sessions died with it. */
            run(fleet->pg,
                "WITH leases AS (DELETE FROM sandboxd_leases WHERE node = $1) "
                "DELETE FROM sandboxd_placements WHERE node = $1",
                1, values, err) < 0) {
                sbx_quota_pg_close(fleet);
                return -1;
        }
        prune(fleet);
        int rc = pthread_create(&fleet->heartbeat, NULL, heartbeat_main, fleet);
        if (rc != 0) {
                sbx_quota_pg_close(fleet);
                return sbx_error_set(err, rc, "store: heartbeat thread");
        }
        fleet->heartbeat_started = true;
        *out = fleet;
        return 0;
}

void sbx_quota_pg_close(struct sbx_quota_pg *fleet)
{
        if (fleet == NULL)
                return;
        if (fleet->heartbeat_started) {
                pthread_mutex_lock(&fleet->lock);
                fleet->stopping = true;
                pthread_cond_signal(&fleet->wake);
                pthread_mutex_unlock(&fleet->lock);
                pthread_join(fleet->heartbeat, NULL);
                run_taken(fleet, &fleet->handed);
                run_taken(fleet, &fleet->pending);
        }
        size_t lost = 0;
        while (fleet->pending != NULL) {
                struct pending *item = fleet->pending;
                fleet->pending = item->next;
                pending_free(item);
                lost++;
        }
        if (lost > 0)
                sbx_warn("store: %zu statement(s) never reached PostgreSQL; their leases and "
                         "placements lapse with this node's liveness",
                         lost);
        sbx_pg_close(fleet->pg);
        pthread_cond_destroy(&fleet->wake);
        pthread_mutex_destroy(&fleet->lock);
        free(fleet->node);
        free(fleet->url);
        free(fleet);
}

int sbx_quota_pg_reserve(struct sbx_quota_pg *fleet, const struct sbx_tenant *tenant,
                         uint64_t expected_ms, enum sbx_quota_verdict *verdict,
                         uint64_t *retry_after_ms, uint64_t *lease, struct sbx_error *err)
{
        const struct sbx_tier *tier = tenant->tier;
        char concurrency[24], budget[24], window[24], expected[24];
        snprintf(concurrency, sizeof(concurrency), "%" PRIu64, tier->max_concurrency);
        snprintf(budget, sizeof(budget), "%" PRIu64, tier->cpu_budget_ms);
        snprintf(window, sizeof(window), "%" PRIu64, tier->cpu_window_s * 1000);
        snprintf(expected, sizeof(expected), "%" PRIu64, expected_ms);
        const char *values[] = {tenant->name, fleet->node, concurrency, budget, window, expected};
        PGresult *result = sbx_pg_query(
                fleet->pg,
                "SELECT verdict, retry_after_ms, lease FROM sandboxd_reserve($1, $2, $3, $4, $5, "
                "$6)",
                6, values, err);
        if (result == NULL)
                return -1;
        int r = 0;
        if (PQntuples(result) != 1 || PQnfields(result) != 3) {
                r = sbx_error_plain(err, EPROTO, "store: sandboxd_reserve answered %d rows",
                                    PQntuples(result));
        } else {
                /* sandboxd_reserve names its verdicts as the metrics do (sbx_quota_verdict_name).
                 */
                static const enum sbx_quota_verdict answers[] = {
                        SBX_QUOTA_ALLOWED, SBX_QUOTA_OVER_CONCURRENCY, SBX_QUOTA_OVER_CPU_BUDGET};
                const char *name = PQgetvalue(result, 0, 0);
                *retry_after_ms = strtoull(PQgetvalue(result, 0, 1), NULL, 10);
                *lease = strtoull(PQgetvalue(result, 0, 2), NULL, 10);
                r = sbx_error_plain(err, EPROTO, "store: unknown verdict '%s'", name);
                for (size_t i = 0; i < SBX_ARRAY_SIZE(answers); i++)
                        if (strcmp(name, sbx_quota_verdict_name(answers[i])) == 0) {
                                *verdict = answers[i];
                                r = 0;
                                break;
                        }
        }
        PQclear(result);
        return r;
}

void sbx_quota_pg_release(struct sbx_quota_pg *fleet, const char *tenant_name, uint64_t lease,
                          uint64_t cpu_ms)
{
        if (lease == 0 && cpu_ms == 0)
                return;
        char lease_text[24], cpu_text[24];
        snprintf(lease_text, sizeof(lease_text), "%" PRIu64, lease);
        snprintf(cpu_text, sizeof(cpu_text), "%" PRIu64, cpu_ms);
        const char *values[] = {lease_text, tenant_name, cpu_text};
        struct sbx_error err = {0};
        if (run(fleet->pg, release_sql, 3, values, &err) == 0)
                return;
        struct pending *item = pending_new(release_sql, "a release", 3, values);
        if (item == NULL) {
                sbx_warn("store: release of lease %" PRIu64 " lost (out of memory)", lease);
                return;
        }
        pthread_mutex_lock(&fleet->lock);
        item->next = fleet->pending;
        fleet->pending = item;
        pthread_mutex_unlock(&fleet->lock);
        sbx_debug("store: release of lease %" PRIu64 " kept for later: %s", lease, err.message);
}

void sbx_quota_pg_later(struct sbx_quota_pg *fleet, const char *sql, const char *what, int n,
                        const char *const *values)
{
        struct pending *item = pending_new(sql, what, n, values);
        if (item == NULL) {
                sbx_warn("store: %s lost (out of memory)", what);
                return;
        }
        pthread_mutex_lock(&fleet->lock);
        item->next = fleet->handed;
        fleet->handed = item;
        pthread_cond_signal(&fleet->wake);
        pthread_mutex_unlock(&fleet->lock);
}

struct sbx_pg *sbx_quota_pg_store(struct sbx_quota_pg *fleet)
{
        return fleet->pg;
}

const char *sbx_quota_pg_node(const struct sbx_quota_pg *fleet)
{
        return fleet->node;
}
