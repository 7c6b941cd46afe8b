/* Unit tests for service/quota.h with an injected clock: concurrency reserve/release and its
 * Retry-After from the earliest wall deadline (no history) or from the recent executions' wall
 * time (never past a deadline, never 0); the server's capacity over all tenants; the rolling CPU
 * budget, its Retry-After from when enough charge leaves the window, and recovery when the
 * window rolls; tenants never affect each other; and many threads reserving at once never exceed
 * the limit. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "service/config.h"
#include "service/quota.h"

/* Tier "two": 2 in flight, 1000 ms of CPU per 60 s. Tenants a and b share it; c has "wide"
 * (64 in flight, a large budget) for the thread test. */
static const char config_text[] =
        "[tier.two]\n"
        "max_concurrency = 2\n"
        "cpu_budget_ms = 1000\n"
        "cpu_window_s = 60\n"
        "[tier.wide]\n"
        "max_concurrency = 4\n"
        "cpu_budget_ms = 1000000000\n"
        "[tenant.a]\n"
        "tier = two\n"
        "token_sha256 = 0000000000000000000000000000000000000000000000000000000000000001\n"
        "[tenant.b]\n"
        "tier = two\n"
        "token_sha256 = 0000000000000000000000000000000000000000000000000000000000000002\n"
        "[tenant.c]\n"
        "tier = wide\n"
        "token_sha256 = 0000000000000000000000000000000000000000000000000000000000000003\n";

static struct sbx_config config;
static const struct sbx_tenant *a, *b, *c;

static int setup(void **state)
{
        struct sbx_error err = {0};
        if (sbx_config_load_string(config_text, "t", &config, &err) != 0) {
                fprintf(stderr, "config: %s\n", err.message);
                return -1;
        }
        a = &config.tenants[0];
        b = &config.tenants[1];
        c = &config.tenants[2];
        return 0;
}

static int teardown(void **state)
{
        sbx_config_free(&config);
        return 0;
}

/* Reserves and returns the decision. */
static struct sbx_quota_decision reserve(struct sbx_quota *quota, const struct sbx_tenant *tenant,
                                         uint64_t wall_ms, uint64_t now_ms)
{
        struct sbx_quota_decision decision;
        struct sbx_error err = {0};
        assert_int_equal(sbx_quota_reserve(quota, tenant, wall_ms, now_ms, &decision, &err), 0);
        return decision;
}

static uint64_t reserve_allowed(struct sbx_quota *quota, const struct sbx_tenant *tenant,
                                uint64_t wall_ms, uint64_t now_ms)
{
        struct sbx_quota_decision decision = reserve(quota, tenant, wall_ms, now_ms);
        if (decision.verdict != SBX_QUOTA_ALLOWED)
                fail_msg("refused (%s, retry %llu s) at %llu ms",
                         sbx_quota_verdict_name(decision.verdict),
                         (unsigned long long)decision.retry_after_s, (unsigned long long)now_ms);
        assert_true(decision.reservation != 0);
        return decision.reservation;
}

static void assert_refused(struct sbx_quota *quota, const struct sbx_tenant *tenant,
                           uint64_t now_ms, enum sbx_quota_verdict verdict, uint64_t retry_after_s)
{
        struct sbx_quota_decision decision = reserve(quota, tenant, 1000, now_ms);
        if (decision.verdict != verdict || decision.retry_after_s != retry_after_s)
                fail_msg("at %llu ms: %s retry %llu s, expected %s retry %llu s",
                         (unsigned long long)now_ms, sbx_quota_verdict_name(decision.verdict),
                         (unsigned long long)decision.retry_after_s,
                         sbx_quota_verdict_name(verdict), (unsigned long long)retry_after_s);
}

