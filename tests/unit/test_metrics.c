/* Unit tests for api/metrics.h: the exposition text after some observations (exact sample
 * lines, HELP/TYPE headers), histogram buckets that are cumulative with inclusive upper bounds,
 * label escaping, the "other" overflow series that bounds cardinality, and exact counts under
 * concurrent updates. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <pthread.h>

#include "api/metrics.h"

static struct sbx_metrics *new_registry(void)
{
        static const char *const tenants[] = {"acme", "beta"};
        struct sbx_error err = {0};
        struct sbx_metrics *metrics = sbx_metrics_new(tenants, 2, &err);
        assert_non_null(metrics);
        return metrics;
}

/* Whether text has line as one whole line. */
static int has_line(const char *text, const char *line)
{
        size_t len = strlen(line);
        for (const char *p = text; (p = strstr(p, line)) != NULL; p++)
                if ((p == text || p[-1] == '\n') && p[len] == '\n')
                        return 1;
        return 0;
}

/* The value of the sample named by the whole line prefix `series ` (name and labels). */
static unsigned long long sample_value(const char *text, const char *series)
{
        size_t len = strlen(series);
        for (const char *p = text; (p = strstr(p, series)) != NULL; p++)
                if ((p == text || p[-1] == '\n') && p[len] == ' ')
                        return strtoull(p + len + 1, NULL, 10);
        fail_msg("no sample %s", series);
        return 0;
}

static void test_counter_lines_are_exact(void **state)
{
        struct sbx_metrics *metrics = new_registry();
        sbx_metrics_count_execution(metrics, "acme", "native", "ok", 1000);
        sbx_metrics_count_execution(metrics, "acme", "native", "ok", 1000);
        sbx_metrics_count_execution(metrics, "beta", "native", "timeout", 1000);
        sbx_metrics_count_execution(metrics, "beta", "gvisor", "exit_nonzero", 30000);
        size_t length = 0;
        char *text = sbx_metrics_render(metrics, &length);
        assert_non_null(text);
        assert_int_equal(length, strlen(text));
        assert_true(has_line(text, "# HELP sandboxd_executions_total Executions finished, by "
                                   "tenant and status."));
        assert_true(has_line(text, "# TYPE sandboxd_executions_total counter"));
        assert_true(has_line(text, "sandboxd_executions_total{tenant=\"acme\",status=\"ok\"} 2"));
        /* Per backend: every backend's series from the start, and its executions' total time. */
        assert_true(has_line(text, "# TYPE sandboxd_backend_executions_total counter"));
        assert_true(has_line(
                text, "sandboxd_backend_executions_total{backend=\"native\",status=\"ok\"} 2"));
        assert_true(has_line(
                text,
                "sandboxd_backend_executions_total{backend=\"gvisor\",status=\"exit_nonzero\"} 1"));
        assert_true(has_line(
                text,
                "sandboxd_backend_executions_total{backend=\"gvisor\",status=\"timeout\"} 0"));
        assert_true(has_line(text, "# TYPE sandboxd_backend_duration_seconds histogram"));
        assert_true(
                has_line(text, "sandboxd_backend_duration_seconds_count{backend=\"native\"} 3"));
        assert_true(has_line(text, "sandboxd_backend_duration_seconds_sum{backend=\"gvisor\"} "
                                   "0.030000"));
        assert_true(
                has_line(text, "sandboxd_executions_total{tenant=\"beta\",status=\"timeout\"} 1"));
        /* Known series exist from the start, at zero. */
        assert_true(has_line(text, "sandboxd_executions_total{tenant=\"beta\",status=\"ok\"} 0"));
        assert_true(has_line(
                text, "sandboxd_executions_total{tenant=\"acme\",status=\"internal_error\"} 0"));
        /* Nothing was counted under "other", so no such series is listed. */
        assert_null(strstr(text, "\"other\""));
        assert_true(has_line(text, "# TYPE sandboxd_sandboxes_alive gauge"));
        assert_true(has_line(text, "sandboxd_sandboxes_alive 0"));
        assert_int_equal(text[length - 1], '\n');
        free(text);
        sbx_metrics_free(metrics);
}

