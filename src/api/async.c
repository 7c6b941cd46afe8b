/* Asynchronous executions: the queue in memory, its order and its runners (async.h). */
#include "api/async.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/live_config.h"
#include "api/respond.h"
#include "api/webhooks.h"
#include "model/language.h"
#include "api/metrics.h"
#include "service/audit_queue.h"
#include "service/pg.h"
#include "service/quota.h"
#include "util/cleanup.h"
#include "util/log.h"
#include "util/time.h"

/* How often runners look again while executions wait on a quota: a synchronous execution that
 * ends frees its tenant's room without telling the queue. */
#define RECHECK_MS 20

/* How long a runner waits after the engine refused for lack of room before it tries again. */
#define REFUSED_BACKOFF_MS 100

/* A fleet's store: how often a node looks for work other nodes queued without it hearing (a
 * NOTIFY lost while its listening connection was down, or a dead node's executions queued again)
 * and for dead nodes whose executions to end. */
#define SWEEP_MS 1000

/* How long a cancel waits for a run that has just been taken to be sent to the engine. */
#define CANCEL_SEND_WAIT_MS 1000

/* A batch's cases of a compiled language wait for its first to end, so that its compile stage
 * runs once and the others take the artifact from the compile cache. */
struct gate {
        int refs;
        bool open;
};

struct item {
        struct item *next;
        struct gate *gate; /* NULL, or the batch's: closed until the item that opens it ends */
        bool opens_gate;
        char id[SBX_EXECUTION_ID_CHARS + 1];
        struct tenant_queue *queue;
        uint64_t wall_ms;
        uint64_t queued_at_ms; /* monotonic, for the queue's wait */
        /* Running: the engine request, for a cancel (0 until it is sent). */
        _Atomic uint64_t request_id;
        bool cancel; /* a DELETE came while it was running: checked before it is sent */
};

struct tenant_queue {
        char *name;
        struct item *head, *tail;
        size_t count;
};

struct sbx_async {
        struct sbx_api *api;
        pthread_mutex_t lock;
        pthread_cond_t work;  /* an execution was queued, a run ended, or stop */
        pthread_cond_t ended; /* a run ended or a queued one was canceled */
        struct tenant_queue **tenants;
        size_t n_tenants;
        size_t cursor; /* the tenant whose turn is next */
        size_t queued;
        struct item *running; /* a list through next */
        uint64_t mean_run_ms; /* a moving average of the runs' wall time, for estimates */
        bool stopping;
        pthread_t runners[SBX_ASYNC_MAX_RUNNERS];
        size_t n_runners;
        /* A fleet's store: the thread that takes in what other nodes queued (sweeper). */
        struct sbx_pg_listener *listener;
        pthread_t sweeper;
        bool sweeping;
};

static struct tenant_queue *tenant_queue(struct sbx_async *async, const char *name)
{
        for (size_t i = 0; i < async->n_tenants; i++)
                if (strcmp(async->tenants[i]->name, name) == 0)
                        return async->tenants[i];
        struct tenant_queue **grown =
                realloc(async->tenants, (async->n_tenants + 1) * sizeof(*grown));
        if (grown == NULL)
                return NULL;
        async->tenants = grown;
        struct tenant_queue *queue = calloc(1, sizeof(*queue));
        if (queue == NULL || (queue->name = strdup(name)) == NULL) {
                free(queue);
                return NULL;
        }
        async->tenants[async->n_tenants++] = queue;
        return queue;
}

/* Appends a new item for id (at the front: a refused run goes first again). Called locked. */
static struct item *push(struct sbx_async *async, const char *tenant, const char *id,
                         uint64_t wall_ms, bool front, struct gate *gate, bool opens_gate)
{
        struct tenant_queue *queue = tenant_queue(async, tenant);
        struct item *item = queue ? calloc(1, sizeof(*item)) : NULL;
        if (item == NULL)
                return NULL;
        snprintf(item->id, sizeof(item->id), "%s", id);
        item->queue = queue;
        item->wall_ms = wall_ms;
        item->queued_at_ms = sbx_now_ms();
        item->gate = gate;
        item->opens_gate = opens_gate;
        if (gate != NULL)
                gate->refs++;
        if (front) {
                item->next = queue->head;
                queue->head = item;
                if (queue->tail == NULL)
                        queue->tail = item;
        } else {
                if (queue->tail != NULL)
                        queue->tail->next = item;
                else
                        queue->head = item;
                queue->tail = item;
        }
        queue->count++;
        async->queued++;
        sbx_metrics_add_queued(async->api->metrics, queue->name, 1);
        return item;
}