static void test_concurrency(void **state)
{
        struct sbx_quota *quota = sbx_quota_new(0);
        assert_non_null(quota);
        uint64_t first = reserve_allowed(quota, a, 10000, 0);    /* deadline 10000 */
        uint64_t second = reserve_allowed(quota, a, 5000, 1000); /* deadline 6000 */
        assert_int_not_equal(first, second);

        /* Full: retry when the earliest deadline passes, rounded up to whole seconds. */
        assert_refused(quota, a, 2000, SBX_QUOTA_OVER_CONCURRENCY, 4);
        assert_refused(quota, a, 1500, SBX_QUOTA_OVER_CONCURRENCY, 5);
        assert_refused(quota, a, 5999, SBX_QUOTA_OVER_CONCURRENCY, 1);
        /* Past the deadline but not yet released (teardown): still full, retry soon. */
        assert_refused(quota, a, 7000, SBX_QUOTA_OVER_CONCURRENCY, 1);

        struct sbx_quota_usage usage;
        sbx_quota_usage(quota, a, 7000, &usage);
        assert_int_equal(usage.in_flight, 2);

        /* Releasing frees a slot; the other keeps its deadline. */
        sbx_quota_release(quota, a, second, false, 0, 7000);
        uint64_t third = reserve_allowed(quota, a, 20000, 7000); /* deadline 27000 */
        assert_refused(quota, a, 8000, SBX_QUOTA_OVER_CONCURRENCY, 2);
        sbx_quota_release(quota, a, first, false, 0, 9000);
        sbx_quota_release(quota, a, third, false, 0, 9000);
        sbx_quota_usage(quota, a, 9000, &usage);
        assert_int_equal(usage.in_flight, 0);
        assert_int_equal(usage.cpu_ms_in_window, 0);

        /* Releasing an unknown or already released reservation changes nothing. */
        sbx_quota_release(quota, a, third, false, 0, 9000);
        sbx_quota_release(quota, a, 12345, false, 0, 9000);
        reserve_allowed(quota, a, 1000, 9000);
        reserve_allowed(quota, a, 1000, 9000);
        assert_refused(quota, a, 9000, SBX_QUOTA_OVER_CONCURRENCY, 1);
        sbx_quota_free(quota);
}

static void test_cpu_budget(void **state)
{
        struct sbx_quota *quota = sbx_quota_new(0);
        assert_non_null(quota);
        uint64_t r = reserve_allowed(quota, a, 1000, 0);
        sbx_quota_release(quota, a, r, false, 600, 1000); /* in the window until 61000 */
        r = reserve_allowed(quota, a, 1000, 4000);
        sbx_quota_release(quota, a, r, false, 600, 5000); /* in the window until 65000 */

        struct sbx_quota_usage usage;
        sbx_quota_usage(quota, a, 5000, &usage);
        assert_int_equal(usage.cpu_ms_in_window, 1200);
        assert_int_equal(usage.in_flight, 0);

        /* 1200 >= 1000: refused until the first charge leaves (61000), leaving 600. */
        assert_refused(quota, a, 5000, SBX_QUOTA_OVER_CPU_BUDGET, 56);
        assert_refused(quota, a, 60001, SBX_QUOTA_OVER_CPU_BUDGET, 1);
        assert_refused(quota, a, 60999, SBX_QUOTA_OVER_CPU_BUDGET, 1);

        /* The window rolls: the budget is back. */
        r = reserve_allowed(quota, a, 1000, 61000);
        sbx_quota_usage(quota, a, 61000, &usage);
        assert_int_equal(usage.cpu_ms_in_window, 600);
        /* Exactly the budget is over it (the rule is "used < budget"). */
        sbx_quota_release(quota, a, r, false, 400, 62000);
        assert_refused(quota, a, 62000, SBX_QUOTA_OVER_CPU_BUDGET, 3);
        reserve_allowed(quota, a, 1000, 65000);

        /* Every charge gone once the window has passed them all. */
        sbx_quota_usage(quota, a, 122000, &usage);
        assert_int_equal(usage.cpu_ms_in_window, 0);
        sbx_quota_free(quota);
}

static void test_a_charge_without_a_reservation(void **state)
{
        /* A session's background CPU: charged by tenant name, counted and expired like any. */
        struct sbx_quota *quota = sbx_quota_new(0);
        assert_non_null(quota);
        sbx_quota_charge(quota, a->name, 1500, 2000); /* in the window until 62000 */
        struct sbx_quota_usage usage;
        sbx_quota_usage(quota, a, 2000, &usage);
        assert_int_equal(usage.cpu_ms_in_window, 1500);
        assert_int_equal(usage.in_flight, 0);
        assert_refused(quota, a, 3000, SBX_QUOTA_OVER_CPU_BUDGET, 59);
        reserve_allowed(quota, a, 1000, 62000);
        sbx_quota_usage(quota, a, 62000, &usage);
        assert_int_equal(usage.cpu_ms_in_window, 0);
        sbx_quota_free(quota);
}