static void test_unknown_labels_go_to_other(void **state)
{
        struct sbx_metrics *metrics = new_registry();
        sbx_metrics_count_execution(metrics, "intruder", "native", "ok", 1000);
        sbx_metrics_count_execution(metrics, "acme", "native", "no_such_status", 1000);
        sbx_metrics_count_execution(metrics, NULL, NULL, NULL, 0);
        sbx_metrics_count_quota_rejection(metrics, "acme", "concurrency");
        sbx_metrics_count_quota_rejection(metrics, "beta", "cpu_budget");
        sbx_metrics_count_quota_rejection(metrics, "beta", "disk");
        sbx_metrics_count_quota_rejection(metrics, "acme", "capacity");
        sbx_metrics_count_http_request(metrics, 200);
        sbx_metrics_count_http_request(metrics, 200);
        sbx_metrics_count_http_request(metrics, 429);
        sbx_metrics_count_http_request(metrics, 999);
        sbx_metrics_count_http_request(metrics, 0);
        char *text = sbx_metrics_render(metrics, NULL);
        assert_non_null(text);
        assert_true(has_line(text, "sandboxd_executions_total{tenant=\"other\",status=\"ok\"} 1"));
        assert_true(
                has_line(text, "sandboxd_executions_total{tenant=\"acme\",status=\"other\"} 1"));
        assert_true(
                has_line(text, "sandboxd_executions_total{tenant=\"other\",status=\"other\"} 1"));
        /* The "other" row lists only what it counted. */
        assert_false(
                has_line(text, "sandboxd_executions_total{tenant=\"other\",status=\"timeout\"} 0"));
        /* The client-chosen names themselves never become label values. */
        assert_null(strstr(text, "intruder"));
        assert_null(strstr(text, "no_such_status"));
        assert_true(has_line(
                text, "sandboxd_quota_rejections_total{tenant=\"acme\",reason=\"concurrency\"} 1"));
        assert_true(has_line(
                text, "sandboxd_quota_rejections_total{tenant=\"beta\",reason=\"cpu_budget\"} 1"));
        assert_true(has_line(
                text, "sandboxd_quota_rejections_total{tenant=\"beta\",reason=\"other\"} 1"));
        assert_true(has_line(
                text, "sandboxd_quota_rejections_total{tenant=\"acme\",reason=\"capacity\"} 1"));
        assert_true(has_line(text, "sandboxd_http_requests_total{code=\"200\"} 2"));
        assert_true(has_line(text, "sandboxd_http_requests_total{code=\"429\"} 1"));
        assert_true(has_line(text, "sandboxd_http_requests_total{code=\"other\"} 2"));
        /* Codes never seen are not listed. */
        assert_null(strstr(text, "code=\"500\""));
        free(text);
        sbx_metrics_free(metrics);
}

