/* rlimit_plan: the limits, their order, and the arithmetic (zero = no cap, CPU rounding). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/resource.h>

#include <cmocka.h>

#include "sandbox/native/rlimit.h"

#define MIB (1024ull * 1024ull)

/* By value: cmocka's fail_msg() is not marked noreturn, so a pointer would look nullable. */
static struct rlimit find(const struct rlimit_setting *plan, size_t n, int resource)
{
        for (size_t i = 0; i < n; i++)
                if (plan[i].resource == resource)
                        return plan[i].value;
        fail_msg("resource %d not in the plan", resource);
        return (struct rlimit){0, 0};
}

static void test_order_and_names(void **state)
{
        (void)state;
        struct sbx_limits limits = {.open_files = 64};
        struct rlimit_setting plan[RLIMIT_PLAN_MAX];
        size_t n = rlimit_plan(&limits, plan);
        const int order[] = {RLIMIT_NOFILE, RLIMIT_FSIZE,      RLIMIT_CORE,     RLIMIT_STACK,
                             RLIMIT_NPROC,  RLIMIT_SIGPENDING, RLIMIT_MSGQUEUE, RLIMIT_CPU};
        assert_int_equal(n, sizeof(order) / sizeof(order[0]));
        assert_true(n <= RLIMIT_PLAN_MAX);
        for (size_t i = 0; i < n; i++) {
                assert_int_equal(plan[i].resource, order[i]);
                assert_non_null(plan[i].name);
                assert_true(strncmp(plan[i].name, "RLIMIT_", 7) == 0);
                assert_true(plan[i].value.rlim_cur <= plan[i].value.rlim_max);
        }
}

static void test_typical_limits(void **state)
{
        (void)state;
        struct sbx_limits limits = {
                .cpu_ms = 5000,
                .memory_bytes = 256 * MIB,
                .pids = 64,
                .disk_bytes = 64 * MIB,
                .open_files = 256,
        };
        struct rlimit_setting plan[RLIMIT_PLAN_MAX];
        size_t n = rlimit_plan(&limits, plan);

        const struct rlimit files = find(plan, n, RLIMIT_NOFILE);
        assert_int_equal(files.rlim_cur, 256);
        assert_int_equal(files.rlim_max, 256);
        const struct rlimit fsize = find(plan, n, RLIMIT_FSIZE);
        assert_int_equal(fsize.rlim_cur, 64 * MIB);
        assert_int_equal(fsize.rlim_max, 64 * MIB);
        const struct rlimit core = find(plan, n, RLIMIT_CORE);
        assert_int_equal(core.rlim_cur, 0);
        assert_int_equal(core.rlim_max, 0);
        const struct rlimit stack = find(plan, n, RLIMIT_STACK);
        assert_int_equal(stack.rlim_cur, 8 * MIB);
        assert_int_equal(stack.rlim_max, 256 * MIB);
        /* Above pids.max (64), so that the cgroup refuses first and leaves evidence. */
        const struct rlimit nproc = find(plan, n, RLIMIT_NPROC);
        assert_true(nproc.rlim_cur > 64);
        assert_true(nproc.rlim_cur <= 64 + 16);
        assert_int_equal(nproc.rlim_max, nproc.rlim_cur);
        /* Per-user kernel counters: a few queued signals, no message queues, whatever the
         * limits asked. */
        const struct rlimit sigpending = find(plan, n, RLIMIT_SIGPENDING);
        assert_int_equal(sigpending.rlim_cur, 1024);
        assert_int_equal(sigpending.rlim_max, 1024);
        const struct rlimit msgqueue = find(plan, n, RLIMIT_MSGQUEUE);
        assert_int_equal(msgqueue.rlim_cur, 0);
        assert_int_equal(msgqueue.rlim_max, 0);
        const struct rlimit cpu = find(plan, n, RLIMIT_CPU);
        assert_int_equal(cpu.rlim_cur, 5);
        assert_int_equal(cpu.rlim_max, 6);
}

static void test_zero_means_no_cap(void **state)
{
        (void)state;
        struct sbx_limits limits = {0};
        struct rlimit_setting plan[RLIMIT_PLAN_MAX];
        size_t n = rlimit_plan(&limits, plan);

        const int unlimited[] = {RLIMIT_NOFILE, RLIMIT_FSIZE, RLIMIT_NPROC, RLIMIT_CPU};
        for (size_t i = 0; i < sizeof(unlimited) / sizeof(unlimited[0]); i++) {
                const struct rlimit r = find(plan, n, unlimited[i]);
                assert_true(r.rlim_cur == RLIM_INFINITY);
                assert_true(r.rlim_max == RLIM_INFINITY);
        }
        const struct rlimit core = find(plan, n, RLIMIT_CORE);
        assert_int_equal(core.rlim_cur, 0);
        assert_int_equal(core.rlim_max, 0);
        const struct rlimit stack = find(plan, n, RLIMIT_STACK);
        assert_int_equal(stack.rlim_cur, 8 * MIB);
        assert_true(stack.rlim_max == RLIM_INFINITY);
}

static void test_cpu_rounds_up(void **state)
{
        (void)state;
        const struct {
                uint64_t cpu_ms;
                rlim_t soft;
        } cases[] = {
                {1, 1}, {999, 1}, {1000, 1}, {1001, 2}, {1500, 2}, {2000, 2}, {60001, 61},
        };
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                struct sbx_limits limits = {.cpu_ms = cases[i].cpu_ms};
                struct rlimit_setting plan[RLIMIT_PLAN_MAX];
                size_t n = rlimit_plan(&limits, plan);
                const struct rlimit cpu = find(plan, n, RLIMIT_CPU);
                assert_int_equal(cpu.rlim_cur, cases[i].soft);
                assert_int_equal(cpu.rlim_max, cases[i].soft + 1);
        }
}

static void test_cpu_does_not_overflow(void **state)
{
        (void)state;
        struct sbx_limits limits = {.cpu_ms = UINT64_MAX};
        struct rlimit_setting plan[RLIMIT_PLAN_MAX];
        size_t n = rlimit_plan(&limits, plan);
        const struct rlimit cpu = find(plan, n, RLIMIT_CPU);
        assert_int_equal(cpu.rlim_cur, UINT64_MAX / 1000 + 1);
        assert_true(cpu.rlim_max > cpu.rlim_cur);
}

static void test_stack_hard_is_at_least_soft(void **state)
{
        (void)state;
        struct sbx_limits limits = {.memory_bytes = 1 * MIB};
        struct rlimit_setting plan[RLIMIT_PLAN_MAX];
        size_t n = rlimit_plan(&limits, plan);
        const struct rlimit stack = find(plan, n, RLIMIT_STACK);
        assert_int_equal(stack.rlim_cur, 8 * MIB);
        assert_int_equal(stack.rlim_max, 8 * MIB);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_order_and_names),
                cmocka_unit_test(test_typical_limits),
                cmocka_unit_test(test_zero_means_no_cap),
                cmocka_unit_test(test_cpu_rounds_up),
                cmocka_unit_test(test_cpu_does_not_overflow),
                cmocka_unit_test(test_stack_hard_is_at_least_soft),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