static void test_budget_retry_needs_several_charges(void **state)
{
        struct sbx_quota *quota = sbx_quota_new(0);
        /* 300 + 300 + 900 = 1500: two must leave (at 62000 and 63000) for 900 < 1000. */
        static const uint64_t finished[] = {2000, 3000, 4000};
        static const uint64_t cpu[] = {300, 300, 900};
        for (size_t i = 0; i < 3; i++) {
                uint64_t r = reserve_allowed(quota, a, 1000, finished[i] - 500);
                sbx_quota_release(quota, a, r, false, cpu[i], finished[i]);
        }
        assert_refused(quota, a, 10000, SBX_QUOTA_OVER_CPU_BUDGET, 53);
        assert_refused(quota, a, 62000, SBX_QUOTA_OVER_CPU_BUDGET, 1);
        reserve_allowed(quota, a, 1000, 63000);
        sbx_quota_free(quota);
}

static void test_charges_in_one_second_merge(void **state)
{
        struct sbx_quota *quota = sbx_quota_new(0);
        uint64_t r1 = reserve_allowed(quota, a, 1000, 0);
        uint64_t r2 = reserve_allowed(quota, a, 1000, 0);
        sbx_quota_release(quota, a, r1, false, 500, 1100);
        sbx_quota_release(quota, a, r2, false, 500, 1900); /* same second: one charge, at 1900 */
        assert_refused(quota, a, 2000, SBX_QUOTA_OVER_CPU_BUDGET, 60);
        /* Leaves with the later time: never earlier than the exact rule would allow. */
        assert_refused(quota, a, 61100, SBX_QUOTA_OVER_CPU_BUDGET, 1);
        reserve_allowed(quota, a, 1000, 61900);
        sbx_quota_free(quota);
}

/* Over both limits at once, the verdict is the one that frees last, and Retry-After is its. */
static void test_both_limits(void **state)
{
        struct sbx_quota *quota = sbx_quota_new(0);
        reserve_allowed(quota, a, 100000, 0); /* deadline 100000 */
        reserve_allowed(quota, a, 30000, 0);  /* deadline 30000 */
        sbx_quota_release(quota, a, 0, false, 2000,
                          500); /* a charge alone: budget frees at 60500 */
        assert_refused(quota, a, 1000, SBX_QUOTA_OVER_CPU_BUDGET, 60);
        sbx_quota_free(quota);

        quota = sbx_quota_new(0);
        reserve_allowed(quota, a, 100000, 0); /* deadline 100000 */
        reserve_allowed(quota, a, 90000, 0);  /* deadline 90000 */
        sbx_quota_release(quota, a, 0, false, 2000, 500);
        assert_refused(quota, a, 1000, SBX_QUOTA_OVER_CONCURRENCY, 89);
        sbx_quota_free(quota);
}

static void test_tenants_are_isolated(void **state)
{
        struct sbx_quota *quota = sbx_quota_new(0);
        /* a: full and over budget. */
        uint64_t r = reserve_allowed(quota, a, 1000, 0);
        sbx_quota_release(quota, a, r, false, 5000, 1000);
        reserve_allowed(quota, a, 1000, 70000);
        reserve_allowed(quota, a, 1000, 70000);
        assert_refused(quota, a, 70000, SBX_QUOTA_OVER_CONCURRENCY, 1);
        r = reserve_allowed(quota, b, 1000, 70000);
        /* b, same tier, is untouched by a. */
        sbx_quota_release(quota, b, r, false, 100, 70500);
        struct sbx_quota_usage usage;
        sbx_quota_usage(quota, b, 70500, &usage);
        assert_int_equal(usage.cpu_ms_in_window, 100);
        assert_int_equal(usage.in_flight, 0);
        sbx_quota_usage(quota, a, 70500, &usage);
        assert_int_equal(usage.in_flight, 2);
        /* A tenant never seen has no usage. */
        sbx_quota_usage(quota, c, 0, &usage);
        assert_int_equal(usage.in_flight, 0);
        assert_int_equal(usage.cpu_ms_in_window, 0);
        sbx_quota_free(quota);
}

