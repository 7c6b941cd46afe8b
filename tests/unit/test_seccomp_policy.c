/* The seccomp policy table: complete, resolvable, without duplicates, every row explained; the
 * filter builds; and, loaded in a throwaway child, it answers with the policy's errnos and kills
 * foreign system call ABIs. Loading needs no privilege (NO_NEW_PRIVS), so this runs as any user. */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/personality.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <seccomp.h>

#include "sandbox/native/seccomp_build.h"

static const char *const required_refused[] = {
        "unshare",
        "setns",
        "mount",
        "umount2",
        "pivot_root",
        "chroot",
        "open_tree",
        "move_mount",
        "fsopen",
        "fsconfig",
        "fsmount",
        "fspick",
        "mount_setattr",
        "io_uring_setup",
        "io_uring_enter",
        "io_uring_register",
        "bpf",
        "perf_event_open",
        "userfaultfd",
        "keyctl",
        "add_key",
        "request_key",
        "ptrace",
        "process_vm_readv",
        "process_vm_writev",
        "pidfd_getfd",
        "kcmp",
        "settimeofday",
        "clock_settime",
        "clock_adjtime",
        "adjtimex",
        "open_by_handle_at",
        "name_to_handle_at",
        "kexec_load",
        "kexec_file_load",
        "init_module",
        "finit_module",
        "delete_module",
        "reboot",
        "swapon",
        "swapoff",
        "acct",
        "quotactl",
        "quotactl_fd",
        "syslog",
        "lookup_dcookie",
        "vhangup",
        "iopl",
        "ioperm",
};

static const struct seccomp_rule *find_rule(const char *syscall, enum seccomp_match match,
                                            unsigned arg, uint64_t mask, uint64_t value)
{
        for (size_t i = 0; i < seccomp_policy_len; i++) {
                const struct seccomp_rule *r = &seccomp_policy[i];
                if (strcmp(r->syscall, syscall) != 0 || r->match != match)
                        continue;
                if (match == SECCOMP_MATCH_ALWAYS)
                        return r;
                if (r->arg == arg && r->value == value &&
                    (match != SECCOMP_MATCH_ARG_MASKED_EQ || r->mask == mask))
                        return r;
        }
        return NULL;
}

static void test_every_rule_is_explained_and_valid(void **state)
{
        (void)state;
        assert_true(seccomp_policy_len > 0);
        for (size_t i = 0; i < seccomp_policy_len; i++) {
                const struct seccomp_rule *r = &seccomp_policy[i];
                assert_non_null(r->syscall);
                assert_true(r->syscall[0] != '\0');
                assert_non_null(r->reason);
                assert_true(strlen(r->reason) >= 10);
                /* The kernel caps SECCOMP_RET_ERRNO data at MAX_ERRNO. */
                assert_in_range(r->errnum, 1, 4095);
                assert_true(r->errnum == EPERM || r->errnum == ENOSYS ||
                            r->errnum == EAFNOSUPPORT || r->errnum == EACCES);
                assert_in_range(r->match, SECCOMP_MATCH_ALWAYS, SECCOMP_MATCH_ARG_GT);
                if (r->match != SECCOMP_MATCH_ALWAYS)
                        assert_in_range(r->arg, 0, 5);
                if (r->match == SECCOMP_MATCH_ARG_MASKED_EQ) {
                        assert_true(r->mask != 0);
                        /* A value with bits outside the mask could never match. */
                        assert_true((r->value & ~r->mask) == 0);
                }
        }
}

