/* The init (pid 1) of a user-mode-linux guest of the uml backend (src/sandbox/uml/uml.c). The
 * build embeds this program into sandboxd, which writes it into the native sandbox that runs the
 * UML kernel, beside the job; the kernel boots from that sandbox's root (hostfs, read-only) and
 * starts it. It:
 *
 *   1. mounts /proc, /sys, /dev and a pure cgroup v2 hierarchy with the memory, pids and cpu
 *      controllers, and opens its report channel (/dev/tty3: UML's con3, the host's fd 3);
 *   2. reads the job (/workspace/.sbx-uml/job, format below), mounts a tmpfs of the job's disk size
 *      and copies the request's files into it (its /workspace; its /tmp beside it);
 *   3. runs the program in a cgroup with the job's memory, pids and CPU caps, as the guest's uid 0
 *      with no capabilities and no_new_privs, in a mount namespace of its own, with its rlimits,
 *      stdin from the job's file, stdout on /dev/tty1 and stderr on /dev/tty2 (con1 and con2: the
 *      host's fds 1 and 2), both raw;
 *   4. ends it at its wall deadline, kills whatever it left (cgroup.kill) and reports, in one line
 *      on the report channel, how it ended and the guest kernel's counters, then powers off.
 *
 * The program cannot forge the report: the channel's device node is removed before the program
 * starts and init's descriptor is not inherited (init's /proc/1/fd needs CAP_SYS_PTRACE over a
 * process with more capabilities), and without CAP_SYS_BOOT it cannot end the guest itself.
 *
 * The job: NUL-terminated strings. "sandboxd-uml-job 1", then "KEY VALUE" pairs (memory, pids,
 * cpu_quota_us, cpu_period_us, cpu_time_ms, wall_ms, disk, open_files, stdin 0|1), then "argv N"
 * and N strings, then "env N" and N strings.
 *
 * Standalone on purpose: it links nothing of sandboxd's, and it is not sanitized (meson.build). */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/capability.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/reboot.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#define STAGING "/workspace/.sbx-uml"
/* The native sandbox's root, which is the guest's, has no /sys or /mnt: init's own mounts live
 * in the guest's devtmpfs, and the program's mount namespace detaches them. */
#define SCRATCH       "/dev/.sbx-scratch"
#define CGROUP_ROOT   "/dev/.sbx-cgroup"
#define JOB_CGROUP    CGROUP_ROOT "/job"
#define LOADER        "/lib64/ld-linux-x86-64.so.2"
#define MAX_PRELOADED 64
#define MAX_JOB_BYTES (4u << 20)
#define MAX_STRINGS   4096

struct job {
        uint64_t memory, pids, cpu_quota_us, cpu_period_us, cpu_time_ms, wall_ms, disk, open_files,
                stdin_file;
        char *argv[MAX_STRINGS + 1];
        char *env[MAX_STRINGS + 1];
};

static int report_fd = -1;

/* Init cannot exit (the guest kernel would panic and the host learns nothing): every failure is
 * reported on the channel, and the guest powers off. */
static _Noreturn void power_off(void)
{
        sync();
        reboot(RB_POWER_OFF);
        for (;;)
                pause();
}

static _Noreturn void fail(const char *format, ...)
{
        char line[512];
        va_list args;
        va_start(args, format);
        int n = vsnprintf(line, sizeof line - 1, format, args);
        va_end(args);
        if (n < 0)
                n = 0;
        if ((size_t)n > sizeof line - 2)
                n = sizeof line - 2;
        line[n++] = '\n';
        if (report_fd >= 0)
                dprintf(report_fd, "sandboxd-uml-failed %.*s", n, line);
        power_off();
}

static void write_file(const char *path, const char *text)
{
        int fd = open(path, O_WRONLY | O_CLOEXEC);
        if (fd < 0)
                fail("open %s: %s", path, strerror(errno));
        ssize_t n = write(fd, text, strlen(text));
        if (n != (ssize_t)strlen(text))
                fail("write %s to %s: %s", text, path, strerror(errno));
        close(fd);
}

static void make_raw(int fd, const char *name)
{
        struct termios tio;
        if (tcgetattr(fd, &tio) < 0)
                fail("tcgetattr %s: %s", name, strerror(errno));
        cfmakeraw(&tio);
        if (tcsetattr(fd, TCSANOW, &tio) < 0)
                fail("tcsetattr %s: %s", name, strerror(errno));
}