static void unlink_queued(struct sbx_async *async, struct item *item)
{
        struct tenant_queue *queue = item->queue;
        struct item **p = &queue->head, *previous = NULL;
        while (*p != NULL && *p != item) {
                previous = *p;
                p = &(*p)->next;
        }
        if (*p == NULL)
                return;
        *p = item->next;
        if (queue->tail == item)
                queue->tail = previous;
        item->next = NULL;
        queue->count--;
        async->queued--;
        sbx_metrics_add_queued(async->api->metrics, queue->name, -1);
}

/* Frees an item that left the queue and the running list; an item that opens its gate opens it
 * also when it never ran (canceled). Locked. */
static void release(struct item *item)
{
        if (item->gate != NULL) {
                if (item->opens_gate)
                        item->gate->open = true;
                if (--item->gate->refs == 0)
                        free(item->gate);
        }
        free(item);
}

static struct item *find_queued(struct sbx_async *async, const char *id, size_t *position)
{
        for (size_t i = 0; i < async->n_tenants; i++) {
                size_t at = 1;
                for (struct item *item = async->tenants[i]->head; item != NULL;
                     item = item->next, at++)
                        if (strcmp(item->id, id) == 0) {
                                if (position != NULL)
                                        *position = at;
                                return item;
                        }
        }
        return NULL;
}

static struct item *find_running(struct sbx_async *async, const char *id)
{
        for (struct item *item = async->running; item != NULL; item = item->next)
                if (strcmp(item->id, id) == 0)
                        return item;
        return NULL;
}

static void unlink_running(struct sbx_async *async, struct item *item)
{
        for (struct item **p = &async->running; *p != NULL; p = &(*p)->next)
                if (*p == item) {
                        *p = item->next;
                        item->next = NULL;
                        return;
                }
}

/* The next execution to run, its quota reserved: tenants in turn from the cursor, each one's
 * oldest, the first whose tenant has room. NULL when none may start now. A tenant the
 * configuration no longer has gives its item with *tenant NULL (it fails in run()). Locked. */
static struct item *pick(struct sbx_async *async, const struct sbx_config *config,
                         const struct sbx_tenant **tenant, uint64_t *reservation)
{
        for (size_t k = 0; k < async->n_tenants; k++) {
                size_t index = (async->cursor + k) % async->n_tenants;
                struct item *item = async->tenants[index]->head;
                if (item == NULL || (item->gate != NULL && !item->gate->open && !item->opens_gate))
                        continue;
                *tenant = sbx_config_find_tenant(config, async->tenants[index]->name);
                if (*tenant != NULL) {
                        struct sbx_quota_decision decision;
                        struct sbx_error err = {0};
                        if (sbx_quota_reserve(async->api->quota, *tenant, item->wall_ms,
                                              sbx_now_ms(), &decision, &err) < 0)
                                return NULL;
                        if (sbx_quota_verdict_is_server(decision.verdict))
                                return NULL; /* no tenant's item can start now */
                        if (decision.verdict != SBX_QUOTA_ALLOWED)
                                continue;
                        *reservation = decision.reservation;
                }
                async->cursor = index + 1;
                unlink_queued(async, item);
                item->next = async->running;
                async->running = item;
                return item;
        }
        return NULL;
}

static void fail_record(struct sbx_api *api, const char *id, const char *why)
{
        sbx_http_end_without_result(api, id, NULL, SBX_STATUS_INTERNAL_ERROR, why);
}

enum run_end {
        RUN_ENDED,   /* it has an outcome (or was canceled before it was taken) */
        RUN_REFUSED, /* the engine had no room: queue it again, first */
        RUN_PARKED,  /* the engine is gone: the store keeps it (queued, or running for the next
                        start) */
};

/* Runs a taken item: its request from the store, the settings rebuilt under the tenant's tier of
 * now, the engine's round trip, the outcome recorded. */
