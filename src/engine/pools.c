/* The engine's warm pools (DESIGN.md "Warm pools"): pool workers made in the background, each
 * with a sandbox whose loader waits for one RUN; see server_state.h. */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "engine/server_state.h"
#include "protocol/transport.h"
#include "util/cleanup.h"
#include "util/log.h"
#include "util/time.h"

/* After a pool worker fails to get ready, refills wait this long (doubling, up to the maximum),
 * so that a broken runtime costs a log line a minute, not a fork loop. */
#define POOL_RETRY_FIRST_MS 1000
#define POOL_RETRY_MAX_MS   60000

bool pool_worker_idle(const struct worker *w)
{
        return w->pool != NULL && w->request_id == 0 && !w->retiring;
}

static void spawn_pool_worker(struct engine *e, const struct sbx_engine_pool *pool)
{
        struct sbx_error err = {0};
        struct worker *w = engine_fork_worker(e, POOL_WORKER, 0, pool, &err);
        if (w == NULL)
                sbx_warn("engine: pool %s (%s): %s", pool->language, pool->backend, err.message);
        else
                w->spawned_us = sbx_now_us();
}

void pools_maintain(struct engine *e)
{
        uint64_t now = sbx_now_us();
        for (size_t i = 0; i < e->n_workers; i++) {
                struct worker *w = &e->workers[i];
                if (pool_worker_idle(w) && w->ready && w->pool->max_idle_s > 0 &&
                    now - w->ready_since_us > (uint64_t)w->pool->max_idle_s * 1000000) {
                        w->retiring = true;
                        engine_signal_worker(w, SIGTERM);
                }
        }
        if (e->stopping || now < e->pool_retry_us || now < e->pool_refill_after_us)
                return;
        for (size_t p = 0; p < e->n_pools; p++) {
                const struct sbx_engine_pool *pool = &e->pools[p];
                unsigned idle = 0;
                for (size_t i = 0; i < e->n_workers; i++)
                        if (e->workers[i].pool == pool && pool_worker_idle(&e->workers[i]))
                                idle++;
                unsigned target = pool->min_idle < pool->max_idle ? pool->min_idle : pool->max_idle;
                for (; idle < target; idle++)
                        spawn_pool_worker(e, pool);
        }
}

struct worker *pools_find_ready(struct engine *e, const char *language, const char *backend,
                                uint64_t memory_bytes, bool sessions)
{
        for (size_t i = 0; i < e->n_workers; i++) {
                struct worker *w = &e->workers[i];
                if (pool_worker_idle(w) && w->ready && w->pool->sessions == sessions &&
                    strcmp(w->pool->language, language) == 0 &&
                    strcmp(w->pool->backend, backend) == 0 &&
                    (w->pool->memory_bytes == 0 || memory_bytes <= w->pool->memory_bytes))
                        return w;
        }
        return NULL;
}

bool pools_assign(struct engine *e, struct worker *w, const void *buf, size_t len,
                  uint64_t request_id)
{
        struct sbx_error err = {0};
        if (sbx_message_send(w->control_fd, buf, len, &err) < 0) {
                sbx_warn("engine: pool worker %d: %s", (int)w->pid, err.message);
                w->retiring = true;
                engine_signal_worker(w, SIGTERM);
                return false;
        }
        w->request_id = request_id;
        e->stats.pool_hits++;
        e->stats.executions_started++;
        uint64_t now = sbx_now_us();
        uint64_t delay_ms = strcmp(w->pool->backend, "native") == 0 ? POOL_REFILL_DELAY_MS
                                                                    : POOL_REFILL_DELAY_GUEST_MS;
        if (e->pool_refill_after_us <= now)
                e->pool_refill_after_us = now + delay_ms * 1000;
        return true;
}

void pools_worker_ready(struct engine *e, struct worker *w)
{
        w->ready = true;
        w->ready_since_us = sbx_now_us();
        e->pool_failures = 0;
        e->stats.pool_created++;
        e->stats.pool_refill_us += w->ready_since_us - w->spawned_us;
}

void pools_worker_ended(struct engine *e, const struct worker *w)
{
        e->stats.pool_destroyed++;
        if (w->ready || e->stopping)
                return;
        e->pool_failures++;
        uint64_t backoff = POOL_RETRY_FIRST_MS << (e->pool_failures < 7 ? e->pool_failures - 1 : 6);
        if (backoff > POOL_RETRY_MAX_MS)
                backoff = POOL_RETRY_MAX_MS;
        e->pool_retry_us = sbx_now_us() + backoff * 1000;
}

void pools_count(const struct engine *e, struct sbx_message_stats *stats)
{
        stats->pool_idle = stats->pool_starting = stats->pool_in_use = 0;
        for (size_t i = 0; i < e->n_workers; i++) {
                const struct worker *w = &e->workers[i];
                if (w->pool == NULL)
                        continue;
                if (w->request_id != 0)
                        stats->pool_in_use++;
                else if (w->ready && !w->retiring)
                        stats->pool_idle++;
                else if (!w->retiring)
                        stats->pool_starting++;
        }
}