static void test_required_calls_are_refused(void **state)
{
        (void)state;
        for (size_t i = 0; i < sizeof(required_refused) / sizeof(required_refused[0]); i++) {
                const struct seccomp_rule *r =
                        find_rule(required_refused[i], SECCOMP_MATCH_ALWAYS, 0, 0, 0);
                if (r == NULL)
                        fail_msg("%s is not refused unconditionally", required_refused[i]);
                else
                        assert_int_equal(r->errnum, EPERM);
        }
        const struct seccomp_rule *clone3 = find_rule("clone3", SECCOMP_MATCH_ALWAYS, 0, 0, 0);
        assert_non_null(clone3);
        if (clone3 != NULL)
                assert_int_equal(clone3->errnum, ENOSYS);

        const uint64_t namespace_flags[] = {CLONE_NEWUSER,   CLONE_NEWNS,  CLONE_NEWPID,
                                            CLONE_NEWNET,    CLONE_NEWIPC, CLONE_NEWUTS,
                                            CLONE_NEWCGROUP, CLONE_NEWTIME};
        for (size_t i = 0; i < sizeof(namespace_flags) / sizeof(namespace_flags[0]); i++)
                assert_non_null(find_rule("clone", SECCOMP_MATCH_ARG_MASKED_EQ, 0,
                                          namespace_flags[i], namespace_flags[i]));

        assert_non_null(find_rule("ioctl", SECCOMP_MATCH_ARG_MASKED_EQ, 1, 0xffffffffu, TIOCSTI));
        assert_non_null(find_rule("ioctl", SECCOMP_MATCH_ARG_MASKED_EQ, 1, 0xffffffffu, TIOCLINUX));

        const char *const socket_calls[] = {"socket", "socketpair"};
        for (size_t c = 0; c < 2; c++) {
                assert_non_null(find_rule(socket_calls[c], SECCOMP_MATCH_ARG_GT, 0, 0, AF_INET6));
                for (uint64_t family = 0; family < AF_INET6; family++) {
                        if (family == AF_UNIX || family == AF_INET)
                                continue;
                        if (find_rule(socket_calls[c], SECCOMP_MATCH_ARG_EQ, 0, 0, family) == NULL)
                                fail_msg("%s family %llu is not refused", socket_calls[c],
                                         (unsigned long long)family);
                }
        }
}

static void test_no_duplicate_rows(void **state)
{
        (void)state;
        for (size_t i = 0; i < seccomp_policy_len; i++)
                for (size_t j = i + 1; j < seccomp_policy_len; j++) {
                        const struct seccomp_rule *a = &seccomp_policy[i], *b = &seccomp_policy[j];
                        if (strcmp(a->syscall, b->syscall) == 0 && a->match == b->match &&
                            a->arg == b->arg && a->mask == b->mask && a->value == b->value)
                                fail_msg("rows %zu and %zu are the same rule for %s", i, j,
                                         a->syscall);
                }
}

/* When a call matches rows that test different arguments, libseccomp does not define which row
 * answers: the policy's errno is only well defined if all rows of one syscall share it. */
static void test_one_errno_per_syscall(void **state)
{
        (void)state;
        for (size_t i = 0; i < seccomp_policy_len; i++)
                for (size_t j = i + 1; j < seccomp_policy_len; j++) {
                        const struct seccomp_rule *a = &seccomp_policy[i], *b = &seccomp_policy[j];
                        if (strcmp(a->syscall, b->syscall) == 0 && a->errnum != b->errnum)
                                fail_msg("%s answers both %d and %d", a->syscall, a->errnum,
                                         b->errnum);
                }
}

static void test_every_name_resolves(void **state)
{
        (void)state;
        for (size_t i = 0; i < seccomp_policy_len; i++) {
                int nr = seccomp_syscall_resolve_name(seccomp_policy[i].syscall);
                if (nr == __NR_SCMP_ERROR)
                        fail_msg("libseccomp does not know %s", seccomp_policy[i].syscall);
#ifdef __x86_64__
                /* Every call in the table exists on x86_64: no pseudo-syscall numbers. */
                assert_true(nr >= 0);
#endif
        }
}

static void test_filter_builds(void **state)
{
        (void)state;
        scmp_filter_ctx ctx = NULL;
        struct sbx_error err = {0};
        if (seccomp_build(&ctx, SECCOMP_PROFILE_PROGRAM, &err) < 0)
                fail_msg("seccomp_build: %s", err.message);
        assert_non_null(ctx);
        seccomp_release(ctx);
}

