#include "api/metrics.h"

#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/backend.h"
#include "util/cleanup.h"

/* Every enum sbx_status value has a name; they run from SBX_STATUS_OK to the last one. */
#define STATUS_COUNT SBX_STATUS_COUNT

/* HTTP status codes are three digits with a first digit of 1 to 5 (RFC 9110 section 15). */
#define HTTP_CODE_FIRST 100u
#define HTTP_CODE_LAST  599u
#define HTTP_CODE_COUNT (HTTP_CODE_LAST - HTTP_CODE_FIRST + 1)

enum phase { PHASE_ACQUIRE, PHASE_SETUP, PHASE_RUN, PHASE_TEARDOWN, PHASE_TOTAL, PHASE_COUNT };

static const char *const phase_names[PHASE_COUNT] = {
        [PHASE_ACQUIRE] = "acquire",   [PHASE_SETUP] = "setup", [PHASE_RUN] = "run",
        [PHASE_TEARDOWN] = "teardown", [PHASE_TOTAL] = "total",
};

/* The buckets: 100 us to 10 s spans an RL episode's step (a fraction of a millisecond), a warm
 * start (a few ms) and the default wall limit.
 * Bounds are kept in microseconds, the unit of struct sbx_timing, so that comparing an
 * observation with a bound is exact; the label is the same bound written in seconds. */
struct bucket {
        uint64_t upper_us;
        const char *label;
};

static const struct bucket buckets[] = {
        {100, "0.0001"},  {250, "0.00025"}, {500, "0.0005"},  {1000, "0.001"},
        {2500, "0.0025"}, {5000, "0.005"},  {10000, "0.01"},  {25000, "0.025"},
        {50000, "0.05"},  {100000, "0.1"},  {250000, "0.25"}, {500000, "0.5"},
        {1000000, "1"},   {2500000, "2.5"}, {5000000, "5"},   {10000000, "10"},
};

#define BUCKET_COUNT SBX_ARRAY_SIZE(buckets)

static const char *const quota_reasons[] = {"concurrency", "cpu_budget", "capacity", "store",
                                            "sessions",    "episodes",   "queued"};

/* A session run's statuses (engine/session.h) and a session's ends (api/sessions.h). */
static const char *const session_statuses[] = {
        "ok",         "error",        "exit_nonzero", "timeout",  "memory_limit",
        "pids_limit", "output_limit", "disk_full",    "canceled", "internal_error"};
static const char *const session_ends[] = {"deleted",      "idle_timeout", "max_lifetime",
                                           "agent_died",   "shutdown",     "gone",
                                           "never_opened", "step_timeout"};
#define SESSION_STATUS_COUNT SBX_ARRAY_SIZE(session_statuses)
#define SESSION_END_COUNT    SBX_ARRAY_SIZE(session_ends)

#define REASON_COUNT SBX_ARRAY_SIZE(quota_reasons)

struct histogram {
        uint64_t bucket_counts[BUCKET_COUNT]; /* per bucket, not cumulative; +Inf is count */
        uint64_t sum_us;
        uint64_t count;
};

/* A kind of long-lived sandbox's figures (sessions, RL episodes): opened, ended by reason
 * (+ other), operations (runs, steps) by status (+ other) with their round trip, and how many
 * are open (set before each render). */
struct long_lived {
        uint64_t opened;
        uint64_t ended[SESSION_END_COUNT + 1];
        uint64_t operations[SESSION_STATUS_COUNT + 1];
        struct histogram operation_time;
        uint64_t open;
};

/* How a kind's families are named and described. */
struct long_lived_names {
        const char *open, *open_help;
        const char *opened, *opened_help;
        const char *ended, *ended_help;
        const char *operations, *operations_help;
        const char *duration, *duration_help;
};