static int open_tty(const char *path)
{
        int fd = open(path, O_RDWR | O_NOCTTY | O_CLOEXEC);
        if (fd < 0)
                fail("open %s: %s", path, strerror(errno));
        make_raw(fd, path);
        return fd;
}

static void read_job(struct job *job)
{
        int fd = open(STAGING "/job", O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                fail("open the job: %s", strerror(errno));
        char *data = malloc(MAX_JOB_BYTES + 1);
        if (data == NULL)
                fail("no memory for the job");
        size_t size = 0;
        for (;;) {
                ssize_t n = read(fd, data + size, MAX_JOB_BYTES - size);
                if (n < 0)
                        fail("read the job: %s", strerror(errno));
                if (n == 0)
                        break;
                size += (size_t)n;
                if (size == MAX_JOB_BYTES)
                        fail("the job is larger than %u bytes", MAX_JOB_BYTES);
        }
        close(fd);
        data[size] = '\0';
        char *at = data, *end = data + size;
        if (size == 0 || data[size - 1] != '\0' || strcmp(at, "sandboxd-uml-job 1") != 0)
                fail("the job's header is not sandboxd-uml-job 1");
        at += strlen(at) + 1;
        struct {
                const char *key;
                uint64_t *value;
        } keys[] = {{"memory", &job->memory},
                    {"pids", &job->pids},
                    {"cpu_quota_us", &job->cpu_quota_us},
                    {"cpu_period_us", &job->cpu_period_us},
                    {"cpu_time_ms", &job->cpu_time_ms},
                    {"wall_ms", &job->wall_ms},
                    {"disk", &job->disk},
                    {"open_files", &job->open_files},
                    {"stdin", &job->stdin_file}};
        for (; at < end && strncmp(at, "argv ", 5) != 0; at += strlen(at) + 1) {
                bool known = false;
                for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
                        size_t len = strlen(keys[i].key);
                        if (strncmp(at, keys[i].key, len) == 0 && at[len] == ' ') {
                                *keys[i].value = strtoull(at + len + 1, NULL, 10);
                                known = true;
                        }
                }
                if (!known)
                        fail("the job has an unknown entry: %.40s", at);
        }
        char **lists[] = {job->argv, job->env};
        const char *names[] = {"argv ", "env "};
        for (size_t l = 0; l < 2; l++) {
                if (at >= end || strncmp(at, names[l], strlen(names[l])) != 0)
                        fail("the job has no %slist", names[l]);
                unsigned long count = strtoul(at + strlen(names[l]), NULL, 10);
                if (count > MAX_STRINGS)
                        fail("the job's %slist is too long", names[l]);
                at += strlen(at) + 1;
                for (unsigned long i = 0; i < count; i++) {
                        if (at >= end)
                                fail("the job's %slist is cut short", names[l]);
                        lists[l][i] = at;
                        at += strlen(at) + 1;
                }
                lists[l][count] = NULL;
        }
        if (job->argv[0] == NULL)
                fail("the job has no program");
}

/* Copies the directory from (the staged request files, on the read-only hostfs) into to. */
static void copy_tree(const char *from, const char *to)
{
        DIR *dir = opendir(from);
        if (dir == NULL && errno == ENOENT)
                return; /* a request without files */
        if (dir == NULL)
                fail("opendir %s: %s", from, strerror(errno));
        struct dirent *entry;
        while ((entry = readdir(dir)) != NULL) {
                if (strcmp(entry->d_name, ".") == 0 || strcmp(entry->d_name, "..") == 0)
                        continue;
                char source[4096], target[4096];
                snprintf(source, sizeof source, "%s/%s", from, entry->d_name);
                snprintf(target, sizeof target, "%s/%s", to, entry->d_name);
                struct stat st;
                if (lstat(source, &st) < 0)
                        fail("lstat %s: %s", source, strerror(errno));
                if (S_ISDIR(st.st_mode)) {
                        if (mkdir(target, st.st_mode & 07777) < 0 && errno != EEXIST)
                                fail("mkdir %s: %s", target, strerror(errno));
                        copy_tree(source, target);
                        continue;
                }
                if (!S_ISREG(st.st_mode))
                        continue;
                int in = open(source, O_RDONLY | O_CLOEXEC);
                int out = open(target, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, st.st_mode & 07777);
                if (in < 0 || out < 0)
                        fail("copy %s: %s", source, strerror(errno));
                char buffer[65536];
                ssize_t n;
                while ((n = read(in, buffer, sizeof buffer)) > 0)
                        if (write(out, buffer, (size_t)n) != n)
                                fail("write %s: %s", target, strerror(errno));
                if (n < 0)
                        fail("read %s: %s", source, strerror(errno));
                close(in);
                close(out);
        }
        closedir(dir);
}