/* ---- threads ---------------------------------------------------------------------------- */

static struct sbx_quota *shared_quota;
static atomic_int running;
static atomic_int most_running;
static atomic_int refused;

static void *reserve_in_loop(void *arg)
{
        for (int i = 0; i < 20000; i++) {
                struct sbx_quota_decision decision;
                struct sbx_error err = {0};
                if (sbx_quota_reserve(shared_quota, c, 1000, (uint64_t)i, &decision, &err) != 0)
                        return (void *)1;
                if (decision.verdict != SBX_QUOTA_ALLOWED) {
                        atomic_fetch_add(&refused, 1);
                        continue;
                }
                int now = atomic_fetch_add(&running, 1) + 1;
                int most = atomic_load(&most_running);
                while (now > most && !atomic_compare_exchange_weak(&most_running, &most, now))
                        ;
                atomic_fetch_sub(&running, 1);
                sbx_quota_release(shared_quota, c, decision.reservation, true, 1, (uint64_t)i);
        }
        return NULL;
}

static void test_threads(void **state)
{
        shared_quota = sbx_quota_new(0);
        pthread_t threads[8];
        for (size_t i = 0; i < 8; i++)
                assert_int_equal(pthread_create(&threads[i], NULL, reserve_in_loop, NULL), 0);
        for (size_t i = 0; i < 8; i++) {
                void *result;
                assert_int_equal(pthread_join(threads[i], &result), 0);
                assert_null(result);
        }
        /* Tier "wide" allows 4 in flight: never more ran at once. */
        assert_true(atomic_load(&most_running) <= 4);
        assert_true(atomic_load(&most_running) >= 1);
        struct sbx_quota_usage usage;
        sbx_quota_usage(shared_quota, c, 20000, &usage);
        assert_int_equal(usage.in_flight, 0);
        /* Every allowed execution charged 1 ms, all within the 60 s window. */
        assert_int_equal(usage.cpu_ms_in_window, 8 * 20000 - atomic_load(&refused));
        sbx_quota_free(shared_quota);
}

/* Runs n executions of tenant that each take took_ms, one after another from start_ms. */
static uint64_t run_history(struct sbx_quota *quota, const struct sbx_tenant *tenant, size_t n,
                            uint64_t took_ms, uint64_t start_ms)
{
        for (size_t i = 0; i < n; i++) {
                uint64_t r = reserve_allowed(quota, tenant, 10000, start_ms);
                start_ms += took_ms;
                sbx_quota_release(quota, tenant, r, true, 1, start_ms);
        }
        return start_ms;
}

/* Short programs under a long deadline: Retry-After follows how long they take, not the
 * deadline (the 10 s of the 0.2 s programs). */
static void test_retry_after_follows_run_times(void **state)
{
        struct sbx_quota *quota = sbx_quota_new(0);
        uint64_t now = run_history(quota, a, 16, 200, 0);
        reserve_allowed(quota, a, 10000, now);
        reserve_allowed(quota, a, 10000, now + 100);
        /* Expected to end 200 ms after they started: 1 s (whole seconds, never 0), not 10. */
        assert_refused(quota, a, now + 150, SBX_QUOTA_OVER_CONCURRENCY, 1);
        /* Overdue: expected any moment now. */
        assert_refused(quota, a, now + 5000, SBX_QUOTA_OVER_CONCURRENCY, 1);
        sbx_quota_free(quota);

        /* Long programs: the estimate is their typical time ... */
        quota = sbx_quota_new(0);
        now = run_history(quota, a, 16, 5000, 0);
        reserve_allowed(quota, a, 10000, now);
        reserve_allowed(quota, a, 10000, now);
        assert_refused(quota, a, now, SBX_QUOTA_OVER_CONCURRENCY, 5);
        sbx_quota_free(quota);

        /* ... but never past the deadline of the one that ends first. */
        quota = sbx_quota_new(0);
        now = run_history(quota, a, 16, 5000, 0);
        reserve_allowed(quota, a, 3000, now);
        reserve_allowed(quota, a, 10000, now);
        assert_refused(quota, a, now, SBX_QUOTA_OVER_CONCURRENCY, 3);
        sbx_quota_free(quota);

        /* A refused execution (ran false) teaches nothing: the deadlines stay the estimate. */
        quota = sbx_quota_new(0);
        uint64_t r = reserve_allowed(quota, a, 10000, 0);
        sbx_quota_release(quota, a, r, false, 0, 100);
        reserve_allowed(quota, a, 10000, 1000);
        reserve_allowed(quota, a, 10000, 1000);
        assert_refused(quota, a, 1000, SBX_QUOTA_OVER_CONCURRENCY, 10);
        sbx_quota_free(quota);
}

