/* Hostile payload (privilege): gain privilege through exec. Checks the program's own credentials
 * (NoNewPrivs must be 1; the sandbox's root holds exactly its small set, caps.h
 * CAPS_ROOT_SET_MASK, in permitted, effective and bounding, nothing inheritable or ambient), then
 * execs every setuid/setgid binary of the runtime and reads the new process's credentials while
 * it is still alive (its output goes to a pipe that is already full, so it blocks on its first
 * write), then tries to give a binary file capabilities (security.capability) and exec that.
 * No exec may change the ids or add a capability. One JSON line per attempt on stdout. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

struct creds {
        bool found;
        char name[64];
        unsigned long uid[4], gid[4];
        unsigned long long cap_inh, cap_prm, cap_eff, cap_bnd, cap_amb;
        int no_new_privs;
};

static bool read_creds(pid_t pid, struct creds *c)
{
        char path[64];
        snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
        FILE *f = fopen(path, "re");
        memset(c, 0, sizeof(*c));
        c->no_new_privs = -1;
        if (f == NULL)
                return false;
        char line[256];
        while (fgets(line, sizeof(line), f)) {
                sscanf(line, "Name:\t%63s", c->name);
                sscanf(line, "Uid:\t%lu\t%lu\t%lu\t%lu", &c->uid[0], &c->uid[1], &c->uid[2],
                       &c->uid[3]);
                sscanf(line, "Gid:\t%lu\t%lu\t%lu\t%lu", &c->gid[0], &c->gid[1], &c->gid[2],
                       &c->gid[3]);
                sscanf(line, "CapInh:\t%llx", &c->cap_inh);
                sscanf(line, "CapPrm:\t%llx", &c->cap_prm);
                sscanf(line, "CapEff:\t%llx", &c->cap_eff);
                sscanf(line, "CapBnd:\t%llx", &c->cap_bnd);
                sscanf(line, "CapAmb:\t%llx", &c->cap_amb);
                sscanf(line, "NoNewPrivs:\t%d", &c->no_new_privs);
        }
        fclose(f);
        c->found = true;
        return true;
}

/* caps.h CAPS_ROOT_SET_MASK: CHOWN, DAC_OVERRIDE, FOWNER, KILL, SETGID, SETUID. */
#define ROOT_SET 0xebULL

/* "ROOT_SET": exactly the sandbox root's set and no way to more; "EMPTY": nothing at all;
 * anything else is "HELD". */
static const char *caps_verdict(const struct creds *c)
{
        if (c->cap_inh != 0 || c->cap_amb != 0)
                return "HELD";
        if (c->cap_prm == 0 && c->cap_eff == 0 && c->cap_bnd == 0)
                return "EMPTY";
        if (c->cap_prm == ROOT_SET && c->cap_eff == ROOT_SET && c->cap_bnd == ROOT_SET)
                return "ROOT_SET";
        return "HELD";
}

/* Whether c holds a capability that before does not, in any set. */
static bool caps_beyond(const struct creds *c, const struct creds *before)
{
        return (c->cap_inh & ~before->cap_inh) != 0 || (c->cap_prm & ~before->cap_prm) != 0 ||
               (c->cap_eff & ~before->cap_prm) != 0 || (c->cap_bnd & ~before->cap_bnd) != 0 ||
               (c->cap_amb & ~before->cap_amb) != 0;
}

static void print_creds(const char *op, const char *target, const char *verdict,
                        const struct creds *c)
{
        printf("{\"op\": \"%s\", \"target\": \"%s\", \"ret\": 0, \"errno\": \"%s\", \"name\": "
               "\"%s\", \"uid\": [%lu, %lu, %lu, %lu], \"gid\": [%lu, %lu, %lu, %lu], "
               "\"CapInh\": \"%llx\", \"CapPrm\": \"%llx\", \"CapEff\": \"%llx\", "
               "\"CapBnd\": \"%llx\", \"CapAmb\": \"%llx\", \"NoNewPrivs\": %d}\n",
               op, target, verdict, c->name, c->uid[0], c->uid[1], c->uid[2], c->uid[3], c->gid[0],
               c->gid[1], c->gid[2], c->gid[3], c->cap_inh, c->cap_prm, c->cap_eff, c->cap_bnd,
               c->cap_amb, c->no_new_privs);
        fflush(stdout);
}