static void set_up_cgroup(const struct job *job)
{
        /* As on the host: an allocation larger than the guest's RAM is granted, and its use meets
         * the cgroup's cap (the OOM killer), not the guest's overcommit heuristic (MemoryError). */
        write_file("/proc/sys/vm/overcommit_memory", "1");
        write_file(CGROUP_ROOT "/cgroup.subtree_control", "+memory +pids +cpu");
        if (mkdir(JOB_CGROUP, 0755) < 0)
                fail("mkdir %s: %s", JOB_CGROUP, strerror(errno));
        char value[64];
        snprintf(value, sizeof value, "%" PRIu64, job->memory);
        write_file(JOB_CGROUP "/memory.max", value);
        write_file(JOB_CGROUP "/memory.swap.max", "0");
        /* As on the host (cgroup.c): an OOM kill ends the whole program, not one of its
         * processes. */
        write_file(JOB_CGROUP "/memory.oom.group", "1");
        snprintf(value, sizeof value, "%" PRIu64, job->pids);
        write_file(JOB_CGROUP "/pids.max", value);
        if (job->cpu_quota_us > 0 && job->cpu_period_us > 0) {
                snprintf(value, sizeof value, "%" PRIu64 " %" PRIu64, job->cpu_quota_us,
                         job->cpu_period_us);
                write_file(JOB_CGROUP "/cpu.max", value);
        }
}

/* Reads a file whole, into the page cache, charged to init's cgroup, and keeps it open: hostfs
 * caches no dentry (d_delete), so a file nobody holds open loses its inode and its pages. */
static void read_whole(const char *path)
{
        static int held;
        if (held == MAX_PRELOADED)
                return;
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return;
        static char buffer[1 << 16];
        while (read(fd, buffer, sizeof buffer) > 0)
                ;
        held++;
}

/* The program's executable and shared libraries, read once by init. A page of the page cache is
 * charged to the cgroup that first reads it; these are the pages the program runs from. Charged
 * to the program, its cgroup's reclaim at the memory cap would drop them and the program would
 * fault them back at once, round after round: a run that thrashes to its CPU limit instead of
 * meeting the OOM killer. On a host they are in the page cache already, read by other processes
 * (and the native backend's programs meet the OOM killer); in a fresh guest, init reads them.
 * The libraries are the dynamic loader's own list (ld.so --list). */
static void preload(const char *program)
{
        read_whole(program);
        int out[2];
        if (pipe2(out, O_CLOEXEC) < 0)
                return;
        pid_t pid = fork();
        if (pid == 0) {
                int null = open("/dev/null", O_RDWR);
                if (null < 0 || dup2(null, 0) < 0 || dup2(out[1], 1) < 0 || dup2(null, 2) < 0)
                        _exit(127);
                char *const argv[] = {"ld.so", "--list", (char *)program, NULL};
                char *const envp[] = {NULL};
                execve(LOADER, argv, envp);
                _exit(127);
        }
        close(out[1]);
        if (pid < 0) {
                close(out[0]);
                return;
        }
        read_whole(LOADER);
        FILE *list = fdopen(out[0], "re");
        char line[4096];
        while (list != NULL && fgets(line, sizeof line, list) != NULL) {
                /* "\tlibm.so.6 => /lib/x86_64-linux-gnu/libm.so.6 (0x...)" */
                char *path = strstr(line, "=> /");
                if (path == NULL)
                        continue;
                path += 3;
                path[strcspn(path, " \n")] = '\0';
                read_whole(path);
        }
        if (list != NULL)
                fclose(list);
        else
                close(out[0]);
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
                ;
}

static void set_limit(int resource, uint64_t soft, uint64_t hard)
{
        struct rlimit limit = {.rlim_cur = soft, .rlim_max = hard};
        if (setrlimit(resource, &limit) < 0)
                _exit(126);
}