static enum run_end run(struct sbx_async *async, struct item *item, const struct sbx_tenant *tenant,
                        uint64_t *cpu_ms)
{
        struct sbx_api *api = async->api;
        struct sbx_error err = {0};
        _cleanup_free_ char *text = NULL;
        /* An engine already gone takes nothing: the execution stays queued (an engine that
         * goes while the RUN is on its way leaves it running, below). */
        if (!sbx_engine_client_alive(api->engine))
                return RUN_PARKED;
        int taken = sbx_audit_take(api->audit, item->id, &text, &err);
        if (taken <= 0) {
                if (taken < 0) {
                        sbx_warn("async: execution %s: %s", item->id, err.message);
                        fail_record(api, item->id, err.message);
                }
                return RUN_ENDED;
        }
        if (tenant == NULL) {
                fail_record(api, item->id,
                            "its tenant is no longer in the configuration; nothing was run");
                return RUN_ENDED;
        }
        json_error_t json_error;
        _cleanup_(json_decrefp) json_t *body = json_loads(text, JSON_ALLOW_NUL, &json_error);
        struct sbx_settings *settings = NULL;
        struct sbx_problem problem;
        if (body == NULL || sbx_settings_build(body, tenant, &settings, &problem) < 0) {
                char why[SBX_ERROR_MESSAGE_MAX];
                snprintf(why, sizeof(why), "the queued request is no longer valid: %.400s",
                         body == NULL ? json_error.text : problem.detail);
                fail_record(api, item->id, why);
                return RUN_ENDED;
        }
        memcpy(settings->id, item->id, sizeof(settings->id));
        settings->queued = true; /* also when it came with Prefer: respond-async */
        struct sbx_request request;
        sbx_settings_to_request(settings, &request);
        pthread_mutex_lock(&async->lock);
        bool canceled = item->cancel; /* a DELETE came before its run was sent */
        pthread_mutex_unlock(&async->lock);
        if (canceled) {
                sbx_http_end_without_result(api, item->id, NULL, SBX_STATUS_CANCELED,
                                            "canceled by its tenant");
                sbx_settings_free(settings);
                return RUN_ENDED;
        }
        sbx_metrics_observe_queue_wait(api->metrics, sbx_now_ms() - item->queued_at_ms);
        uint64_t started = sbx_now_ms();
        struct sbx_engine_result outcome = {0};
        int rc = sbx_engine_client_run_stream(api->engine, item->id, &request, NULL, NULL,
                                              &item->request_id, &outcome, &err);
        enum run_end end = RUN_ENDED;
        pthread_mutex_lock(&async->lock);
        canceled = item->cancel;
        pthread_mutex_unlock(&async->lock);
        if (rc == 0 && outcome.result.status == SBX_STATUS_CANCELED && settings->retry &&
            !canceled) {
                /* Canceled, and not by its tenant: the service is going down (the engine died,
                 * or its shutdown's grace ran out). It asked to run again: queued for the next
                 * start. */
                sbx_engine_result_free(&outcome);
                struct sbx_error store_err = {0};
                if (sbx_audit_requeue(api->audit, item->id, &store_err) < 0)
                        sbx_warn("async: execution %s: %s", item->id, store_err.message);
                end = RUN_PARKED;
        } else if (rc == 0) {
                *cpu_ms = sbx_result_cpu_ms(&outcome.result);
                json_decref(sbx_http_finish_execution(api, tenant, settings, &outcome));
                pthread_mutex_lock(&async->lock);
                uint64_t took = sbx_now_ms() - started;
                async->mean_run_ms =
                        async->mean_run_ms == 0 ? took : (7 * async->mean_run_ms + took) / 8;
                pthread_mutex_unlock(&async->lock);
        } else if (canceled && err.code != ETIMEDOUT && err.code != EBADMSG) {
                /* Its tenant canceled it and it did not run (or we cannot know that it did):
                 * the cancel stands, never a requeue. */
                sbx_http_end_without_result(api, item->id, NULL, SBX_STATUS_CANCELED,
                                            "canceled by its tenant");
        } else if (err.code == EBUSY || err.code == EAGAIN || err.code == ESHUTDOWN) {
                /* The engine refused it, nothing ran: queued again, in the store first. */
                struct sbx_error store_err = {0};
                if (sbx_audit_requeue(api->audit, item->id, &store_err) < 0)
                        sbx_warn("async: execution %s: %s", item->id, store_err.message);
                end = err.code == ESHUTDOWN ? RUN_PARKED : RUN_REFUSED;
        } else if (err.code == EPIPE && atomic_load(&item->request_id) == 0) {
                /* The RUN never left: queued again for the next start. */
                struct sbx_error store_err = {0};
                if (sbx_audit_requeue(api->audit, item->id, &store_err) < 0)
                        sbx_warn("async: execution %s: %s", item->id, store_err.message);
                end = RUN_PARKED;
        } else if (err.code == EPIPE) {
                /* The engine went away after it may have taken the RUN: the record stays
                 * running for the next start, which completes it from the engine's spool, or as
                 * interrupted (or queues it again with "retry": true). Never run twice. */
                sbx_warn("async: execution %s: %s; the next start decides its record", item->id,
                         err.message);
                end = RUN_PARKED;
        } else {
                sbx_warn("async: execution %s: engine: %s", item->id, err.message);
                fail_record(api, item->id, err.message);
        }
        sbx_settings_free(settings);
        return end;
}

