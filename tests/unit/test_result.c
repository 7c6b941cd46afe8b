/* Unit tests for model/result.h: how a status is decided from what the supervisor saw and the
 * kernel's counters, the status names, and the documented exit codes of `sandboxd run`.
 *
 * The priority order under test (result.h, cli.md): output_limit > timeout (wall) > memory_limit
 * (oom_kills moved) > pids_limit (pids_max_events moved) > disk_full (scratch full or SIGXFSZ) >
 * timeout (SIGXCPU) > signaled > exit_nonzero > ok. Every pair of adjacent causes is tested
 * together, so swapping any two of them in sbx_classify fails a test. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "model/result.h"

#define MIB (1024ULL * 1024ULL)

/* The three inputs of sbx_classify, starting from a clean "exited 0, nothing hit" run. */
struct classify_case {
        struct sbx_run run;
        struct sbx_evidence evidence;
        struct sbx_limits limits;
};

static void case_init(struct classify_case *c)
{
        memset(c, 0, sizeof(*c));
        c->limits = (struct sbx_limits){
                .wall_ms = 10000,
                .cpu_ms = 10000,
                .memory_bytes = 256 * MIB,
                .pids = 64,
                .disk_bytes = 64 * MIB,
                .output_bytes = MIB,
                .open_files = 256,
                .cpu_millicores = 1000,
        };
        c->run.exited = true;
        c->run.exit_code = 0;
        c->run.signal = 0;
        sbx_buffer_init(&c->run.out, c->limits.output_bytes);
        sbx_buffer_init(&c->run.err, c->limits.output_bytes);
        /* A scratch tmpfs that is far from full. */
        c->run.disk_known = true;
        c->run.disk_used_bytes = 8192;
        c->run.disk_total_bytes = c->limits.disk_bytes;
        c->run.inodes_free = 10000;
        c->run.wall_us = 15000;
        c->evidence.cpu_usage_us = 12000;
        c->evidence.memory_peak_bytes = 5 * MIB;
}

static void set_killed(struct classify_case *c, int signal_number)
{
        c->run.exited = false;
        c->run.exit_code = -1;
        c->run.signal = signal_number;
}

static void set_exited(struct classify_case *c, int code)
{
        c->run.exited = true;
        c->run.exit_code = code;
        c->run.signal = 0;
}

static void set_scratch_full(struct classify_case *c)
{
        c->run.disk_known = true;
        c->run.disk_used_bytes = c->limits.disk_bytes;
        c->run.disk_total_bytes = c->limits.disk_bytes;
        c->run.inodes_free = 0;
}

static void set_output_limit(struct classify_case *c)
{
        c->run.output_limit = true;
        c->run.out.overflow = true;
        set_killed(c, SIGKILL);
}

static void set_wall_timeout(struct classify_case *c)
{
        c->run.wall_timeout = true;
        set_killed(c, SIGKILL);
}

static void set_oom_kill(struct classify_case *c)
{
        c->evidence.oom_kills = 1;
        c->evidence.memory_peak_bytes = c->limits.memory_bytes;
        set_killed(c, SIGKILL);
}

static void set_pids_max(struct classify_case *c)
{
        c->evidence.pids_max_events = 3198;
}

static enum sbx_status classify(const struct classify_case *c)
{
        return sbx_classify(&c->run, &c->evidence, &c->limits);
}

static void assert_status(const struct classify_case *c, enum sbx_status expected)
{
        enum sbx_status got = classify(c);
        if (got != expected)
                fail_msg("sbx_classify = %s, want %s", sbx_status_name(got),
                         sbx_status_name(expected));
}