static void report(const char *op, const char *target, long ret, int err)
{
        if (ret < 0)
                printf("{\"op\": \"%s\", \"target\": \"%s\", \"ret\": %ld, \"errno\": \"%s\"}\n",
                       op, target, ret, strerrorname_np(err) ? strerrorname_np(err) : "UNKNOWN");
        else
                printf("{\"op\": \"%s\", \"target\": \"%s\", \"ret\": %ld, \"errno\": null}\n", op,
                       target, ret);
        fflush(stdout);
}

static struct creds self;

/* "UNCHANGED": same uid/gid as before the exec, no capability the payload did not hold itself,
 * NoNewPrivs still set. */
static const char *judge(const struct creds *c)
{
        if (!c->found)
                return "HIDDEN"; /* our own child, yet invisible: its credentials changed */
        for (int i = 0; i < 4; i++)
                if (c->uid[i] != self.uid[i] || c->gid[i] != self.gid[i])
                        return "ESCALATED";
        /* No NoNewPrivs line (gVisor's status): the payload's own, which every exec inherits
         * and nothing can clear. */
        int no_new_privs = c->no_new_privs >= 0 ? c->no_new_privs : self.no_new_privs;
        if (caps_beyond(c, &self) || no_new_privs != 1)
                return "ESCALATED";
        return "UNCHANGED";
}

static void sleep_ms(long ms)
{
        struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
        nanosleep(&ts, NULL);
}

/* Starts `path arg` with stdout and stderr on a full pipe, so that it blocks on its first write,
 * reads its credentials once the exec has happened, kills it. */
static void exec_and_inspect(const char *op, const char *path, const char *arg)
{
        int p[2], exec_status[2];
        if (pipe2(p, O_CLOEXEC) < 0 || pipe2(exec_status, O_CLOEXEC) < 0) {
                report(op, path, -1, errno);
                return;
        }
        fcntl(p[1], F_SETFL, O_NONBLOCK);
        static char junk[4096];
        while (write(p[1], junk, sizeof(junk)) > 0)
                ;
        /* Whatever fits in the last partial page too: the next write of any size must block. */
        while (write(p[1], junk, 1) > 0)
                ;
        fcntl(p[1], F_SETFL, 0);

        pid_t child = fork();
        if (child == 0) {
                dup2(p[1], STDOUT_FILENO);
                dup2(p[1], STDERR_FILENO);
                int null = open("/dev/null", O_RDONLY);
                if (null >= 0)
                        dup2(null, STDIN_FILENO);
                execl(path, path, arg, (char *)NULL);
                int err = errno;
                (void)!write(exec_status[1], &err, sizeof(err));
                _exit(127);
        }
        close(p[1]);
        close(exec_status[1]);
        /* EOF: the exec happened (the pipe is close-on-exec); an int: why it did not. */
        int exec_errno = 0;
        ssize_t got = read(exec_status[0], &exec_errno, sizeof(exec_errno));
        close(exec_status[0]);
        if (got == (ssize_t)sizeof(exec_errno)) {
                report(op, path, -1, exec_errno);
                waitpid(child, NULL, 0);
                close(p[0]);
                return;
        }

        struct creds c = {0};
        const char *verdict = "EXITED"; /* left before it could be looked at: nothing proved */
        const char *reported_op = op;
        for (int tries = 0; tries < 200; tries++) { /* up to 2 s */
                int status;
                if (waitpid(child, &status, WNOHANG) == child) {
                        child = -1;
                        break;
                }
                if (read_creds(child, &c) || tries == 199) {
                        verdict = judge(&c);
                        break;
                }
                sleep_ms(10);
        }
        if (child > 0 && strcmp(verdict, "HIDDEN") == 0) {
                /* hidepid=invisible hides a process we may not ptrace. That happens when its
                 * credentials changed, and also when it makes itself non-dumpable (ssh-agent does,
                 * at start, against debuggers). kill(0) tells them apart for the uids: it works
                 * only while the target's real or saved uid is still ours. Capabilities cannot
                 * be checked this way: capability_sets (the bounding set: what any exec could
                 * grant) covers them. */
                if (kill(child, 0) == 0) {
                        verdict = "UNOBSERVABLE_SAME_UID";
                        reported_op = "setid_exec_unobservable";
                } else
                        verdict = "ESCALATED";
        }
        print_creds(reported_op, path, verdict, &c);
        if (child > 0) {
                kill(child, SIGKILL);
                waitpid(child, NULL, 0);
        }
        close(p[0]);
}