/* By enum sbx_metrics_long_lived. */
static const struct long_lived_names long_lived_names[SBX_METRICS_LONG_LIVED_COUNT] = {
        [SBX_METRICS_SESSIONS] =
                {
                        "sandboxd_sessions_open",
                        "Sessions open now.",
                        "sandboxd_sessions_opened_total",
                        "Sessions opened.",
                        "sandboxd_sessions_ended_total",
                        "Sessions ended, by reason (deleted, idle_timeout, max_lifetime, ...).",
                        "sandboxd_session_runs_total",
                        "Session runs finished, by status.",
                        "sandboxd_session_run_duration_seconds",
                        "A session run's round trip in the API process, in seconds.",
                },
        [SBX_METRICS_EPISODES] =
                {
                        "sandboxd_episodes_open",
                        "RL episodes open now.",
                        "sandboxd_episodes_opened_total",
                        "RL episodes opened.",
                        "sandboxd_episodes_ended_total",
                        "RL episodes ended, by reason (deleted, step_timeout, ...).",
                        "sandboxd_episode_steps_total",
                        "RL episode steps and resets, by status.",
                        "sandboxd_episode_step_duration_seconds",
                        "An RL episode step's round trip in the API process, in seconds.",
                },
};

/* Counter tables are indexed [tenant][value]; the last row and column are "other". */
struct sbx_metrics {
        pthread_mutex_t lock;
        char **tenants;
        size_t n_tenants;
        uint64_t *executions;       /* (n_tenants + 1) x (STATUS_COUNT + 1) */
        uint64_t *quota_rejections; /* (n_tenants + 1) x (REASON_COUNT + 1) */
        uint64_t http_requests[HTTP_CODE_COUNT];
        uint64_t http_requests_other;
        struct histogram phases[PHASE_COUNT];
        /* By backend, in model/backend.h's order, then "other": the two families below. */
        uint64_t backend_executions[SBX_BACKEND_COUNT + 1][STATUS_COUNT + 1];
        struct histogram backend_total[SBX_BACKEND_COUNT + 1];
        struct sbx_message_stats engine; /* the engine's last STATS reply */
        /* Sessions, and RL episodes (sessions of their own kind): each kind's figures. */
        struct long_lived long_lived[SBX_METRICS_LONG_LIVED_COUNT];
        uint64_t compile_cache_hits, compile_cache_misses;
        /* Asynchronous executions (api/async.h): waiting now, (n_tenants + 1) x 1; and how long
         * each waited before it started. */
        uint64_t *queued;
        struct histogram queue_wait;
        /* Webhook delivery attempts by outcome (webhook_outcomes). */
        uint64_t webhooks[3];
};

struct sbx_metrics *sbx_metrics_new(const char *const *tenants, size_t n_tenants,
                                    struct sbx_error *err)
{
        struct sbx_metrics *metrics = calloc(1, sizeof(*metrics));
        if (metrics == NULL) {
                sbx_error_set(err, ENOMEM, "metrics: allocate registry");
                return NULL;
        }
        pthread_mutex_init(&metrics->lock, NULL);
        metrics->tenants = calloc(n_tenants + 1, sizeof(*metrics->tenants));
        metrics->executions = calloc((n_tenants + 1) * (STATUS_COUNT + 1), sizeof(uint64_t));
        metrics->quota_rejections = calloc((n_tenants + 1) * (REASON_COUNT + 1), sizeof(uint64_t));
        metrics->queued = calloc(n_tenants + 1, sizeof(uint64_t));
        if (metrics->tenants == NULL || metrics->executions == NULL ||
            metrics->quota_rejections == NULL || metrics->queued == NULL) {
                sbx_metrics_free(metrics);
                sbx_error_set(err, ENOMEM, "metrics: allocate counters");
                return NULL;
        }
        for (size_t i = 0; i < n_tenants; i++) {
                metrics->tenants[i] = strdup(tenants[i]);
                if (metrics->tenants[i] == NULL) {
                        sbx_metrics_free(metrics);
                        sbx_error_set(err, ENOMEM, "metrics: copy tenant name");
                        return NULL;
                }
                metrics->n_tenants = i + 1; /* what sbx_metrics_free() must free so far */
        }
        return metrics;
}