static void test_names(void **state)
{
        assert_string_equal(sbx_status_name(SBX_STATUS_OK), "ok");
        assert_string_equal(sbx_status_name(SBX_STATUS_EXIT_NONZERO), "exit_nonzero");
        assert_string_equal(sbx_status_name(SBX_STATUS_SIGNALED), "signaled");
        assert_string_equal(sbx_status_name(SBX_STATUS_TIMEOUT), "timeout");
        assert_string_equal(sbx_status_name(SBX_STATUS_MEMORY_LIMIT), "memory_limit");
        assert_string_equal(sbx_status_name(SBX_STATUS_PIDS_LIMIT), "pids_limit");
        assert_string_equal(sbx_status_name(SBX_STATUS_OUTPUT_LIMIT), "output_limit");
        assert_string_equal(sbx_status_name(SBX_STATUS_DISK_FULL), "disk_full");
        assert_string_equal(sbx_status_name(SBX_STATUS_COMPILE_ERROR), "compile_error");
        assert_string_equal(sbx_status_name(SBX_STATUS_INTERNAL_ERROR), "internal_error");
}

static void test_ok(void **state)
{
        struct classify_case c;
        case_init(&c);
        assert_status(&c, SBX_STATUS_OK);
}

static void test_exit_nonzero(void **state)
{
        struct classify_case c;
        case_init(&c);
        set_exited(&c, 3);
        assert_status(&c, SBX_STATUS_EXIT_NONZERO);
        set_exited(&c, 255);
        assert_status(&c, SBX_STATUS_EXIT_NONZERO);
}

static void test_signaled(void **state)
{
        struct classify_case c;
        case_init(&c);
        set_killed(&c, SIGTERM);
        assert_status(&c, SBX_STATUS_SIGNALED);
        set_killed(&c, SIGSEGV);
        assert_status(&c, SBX_STATUS_SIGNALED);
        /* A SIGKILL nobody's cap explains (the program killed itself) is just a signal. */
        set_killed(&c, SIGKILL);
        assert_status(&c, SBX_STATUS_SIGNALED);
}

static void test_cpu_time_is_timeout(void **state)
{
        struct classify_case c;
        case_init(&c);
        set_killed(&c, SIGXCPU);
        assert_status(&c, SBX_STATUS_TIMEOUT);
}

static void test_cpu_hard_limit_kill_is_timeout(void **state)
{
        /* A program that catches SIGXCPU runs on to the hard limit and gets SIGKILL there; with
         * the CPU used at or past the cap that SIGKILL is the cpu-time limit, not a signal. */
        struct classify_case c;
        case_init(&c);
        c.limits.cpu_ms = 1000;
        c.evidence.cpu_usage_us = 2000 * 1000;
        set_killed(&c, SIGKILL);
        assert_status(&c, SBX_STATUS_TIMEOUT);
        /* Control: the same SIGKILL far below the CPU cap is just a signal. */
        c.evidence.cpu_usage_us = 100 * 1000;
        assert_status(&c, SBX_STATUS_SIGNALED);
}

static void test_sigxfsz_is_disk_full(void **state)
{
        struct classify_case c;
        case_init(&c);
        set_killed(&c, SIGXFSZ);
        assert_status(&c, SBX_STATUS_DISK_FULL);
}

static void test_scratch_full_is_disk_full(void **state)
{
        struct classify_case c;
        case_init(&c);
        set_scratch_full(&c);
        set_exited(&c, 1);
        assert_status(&c, SBX_STATUS_DISK_FULL);
        /* The cap's status wins over the exit code, also when the program shrugged it off. */
        set_exited(&c, 0);
        assert_status(&c, SBX_STATUS_DISK_FULL);
        set_killed(&c, SIGTERM);
        assert_status(&c, SBX_STATUS_DISK_FULL);
}

static void test_scratch_full_but_for_a_partial_page_is_disk_full(void **state)
{
        /* A writer that hit ENOSPC can leave the last page partly used: still full. */
        struct classify_case c;
        case_init(&c);
        set_scratch_full(&c);
        c.run.disk_used_bytes = c.limits.disk_bytes - 4096;
        c.run.inodes_free = 100;
        set_exited(&c, 1);
        assert_status(&c, SBX_STATUS_DISK_FULL);
}