/* Runs check() in a child under the profile's loaded filter; returns its wait status. */
static int run_filtered_as(enum seccomp_profile profile, int (*check)(void))
{
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
                /* SIGSYS dumps core by default: not into the test's directory. */
                setrlimit(RLIMIT_CORE, &(struct rlimit){0, 0});
                struct sbx_error err = {0};
                if (seccomp_apply(profile, &err) < 0)
                        _exit(100);
                _exit(check());
        }
        int status = 0;
        assert_int_equal(waitpid(pid, &status, 0), pid);
        return status;
}

static int run_filtered(int (*check)(void))
{
        return run_filtered_as(SECCOMP_PROFILE_PROGRAM, check);
}

/* Each check returns 0 or the (1-based) number of the first expectation that failed. */
static int expect_errno(long ret, int errnum)
{
        return ret == -1 && errno == errnum;
}

static int check_policy_errnos(void)
{
        int step = 0;
        step++;
        if (!expect_errno(unshare(CLONE_NEWUSER), EPERM))
                return step;
        step++;
        if (!expect_errno(syscall(SYS_mount, "none", "/", "tmpfs", 0, NULL), EPERM))
                return step;
        step++;
        if (!expect_errno(socket(AF_NETLINK, SOCK_RAW, 0), EAFNOSUPPORT))
                return step;
        step++;
        if (!expect_errno(socket(AF_PACKET, SOCK_RAW, 0), EAFNOSUPPORT))
                return step;
        step++;
        if (!expect_errno(syscall(SYS_socket, 0x100000000L | AF_NETLINK, SOCK_DGRAM, 0),
                          EAFNOSUPPORT))
                return step;
        step++;
        if (!expect_errno(socket(AF_INET, SOCK_PACKET, 0), EAFNOSUPPORT))
                return step;
        step++;
        if (!expect_errno(socket(AF_INET, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_ICMP), EAFNOSUPPORT))
                return step;
        step++;
        step++;
        if (!expect_errno(ioctl(0, TIOCSTI, "x"), EPERM))
                return step;
        step++;
        if (!expect_errno(syscall(SYS_ioctl, 0, (unsigned long)TIOCSTI | (1ul << 32), "x"), EPERM))
                return step;
        step++;
        if (!expect_errno(syscall(SYS_clone, CLONE_NEWNS | SIGCHLD, 0, 0, 0, 0), EPERM))
                return step;
        step++;
        if (!expect_errno(syscall(SYS_clone3, NULL, 0), ENOSYS))
                return step;
        step++;
        if (!expect_errno(personality(ADDR_NO_RANDOMIZE), EPERM))
                return step;
        step++;
        if (!expect_errno(syscall(SYS_personality, 0xfffffffeul), EPERM))
                return step;
        step++;
        if (personality(0xffffffff) < 0 || personality(PER_LINUX) < 0)
                return step;
        step++;
        pid_t child = fork(); /* glibc's clone3 meets ENOSYS and falls back to clone */
        if (child < 0)
                return step;
        if (child == 0)
                _exit(0);
        int status;
        if (waitpid(child, &status, 0) != child || !WIFEXITED(status))
                return step;
        return 0;
}

static void test_loaded_filter_answers_with_policy_errnos(void **state)
{
        (void)state;
        int status = run_filtered(check_policy_errnos);
        assert_true(WIFEXITED(status));
        if (WEXITSTATUS(status) != 0)
                fail_msg("expectation %d failed under the filter", WEXITSTATUS(status));
}

#ifdef __x86_64__
static int call_x32_getpid(void)
{
        syscall(0x40000000 | SYS_getpid);
        return 0;
}

static int call_int80_getpid(void)
{
        long ret;
        /* eax 20 is getpid in the i386 table. */
        __asm__ volatile("int $0x80" : "=a"(ret) : "a"(20L) : "memory");
        return 0;
}

