/* The Prometheus registry behind GET /metrics: a fixed set of metric families (README,
 * "Metrics"), updated by the request handlers and rendered in the text exposition format 0.0.4.
 *
 *   sandboxd_executions_total{tenant,status}          counter
 *   sandboxd_backend_executions_total{backend,status} counter
 *   sandboxd_backend_duration_seconds{backend}        histogram of an execution's total time
 *   sandboxd_phase_duration_seconds{phase}            histogram (acquire, setup, run, teardown,
 *                                                     total), buckets 1 ms .. 10 s
 *   sandboxd_quota_rejections_total{tenant,reason}    counter (reason: concurrency, cpu_budget,
 *                                                     capacity)
 *   sandboxd_sandboxes_alive                          gauge, set from the engine's STATS reply
 *   sandboxd_pool_entries{state}                      gauge (idle, starting, in_use), likewise
 *   sandboxd_pool_{created,destroyed,hits,misses}_total  counters, likewise
 *   sandboxd_pool_refill_seconds                      summary (_sum, _count), likewise
 *   sandboxd_http_requests_total{code}                counter
 *
 * Label cardinality is bounded by construction, so no client can grow the registry: tenants are
 * the config's (named at creation, and added by a config reload), backends model/backend.h's,
 * statuses the fixed set of sbx_status_name(), reasons the three below, codes 100..599. Any other
 * value is counted under the label value "other" (a configured tenant that is itself called "other"
 * shares that series).
 *
 * Every function is thread-safe (one mutex; the HTTP server runs a thread per connection). */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "protocol/protocol.h"
#include "model/result.h"
#include "util/error.h"

/* The Content-Type of the rendered text. */
#define SBX_METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

/* The label value that collects every value outside the known set. */
#define SBX_METRICS_OTHER "other"

struct sbx_metrics;

/* A new registry with every counter at zero, or NULL with err. tenants (n_tenants names, copied)
 * are the label values the tenant label may take. Free with sbx_metrics_free(). */
struct sbx_metrics *sbx_metrics_new(const char *const *tenants, size_t n_tenants,
                                    struct sbx_error *err);

/* Adds tenant to the label values of the tenant label (a tenant a config reload added); its
 * counters start at zero. Nothing happens for a known one. -1 with err when memory runs out. */
int sbx_metrics_add_tenant(struct sbx_metrics *metrics, const char *tenant, struct sbx_error *err);

/* Frees the registry. NULL is a no-op. Nothing may use it concurrently. */
void sbx_metrics_free(struct sbx_metrics *metrics);

/* Counts one finished execution of tenant on backend (a model/backend.h name). status is a
 * sbx_status_name() ("ok", "timeout", ...); total_us its timing's total. */
void sbx_metrics_count_execution(struct sbx_metrics *metrics, const char *tenant,
                                 const char *backend, const char *status, uint64_t total_us);

/* Counts one compile stage: served from the compile cache (hit) or compiled (miss). */
void sbx_metrics_count_compile(struct sbx_metrics *metrics, bool cached);

/* Adds one observation of each phase of timing (microseconds) to the phase histograms. */
void sbx_metrics_observe_timing(struct sbx_metrics *metrics, const struct sbx_timing *timing);

/* Counts one request refused by a quota; reason is "concurrency", "cpu_budget", "capacity",
 * "sessions", "episodes" or "queued" (a tier's max_queued). */
void sbx_metrics_count_quota_rejection(struct sbx_metrics *metrics, const char *tenant,
                                       const char *reason);

/* Asynchronous executions (api/async.h): delta more (or fewer) of tenant's waiting in the
 * queue; and how long one waited before it started. */
void sbx_metrics_add_queued(struct sbx_metrics *metrics, const char *tenant, int64_t delta);
void sbx_metrics_observe_queue_wait(struct sbx_metrics *metrics, uint64_t wait_ms);

/* Counts one webhook delivery attempt: "delivered", "retried" or "failed" (api/webhooks.h). */
void sbx_metrics_count_webhook(struct sbx_metrics *metrics, const char *outcome);

/* Counts one HTTP response by its status code. */
void sbx_metrics_count_http_request(struct sbx_metrics *metrics, unsigned code);

/* The kinds of long-lived sandbox counted apart: sessions (api/sessions.c) and RL episodes
 * (api/episodes.c), whose operations are runs, and steps and resets. */
enum sbx_metrics_long_lived {
        SBX_METRICS_SESSIONS,
        SBX_METRICS_EPISODES,
        SBX_METRICS_LONG_LIVED_COUNT,
};

/* A kind's figures: n opened; one ended, by reason; an operation finished, by status, with its
 * round trip; how many are open now (set before rendering). */
void sbx_metrics_count_opened(struct sbx_metrics *metrics, enum sbx_metrics_long_lived kind,
                              uint64_t n);
void sbx_metrics_count_ended(struct sbx_metrics *metrics, enum sbx_metrics_long_lived kind,
                             const char *reason);
void sbx_metrics_count_operation(struct sbx_metrics *metrics, enum sbx_metrics_long_lived kind,
                                 const char *status, uint64_t duration_us);
void sbx_metrics_set_open(struct sbx_metrics *metrics, enum sbx_metrics_long_lived kind,
                          uint64_t open);

/* Takes the engine's figures from its last STATS reply: the sandboxes-alive gauge and the warm
 * pools' (idle, starting, in use gauges; created, destroyed, hits, misses counters; the refill
 * time as a summary). */
void sbx_metrics_set_engine_stats(struct sbx_metrics *metrics,
                                  const struct sbx_message_stats *stats);

/* The whole registry as exposition text (a consistent snapshot: taken under the lock), in a new
 * malloc'd NUL-terminated buffer the caller frees; its length (without the NUL) goes to *length
 * when length is not NULL. NULL when memory runs out. Each family has its HELP and TYPE lines;
 * counters list every known label combination, zero or not, plus the "other" series once they
 * are non-zero; http codes are listed once seen. Histogram buckets are cumulative and end with
 * le="+Inf", followed by _sum (seconds) and _count. */
char *sbx_metrics_render(struct sbx_metrics *metrics, size_t *length);
