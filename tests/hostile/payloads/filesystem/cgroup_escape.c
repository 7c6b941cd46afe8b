/* Hostile payload (filesystem): escape or loosen the cgroup. Reads /proc/self/cgroup (the
 * namespace root must be "/"), writes its own limits through every path a cgroup filesystem could
 * be reached by (/sys/fs/cgroup/..., a fresh cgroup2 or cgroup v1 mount in /tmp), and then
 * CVE-2022-0492: unshare a user + mount + cgroup namespace, mount the v1 memory / rdma hierarchy
 * and write release_agent and notify_on_release. Every write puts back the value it read (or
 * nothing), so that even an accepted write would change nothing. One JSON line per attempt. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

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

/* Opens for writing and writes back what the file held (at most one line): permission is what
 * is tested. */
static void write_back(const char *op, const char *path)
{
        char old[256] = "";
        int rfd = open(path, O_RDONLY | O_CLOEXEC);
        ssize_t n = rfd >= 0 ? read(rfd, old, sizeof(old) - 1) : 0;
        if (rfd >= 0)
                close(rfd);
        if (n < 0)
                n = 0;
        old[n] = '\0';
        char *newline = strchr(old, '\n');
        if (newline != NULL)
                *newline = '\0';
        errno = 0;
        int fd = open(path, O_WRONLY | O_CLOEXEC);
        if (fd < 0) {
                report(op, path, -1, errno);
                return;
        }
        errno = 0;
        long r = strlen(old) ? write(fd, old, strlen(old)) : 0;
        report(op, path, r, errno);
        close(fd);
}

static void own_limits(const char *prefix, const char *base)
{
        static const char *const files[] = {
                "memory/memory.limit_in_bytes",
                "memory/memory.memsw.limit_in_bytes",
                "pids/pids.max",
                "cpu/cpu.cfs_quota_us",
                "cgroup.procs",
                "memory.max",
                "pids.max",
                "cpu.max",
                "unified/cgroup.procs",
                "memory/cgroup.procs",
                "memory/release_agent",
                "release_agent",
                "notify_on_release",
                "memory/notify_on_release",
        };
        char op[64];
        snprintf(op, sizeof(op), "%swrite_cgroup", prefix);
        for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
                char path[512];
                snprintf(path, sizeof(path), "%s/%s", base, files[i]);
                write_back(op, path);
        }
}

static void mount_cgroupfs(const char *prefix)
{
        static const struct {
                const char *type, *options;
        } fs[] = {
                {"cgroup2", NULL},
                {"cgroup", "memory"},
                {"cgroup", "rdma"},
                {"cgroup", "pids"},
                {"cgroup", "none,name=hostile"},
        };
        char op[64];
        snprintf(op, sizeof(op), "%smount_cgroup", prefix);
        for (size_t i = 0; i < sizeof(fs) / sizeof(fs[0]); i++) {
                char dir[64], label[96];
                snprintf(dir, sizeof(dir), "/tmp/cg%zu", i);
                mkdir(dir, 0700);
                snprintf(label, sizeof(label), "%s %s", fs[i].type,
                         fs[i].options ? fs[i].options : "");
                errno = 0;
                long r = mount("cgroup", dir, fs[i].type, 0, fs[i].options);
                report(op, label, r, errno);
                if (r == 0) {
                        own_limits(prefix, dir);
                        umount2(dir, MNT_DETACH);
                }
        }
}

int main(void)
{
        char line[512];
        FILE *f = fopen("/proc/self/cgroup", "re");
        while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
                line[strcspn(line, "\n")] = '\0';
                /* hierarchy-id:controllers:path; inside a cgroup namespace the path is "/". */
                const char *path = strrchr(line, ':');
                bool host_path = path == NULL || strcmp(path + 1, "/") != 0;
                printf("{\"op\": \"proc_self_cgroup\", \"target\": \"%s\", \"ret\": 0, "
                       "\"errno\": \"%s\"}\n",
                       line, host_path ? "HOST_PATH" : "NAMESPACE_ROOT");
        }
        if (f != NULL)
                fclose(f);
        fflush(stdout);

        own_limits("", "/sys/fs/cgroup");
        mount_cgroupfs("");
        /* CVE-2022-0492: a user namespace for CAP_SYS_ADMIN, a mount namespace to mount in, a
         * cgroup namespace rooted at our own cgroup, then release_agent. */
        errno = 0;
        long r = unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWCGROUP);
        report("unshare", "CLONE_NEWUSER|CLONE_NEWNS|CLONE_NEWCGROUP", r, errno);
        if (r == 0)
                mount_cgroupfs("nested_");
        return 0;
}