/* The server's capacity counts every tenant; a tenant's own limit is checked first. */
static void test_capacity(void **state)
{
        struct sbx_quota *quota = sbx_quota_new(3);
        reserve_allowed(quota, a, 4000, 0);
        reserve_allowed(quota, a, 9000, 0);
        reserve_allowed(quota, b, 8000, 0);
        /* b and c are under their tiers' limits, but the server is full: 503, from the first
         * deadline (no history yet). */
        assert_refused(quota, b, 1000, SBX_QUOTA_OVER_CAPACITY, 3);
        assert_refused(quota, c, 1000, SBX_QUOTA_OVER_CAPACITY, 3);
        assert_int_equal(sbx_quota_capacity_retry_after(quota, 1000), 3);
        /* a is at its own tier's limit too: that 429 comes first, from a's own executions. */
        assert_refused(quota, a, 1000, SBX_QUOTA_OVER_CONCURRENCY, 3);
        sbx_quota_free(quota);

        quota = sbx_quota_new(2);
        uint64_t ra = reserve_allowed(quota, a, 4000, 0);
        uint64_t rb = reserve_allowed(quota, b, 8000, 0);
        assert_refused(quota, c, 0, SBX_QUOTA_OVER_CAPACITY, 4);
        /* A release makes room at once; the run time seen so far (500 ms) is the estimate. */
        sbx_quota_release(quota, a, ra, true, 1, 500);
        uint64_t rc = reserve_allowed(quota, c, 6000, 600);
        assert_refused(quota, c, 700, SBX_QUOTA_OVER_CAPACITY, 1);
        sbx_quota_release(quota, b, rb, true, 1, 900);
        sbx_quota_release(quota, c, rc, true, 1, 900);
        /* Nothing in flight: room now, and an estimate of at least 1 s all the same. */
        assert_int_equal(sbx_quota_capacity_retry_after(quota, 1000), 1);
        reserve_allowed(quota, c, 6000, 1000);
        reserve_allowed(quota, c, 6000, 1000);
        sbx_quota_free(quota);
}

static void test_verdict_names(void **state)
{
        assert_string_equal(sbx_quota_verdict_name(SBX_QUOTA_ALLOWED), "allowed");
        assert_string_equal(sbx_quota_verdict_name(SBX_QUOTA_OVER_CONCURRENCY), "concurrency");
        assert_string_equal(sbx_quota_verdict_name(SBX_QUOTA_OVER_CPU_BUDGET), "cpu_budget");
        assert_string_equal(sbx_quota_verdict_name(SBX_QUOTA_OVER_CAPACITY), "capacity");
        sbx_quota_free(NULL);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_concurrency),
                cmocka_unit_test(test_cpu_budget),
                cmocka_unit_test(test_a_charge_without_a_reservation),
                cmocka_unit_test(test_budget_retry_needs_several_charges),
                cmocka_unit_test(test_charges_in_one_second_merge),
                cmocka_unit_test(test_both_limits),
                cmocka_unit_test(test_tenants_are_isolated),
                cmocka_unit_test(test_retry_after_follows_run_times),
                cmocka_unit_test(test_capacity),
                cmocka_unit_test(test_threads),
                cmocka_unit_test(test_verdict_names),
        };
        return cmocka_run_group_tests(tests, setup, teardown);
}