static void *runner(void *arg)
{
        struct sbx_async *async = arg;
        struct sbx_api *api = async->api;
        pthread_mutex_lock(&async->lock);
        while (!async->stopping) {
                const struct sbx_config *config = sbx_live_config_acquire(api->live);
                const struct sbx_tenant *tenant = NULL;
                uint64_t reservation = 0;
                struct item *item = pick(async, config, &tenant, &reservation);
                if (item == NULL) {
                        sbx_live_config_release(api->live, config);
                        if (async->queued == 0) {
                                pthread_cond_wait(&async->work, &async->lock);
                        } else {
                                struct timespec until = sbx_monotonic_after(RECHECK_MS);
                                pthread_cond_timedwait(&async->work, &async->lock, &until);
                        }
                        continue;
                }
                pthread_mutex_unlock(&async->lock);
                uint64_t cpu_ms = 0;
                enum run_end end = run(async, item, tenant, &cpu_ms);
                if (tenant != NULL)
                        sbx_quota_release(api->quota, tenant, reservation, end == RUN_ENDED, cpu_ms,
                                          sbx_now_ms());
                sbx_live_config_release(api->live, config);
                if (end == RUN_REFUSED)
                        sbx_sleep_ms(REFUSED_BACKOFF_MS);
                pthread_mutex_lock(&async->lock);
                unlink_running(async, item);
                if (end == RUN_REFUSED && !async->stopping &&
                    push(async, item->queue->name, item->id, item->wall_ms, true, item->gate,
                         item->opens_gate) == NULL)
                        sbx_warn("async: execution %s: out of memory; it runs after a restart",
                                 item->id);
                if (end == RUN_REFUSED)
                        item->opens_gate = false; /* its copy in the queue does */
                release(item);
                pthread_cond_broadcast(&async->ended);
                pthread_cond_broadcast(&async->work);
                if (end == RUN_ENDED)
                        sbx_webhooks_wake(api->webhooks); /* its delivery may be due now */
        }
        pthread_mutex_unlock(&async->lock);
        return NULL;
}

static int load_item(void *ctx, const struct sbx_audit_queued *queued)
{
        struct sbx_async *async = ctx;
        return push(async, queued->tenant, queued->id, queued->wall_ms, false, NULL, false) ? 0
                                                                                            : -1;
}

/* What a sweep found queued in a fleet's store, to push once the store's connection is given
 * back (push takes the queue's lock, which is never taken while a connection is held). */
struct found {
        struct found *next;
        char id[SBX_EXECUTION_ID_CHARS + 1];
        char *tenant;
        uint64_t wall_ms;
};

static int found_item(void *ctx, const struct sbx_audit_queued *queued)
{
        struct found **list = ctx;
        struct found *found = calloc(1, sizeof(*found));
        if (found == NULL || (found->tenant = strdup(queued->tenant)) == NULL) {
                free(found);
                return -1;
        }
        snprintf(found->id, sizeof(found->id), "%s", queued->id);
        found->wall_ms = queued->wall_ms;
        found->next = *list;
        *list = found;
        return 0;
}

/* One sweep of a fleet's store: the outcomes it did not take written, a dead node's executions
 * ended or queued again, then every queued execution this node does not know yet taken into its
 * queue (whoever takes it first runs it: sbx_audit_take). -1 with err when the store failed. */