/* The child: becomes the program. Failures before exec exit 126 (127: the exec itself). */
static _Noreturn void run_program(const struct job *job, int stdin_fd, int out_fd, int err_fd)
{
        setsid();
        int procs = open(JOB_CGROUP "/cgroup.procs", O_WRONLY | O_CLOEXEC);
        if (procs < 0 || write(procs, "0", 1) != 1)
                _exit(126);
        close(procs);
        /* Its own mounts: without init's (whose cgroup files the guest's uid 0 owns), and with
         * /proc/exitcode (the UML process's exit status) and /proc/sysrq-trigger hidden. */
        if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
            umount2(CGROUP_ROOT, MNT_DETACH) < 0 || umount2(SCRATCH, MNT_DETACH) < 0 ||
            mount("/dev/null", "/proc/exitcode", NULL, MS_BIND, NULL) < 0 ||
            mount("/dev/null", "/proc/sysrq-trigger", NULL, MS_BIND, NULL) < 0)
                _exit(126);
        if (dup2(stdin_fd, 0) < 0 || dup2(out_fd, 1) < 0 || dup2(err_fd, 2) < 0)
                _exit(126);
        if (chdir("/workspace") < 0)
                _exit(126);
        uint64_t cpu_s = (job->cpu_time_ms + 999) / 1000;
        set_limit(RLIMIT_CPU, cpu_s, cpu_s + 1);
        set_limit(RLIMIT_FSIZE, job->disk, job->disk);
        set_limit(RLIMIT_CORE, 0, 0);
        set_limit(RLIMIT_NOFILE, job->open_files, job->open_files);
        /* No capabilities: the program is the guest's uid 0 (files it writes are its own, as in a
         * native sandbox), but can neither mount, nor trace init, nor power the guest off. */
        for (int cap = 0; cap <= CAP_LAST_CAP; cap++)
                if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 && errno != EINVAL)
                        _exit(126);
        struct __user_cap_header_struct header = {.version = _LINUX_CAPABILITY_VERSION_3};
        struct __user_cap_data_struct data[2] = {{0}};
        if (syscall(SYS_capset, &header, data) < 0 || prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
                _exit(126);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        execve(job->argv[0], job->argv, job->env);
        dprintf(2, "sandboxd: cannot run %s: %s\n", job->argv[0], strerror(errno));
        _exit(127);
}

static uint64_t read_key(const char *path, const char *key)
{
        FILE *file = fopen(path, "re");
        if (file == NULL)
                return 0;
        char name[64];
        unsigned long long value;
        uint64_t found = 0;
        while (fscanf(file, "%63s %llu", name, &value) == 2)
                if (strcmp(name, key) == 0)
                        found = value;
        fclose(file);
        return found;
}

static uint64_t read_number(const char *path)
{
        FILE *file = fopen(path, "re");
        unsigned long long value = 0;
        if (file != NULL) {
                if (fscanf(file, "%llu", &value) != 1)
                        value = 0;
                fclose(file);
        }
        return value;
}