/* Whether this kernel runs `int $0x80` at all: without the i386 ABI (CONFIG_IA32_EMULATION off,
 * or ia32_emulation=0 on its command line) the instruction faults before any filter sees it. */
static bool kernel_runs_int80(void)
{
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
                setrlimit(RLIMIT_CORE, &(struct rlimit){0, 0});
                /* The fault must end this child, not reach cmocka's handler, which would go on
                 * running the rest of the tests in it and print a failure of its own. */
                signal(SIGSEGV, SIG_DFL);
                _exit(call_int80_getpid());
        }
        int status = 0;
        assert_int_equal(waitpid(pid, &status, 0), pid);
        return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

static void test_foreign_abis_are_killed(void **state)
{
        (void)state;
        int status = run_filtered(call_x32_getpid);
        assert_true(WIFSIGNALED(status));
        assert_int_equal(WTERMSIG(status), SIGSYS);

        if (!kernel_runs_int80()) {
                printf("SKIP int $0x80 under the filter: this kernel has no i386 ABI (the "
                       "instruction faults without a filter too)\n");
                return;
        }
        status = run_filtered(call_int80_getpid);
        assert_true(WIFSIGNALED(status));
        assert_int_equal(WTERMSIG(status), SIGSYS);
}
#endif

/* The uml backend's kernel (src/sandbox/uml/uml.c) gets every row but those it needs: ptrace
 * only, whose refusal would stop it running its guest's processes. */
static void test_the_uml_kernel_profile_leaves_out_ptrace_only(void **state)
{
        (void)state;
        size_t left_out = 0;
        for (size_t i = 0; i < seccomp_policy_len; i++)
                if (seccomp_policy[i].uml_kernel_needs) {
                        assert_string_equal(seccomp_policy[i].syscall, "ptrace");
                        left_out++;
                }
        assert_int_equal(left_out, 1);
        assert_true(seccomp_compiled_length_uml_kernel > 0);
        assert_true(seccomp_compiled_length_uml_kernel <= seccomp_compiled_length);
}

static int check_ptrace_refused(void)
{
        return expect_errno(ptrace(PTRACE_TRACEME, 0, NULL, NULL), EPERM) ? 0 : 1;
}

/* The same call, under each profile: refused by the program's filter, let through by the UML
 * kernel's (PTRACE_TRACEME succeeds for a child of a test runner nobody traces), and the rest of
 * the policy still in force there. */
static int check_uml_kernel_answers(void)
{
        if (ptrace(PTRACE_TRACEME, 0, NULL, NULL) != 0)
                return 1;
        if (!expect_errno(unshare(CLONE_NEWUSER), EPERM))
                return 2;
        if (!expect_errno(syscall(SYS_mount, "none", "/", "tmpfs", 0, NULL), EPERM))
                return 3;
        return 0;
}

static void test_the_uml_kernel_profile_lets_ptrace_through(void **state)
{
        (void)state;
        int status = run_filtered_as(SECCOMP_PROFILE_PROGRAM, check_ptrace_refused);
        assert_true(WIFEXITED(status));
        assert_int_equal(WEXITSTATUS(status), 0);
        status = run_filtered_as(SECCOMP_PROFILE_UML_KERNEL, check_uml_kernel_answers);
        assert_true(WIFEXITED(status));
        assert_int_equal(WEXITSTATUS(status), 0);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_every_rule_is_explained_and_valid),
                cmocka_unit_test(test_required_calls_are_refused),
                cmocka_unit_test(test_no_duplicate_rows),
                cmocka_unit_test(test_one_errno_per_syscall),
                cmocka_unit_test(test_every_name_resolves),
                cmocka_unit_test(test_filter_builds),
                cmocka_unit_test(test_the_uml_kernel_profile_leaves_out_ptrace_only),
                cmocka_unit_test(test_the_uml_kernel_profile_lets_ptrace_through),
                cmocka_unit_test(test_loaded_filter_answers_with_policy_errnos),
#ifdef __x86_64__
                cmocka_unit_test(test_foreign_abis_are_killed),
#endif
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