static void test_histogram_buckets_are_cumulative(void **state)
{
        struct sbx_metrics *metrics = new_registry();
        /* acquire: on a bound (inclusive), setup: just past it, run: past the last bound. */
        struct sbx_timing first = {.acquire_us = 1000,
                                   .setup_us = 1001,
                                   .run_us = 20000000,
                                   .teardown_us = 0,
                                   .total_us = 20002001};
        struct sbx_timing second = {.acquire_us = 300,
                                    .setup_us = 40000,
                                    .run_us = 700000,
                                    .teardown_us = 2500,
                                    .total_us = 742800};
        sbx_metrics_observe_timing(metrics, &first);
        sbx_metrics_observe_timing(metrics, &second);
        char *text = sbx_metrics_render(metrics, NULL);
        assert_non_null(text);
        assert_true(has_line(text, "# TYPE sandboxd_phase_duration_seconds histogram"));
        const char *name = "sandboxd_phase_duration_seconds";
        char series[160];
        snprintf(series, sizeof(series), "%s_bucket{phase=\"acquire\",le=\"0.001\"}", name);
        assert_int_equal(sample_value(text, series), 2);
        snprintf(series, sizeof(series), "%s_bucket{phase=\"setup\",le=\"0.001\"}", name);
        assert_int_equal(sample_value(text, series), 0);
        snprintf(series, sizeof(series), "%s_bucket{phase=\"setup\",le=\"0.0025\"}", name);
        assert_int_equal(sample_value(text, series), 1);
        snprintf(series, sizeof(series), "%s_bucket{phase=\"setup\",le=\"0.05\"}", name);
        assert_int_equal(sample_value(text, series), 2);
        snprintf(series, sizeof(series), "%s_bucket{phase=\"run\",le=\"10\"}", name);
        assert_int_equal(sample_value(text, series), 1);
        snprintf(series, sizeof(series), "%s_bucket{phase=\"run\",le=\"+Inf\"}", name);
        assert_int_equal(sample_value(text, series), 2);
        assert_true(has_line(text, "sandboxd_phase_duration_seconds_sum{phase=\"run\"} 20.700000"));
        assert_true(has_line(text, "sandboxd_phase_duration_seconds_count{phase=\"run\"} 2"));
        assert_true(
                has_line(text, "sandboxd_phase_duration_seconds_sum{phase=\"teardown\"} 0.002500"));

        /* Every phase: each bucket at least the one before, +Inf equal to _count. */
        static const char *const phases[] = {"acquire", "setup", "run", "teardown", "total"};
        static const char *const bounds[] = {
                "0.0001", "0.00025", "0.0005", "0.001", "0.0025", "0.005", "0.01", "0.025", "0.05",
                "0.1",    "0.25",    "0.5",    "1",     "2.5",    "5",     "10",   "+Inf"};
        for (size_t p = 0; p < 5; p++) {
                unsigned long long previous = 0;
                for (size_t b = 0; b < sizeof(bounds) / sizeof(bounds[0]); b++) {
                        snprintf(series, sizeof(series), "%s_bucket{phase=\"%s\",le=\"%s\"}", name,
                                 phases[p], bounds[b]);
                        unsigned long long value = sample_value(text, series);
                        assert_true(value >= previous);
                        previous = value;
                }
                snprintf(series, sizeof(series), "%s_count{phase=\"%s\"}", name, phases[p]);
                assert_int_equal(sample_value(text, series), previous);
                assert_int_equal(previous, 2);
        }
        free(text);
        sbx_metrics_free(metrics);
}

static void test_label_values_are_escaped(void **state)
{
        static const char *const tenants[] = {"we\"ird\\name\nx"};
        struct sbx_error err = {0};
        struct sbx_metrics *metrics = sbx_metrics_new(tenants, 1, &err);
        assert_non_null(metrics);
        sbx_metrics_count_execution(metrics, "we\"ird\\name\nx", "native", "ok", 1000);
        char *text = sbx_metrics_render(metrics, NULL);
        assert_non_null(text);
        assert_true(has_line(
                text,
                "sandboxd_executions_total{tenant=\"we\\\"ird\\\\name\\nx\",status=\"ok\"} 1"));
        /* The raw line feed never reaches the output: every line is a comment or a sample. */
        for (const char *line = text; *line != '\0'; line = strchr(line, '\n') + 1)
                assert_true(line[0] == '#' || strncmp(line, "sandboxd_", 9) == 0);
        free(text);
        sbx_metrics_free(metrics);
}

static void test_gauge_is_set_not_added(void **state)
{
        struct sbx_metrics *metrics = new_registry();
        sbx_metrics_set_engine_stats(metrics, &(struct sbx_message_stats){.sandboxes_alive = 7});
        sbx_metrics_set_engine_stats(metrics, &(struct sbx_message_stats){
                                                      .sandboxes_alive = 3,
                                                      .pool_idle = 2,
                                                      .pool_hits = 5,
                                                      .pool_created = 4,
                                                      .pool_refill_us = 1500000,
                                              });
        char *text = sbx_metrics_render(metrics, NULL);
        assert_non_null(text);
        assert_true(has_line(text, "sandboxd_sandboxes_alive 3"));
        assert_true(has_line(text, "sandboxd_pool_entries{state=\"idle\"} 2"));
        assert_true(has_line(text, "sandboxd_pool_hits_total 5"));
        assert_true(has_line(text, "sandboxd_pool_refill_seconds_sum 1.500000"));
        assert_true(has_line(text, "sandboxd_pool_refill_seconds_count 4"));
        free(text);
        sbx_metrics_free(metrics);
}