static int sweep(struct sbx_async *async, struct sbx_error *err)
{
        struct sbx_api *api = async->api;
        uint64_t written = 0, requeued = 0, interrupted = 0;
        if (sbx_audit_write_kept(api->audit, &written, err) < 0)
                return -1;
        if (written > 0)
                sbx_info("async: %" PRIu64 " outcome(s) the store had not taken are written",
                         written);
        if (sbx_audit_reap(api->audit, "its node died while it ran; nothing of it was kept",
                           (int64_t)sbx_wall_clock_ms(), &requeued, &interrupted, err) < 0)
                return -1;
        if (interrupted > 0)
                sbx_webhooks_wake(api->webhooks); /* their deliveries may be due now */
        struct found *list = NULL;
        int rc = sbx_audit_queue_each(api->audit, found_item, &list, err);
        size_t taken_in = 0;
        pthread_mutex_lock(&async->lock);
        while (list != NULL) {
                struct found *found = list;
                list = found->next;
                if (rc == 0 && !async->stopping && find_queued(async, found->id, NULL) == NULL &&
                    find_running(async, found->id) == NULL &&
                    push(async, found->tenant, found->id, found->wall_ms, false, NULL, false) !=
                            NULL)
                        taken_in++;
                free(found->tenant);
                free(found);
        }
        if (taken_in > 0)
                pthread_cond_broadcast(&async->work);
        pthread_mutex_unlock(&async->lock);
        return rc;
}

static void *sweeper(void *arg)
{
        struct sbx_async *async = arg;
        bool failing = false; /* logged once an outage, and its end */
        for (;;) {
                pthread_mutex_lock(&async->lock);
                bool stopping = async->stopping;
                pthread_mutex_unlock(&async->lock);
                if (stopping)
                        break;
                struct sbx_error err = {0};
                int heard = sbx_pg_listener_wait(async->listener, SWEEP_MS, &err);
                if (heard < 0) {
                        /* Not a busy loop while the store is away. */
                        pthread_mutex_lock(&async->lock);
                        struct timespec until = sbx_monotonic_after(SWEEP_MS);
                        if (!async->stopping)
                                pthread_cond_timedwait(&async->work, &async->lock, &until);
                        pthread_mutex_unlock(&async->lock);
                }
                struct sbx_error sweep_err = {0};
                int swept = sweep(async, &sweep_err);
                if (swept < 0)
                        err = sweep_err;
                if (heard >= 0 && swept == 0) {
                        if (failing)
                                sbx_info("async: the fleet's store answers again");
                        failing = false;
                } else if (!failing) {
                        sbx_warn("async: the fleet's store: %s (tried again every %d ms)",
                                 err.message, SWEEP_MS);
                        failing = true;
                }
        }
        return NULL;
}

struct sbx_async *sbx_async_start(struct sbx_api *api, struct sbx_error *err)
{
        struct sbx_async *async = calloc(1, sizeof(*async));
        if (async == NULL) {
                sbx_error_set(err, ENOMEM, "async: allocate");
                return NULL;
        }
        async->api = api;
        pthread_mutex_init(&async->lock, NULL);
        sbx_cond_init_monotonic(&async->work);
        sbx_cond_init_monotonic(&async->ended);
        if (sbx_audit_queue_each(api->audit, load_item, async, err) < 0) {
                if (err->message[0] == '\0')
                        sbx_error_set(err, ENOMEM, "async: load the queue");
                sbx_async_stop(async);
                return NULL;
        }
        if (async->queued > 0)
                sbx_info("async: %zu queued execution(s) from the store", async->queued);
        if (sbx_audit_shared(api->audit)) {
                if (sbx_pg_listen(api->config->store.url, SBX_AUDIT_QUEUE_CHANNEL, &async->listener,
                                  err) < 0) {
                        sbx_async_stop(async);
                        return NULL;
                }
                int rc = pthread_create(&async->sweeper, NULL, sweeper, async);
                if (rc != 0) {
                        sbx_error_set(err, rc, "async: start the fleet's sweeper");
                        sbx_async_stop(async);
                        return NULL;
                }
                async->sweeping = true;
        }
        uint64_t runners = api->config->server.max_sandboxes;
        if (runners == 0 || runners > SBX_ASYNC_MAX_RUNNERS)
                runners = SBX_ASYNC_MAX_RUNNERS;
        for (size_t i = 0; i < runners; i++) {
                int rc = pthread_create(&async->runners[i], NULL, runner, async);
                if (rc != 0) {
                        sbx_error_set(err, rc, "async: start a runner");
                        sbx_async_stop(async);
                        return NULL;
                }
                async->n_runners++;
        }
        return async;
}

