/* Hostile payload (privilege): reach into other processes. ptrace (attach, seize, traceme),
 * process_vm_readv and pidfd_getfd against the sandbox's init (pid 1), against a child of our
 * own, and against every pid given as an argument (the harness passes a host pid that must not
 * even exist here). One JSON line per attempt on stdout. */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

static void report(const char *op, long pid, long ret, int err)
{
        if (ret < 0)
                printf("{\"op\": \"%s\", \"pid\": %ld, \"ret\": %ld, \"errno\": \"%s\"}\n", op, pid,
                       ret, strerrorname_np(err) ? strerrorname_np(err) : "UNKNOWN");
        else
                printf("{\"op\": \"%s\", \"pid\": %ld, \"ret\": %ld, \"errno\": null}\n", op, pid,
                       ret);
        fflush(stdout);
}

static char secret[64] = "not the payload's own memory";

static void attack(pid_t pid)
{
        errno = 0;
        long r = ptrace(PTRACE_ATTACH, pid, NULL, NULL);
        report("ptrace_attach", pid, r, errno);
        if (r == 0) {
                waitpid(pid, NULL, __WALL);
                ptrace(PTRACE_DETACH, pid, NULL, NULL);
        }
        errno = 0;
        r = ptrace(PTRACE_SEIZE, pid, NULL, NULL);
        report("ptrace_seize", pid, r, errno);
        if (r == 0) {
                ptrace(PTRACE_INTERRUPT, pid, NULL, NULL);
                waitpid(pid, NULL, __WALL);
                ptrace(PTRACE_DETACH, pid, NULL, NULL);
        }

        /* The child is a fork: `secret` sits at the same address there. */
        char buf[sizeof(secret)];
        struct iovec local = {buf, sizeof(buf)}, remote = {secret, sizeof(secret)};
        errno = 0;
        r = process_vm_readv(pid, &local, 1, &remote, 1, 0);
        report("process_vm_readv", pid, r, errno);
        errno = 0;
        r = process_vm_writev(pid, &local, 1, &remote, 1, 0);
        report("process_vm_writev", pid, r, errno);

        errno = 0;
        long pidfd = syscall(SYS_pidfd_open, pid, 0);
        int open_errno = errno;
        if (pidfd < 0) {
                /* No pidfd, no theft: the reason counts for pidfd_getfd too. */
                report("pidfd_getfd", pid, -1, open_errno);
                return;
        }
        for (int target = 0; target <= 2; target++) { /* the stdio every process holds */
                errno = 0;
                r = syscall(SYS_pidfd_getfd, (int)pidfd, target, 0);
                report("pidfd_getfd", pid, r, errno);
                if (r >= 0)
                        close((int)r);
        }
        close((int)pidfd);
}

int main(int argc, char **argv)
{
        strcpy(secret, "the child's secret");
        pid_t child = fork();
        if (child == 0) {
                pause();
                _exit(0);
        }
        attack(1);
        attack(child);
        for (int i = 1; i < argc; i++)
                attack((pid_t)strtol(argv[i], NULL, 10));

        /* The other direction: a child offering itself to its parent. */
        pid_t tracee = fork();
        if (tracee == 0) {
                errno = 0;
                long r = ptrace(PTRACE_TRACEME, 0, NULL, NULL);
                report("ptrace_traceme", getpid(), r, errno);
                _exit(0);
        }
        waitpid(tracee, NULL, 0);
        kill(child, SIGKILL);
        waitpid(child, NULL, 0);
        return 0;
}