static uint64_t now_us(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* Reaps every child init has (orphans are re-parented to it); program's status when it ends. */
static bool reap(pid_t program, int *status)
{
        bool ended = false;
        int st;
        pid_t pid;
        while ((pid = waitpid(-1, &st, WNOHANG)) > 0)
                if (pid == program) {
                        *status = st;
                        ended = true;
                }
        return ended;
}

int main(void)
{
        if (getpid() != 1) {
                fprintf(stderr, "sandboxd-uml-init: the init of a uml backend guest\n");
                return 2;
        }
        mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
        mount("devtmpfs", "/dev", "devtmpfs", MS_NOSUID | MS_NOEXEC, NULL);
        report_fd = open("/dev/tty3", O_WRONLY | O_NOCTTY | O_CLOEXEC);
        if (report_fd < 0)
                power_off(); /* no channel: the host reports that the guest said nothing */
        make_raw(report_fd, "/dev/tty3");
        if (mkdir(CGROUP_ROOT, 0700) < 0 || mkdir(SCRATCH, 0700) < 0)
                fail("make init's directories: %s", strerror(errno));
        if (mount("cgroup2", CGROUP_ROOT, "cgroup2", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
                fail("mount cgroup2: %s", strerror(errno));

        static struct job job;
        read_job(&job);

        /* The program's scratch: one tmpfs of the job's disk size, its /workspace and /tmp. */
        char options[64];
        snprintf(options, sizeof options, "size=%" PRIu64 ",mode=0755", job.disk);
        if (mount("tmpfs", SCRATCH, "tmpfs", MS_NOSUID | MS_NODEV, options) < 0)
                fail("mount the scratch tmpfs: %s", strerror(errno));
        if (mkdir(SCRATCH "/workspace", 0755) < 0 || mkdir(SCRATCH "/tmp", 01777) < 0 ||
            chmod(SCRATCH "/tmp", 01777) < 0)
                fail("make the scratch directories: %s", strerror(errno));
        copy_tree(STAGING "/files", SCRATCH "/workspace");
        int stdin_fd = open(job.stdin_file ? STAGING "/stdin" : "/dev/null", O_RDONLY | O_CLOEXEC);
        if (stdin_fd < 0)
                fail("open the program's stdin: %s", strerror(errno));
        if (mount(SCRATCH "/workspace", "/workspace", NULL, MS_BIND, NULL) < 0 ||
            mount(SCRATCH "/tmp", "/tmp", NULL, MS_BIND, NULL) < 0)
                fail("bind the scratch directories: %s", strerror(errno));

        set_up_cgroup(&job);
        preload(job.argv[0]);
        int out_fd = open_tty("/dev/tty1");
        int err_fd = open_tty("/dev/tty2");
        /* Only init may write the report. */
        if (unlink("/dev/tty3") < 0)
                fail("unlink /dev/tty3: %s", strerror(errno));

        sigset_t child;
        sigemptyset(&child);
        sigaddset(&child, SIGCHLD);
        sigprocmask(SIG_BLOCK, &child, NULL);
        uint64_t started = now_us();
        pid_t program = fork();
        if (program < 0)
                fail("fork: %s", strerror(errno));
        if (program == 0)
                run_program(&job, stdin_fd, out_fd, err_fd);

        int status = 0;
        bool wall_timeout = false;
        uint64_t deadline = started + job.wall_ms * 1000u;
        while (!reap(program, &status)) {
                uint64_t now = now_us();
                if (now >= deadline) {
                        wall_timeout = true;
                        write_file(JOB_CGROUP "/cgroup.kill", "1");
                        while (waitpid(program, &status, 0) < 0 && errno == EINTR)
                                ;
                        break;
                }
                struct timespec wait = {.tv_sec = (time_t)((deadline - now) / 1000000u),
                                        .tv_nsec = (long)((deadline - now) % 1000000u) * 1000};
                sigtimedwait(&child, NULL, &wait);
        }
        uint64_t wall_us = now_us() - started;

        /* Whatever the program left behind ends with it; its counters are then final. */
        write_file(JOB_CGROUP "/cgroup.kill", "1");
        for (int i = 0; i < 1000 && read_key(JOB_CGROUP "/cgroup.events", "populated") != 0; i++) {
                reap(program, &status);
                usleep(1000);
        }
        struct statvfs disk = {0};
        statvfs(SCRATCH, &disk);
        uint64_t disk_total = (uint64_t)disk.f_blocks * disk.f_frsize;
        uint64_t disk_used = disk_total - (uint64_t)disk.f_bfree * disk.f_frsize;
        dprintf(report_fd,
                "sandboxd-uml-report 1 exited=%d code=%d signal=%d wall_timeout=%d "
                "wall_us=%" PRIu64 " oom_kills=%" PRIu64 " memory_max_events=%" PRIu64
                " memory_peak_bytes=%" PRIu64 " pids_max_events=%" PRIu64 " pids_peak=%" PRIu64
                " cpu_usage_us=%" PRIu64 " cpu_throttled_us=%" PRIu64 " cpu_nr_throttled=%" PRIu64
                " disk_used_bytes=%" PRIu64 " disk_total_bytes=%" PRIu64 " inodes_free=%" PRIu64
                "\n",
                WIFEXITED(status), WIFEXITED(status) ? WEXITSTATUS(status) : 0,
                WIFSIGNALED(status) ? WTERMSIG(status) : 0, wall_timeout, wall_us,
                read_key(JOB_CGROUP "/memory.events", "oom_kill"),
                read_key(JOB_CGROUP "/memory.events", "max"),
                read_number(JOB_CGROUP "/memory.peak"), read_key(JOB_CGROUP "/pids.events", "max"),
                read_number(JOB_CGROUP "/pids.peak"),
                read_key(JOB_CGROUP "/cpu.stat", "usage_usec"),
                read_key(JOB_CGROUP "/cpu.stat", "throttled_usec"),
                read_key(JOB_CGROUP "/cpu.stat", "nr_throttled"), disk_used, disk_total,
                (uint64_t)disk.f_ffree);
        power_off();
}