/* A copy of a counter table of n_tenants + 1 rows with a zeroed row inserted before the last
 * ("other"), or NULL. */
static uint64_t *table_with_new_row(const uint64_t *table, size_t n_tenants, size_t columns)
{
        uint64_t *grown = calloc((n_tenants + 2) * columns, sizeof(*grown));
        if (grown == NULL)
                return NULL;
        memcpy(grown, table, n_tenants * columns * sizeof(*grown));
        memcpy(grown + (n_tenants + 1) * columns, table + n_tenants * columns,
               columns * sizeof(*grown));
        return grown;
}

int sbx_metrics_add_tenant(struct sbx_metrics *metrics, const char *tenant, struct sbx_error *err)
{
        pthread_mutex_lock(&metrics->lock);
        int rc = 0;
        for (size_t i = 0; i < metrics->n_tenants; i++)
                if (strcmp(metrics->tenants[i], tenant) == 0)
                        goto out;
        size_t n = metrics->n_tenants;
        char *name = strdup(tenant);
        char **tenants = realloc(metrics->tenants, (n + 2) * sizeof(*tenants));
        if (tenants != NULL)
                metrics->tenants = tenants;
        uint64_t *executions = table_with_new_row(metrics->executions, n, STATUS_COUNT + 1);
        uint64_t *rejections = table_with_new_row(metrics->quota_rejections, n, REASON_COUNT + 1);
        uint64_t *queued = table_with_new_row(metrics->queued, n, 1);
        if (name == NULL || tenants == NULL || executions == NULL || rejections == NULL ||
            queued == NULL) {
                free(name);
                free(executions);
                free(rejections);
                free(queued);
                rc = sbx_error_set(err, ENOMEM, "metrics: add tenant %s", tenant);
                goto out;
        }
        free(metrics->executions);
        free(metrics->quota_rejections);
        free(metrics->queued);
        metrics->executions = executions;
        metrics->quota_rejections = rejections;
        metrics->queued = queued;
        metrics->tenants[n] = name;
        metrics->n_tenants = n + 1;
out:
        pthread_mutex_unlock(&metrics->lock);
        return rc;
}

void sbx_metrics_free(struct sbx_metrics *metrics)
{
        if (metrics == NULL)
                return;
        if (metrics->tenants != NULL)
                for (size_t i = 0; i < metrics->n_tenants; i++)
                        free(metrics->tenants[i]);
        free(metrics->tenants);
        free(metrics->executions);
        free(metrics->quota_rejections);
        free(metrics->queued);
        pthread_mutex_destroy(&metrics->lock);
        free(metrics);
}

/* The row of tenant; n_tenants ("other") when it is not a configured one. */
static size_t tenant_index(const struct sbx_metrics *metrics, const char *tenant)
{
        for (size_t i = 0; tenant != NULL && i < metrics->n_tenants; i++)
                if (strcmp(metrics->tenants[i], tenant) == 0)
                        return i;
        return metrics->n_tenants;
}

static size_t status_index(const char *status)
{
        for (size_t i = 0; status != NULL && i < STATUS_COUNT; i++)
                if (strcmp(sbx_status_name((enum sbx_status)i), status) == 0)
                        return i;
        return STATUS_COUNT;
}

static size_t reason_index(const char *reason)
{
        for (size_t i = 0; reason != NULL && i < REASON_COUNT; i++)
                if (strcmp(quota_reasons[i], reason) == 0)
                        return i;
        return REASON_COUNT;
}

static size_t backend_index(const char *backend)
{
        for (size_t i = 0; backend != NULL && i < SBX_BACKEND_COUNT; i++)
                if (strcmp(sbx_backend_name_at(i), backend) == 0)
                        return i;
        return SBX_BACKEND_COUNT;
}

static void histogram_observe(struct histogram *histogram, uint64_t value_us)
{
        for (size_t i = 0; i < BUCKET_COUNT; i++) {
                if (value_us <= buckets[i].upper_us) {
                        histogram->bucket_counts[i]++;
                        break;
                }
        }
        histogram->sum_us += value_us;
        histogram->count++;
}