static void scan_setid(const char *dir)
{
        DIR *d = opendir(dir);
        if (d == NULL)
                return;
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
                char path[512];
                snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
                struct stat st;
                if (lstat(path, &st) < 0 || !S_ISREG(st.st_mode))
                        continue;
                if (st.st_mode & (S_ISUID | S_ISGID))
                        exec_and_inspect("setid_exec", path, "--help");
        }
        closedir(d);
}

/* A VFS_CAP_REVISION_2 xattr granting CAP_SETUID, CAP_SETGID, CAP_SYS_ADMIN (permitted and
 * effective). */
static void try_file_caps(void)
{
        const char *copy = "/workspace/filecap-helper";
        int in = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
        int out = open(copy, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0755);
        if (in < 0 || out < 0) {
                report("copy_self", copy, -1, errno);
                return;
        }
        char buf[65536];
        ssize_t n;
        while ((n = read(in, buf, sizeof(buf))) > 0)
                if (write(out, buf, (size_t)n) != n)
                        break;
        close(in);
        close(out);

        struct vfs_cap_data cap = {0};
        cap.magic_etc = VFS_CAP_REVISION_2 | VFS_CAP_FLAGS_EFFECTIVE;
        cap.data[0].permitted = (1u << CAP_SETUID) | (1u << CAP_SETGID) | (1u << CAP_SYS_ADMIN);
        errno = 0;
        long r = setxattr(copy, "security.capability", &cap, XATTR_CAPS_SZ_2, 0);
        report("setxattr_security_capability", copy, r, errno);
        /* Whether or not the xattr landed: the exec must not gain anything. */
        exec_and_inspect("filecap_exec", copy, "--wait-for-inspection");

        /* The setuid bit on our own file (root's, inside): the scratch tmpfs is nosuid, and
         * no_new_privs holds, so the exec must still change nothing. */
        errno = 0;
        r = chmod(copy, 06755);
        report("chmod_setuid", copy, r, errno);
        exec_and_inspect("own_setuid_exec", copy, "--wait-for-inspection");
}

int main(int argc, char **argv)
{
        if (argc > 1 && strcmp(argv[1], "--wait-for-inspection") == 0) {
                /* As the exec'd helper: block on the full pipe like the setuid binaries do. */
                for (;;)
                        if (write(STDOUT_FILENO, "x", 1) < 0)
                                _exit(1);
        }
        signal(SIGPIPE, SIG_IGN);
        read_creds(getpid(), &self);
        /* A kernel whose status has no NoNewPrivs line (gVisor's): the flag from prctl. An exec'd
         * child without the line has the payload's (see judge). */
        if (self.no_new_privs < 0)
                self.no_new_privs = prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0);
        printf("{\"op\": \"no_new_privs\", \"ret\": %d, \"errno\": \"%s\"}\n", self.no_new_privs,
               self.no_new_privs == 1 ? "SET" : "CLEAR");
        print_creds("capability_sets", "self", caps_verdict(&self), &self);
        scan_setid("/usr/bin");
        scan_setid("/usr/sbin");
        scan_setid("/usr/lib/openssh");
        scan_setid("/usr/lib/dbus-1.0");
        try_file_caps();
        return 0;
}