static void test_scratch_unknown_or_roomy_is_not_disk_full(void **state)
{
        struct classify_case c;
        case_init(&c);
        set_exited(&c, 1);
        assert_status(&c, SBX_STATUS_EXIT_NONZERO);
        c.run.disk_known = false;
        c.run.disk_used_bytes = 0;
        c.run.disk_total_bytes = 0;
        c.run.inodes_free = 0;
        assert_status(&c, SBX_STATUS_EXIT_NONZERO);
}

static void test_memory_limit(void **state)
{
        struct classify_case c;
        case_init(&c);
        set_oom_kill(&c);
        assert_status(&c, SBX_STATUS_MEMORY_LIMIT);
        /* A child was OOM-killed and the program carried on and exited: still the cap. */
        set_exited(&c, 0);
        assert_status(&c, SBX_STATUS_MEMORY_LIMIT);
}

static void test_memory_pressure_without_kill_is_not_memory_limit(void **state)
{
        /* memory.events max / failcnt count reclaim at the limit, not kills: no evidence of a
         * cap that ended anything. */
        struct classify_case c;
        case_init(&c);
        c.evidence.memory_max_events = 42;
        c.evidence.memory_peak_bytes = c.limits.memory_bytes;
        assert_status(&c, SBX_STATUS_OK);
}

static void test_pids_limit(void **state)
{
        struct classify_case c;
        case_init(&c);
        set_pids_max(&c);
        assert_status(&c, SBX_STATUS_PIDS_LIMIT);
        set_exited(&c, 1);
        assert_status(&c, SBX_STATUS_PIDS_LIMIT);
}

static void test_output_limit_beats_everything(void **state)
{
        struct classify_case c;
        case_init(&c);
        set_output_limit(&c);
        assert_status(&c, SBX_STATUS_OUTPUT_LIMIT);
        set_wall_timeout(&c);
        set_oom_kill(&c);
        set_pids_max(&c);
        set_scratch_full(&c);
        c.run.output_limit = true;
        assert_status(&c, SBX_STATUS_OUTPUT_LIMIT);
}

static void test_wall_timeout_beats_memory(void **state)
{
        struct classify_case c;
        case_init(&c);
        set_wall_timeout(&c);
        assert_status(&c, SBX_STATUS_TIMEOUT);
        set_oom_kill(&c);
        set_pids_max(&c);
        set_scratch_full(&c);
        c.run.wall_timeout = true;
        assert_status(&c, SBX_STATUS_TIMEOUT);
}

static void test_memory_beats_pids(void **state)
{
        struct classify_case c;
        case_init(&c);
        set_pids_max(&c);
        set_scratch_full(&c);
        set_oom_kill(&c);
        assert_status(&c, SBX_STATUS_MEMORY_LIMIT);
}

static void test_pids_beats_disk(void **state)
{
        struct classify_case c;
        case_init(&c);
        set_scratch_full(&c);
        set_pids_max(&c);
        set_killed(&c, SIGXFSZ);
        assert_status(&c, SBX_STATUS_PIDS_LIMIT);
}

static void test_disk_beats_cpu_time(void **state)
{
        struct classify_case c;
        case_init(&c);
        set_scratch_full(&c);
        set_killed(&c, SIGXCPU);
        assert_status(&c, SBX_STATUS_DISK_FULL);
}

static void test_cpu_time_beats_plain_signal_and_exit(void **state)
{
        /* SIGXCPU is itself the signal: it must read as timeout, never as signaled. */
        struct classify_case c;
        case_init(&c);
        set_killed(&c, SIGXCPU);
        c.run.exit_code = -1;
        assert_status(&c, SBX_STATUS_TIMEOUT);
}