void sbx_metrics_count_execution(struct sbx_metrics *metrics, const char *tenant,
                                 const char *backend, const char *status, uint64_t total_us)
{
        size_t row = tenant_index(metrics, tenant), column = status_index(status);
        size_t backend_row = backend_index(backend);
        pthread_mutex_lock(&metrics->lock);
        metrics->executions[row * (STATUS_COUNT + 1) + column]++;
        metrics->backend_executions[backend_row][column]++;
        histogram_observe(&metrics->backend_total[backend_row], total_us);
        pthread_mutex_unlock(&metrics->lock);
}

void sbx_metrics_count_compile(struct sbx_metrics *metrics, bool cached)
{
        pthread_mutex_lock(&metrics->lock);
        if (cached)
                metrics->compile_cache_hits++;
        else
                metrics->compile_cache_misses++;
        pthread_mutex_unlock(&metrics->lock);
}

void sbx_metrics_observe_timing(struct sbx_metrics *metrics, const struct sbx_timing *timing)
{
        pthread_mutex_lock(&metrics->lock);
        histogram_observe(&metrics->phases[PHASE_ACQUIRE], timing->acquire_us);
        histogram_observe(&metrics->phases[PHASE_SETUP], timing->setup_us);
        histogram_observe(&metrics->phases[PHASE_RUN], timing->run_us);
        histogram_observe(&metrics->phases[PHASE_TEARDOWN], timing->teardown_us);
        histogram_observe(&metrics->phases[PHASE_TOTAL], timing->total_us);
        pthread_mutex_unlock(&metrics->lock);
}

void sbx_metrics_add_queued(struct sbx_metrics *metrics, const char *tenant, int64_t delta)
{
        size_t row = tenant_index(metrics, tenant);
        pthread_mutex_lock(&metrics->lock);
        metrics->queued[row] += (uint64_t)delta; /* wraps back for a negative delta */
        pthread_mutex_unlock(&metrics->lock);
}

void sbx_metrics_observe_queue_wait(struct sbx_metrics *metrics, uint64_t wait_ms)
{
        pthread_mutex_lock(&metrics->lock);
        histogram_observe(&metrics->queue_wait, wait_ms * 1000);
        pthread_mutex_unlock(&metrics->lock);
}

static const char *const webhook_outcomes[] = {"delivered", "retried", "failed"};

void sbx_metrics_count_webhook(struct sbx_metrics *metrics, const char *outcome)
{
        for (size_t i = 0; i < SBX_ARRAY_SIZE(webhook_outcomes); i++)
                if (strcmp(outcome, webhook_outcomes[i]) == 0) {
                        pthread_mutex_lock(&metrics->lock);
                        metrics->webhooks[i]++;
                        pthread_mutex_unlock(&metrics->lock);
                }
}

void sbx_metrics_count_quota_rejection(struct sbx_metrics *metrics, const char *tenant,
                                       const char *reason)
{
        size_t row = tenant_index(metrics, tenant), column = reason_index(reason);
        pthread_mutex_lock(&metrics->lock);
        metrics->quota_rejections[row * (REASON_COUNT + 1) + column]++;
        pthread_mutex_unlock(&metrics->lock);
}

void sbx_metrics_count_http_request(struct sbx_metrics *metrics, unsigned code)
{
        pthread_mutex_lock(&metrics->lock);
        if (code >= HTTP_CODE_FIRST && code <= HTTP_CODE_LAST)
                metrics->http_requests[code - HTTP_CODE_FIRST]++;
        else
                metrics->http_requests_other++;
        pthread_mutex_unlock(&metrics->lock);
}

static size_t name_index(const char *const *names, size_t count, const char *name)
{
        for (size_t i = 0; name != NULL && i < count; i++)
                if (strcmp(names[i], name) == 0)
                        return i;
        return count;
}

