/* Hostile payload (privilege): create namespaces through clone(2) and clone3(2), one flag at a
 * time and all together, including flag words with high bits set (the kernel reads clone's flags
 * as 32 bits, so a filter comparing 64 bits could be slipped past) and clone3 (whose flags live
 * in memory, out of seccomp's sight). A child that gets created exits at once. One JSON line per
 * attempt on stdout. */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/sched.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef CLONE_NEWTIME
#define CLONE_NEWTIME 0x00000080
#endif

static void report(const char *op, const char *flag, long ret, int err)
{
        if (ret < 0)
                printf("{\"op\": \"%s\", \"flags\": \"%s\", \"ret\": %ld, \"errno\": \"%s\"}\n", op,
                       flag, ret, strerrorname_np(err) ? strerrorname_np(err) : "UNKNOWN");
        else
                printf("{\"op\": \"%s\", \"flags\": \"%s\", \"ret\": %ld, \"errno\": null}\n", op,
                       flag, ret);
        fflush(stdout);
}

static const struct {
        const char *name;
        uint64_t flag;
} namespaces[] = {
        {"CLONE_NEWUSER", CLONE_NEWUSER},
        {"CLONE_NEWNS", CLONE_NEWNS},
        {"CLONE_NEWPID", CLONE_NEWPID},
        {"CLONE_NEWNET", CLONE_NEWNET},
        {"CLONE_NEWIPC", CLONE_NEWIPC},
        {"CLONE_NEWUTS", CLONE_NEWUTS},
        {"CLONE_NEWCGROUP", CLONE_NEWCGROUP},
        {"CLONE_NEWUSER|CLONE_NEWNS|CLONE_NEWPID|CLONE_NEWNET",
         CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET},
};

/* Reaps a child the call created (it _exits at once). */
static void reap(long pid)
{
        if (pid > 0)
                waitpid((pid_t)pid, NULL, __WALL);
}

static long raw_clone(uint64_t flags)
{
        /* No new stack: the child returns here like fork() and leaves straight away. */
        long r = syscall(SYS_clone, flags, 0, NULL, NULL, 0);
        if (r == 0)
                _exit(0);
        return r;
}

static long raw_clone3(uint64_t flags)
{
        struct clone_args args;
        memset(&args, 0, sizeof(args));
        args.flags = flags;
        args.exit_signal = SIGCHLD;
        long r = syscall(SYS_clone3, &args, sizeof(args));
        if (r == 0)
                _exit(0);
        return r;
}

int main(void)
{
        for (size_t i = 0; i < sizeof(namespaces) / sizeof(namespaces[0]); i++) {
                uint64_t flag = namespaces[i].flag;
                errno = 0;
                long r = raw_clone(flag | SIGCHLD);
                report("clone", namespaces[i].name, r, errno);
                reap(r);
                /* High bits the kernel drops: still the same request. */
                errno = 0;
                r = raw_clone(flag | SIGCHLD | (0xffffffffull << 32));
                report("clone", namespaces[i].name, r, errno);
                reap(r);
                errno = 0;
                r = raw_clone3(flag);
                report("clone3", namespaces[i].name, r, errno);
                reap(r);
        }
        /* CLONE_NEWTIME fits only clone3's 64-bit flags (in clone(2) it is an exit signal bit). */
        errno = 0;
        long r = raw_clone3(CLONE_NEWTIME);
        report("clone3", "CLONE_NEWTIME", r, errno);
        reap(r);
        /* For comparison, a plain fork must still work: the refusals above are not a broken
         * clone(2). */
        errno = 0;
        r = raw_clone(SIGCHLD);
        report("plain_fork", "SIGCHLD", r, errno);
        reap(r);
        return 0;
}