void sbx_async_drain(struct sbx_async *async, uint64_t deadline_ms)
{
        pthread_mutex_lock(&async->lock);
        async->stopping = true;
        pthread_cond_broadcast(&async->work);
        while (async->running != NULL && sbx_now_ms() < deadline_ms) {
                struct timespec until = sbx_monotonic_after(50);
                pthread_cond_timedwait(&async->ended, &async->lock, &until);
        }
        pthread_mutex_unlock(&async->lock);
}

void sbx_async_stop(struct sbx_async *async)
{
        if (async == NULL)
                return;
        /* The runs under way may end within the grace; the rest are canceled (recorded so). */
        sbx_async_drain(async, sbx_now_ms() + async->api->config->server.shutdown_grace_s * 1000);
        pthread_mutex_lock(&async->lock);
        for (struct item *item = async->running; item != NULL; item = item->next) {
                uint64_t request_id = atomic_load(&item->request_id);
                if (request_id != 0)
                        sbx_engine_client_cancel(async->api->engine, request_id);
        }
        pthread_mutex_unlock(&async->lock);
        for (size_t i = 0; i < async->n_runners; i++)
                pthread_join(async->runners[i], NULL);
        if (async->sweeping)
                pthread_join(async->sweeper, NULL);
        sbx_pg_listener_close(async->listener);
        for (size_t i = 0; i < async->n_tenants; i++) {
                struct item *item = async->tenants[i]->head;
                while (item != NULL) {
                        struct item *next = item->next;
                        release(item);
                        item = next;
                }
                free(async->tenants[i]->name);
                free(async->tenants[i]);
        }
        free(async->tenants);
        pthread_cond_destroy(&async->work);
        pthread_cond_destroy(&async->ended);
        pthread_mutex_destroy(&async->lock);
        free(async);
}

/* Milliseconds until the item at position (1: next) of a tenant allowed concurrency runs at
 * once is expected to start: the runs ahead of it, that many at a time, at the mean run time. */
static uint64_t estimate(const struct sbx_async *async, uint64_t position, uint64_t concurrency)
{
        if (concurrency == 0)
                concurrency = 1;
        return (position - 1) / concurrency * async->mean_run_ms;
}

int sbx_async_submit(struct sbx_async *async, const struct sbx_tenant *tenant,
                     const struct sbx_audit_batch *batch, const struct sbx_async_item *items,
                     size_t n, uint64_t *position, uint64_t *retry_after_s, struct sbx_error *err)
{
        _cleanup_free_ struct sbx_audit_enqueued *enqueued = calloc(n, sizeof(*enqueued));
        _cleanup_free_ char **texts = calloc(n, sizeof(*texts));
        int rc = enqueued != NULL && texts != NULL ? 0
                                                   : sbx_error_set(err, ENOMEM, "async: allocate");
        for (size_t i = 0; rc == 0 && i < n; i++) {
                texts[i] = json_dumps(items[i].settings->requested, JSON_COMPACT | JSON_ENCODE_ANY);
                if (texts[i] == NULL) {
                        rc = sbx_error_set(err, ENOMEM, "async: the request as text");
                        break;
                }
                enqueued[i] = (struct sbx_audit_enqueued){
                        .record = items[i].record,
                        .request = texts[i],
                        .retry = items[i].settings->retry,
                        .wall_ms = items[i].settings->limits.wall_ms,
                        .index = items[i].index,
                        .callback_url = items[i].settings->callback_url,
                        .callback_kind = items[i].callback_kind,
                        .expected_stdout = items[i].expected_stdout,
                        .expected_size = items[i].expected_size,
                };
        }
        /* A batch of a compiled language compiles once: its first case opens the gate. */
        struct gate *gate = NULL;
        if (rc == 0 && batch != NULL && batch->compare != NULL && n > 1 &&
            sbx_language_compiles(sbx_language_find(items[0].settings->language)) &&
            (gate = calloc(1, sizeof(*gate))) == NULL)
                rc = sbx_error_set(err, ENOMEM, "async: allocate");
        pthread_mutex_lock(&async->lock);
        struct tenant_queue *queue = rc == 0 ? tenant_queue(async, tenant->name) : NULL;
        if (rc == 0 && queue == NULL) {
                rc = sbx_error_set(err, ENOMEM, "async: allocate");
        } else if (rc == 0 && queue->count + n > tenant->tier->max_queued) {
                uint64_t wait_ms = async->mean_run_ms > 0 ? async->mean_run_ms : 1000;
                *retry_after_s = wait_ms / 1000 + 1;
                rc = sbx_error_plain(err, ENOSPC,
                                     "tenant %s has %zu executions queued; %zu more would pass its "
                                     "tier's maximum of %llu",
                                     tenant->name, queue->count, n,
                                     (unsigned long long)tenant->tier->max_queued);
        } else if (rc == 0 && sbx_audit_enqueue(async->api->audit, batch, enqueued, n, err) < 0) {
                rc = -1;
        }
        if (rc == 0) {
                *position = queue->count + 1;
                for (size_t i = 0; i < n; i++)
                        if (push(async, tenant->name, items[i].settings->id,
                                 items[i].settings->limits.wall_ms, false, gate, i == 0) == NULL)
                                /* Committed but not in memory: it runs after the next start. */
                                sbx_warn("async: execution %s: out of memory; it runs after a "
                                         "restart",
                                         items[i].settings->id);
                pthread_cond_broadcast(&async->work);
        }
        if (gate != NULL && gate->refs == 0)
                free(gate);
        pthread_mutex_unlock(&async->lock);
        for (size_t i = 0; texts != NULL && i < n; i++)
                free(texts[i]);
        return rc;
}