void sbx_metrics_count_opened(struct sbx_metrics *metrics, enum sbx_metrics_long_lived kind,
                              uint64_t n)
{
        pthread_mutex_lock(&metrics->lock);
        metrics->long_lived[kind].opened += n;
        pthread_mutex_unlock(&metrics->lock);
}

void sbx_metrics_count_ended(struct sbx_metrics *metrics, enum sbx_metrics_long_lived kind,
                             const char *reason)
{
        size_t i = name_index(session_ends, SESSION_END_COUNT, reason);
        pthread_mutex_lock(&metrics->lock);
        metrics->long_lived[kind].ended[i]++;
        pthread_mutex_unlock(&metrics->lock);
}

void sbx_metrics_count_operation(struct sbx_metrics *metrics, enum sbx_metrics_long_lived kind,
                                 const char *status, uint64_t duration_us)
{
        size_t i = name_index(session_statuses, SESSION_STATUS_COUNT, status);
        pthread_mutex_lock(&metrics->lock);
        metrics->long_lived[kind].operations[i]++;
        histogram_observe(&metrics->long_lived[kind].operation_time, duration_us);
        pthread_mutex_unlock(&metrics->lock);
}

void sbx_metrics_set_open(struct sbx_metrics *metrics, enum sbx_metrics_long_lived kind,
                          uint64_t open)
{
        pthread_mutex_lock(&metrics->lock);
        metrics->long_lived[kind].open = open;
        pthread_mutex_unlock(&metrics->lock);
}

void sbx_metrics_set_engine_stats(struct sbx_metrics *metrics,
                                  const struct sbx_message_stats *stats)
{
        pthread_mutex_lock(&metrics->lock);
        metrics->engine = *stats;
        pthread_mutex_unlock(&metrics->lock);
}

/* A label value in the exposition format's escaping: backslash, double quote and line feed are
 * the three characters that would end or break the quoted value. */
static void write_label_value(FILE *out, const char *value)
{
        for (const char *c = value; *c != '\0'; c++) {
                if (*c == '\\')
                        fputs("\\\\", out);
                else if (*c == '"')
                        fputs("\\\"", out);
                else if (*c == '\n')
                        fputs("\\n", out);
                else
                        fputc(*c, out);
        }
}