static void test_no_tenants(void **state)
{
        struct sbx_error err = {0};
        struct sbx_metrics *metrics = sbx_metrics_new(NULL, 0, &err);
        assert_non_null(metrics);
        sbx_metrics_count_execution(metrics, "anyone", "native", "ok", 1000);
        char *text = sbx_metrics_render(metrics, NULL);
        assert_non_null(text);
        assert_true(has_line(text, "sandboxd_executions_total{tenant=\"other\",status=\"ok\"} 1"));
        free(text);
        sbx_metrics_free(metrics);
        sbx_metrics_free(NULL);
}

#define THREADS               8
#define INCREMENTS_PER_THREAD 20000

static void *count_many(void *arg)
{
        struct sbx_metrics *metrics = arg;
        struct sbx_timing timing = {
                .acquire_us = 1, .setup_us = 1, .run_us = 1, .teardown_us = 1, .total_us = 4};
        for (int i = 0; i < INCREMENTS_PER_THREAD; i++) {
                sbx_metrics_count_execution(metrics, "acme", "native", "ok", 1000);
                sbx_metrics_count_http_request(metrics, 200);
                if (i % 100 == 0)
                        sbx_metrics_observe_timing(metrics, &timing);
                if (i % 1000 == 0)
                        free(sbx_metrics_render(metrics, NULL));
        }
        return NULL;
}

static void test_concurrent_updates_lose_nothing(void **state)
{
        struct sbx_metrics *metrics = new_registry();
        pthread_t threads[THREADS];
        for (int i = 0; i < THREADS; i++)
                assert_int_equal(pthread_create(&threads[i], NULL, count_many, metrics), 0);
        for (int i = 0; i < THREADS; i++)
                pthread_join(threads[i], NULL);
        char *text = sbx_metrics_render(metrics, NULL);
        assert_non_null(text);
        assert_int_equal(
                sample_value(text, "sandboxd_executions_total{tenant=\"acme\",status=\"ok\"}"),
                THREADS * INCREMENTS_PER_THREAD);
        assert_int_equal(sample_value(text, "sandboxd_http_requests_total{code=\"200\"}"),
                         THREADS * INCREMENTS_PER_THREAD);
        assert_int_equal(
                sample_value(text, "sandboxd_phase_duration_seconds_count{phase=\"total\"}"),
                THREADS * INCREMENTS_PER_THREAD / 100);
        free(text);
        sbx_metrics_free(metrics);
}

/* A tenant added by a reload gets its own series; the others keep their counts, "other" too. */
static void test_add_tenant_keeps_the_counts(void **state)
{
        struct sbx_metrics *metrics = new_registry();
        struct sbx_error err = {0};
        sbx_metrics_count_execution(metrics, "acme", "native", "ok", 1000);
        sbx_metrics_count_execution(metrics, "newbie", "native", "ok",
                                    1000); /* not yet known: "other" */
        sbx_metrics_count_quota_rejection(metrics, "acme", "capacity");
        assert_int_equal(sbx_metrics_add_tenant(metrics, "newbie", &err), 0);
        assert_int_equal(sbx_metrics_add_tenant(metrics, "acme", &err), 0); /* known: no-op */
        sbx_metrics_count_execution(metrics, "newbie", "native", "timeout", 1000);
        char *text = sbx_metrics_render(metrics, NULL);
        assert_non_null(text);
        assert_true(has_line(text, "sandboxd_executions_total{tenant=\"acme\",status=\"ok\"} 1"));
        assert_true(has_line(text, "sandboxd_executions_total{tenant=\"other\",status=\"ok\"} 1"));
        assert_true(has_line(text,
                             "sandboxd_executions_total{tenant=\"newbie\",status=\"timeout\"} 1"));
        assert_true(has_line(text, "sandboxd_executions_total{tenant=\"newbie\",status=\"ok\"} 0"));
        assert_true(has_line(
                text, "sandboxd_quota_rejections_total{tenant=\"acme\",reason=\"capacity\"} 1"));
        free(text);
        sbx_metrics_free(metrics);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_add_tenant_keeps_the_counts),
                cmocka_unit_test(test_counter_lines_are_exact),
                cmocka_unit_test(test_unknown_labels_go_to_other),
                cmocka_unit_test(test_histogram_buckets_are_cumulative),
                cmocka_unit_test(test_label_values_are_escaped),
                cmocka_unit_test(test_gauge_is_set_not_added),
                cmocka_unit_test(test_no_tenants),
                cmocka_unit_test(test_concurrent_updates_lose_nothing),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