bool sbx_async_position(struct sbx_async *async, const char *id, uint64_t *position,
                        uint64_t *estimate_ms)
{
        pthread_mutex_lock(&async->lock);
        size_t at = 0;
        struct item *item = find_queued(async, id, &at);
        if (item != NULL) {
                *position = at;
                const struct sbx_config *config = sbx_live_config_acquire(async->api->live);
                const struct sbx_tenant *tenant = sbx_config_find_tenant(config, item->queue->name);
                *estimate_ms = estimate(async, at, tenant ? tenant->tier->max_concurrency : 1);
                sbx_live_config_release(async->api->live, config);
        }
        pthread_mutex_unlock(&async->lock);
        return item != NULL;
}

void sbx_async_wait(struct sbx_async *async, const char *id, uint64_t timeout_ms)
{
        uint64_t deadline = sbx_now_ms() + timeout_ms;
        pthread_mutex_lock(&async->lock);
        /* A drain does not wait for a long poll: it ends at the next second. */
        while ((find_queued(async, id, NULL) != NULL || find_running(async, id) != NULL) &&
               sbx_now_ms() < deadline && !sbx_http_draining()) {
                uint64_t left = deadline - sbx_now_ms();
                struct timespec until = sbx_monotonic_after(left < 1000 ? left : 1000);
                pthread_cond_timedwait(&async->ended, &async->lock, &until);
        }
        pthread_mutex_unlock(&async->lock);
}

int sbx_async_cancel(struct sbx_async *async, const char *tenant, const char *id,
                     struct sbx_error *err)
{
        pthread_mutex_lock(&async->lock);
        struct item *item = find_queued(async, id, NULL);
        if (item != NULL && strcmp(item->queue->name, tenant) == 0) {
                /* The store first: if it fails, the execution stays queued, there too. */
                int rc = sbx_audit_cancel_queued(async->api->audit, tenant, id,
                                                 "canceled by its tenant",
                                                 (int64_t)sbx_wall_clock_ms(), err);
                if (rc >= 0) {
                        unlink_queued(async, item);
                        release(item);
                        pthread_cond_broadcast(&async->ended);
                        pthread_cond_broadcast(&async->work); /* a gate it held may be open */
                }
                pthread_mutex_unlock(&async->lock);
                return rc < 0 ? -1 : 1;
        }
        item = find_running(async, id);
        if (item == NULL || strcmp(item->queue->name, tenant) != 0) {
                pthread_mutex_unlock(&async->lock);
                return 0;
        }
        item->cancel = true;
        /* Taken but maybe not yet sent: its request id comes within moments. The item stays
         * allocated while it is running, and it runs while the lock is released only. */
        uint64_t deadline = sbx_now_ms() + CANCEL_SEND_WAIT_MS;
        for (;;) {
                if (find_running(async, id) != item)
                        break; /* it ended meanwhile */
                uint64_t request_id = atomic_load(&item->request_id);
                if (request_id != 0) {
                        sbx_engine_client_cancel(async->api->engine, request_id);
                        break;
                }
                if (sbx_now_ms() >= deadline)
                        break;
                pthread_mutex_unlock(&async->lock);
                sbx_sleep_ms(2);
                pthread_mutex_lock(&async->lock);
        }
        pthread_mutex_unlock(&async->lock);
        return 2;
}