static void write_family_header(FILE *out, const char *name, const char *type, const char *help)
{
        fprintf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* One sample of a family with two labels. */
static void write_pair_sample(FILE *out, const char *name, const char *first_label,
                              const char *first_value, const char *second_label,
                              const char *second_value, uint64_t value)
{
        fprintf(out, "%s{%s=\"", name, first_label);
        write_label_value(out, first_value);
        fprintf(out, "\",%s=\"", second_label);
        write_label_value(out, second_value);
        fprintf(out, "\"} %" PRIu64 "\n", value);
}

/* A [tenant][value] counter table: every configured tenant with every known value, and the
 * "other" row and column only where something was counted, so that a scrape sees each known
 * series from the start (no gap before the first increment) without listing empty overflow. */
static void write_tenant_table(FILE *out, const struct sbx_metrics *metrics, const char *name,
                               const uint64_t *table, const char *label,
                               const char *(*value_name)(size_t), size_t n_values)
{
        for (size_t row = 0; row <= metrics->n_tenants; row++) {
                bool other_row = row == metrics->n_tenants;
                const char *tenant = other_row ? SBX_METRICS_OTHER : metrics->tenants[row];
                for (size_t column = 0; column <= n_values; column++) {
                        bool other_column = column == n_values;
                        uint64_t value = table[row * (n_values + 1) + column];
                        if ((other_row || other_column) && value == 0)
                                continue;
                        write_pair_sample(out, name, "tenant", tenant, label,
                                          other_column ? SBX_METRICS_OTHER : value_name(column),
                                          value);
                }
        }
}

static const char *status_value_name(size_t index)
{
        return sbx_status_name((enum sbx_status)index);
}

static const char *reason_value_name(size_t index)
{
        return quota_reasons[index];
}

/* A histogram's series, each with the label label="value" (phase="run", backend="gvisor"), or
 * none when label is NULL. */
static void write_histogram(FILE *out, const char *name, const char *label, const char *value,
                            const struct histogram *histogram)
{
        char labels[128] = "";
        if (label != NULL)
                snprintf(labels, sizeof(labels), "%s=\"%s\",", label, value);
        uint64_t cumulative = 0;
        for (size_t i = 0; i < BUCKET_COUNT; i++) {
                cumulative += histogram->bucket_counts[i];
                fprintf(out, "%s_bucket{%sle=\"%s\"} %" PRIu64 "\n", name, labels, buckets[i].label,
                        cumulative);
        }
        fprintf(out, "%s_bucket{%sle=\"+Inf\"} %" PRIu64 "\n", name, labels, histogram->count);
        /* The same labels without the trailing comma, in braces, or nothing. */
        char series[128] = "";
        if (label != NULL)
                snprintf(series, sizeof(series), "{%s=\"%s\"}", label, value);
        /* Seconds written from integer microseconds, so the sum is exact (no float rounding). */
        fprintf(out, "%s_sum%s %" PRIu64 ".%06" PRIu64 "\n", name, series,
                histogram->sum_us / 1000000, histogram->sum_us % 1000000);
        fprintf(out, "%s_count%s %" PRIu64 "\n", name, series, histogram->count);
}

/* A kind of long-lived sandbox's families: open, opened, ended by reason, operations by status,
 * their round trip. */
static void write_long_lived(FILE *out, const struct long_lived *kind,
                             const struct long_lived_names *names)
{
        write_family_header(out, names->open, "gauge", names->open_help);
        fprintf(out, "%s %" PRIu64 "\n", names->open, kind->open);
        write_family_header(out, names->opened, "counter", names->opened_help);
        fprintf(out, "%s %" PRIu64 "\n", names->opened, kind->opened);
        write_family_header(out, names->ended, "counter", names->ended_help);
        for (size_t i = 0; i <= SESSION_END_COUNT; i++)
                if (i < SESSION_END_COUNT || kind->ended[i] != 0)
                        fprintf(out, "%s{reason=\"%s\"} %" PRIu64 "\n", names->ended,
                                i < SESSION_END_COUNT ? session_ends[i] : SBX_METRICS_OTHER,
                                kind->ended[i]);
        write_family_header(out, names->operations, "counter", names->operations_help);
        for (size_t i = 0; i <= SESSION_STATUS_COUNT; i++)
                if (i < SESSION_STATUS_COUNT || kind->operations[i] != 0)
                        fprintf(out, "%s{status=\"%s\"} %" PRIu64 "\n", names->operations,
                                i < SESSION_STATUS_COUNT ? session_statuses[i] : SBX_METRICS_OTHER,
                                kind->operations[i]);
        write_family_header(out, names->duration, "histogram", names->duration_help);
        write_histogram(out, names->duration, "phase", "total", &kind->operation_time);
}

static void write_registry(FILE *out, const struct sbx_metrics *metrics)
{
        write_family_header(out, "sandboxd_executions_total", "counter",
                            "Executions finished, by tenant and status.");
        write_tenant_table(out, metrics, "sandboxd_executions_total", metrics->executions, "status",
                           status_value_name, STATUS_COUNT);

        write_family_header(out, "sandboxd_phase_duration_seconds", "histogram",
                            "Duration of each phase of an execution, in seconds.");
        for (size_t phase = 0; phase < PHASE_COUNT; phase++)
                write_histogram(out, "sandboxd_phase_duration_seconds", "phase", phase_names[phase],
                                &metrics->phases[phase]);

        write_family_header(out, "sandboxd_backend_executions_total", "counter",
                            "Executions finished, by isolation backend and status.");
        for (size_t row = 0; row <= SBX_BACKEND_COUNT; row++)
                for (size_t column = 0; column <= STATUS_COUNT; column++) {
                        uint64_t value = metrics->backend_executions[row][column];
                        bool other = row == SBX_BACKEND_COUNT || column == STATUS_COUNT;
                        if (!other || value != 0)
                                write_pair_sample(out, "sandboxd_backend_executions_total",
                                                  "backend",
                                                  row < SBX_BACKEND_COUNT ? sbx_backend_name_at(row)
                                                                          : SBX_METRICS_OTHER,
                                                  "status",
                                                  column < STATUS_COUNT ? status_value_name(column)
                                                                        : SBX_METRICS_OTHER,
                                                  value);
                }
        write_family_header(out, "sandboxd_backend_duration_seconds", "histogram",
                            "An execution's total time, by isolation backend, in seconds.");
        for (size_t row = 0; row <= SBX_BACKEND_COUNT; row++)
                if (row < SBX_BACKEND_COUNT || metrics->backend_total[row].count != 0)
                        write_histogram(out, "sandboxd_backend_duration_seconds", "backend",
                                        row < SBX_BACKEND_COUNT ? sbx_backend_name_at(row)
                                                                : SBX_METRICS_OTHER,
                                        &metrics->backend_total[row]);

        write_family_header(
                out, "sandboxd_quota_rejections_total", "counter",
                "Requests refused by a quota (429), the server's capacity or the fleet's store "
                "(503), by tenant and reason.");
        write_tenant_table(out, metrics, "sandboxd_quota_rejections_total",
                           metrics->quota_rejections, "reason", reason_value_name, REASON_COUNT);

        write_family_header(
                out, "sandboxd_sandboxes_alive", "gauge",
                "Sandboxes and warm pool entries alive in the engine at its last report.");
        fprintf(out, "sandboxd_sandboxes_alive %" PRIu64 "\n", metrics->engine.sandboxes_alive);

        const struct sbx_message_stats *engine = &metrics->engine;
        write_family_header(out, "sandboxd_pool_entries", "gauge",
                            "Warm pool entries, by state, at the engine's last report.");
        fprintf(out, "sandboxd_pool_entries{state=\"idle\"} %" PRIu64 "\n", engine->pool_idle);
        fprintf(out, "sandboxd_pool_entries{state=\"starting\"} %" PRIu64 "\n",
                engine->pool_starting);
        fprintf(out, "sandboxd_pool_entries{state=\"in_use\"} %" PRIu64 "\n", engine->pool_in_use);
        static const struct {
                const char *name;
                const char *help;
                size_t offset;
        } pool_counters[] = {
                {"sandboxd_pool_created_total", "Warm pool entries that became ready.",
                 offsetof(struct sbx_message_stats, pool_created)},
                {"sandboxd_pool_destroyed_total", "Warm pool entries that ended unused.",
                 offsetof(struct sbx_message_stats, pool_destroyed)},
                {"sandboxd_pool_hits_total", "Executions served by a ready pool entry.",
                 offsetof(struct sbx_message_stats, pool_hits)},
                {"sandboxd_pool_misses_total", "Executions of a pooled language run cold.",
                 offsetof(struct sbx_message_stats, pool_misses)},
        };
        for (size_t i = 0; i < sizeof(pool_counters) / sizeof(pool_counters[0]); i++) {
                write_family_header(out, pool_counters[i].name, "counter", pool_counters[i].help);
                fprintf(out, "%s %" PRIu64 "\n", pool_counters[i].name,
                        *(const uint64_t *)((const char *)engine + pool_counters[i].offset));
        }
        write_family_header(out, "sandboxd_pool_refill_seconds", "summary",
                            "Time from starting a pool entry to its loader being ready.");
        fprintf(out, "sandboxd_pool_refill_seconds_sum %" PRIu64 ".%06" PRIu64 "\n",
                engine->pool_refill_us / 1000000, engine->pool_refill_us % 1000000);
        fprintf(out, "sandboxd_pool_refill_seconds_count %" PRIu64 "\n", engine->pool_created);

        write_family_header(out, "sandboxd_compile_cache_lookups_total", "counter",
                            "Compile stages served from the compile cache (hit) or compiled "
                            "(miss).");
        fprintf(out, "sandboxd_compile_cache_lookups_total{result=\"hit\"} %" PRIu64 "\n",
                metrics->compile_cache_hits);
        fprintf(out, "sandboxd_compile_cache_lookups_total{result=\"miss\"} %" PRIu64 "\n",
                metrics->compile_cache_misses);
        write_family_header(out, "sandboxd_compile_cache_bytes", "gauge",
                            "The compile cache's artifacts together (counted at most every 5 s).");
        fprintf(out, "sandboxd_compile_cache_bytes %" PRIu64 "\n", engine->compile_cache_bytes);
        write_family_header(out, "sandboxd_compile_cache_entries", "gauge",
                            "Artifacts in the compile cache (counted at most every 5 s).");
        fprintf(out, "sandboxd_compile_cache_entries %" PRIu64 "\n", engine->compile_cache_entries);
        write_family_header(out, "sandboxd_compile_cache_evictions_total", "counter",
                            "Artifacts evicted (least recently used first) to keep the cache "
                            "within its bound.");
        fprintf(out, "sandboxd_compile_cache_evictions_total %" PRIu64 "\n",
                engine->compile_cache_evictions);

        write_family_header(out, "sandboxd_queue_depth", "gauge",
                            "Asynchronous executions waiting in the queue, by tenant.");
        for (size_t row = 0; row <= metrics->n_tenants; row++)
                if (row < metrics->n_tenants || metrics->queued[row] != 0) {
                        fputs("sandboxd_queue_depth{tenant=\"", out);
                        write_label_value(out, row < metrics->n_tenants ? metrics->tenants[row]
                                                                        : SBX_METRICS_OTHER);
                        fprintf(out, "\"} %" PRIu64 "\n", metrics->queued[row]);
                }
        write_family_header(out, "sandboxd_queue_wait_seconds", "histogram",
                            "How long an asynchronous execution waited in the queue before it "
                            "started, in seconds.");
        write_histogram(out, "sandboxd_queue_wait_seconds", NULL, NULL, &metrics->queue_wait);
        write_family_header(out, "sandboxd_webhook_deliveries_total", "counter",
                            "Webhook delivery attempts, by outcome: delivered, retried (it "
                            "failed and is tried again later), failed (the last attempt).");
        for (size_t i = 0; i < SBX_ARRAY_SIZE(webhook_outcomes); i++)
                fprintf(out, "sandboxd_webhook_deliveries_total{outcome=\"%s\"} %" PRIu64 "\n",
                        webhook_outcomes[i], metrics->webhooks[i]);

        for (size_t kind = 0; kind < SBX_METRICS_LONG_LIVED_COUNT; kind++)
                write_long_lived(out, &metrics->long_lived[kind], &long_lived_names[kind]);

        write_family_header(out, "sandboxd_http_requests_total", "counter",
                            "HTTP responses, by status code.");
        for (unsigned i = 0; i < HTTP_CODE_COUNT; i++)
                if (metrics->http_requests[i] != 0)
                        fprintf(out, "sandboxd_http_requests_total{code=\"%u\"} %" PRIu64 "\n",
                                i + HTTP_CODE_FIRST, metrics->http_requests[i]);
        if (metrics->http_requests_other != 0)
                fprintf(out, "sandboxd_http_requests_total{code=\"%s\"} %" PRIu64 "\n",
                        SBX_METRICS_OTHER, metrics->http_requests_other);
}

char *sbx_metrics_render(struct sbx_metrics *metrics, size_t *length)
{
        char *text = NULL;
        size_t size = 0;
        FILE *out = open_memstream(&text, &size);
        if (out == NULL)
                return NULL;
        pthread_mutex_lock(&metrics->lock);
        write_registry(out, metrics);
        pthread_mutex_unlock(&metrics->lock);
        /* A memory stream reports running out of memory through its error flag and fclose(). */
        bool failed = ferror(out) != 0;
        if (fclose(out) != 0 || failed) {
                free(text);
                return NULL;
        }
        if (length != NULL)
                *length = size;
        return text;
}