static void assert_cli_exit(enum sbx_status status, int exit_code, int signal_number, int expected)
{
        struct sbx_result result;
        memset(&result, 0, sizeof(result));
        result.status = status;
        result.exit_code = exit_code;
        result.signal = signal_number;
        int got = sbx_result_cli_exit_code(&result);
        if (got != expected)
                fail_msg("cli exit code for %s (exit %d, signal %d) = %d, want %d",
                         sbx_status_name(status), exit_code, signal_number, got, expected);
}

static void test_cli_exit_codes(void **state)
{
        assert_cli_exit(SBX_STATUS_OK, 0, 0, 0);
        assert_cli_exit(SBX_STATUS_EXIT_NONZERO, 3, 0, 3);
        assert_cli_exit(SBX_STATUS_EXIT_NONZERO, 1, 0, 1);
        assert_cli_exit(SBX_STATUS_EXIT_NONZERO, 255, 0, 255);
        assert_cli_exit(SBX_STATUS_SIGNALED, -1, SIGTERM, 128 + SIGTERM);
        assert_cli_exit(SBX_STATUS_SIGNALED, -1, SIGSEGV, 128 + SIGSEGV);
        assert_cli_exit(SBX_STATUS_SIGNALED, -1, SIGKILL, 137);
        assert_cli_exit(SBX_STATUS_TIMEOUT, -1, SIGKILL, 124);
        assert_cli_exit(SBX_STATUS_TIMEOUT, -1, SIGXCPU, 124);
        assert_cli_exit(SBX_STATUS_MEMORY_LIMIT, -1, SIGKILL, 125);
        assert_cli_exit(SBX_STATUS_MEMORY_LIMIT, 0, 0, 125);
        assert_cli_exit(SBX_STATUS_PIDS_LIMIT, 0, 0, 123);
        assert_cli_exit(SBX_STATUS_PIDS_LIMIT, 1, 0, 123);
        assert_cli_exit(SBX_STATUS_OUTPUT_LIMIT, -1, SIGKILL, 122);
        assert_cli_exit(SBX_STATUS_DISK_FULL, 1, 0, 121);
        assert_cli_exit(SBX_STATUS_DISK_FULL, -1, SIGXFSZ, 121);
        assert_cli_exit(SBX_STATUS_INTERNAL_ERROR, -1, 0, 70);
}

static void test_classify_then_exit_code(void **state)
{
        /* The two functions agree end to end: a classified run maps to its documented code. */
        struct classify_case c;
        case_init(&c);
        set_oom_kill(&c);
        struct sbx_result result;
        memset(&result, 0, sizeof(result));
        result.status = classify(&c);
        result.exit_code = c.run.exit_code;
        result.signal = c.run.signal;
        assert_int_equal(sbx_result_cli_exit_code(&result), 125);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_names),
                cmocka_unit_test(test_ok),
                cmocka_unit_test(test_exit_nonzero),
                cmocka_unit_test(test_signaled),
                cmocka_unit_test(test_cpu_time_is_timeout),
                cmocka_unit_test(test_cpu_hard_limit_kill_is_timeout),
                cmocka_unit_test(test_sigxfsz_is_disk_full),
                cmocka_unit_test(test_scratch_full_is_disk_full),
                cmocka_unit_test(test_scratch_full_but_for_a_partial_page_is_disk_full),
                cmocka_unit_test(test_scratch_unknown_or_roomy_is_not_disk_full),
                cmocka_unit_test(test_memory_limit),
                cmocka_unit_test(test_memory_pressure_without_kill_is_not_memory_limit),
                cmocka_unit_test(test_pids_limit),
                cmocka_unit_test(test_output_limit_beats_everything),
                cmocka_unit_test(test_wall_timeout_beats_memory),
                cmocka_unit_test(test_memory_beats_pids),
                cmocka_unit_test(test_pids_beats_disk),
                cmocka_unit_test(test_disk_beats_cpu_time),
                cmocka_unit_test(test_cpu_time_beats_plain_signal_and_exit),
                cmocka_unit_test(test_cli_exit_codes),
                cmocka_unit_test(test_classify_then_exit_code),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
