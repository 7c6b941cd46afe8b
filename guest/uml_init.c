/* The init (pid 1) of a user-mode-linux guest of the uml backend (src/sandbox/uml/uml.c). The
 * build embeds this program into sandboxd, which writes it into the native sandbox that runs the
 * UML kernel, beside the job; the kernel boots from that sandbox's root (hostfs, read-only) and
 * starts it. It:
 *
 *   1. mounts /proc, /dev and a pure cgroup v2 hierarchy (nsdelegate) with the memory, pids and
 *      cpu controllers, and opens its report channel (/dev/tty3: UML's con3, the host's fd 3);
 *   2. reads the job (/workspace/.sbx-uml/job, format below) and the program's seccomp filter,
 *      mounts a tmpfs of the job's disk size, copies the request's files into it (the program's
 *      /workspace; its /tmp and /dev/shm beside it), owned by PROGRAM_UID;
 *   3. starts the program's keeper (run_keeper) in new pid, mount and cgroup namespaces, in a
 *      cgroup with the job's memory, pids and CPU caps; the keeper builds the program's view (a
 *      /dev of its own, a /proc of its pids only) and runs the program (run_program) as pid 2, as
 *      the native sandbox's init does: in a user namespace of its own whose ids are the guest's
 *      PROGRAM_UID on, as that namespace's root with the native root's capabilities over it
 *      only, no_new_privs, the native plan's rlimits and the native backend's seccomp filter,
 *      stdin from the job's file, stdout and stderr on pipes;
 *   4. copies the pipes to /dev/tty1 and /dev/tty2 (con1 and con2: the host's fds 1 and 2, raw)
 *      as they come, ends the program at its wall deadline (or when its cgroup thrashes at its
 *      memory cap: thrash_guard), kills whatever it left (cgroup.kill) and reports, in one line on
 *      the report channel, how it ended and the guest kernel's counters; then powers off.
 *
 * Pool mode (the job's "pool 1": a warm entry, uml.c): the program is a loader that takes its
 * execution on stdin (guest/python_loader.py "stdio"). Init starts it as in 3., with a pipe of its
 * own as its stdin, waits for its "R" on its stdout, says "R" on the report channel and waits on
 * /dev/tty4 (con4: the host's fd 0) for the take (read_take): the request's caps, which init puts
 * on the job's cgroup, and how many bytes follow, which init copies to the loader's stdin as it
 * reads them (struct feed): its execution (sandbox/agent.h) and the program's stdin. The wall
 * clock and the CPU time reported start at the take; then 4.
 *
 * Exec mode (also "exec 1": a generic warm entry, a language without a loader): the keeper and
 * the program start at boot as in 3., and the program stops short of its exec, every step done
 * but its rlimits (none until then), its filter and the exec itself; it says "R" as a loader
 * does (start_execution). The execution after the take is init's to read (read_execution): it
 * writes the files into the workspace, then hands the header on a pipe of its own to the
 * program, which takes its argv, environment and rlimits from it and execs; its stdin is the rest
 * of console 4's input. (A fork, a user namespace and the program's view cost ~40 ms of UML's
 * time: not the request's.)
 *
 * The program cannot forge the report or lift its caps: it is not the guest's root (PROGRAM_UID
 * owns nothing of init's: not the cgroup files, not /proc/sys, not init's or its keeper's
 * rlimits), it has no capability in the guest's first user namespace (only over its own, which
 * owns nothing but its files and processes), its seccomp filter refuses new namespaces, mounts
 * and ptrace, and what it sees of /dev and /proc is its keeper's: no console, no init.
 *
 * The job: NUL-terminated strings. "sandboxd-uml-job 1", then "KEY VALUE" pairs (every one of
 * memory, pids, cpu_quota_us, cpu_period_us, wall_ms, disk, stdin 0|1, pool 0|1, exec 0|1; a
 * memory, pids or CPU cap of 0 is none) and "rlimit RESOURCE SOFT HARD" entries (the native
 * plan's, in order), then "argv N" and N strings, then "env N" and N strings. The seccomp filter:
 * the BPF program as an array of struct sock_filter (/workspace/.sbx-uml/seccomp).
 *
 * The report: "sandboxd-uml-report 1" and KEY=VALUE fields (uml.c reads them); on a failure of
 * init itself, "sandboxd-uml-failed WHY".
 *
 * Standalone on purpose: it links nothing of sandboxd's, and it is not sanitized (meson.build). */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/securebits.h>
#include <linux/seccomp.h>
#include <poll.h>
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
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#define STAGING "/workspace/.sbx-uml"
/* The native sandbox's root, which is the guest's, has no /sys or /mnt: init's own mounts live
 * in the guest's devtmpfs, which the program's view covers with a /dev of its own. */
#define SCRATCH     "/dev/.sbx-scratch"
#define CGROUP_ROOT "/dev/.sbx-cgroup"
#define PROGRAM_DEV "/dev/.sbx-dev"
#define JOB_CGROUP  CGROUP_ROOT "/job"
/* The guest ids the program's user namespace maps its ids 0..PROGRAM_IDS-1 to: nobody else's. */
#define PROGRAM_UID      100000
#define PROGRAM_IDS      65536
#define HOSTNAME         "sandbox" /* the native sandbox's */
#define LOADER           "/lib64/ld-linux-x86-64.so.2"
#define MAX_PRELOADED    64
#define MAX_JOB_BYTES    (4u << 20)
#define MAX_TAKE_BYTES   4096
#define MAX_FILTER_INSNS 4096
#define MAX_STRINGS      4096
#define MAX_FILES        1024 /* a request has at most 64 (model/request.h) */

#define MAX_RLIMITS 16

struct job {
        uint64_t memory, pids, cpu_quota_us, cpu_period_us, wall_ms, disk, stdin_file, pool, exec;
        uint64_t input; /* pool mode: the bytes that follow the take on console 4 */
        struct {
                int resource;
                struct rlimit value;
        } rlimits[MAX_RLIMITS];
        size_t n_rlimits;
        char *argv[MAX_STRINGS + 1];
        char *env[MAX_STRINGS + 1];
        struct sock_filter filter[MAX_FILTER_INSNS];
        unsigned short filter_len;
};

static int report_fd = -1;
/* Exec mode: the read end of the pipe on which the program, ready at its exec, receives its
 * execution's header from init (start_execution); -1 otherwise. */
static int execution_fd = -1;
/* The guest's fs.nr_open, read at boot: the most RLIMIT_NOFILE any kernel takes (uml.c's
 * UML_GUEST_NR_OPEN, its boot argument); the program's view has no /proc/sys. */
static uint64_t nr_open;
/* False in init's children: their failures are the program's (exit 126), not the guest's. */
static bool in_init = true;

static uint64_t read_number(const char *path);

/* Init cannot exit (the guest kernel would panic and the host learns nothing): every failure is
 * reported on the channel, and the guest powers off. */
static _Noreturn void power_off(void)
{
        sync();
        reboot(RB_POWER_OFF);
        for (;;)
                pause();
}

__attribute__((format(printf, 1, 2))) static _Noreturn void fail(const char *format, ...)
{
        char line[512];
        va_list args;
        va_start(args, format);
        int n = vsnprintf(line, sizeof line, format, args);
        va_end(args);
        if (n < 0)
                n = 0;
        if ((size_t)n > sizeof line - 1)
                n = sizeof line - 1;
        if (!in_init) {
                dprintf(2, "sandboxd: uml guest: %.*s\n", n, line);
                _exit(126);
        }
        if (report_fd >= 0)
                dprintf(report_fd, "sandboxd-uml-failed %.*s\n", n, line);
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
        int fd = open(path, O_WRONLY | O_NOCTTY | O_CLOEXEC);
        if (fd < 0)
                fail("open %s: %s", path, strerror(errno));
        make_raw(fd, path);
        return fd;
}

/* Reads a staged file whole into data (capacity bytes); a larger one is a failure. */
static size_t read_staged(const char *name, void *data, size_t capacity)
{
        char path[128];
        snprintf(path, sizeof path, STAGING "/%s", name);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                fail("open %s: %s", path, strerror(errno));
        size_t size = 0;
        for (;;) {
                char more;
                ssize_t n = size < capacity ? read(fd, (char *)data + size, capacity - size)
                                            : read(fd, &more, 1);
                if (n < 0)
                        fail("read %s: %s", path, strerror(errno));
                if (n == 0)
                        break;
                if (size == capacity)
                        fail("%s is larger than %zu bytes", path, capacity);
                size += (size_t)n;
        }
        close(fd);
        return size;
}

struct key {
        const char *key;
        uint64_t *value;
        bool seen;
};

/* Parses entry, "KEY NUMBER", into the value of its key; false when it names none of keys. */
static bool parse_key(const char *entry, struct key *keys, size_t n_keys, const char *where)
{
        size_t i = 0;
        while (i < n_keys && !(strncmp(entry, keys[i].key, strlen(keys[i].key)) == 0 &&
                               entry[strlen(keys[i].key)] == ' '))
                i++;
        if (i == n_keys)
                return false;
        char *value_end;
        errno = 0;
        *keys[i].value = strtoull(entry + strlen(keys[i].key) + 1, &value_end, 10);
        if (errno != 0 || *value_end != '\0')
                fail("the %s's %s is not a number", where, keys[i].key);
        keys[i].seen = true;
        return true;
}

/* The caps a job and a take both carry (uml.c's job_add_caps). */
// clang-format off: one key per line, as in the lists that use it
#define CAP_KEYS(job)                                                                              \
        {"memory", &(job)->memory, false}, {"pids", &(job)->pids, false},                          \
                {"cpu_quota_us", &(job)->cpu_quota_us, false},                                     \
                {"cpu_period_us", &(job)->cpu_period_us, false},                                   \
        {                                                                                          \
                "wall_ms", &(job)->wall_ms, false                                                  \
        }
// clang-format on

static void check_keys(const struct key *keys, size_t n_keys, const char *where)
{
        for (size_t i = 0; i < n_keys; i++)
                if (!keys[i].seen)
                        fail("the %s has no %s", where, keys[i].key);
}

static void read_job(struct job *job)
{
        static char data[MAX_JOB_BYTES + 1];
        size_t size = read_staged("job", data, MAX_JOB_BYTES);
        data[size] = '\0';
        char *at = data, *end = data + size;
        if (size == 0 || data[size - 1] != '\0' || strcmp(at, "sandboxd-uml-job 1") != 0)
                fail("the job's header is not sandboxd-uml-job 1");
        at += strlen(at) + 1;
        struct key keys[] = {
                CAP_KEYS(job),
                {"disk", &job->disk, false},
                {"stdin", &job->stdin_file, false},
                {"pool", &job->pool, false},
                {"exec", &job->exec, false},
        };
        size_t n_keys = sizeof keys / sizeof keys[0];
        for (; at < end && strncmp(at, "argv ", 5) != 0; at += strlen(at) + 1) {
                unsigned long long soft, hard;
                int resource, used = 0;
                if (sscanf(at, "rlimit %d %llu %llu%n", &resource, &soft, &hard, &used) == 3 &&
                    at[used] == '\0') {
                        if (job->n_rlimits == MAX_RLIMITS)
                                fail("the job has more than %d rlimits", MAX_RLIMITS);
                        job->rlimits[job->n_rlimits].resource = resource;
                        job->rlimits[job->n_rlimits].value =
                                (struct rlimit){.rlim_cur = soft, .rlim_max = hard};
                        job->n_rlimits++;
                        continue;
                }
                if (!parse_key(at, keys, n_keys, "job"))
                        fail("the job has an unknown entry: %.40s", at);
        }
        check_keys(keys, n_keys, "job");
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
        size_t filter_size = read_staged("seccomp", job->filter, sizeof job->filter);
        if (filter_size == 0 || filter_size % sizeof(struct sock_filter) != 0)
                fail("the seccomp filter has a bad size: %zu", filter_size);
        job->filter_len = (unsigned short)(filter_size / sizeof(struct sock_filter));
}

/* Reads exactly size bytes of fd (blocking). */
static void read_exactly(int fd, void *data, size_t size, const char *what)
{
        for (size_t got = 0; got < size;) {
                ssize_t n = read(fd, (char *)data + got, size - got);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        fail("read %s: %s", what, n == 0 ? "end of file" : strerror(errno));
                got += (size_t)n;
        }
}

static void write_all(int fd, const void *data, size_t size, const char *what)
{
        for (size_t done = 0; done < size;) {
                ssize_t n = write(fd, (const char *)data + done, size - done);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        fail("write %s: %s", what, strerror(errno));
                done += (size_t)n;
        }
}

/* A record of the host's (the take, an execution): a u32 little-endian length (1 to capacity),
 * then that many bytes into data. Returns the length. */
static uint32_t read_record(int fd, char *data, uint32_t capacity, const char *what)
{
        uint8_t prefix[4];
        read_exactly(fd, prefix, sizeof prefix, what);
        uint32_t size = (uint32_t)prefix[0] | (uint32_t)prefix[1] << 8 | (uint32_t)prefix[2] << 16 |
                        (uint32_t)prefix[3] << 24;
        if (size == 0 || size > capacity)
                fail("%s's length is %" PRIu32, what, size);
        read_exactly(fd, data, size, what);
        return size;
}

/* Pool mode: the take, on console 4 once init said "R" (uml.c's make_input): a u32
 * little-endian length, then NUL-terminated strings, "sandboxd-uml-take 1" and every one of the
 * request's memory, pids, cpu_quota_us, cpu_period_us, wall_ms, and input (how many bytes follow:
 * the loader's execution and the program's stdin). */
static void read_take(int fd, struct job *job)
{
        static char data[MAX_TAKE_BYTES + 1];
        uint32_t size = read_record(fd, data, MAX_TAKE_BYTES, "the take");
        data[size] = '\0';
        if (data[size - 1] != '\0' || strcmp(data, "sandboxd-uml-take 1") != 0)
                fail("the take's header is not sandboxd-uml-take 1");
        struct key keys[] = {CAP_KEYS(job), {"input", &job->input, false}};
        for (char *at = data + strlen(data) + 1; at < data + size; at += strlen(at) + 1)
                if (!parse_key(at, keys, sizeof keys / sizeof keys[0], "take"))
                        fail("the take has an unknown entry: %.40s", at);
        check_keys(keys, sizeof keys / sizeof keys[0], "take");
}

/* The next NUL-terminated field of [*at, end); a header cut short is a failure. */
static char *next_field(char **at, char *end, const char *what)
{
        if (*at >= end)
                fail("the execution is cut short before its %s", what);
        char *field = *at;
        *at += strlen(field) + 1;
        return field;
}

static uint64_t next_number(char **at, char *end, const char *what)
{
        char *field = next_field(at, end, what), *field_end;
        errno = 0;
        unsigned long long value = strtoull(field, &field_end, 10);
        if (errno != 0 || field_end == field || *field_end != '\0')
                fail("the execution's %s is not a number", what);
        return value;
}

/* A request file's path, relative to the workspace, its directories made (the program's, as
 * copy_tree makes them); the engine validated it (engine/execution.h), and init checks again
 * what it relies on: relative, without an empty, "." or ".." component. */
static void make_parents(char *path)
{
        if (path[0] == '\0' || path[0] == '/')
                fail("a request file's path is not relative: %.80s", path);
        for (char *at = path;;) {
                size_t len = strcspn(at, "/");
                if (len == 0 || (len == 1 && at[0] == '.') ||
                    (len == 2 && at[0] == '.' && at[1] == '.'))
                        fail("a request file's path has a bad component: %.80s", path);
                if (at[len] == '\0')
                        return;
                at[len] = '\0';
                char dir[PATH_MAX];
                if (snprintf(dir, sizeof dir, SCRATCH "/workspace/%s", path) >= (int)sizeof dir)
                        fail("a request file's path is too long");
                if (mkdir(dir, 0755) < 0 && errno != EEXIST)
                        fail("mkdir %s: %s", dir, strerror(errno));
                if (chown(dir, PROGRAM_UID, PROGRAM_UID) < 0)
                        fail("chown %s: %s", dir, strerror(errno));
                at[len] = '/';
                at += len + 1;
        }
}

/* An execution's files, as its header lists them (parse_execution). */
struct request_file {
        char *path;
        uint64_t size;
        bool executable;
};

/* Parses an execution's header (sandbox/agent.h, on its stdin channel; size bytes, its last
 * field's NUL not sent, so header has a byte more): its argv, environment and rlimits (the plan
 * at its end) replace the job's, pointing into header; files (MAX_FILES of room, or NULL) gets
 * the files that follow it. Returns their count. Init parses it, then the waiting program the
 * same bytes (start_execution). */
static uint64_t parse_execution(char *header, uint32_t size, struct job *job,
                                struct request_file *files)
{
        header[size] = '\0';
        char *at = header, *end = header + size + 1;
        char **lists[] = {job->argv, job->env};
        const char *names[] = {"argv", "environment"};
        for (size_t l = 0; l < 2; l++) {
                uint64_t count = next_number(&at, end, names[l]);
                if (count > MAX_STRINGS)
                        fail("the execution's %s is too long", names[l]);
                for (uint64_t i = 0; i < count; i++)
                        lists[l][i] = next_field(&at, end, names[l]);
                lists[l][count] = NULL;
        }
        if (job->argv[0] == NULL)
                fail("the execution has no program");
        uint64_t n_files = next_number(&at, end, "file count");
        if (n_files > MAX_FILES)
                fail("the execution has %" PRIu64 " files", n_files);
        for (uint64_t i = 0; i < n_files; i++) {
                struct request_file file = {.path = next_field(&at, end, "file's path"),
                                            .size = next_number(&at, end, "file's size")};
                const char *flags = next_field(&at, end, "file's flags");
                if (strchr(flags, 'r') != NULL) /* uml.c refuses them */
                        fail("a read-only file came");
                file.executable = strchr(flags, 'x') != NULL;
                if (files != NULL)
                        files[i] = file;
        }
        (void)next_field(&at, end, "program file");
        uint64_t n_limits = next_number(&at, end, "limit count");
        for (uint64_t i = 0; i < n_limits; i++)
                (void)next_number(&at, end, "limit"); /* the take's caps are the cgroup's */
        uint64_t n_rlimits = next_number(&at, end, "rlimit count");
        if (n_rlimits > MAX_RLIMITS)
                fail("the execution has %" PRIu64 " rlimits", n_rlimits);
        job->n_rlimits = n_rlimits;
        for (uint64_t i = 0; i < n_rlimits; i++) {
                job->rlimits[i].resource = (int)next_number(&at, end, "rlimit's resource");
                job->rlimits[i].value.rlim_cur = next_number(&at, end, "rlimit's soft value");
                job->rlimits[i].value.rlim_max = next_number(&at, end, "rlimit's hard value");
                if (job->rlimits[i].resource == RLIMIT_NOFILE) { /* none is unlimited */
                        struct rlimit *value = &job->rlimits[i].value;
                        value->rlim_cur = value->rlim_cur < nr_open ? value->rlim_cur : nr_open;
                        value->rlim_max = value->rlim_max < nr_open ? value->rlim_max : nr_open;
                }
        }
        if (at != end)
                fail("the execution's header has more than it says");
        return n_files;
}

/* Exec mode: the execution after the take, on console 4 (fd): its header, whose copy goes to
 * the program waiting at its exec (program_fd, then closed), and the files' bytes, each written
 * into the workspace as it comes, owned by the program's uid. Returns the bytes of console 4 it
 * took. */
static uint64_t read_execution(int fd, struct job *job, int program_fd)
{
        static char header[MAX_JOB_BYTES + 1];
        static struct request_file files[MAX_FILES];
        static char buffer[65536];
        uint32_t size = read_record(fd, header, MAX_JOB_BYTES, "the execution");
        uint64_t n_files = parse_execution(header, size, job, files);
        uint64_t taken = sizeof size + size;
        for (uint64_t i = 0; i < n_files; i++) {
                char path[PATH_MAX];
                make_parents(files[i].path);
                if (snprintf(path, sizeof path, SCRATCH "/workspace/%s", files[i].path) >=
                    (int)sizeof path)
                        fail("a request file's path is too long");
                mode_t mode = files[i].executable ? 0755 : 0644;
                int out = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
                if (out < 0 || fchown(out, PROGRAM_UID, PROGRAM_UID) < 0 || fchmod(out, mode) < 0)
                        fail("make %s: %s", path, strerror(errno));
                for (uint64_t left = files[i].size; left > 0;) {
                        size_t n = left < sizeof buffer ? (size_t)left : sizeof buffer;
                        read_exactly(fd, buffer, n, "a request file");
                        write_all(out, buffer, n, path);
                        left -= n;
                }
                close(out);
                taken += files[i].size;
        }
        /* The files are there before the program may look: the header's record, as it came, is
         * its go (start_execution). */
        const uint8_t prefix[4] = {(uint8_t)size, (uint8_t)(size >> 8), (uint8_t)(size >> 16),
                                   (uint8_t)(size >> 24)};
        write_all(program_fd, prefix, sizeof prefix, "the program's execution");
        write_all(program_fd, header, size, "the program's execution");
        close(program_fd);
        return taken;
}

/* Copies the directory from (the staged request files, on the read-only hostfs) into to, every
 * file and directory owned by PROGRAM_UID. Its buffer is static and its paths are built on the
 * way down only: a request's path may nest a hundred directories. */
static void copy_tree(const char *from, const char *to)
{
        static char buffer[65536];
        DIR *dir = opendir(from);
        if (dir == NULL && errno == ENOENT)
                return; /* a request without files */
        if (dir == NULL)
                fail("opendir %s: %s", from, strerror(errno));
        struct dirent *entry;
        while ((entry = readdir(dir)) != NULL) {
                if (strcmp(entry->d_name, ".") == 0 || strcmp(entry->d_name, "..") == 0)
                        continue;
                char *source = NULL, *target = NULL;
                if (asprintf(&source, "%s/%s", from, entry->d_name) < 0 ||
                    asprintf(&target, "%s/%s", to, entry->d_name) < 0)
                        fail("no memory for a path under %s", from);
                struct stat st;
                if (lstat(source, &st) < 0)
                        fail("lstat %s: %s", source, strerror(errno));
                if (S_ISDIR(st.st_mode)) {
                        if (mkdir(target, st.st_mode & 07777) < 0 && errno != EEXIST)
                                fail("mkdir %s: %s", target, strerror(errno));
                        if (chown(target, PROGRAM_UID, PROGRAM_UID) < 0)
                                fail("chown %s: %s", target, strerror(errno));
                        copy_tree(source, target);
                } else if (S_ISREG(st.st_mode)) {
                        int in = open(source, O_RDONLY | O_CLOEXEC);
                        int out = open(target, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC,
                                       st.st_mode & 07777);
                        if (in < 0 || out < 0)
                                fail("copy %s: %s", source, strerror(errno));
                        ssize_t n;
                        while ((n = read(in, buffer, sizeof buffer)) > 0)
                                if (write(out, buffer, (size_t)n) != n)
                                        fail("write %s: %s", target, strerror(errno));
                        if (n < 0)
                                fail("read %s: %s", source, strerror(errno));
                        if (fchown(out, PROGRAM_UID, PROGRAM_UID) < 0 ||
                            fchmod(out, st.st_mode & 07777) < 0)
                                fail("chown %s: %s", target, strerror(errno));
                        close(in);
                        close(out);
                }
                free(source);
                free(target);
        }
        closedir(dir);
}

/* The job's caps on its cgroup (0: none, a pool entry's loose ones until its take). */
static void set_caps(const struct job *job)
{
        char value[64];
        snprintf(value, sizeof value, "%" PRIu64, job->memory);
        write_file(JOB_CGROUP "/memory.max", job->memory > 0 ? value : "max");
        snprintf(value, sizeof value, "%" PRIu64, job->pids);
        write_file(JOB_CGROUP "/pids.max", job->pids > 0 ? value : "max");
        snprintf(value, sizeof value, "%" PRIu64 " %" PRIu64, job->cpu_quota_us,
                 job->cpu_period_us);
        write_file(JOB_CGROUP "/cpu.max",
                   job->cpu_quota_us > 0 && job->cpu_period_us > 0 ? value : "max");
}

static void set_up_cgroup(const struct job *job)
{
        /* As on the host: an allocation larger than the guest's RAM is granted, and its use meets
         * the cgroup's cap (the OOM killer), not the guest's overcommit heuristic (MemoryError). */
        write_file("/proc/sys/vm/overcommit_memory", "1");
        write_file(CGROUP_ROOT "/cgroup.subtree_control", "+memory +pids +cpu");
        if (mkdir(JOB_CGROUP, 0755) < 0)
                fail("mkdir %s: %s", JOB_CGROUP, strerror(errno));
        write_file(JOB_CGROUP "/memory.swap.max", "0");
        /* As on the host (cgroup.c): an OOM kill ends the whole program, not one of its
         * processes. */
        write_file(JOB_CGROUP "/memory.oom.group", "1");
        set_caps(job);
}

/* Reads a file whole, into the page cache, charged to init's cgroup, and keeps it open: hostfs
 * caches no dentry (d_delete), so a file nobody holds open loses its inode and its pages. */
static void read_whole(const char *path)
{
        static int held;
        static char buffer[1 << 16];
        if (held == MAX_PRELOADED)
                return;
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return;
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
 * The libraries are the dynamic loader's own list (ld.so --list). What the program runs besides
 * (a shell script's awk) is thrash_guard's. */
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

/* The program's side, from here on in its keeper's namespaces. Failures before exec exit 126
 * with why on stderr (127: the exec itself). */
static _Noreturn void die(const char *what)
{
        dprintf(2, "sandboxd: uml guest: %s: %s\n", what, strerror(errno));
        _exit(126);
}

/* The capabilities the native sandbox's program keeps over its own user namespace
 * (src/sandbox/native/caps.c says what each reaches), and its securebits: the rules of uid 0,
 * locked. */
static const int kept_caps[] = {CAP_CHOWN, CAP_DAC_OVERRIDE, CAP_FOWNER,
                                CAP_KILL,  CAP_SETGID,       CAP_SETUID};
#define PROGRAM_SECUREBITS                                                                         \
        (SECBIT_KEEP_CAPS_LOCKED | SECBIT_NO_SETUID_FIXUP_LOCKED | SECBIT_NOROOT_LOCKED |          \
         SECBIT_NO_CAP_AMBIENT_RAISE | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED)

static void keep_capabilities(void)
{
        if (prctl(PR_SET_SECUREBITS, PROGRAM_SECUREBITS, 0, 0, 0) < 0)
                die("PR_SET_SECUREBITS");
        if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0)
                die("PR_CAP_AMBIENT_CLEAR_ALL");
        uint64_t kept = 0;
        for (size_t i = 0; i < sizeof kept_caps / sizeof kept_caps[0]; i++)
                kept |= 1ull << kept_caps[i];
        for (int cap = 0; cap <= CAP_LAST_CAP; cap++)
                if (!(kept & (1ull << cap)) && prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 &&
                    errno != EINVAL)
                        die("PR_CAPBSET_DROP");
        struct __user_cap_header_struct header = {.version = _LINUX_CAPABILITY_VERSION_3};
        struct __user_cap_data_struct data[2] = {
                {.effective = (uint32_t)kept, .permitted = (uint32_t)kept},
                {.effective = (uint32_t)(kept >> 32), .permitted = (uint32_t)(kept >> 32)},
        };
        if (syscall(SYS_capset, &header, data) < 0)
                die("capset");
}

/* Exec mode: the program, set up but for its filter, says "R" on its stdout (init reads it
 * before any of the program's output) and waits for its execution's header (read_execution):
 * its argv, environment and rlimits, which only lower the boot's unlimited ones. */
static void start_execution(struct job *job)
{
        static char header[MAX_JOB_BYTES + 1];
        if (write(1, "R", 1) != 1)
                die("say ready");
        uint32_t size = read_record(execution_fd, header, MAX_JOB_BYTES, "the execution");
        close(execution_fd);
        parse_execution(header, size, job, NULL);
        for (size_t i = 0; i < job->n_rlimits; i++)
                if (setrlimit(job->rlimits[i].resource, &job->rlimits[i].value) < 0)
                        die("setrlimit");
}

/* The program (pid 2 of its namespace): a user namespace of its own whose uid 0 is
 * PROGRAM_UID (its keeper writes the map: go_fd), the native plan's rlimits, the native root's
 * capabilities over that namespace only, no_new_privs, the native backend's seccomp filter, and
 * exec. In exec mode, all of it but the rlimits, the filter and the exec before the take. */
static _Noreturn void run_program(struct job *job, const int stdio[3], int ready_fd, int go_fd)
{
        setsid();
        /* While still the guest's root: a hard limit above the inherited one (the guest's
         * RLIMIT_SIGPENDING follows its small RAM) needs CAP_SYS_RESOURCE there. An exec entry's
         * program sets its execution's after the take, in its own user namespace, where it can
         * only lower them: from none. */
        for (size_t i = 0; i < job->n_rlimits; i++) {
                struct rlimit none = {RLIM_INFINITY, RLIM_INFINITY};
                if (job->rlimits[i].resource == RLIMIT_NOFILE)
                        none = (struct rlimit){nr_open, nr_open};
                if (setrlimit(job->rlimits[i].resource,
                              job->exec ? &none : &job->rlimits[i].value) < 0)
                        die("setrlimit");
        }
        if (unshare(CLONE_NEWUSER) < 0)
                die("unshare the user namespace");
        char go;
        if (write(ready_fd, "u", 1) != 1 || read(go_fd, &go, 1) != 1)
                die("wait for the uid map");
        close(ready_fd);
        close(go_fd);
        if (setresgid(0, 0, 0) < 0 || setresuid(0, 0, 0) < 0)
                die("become the namespace's root");
        for (int fd = 0; fd < 3; fd++)
                if (dup2(stdio[fd], fd) < 0)
                        die("dup2");
        for (int fd = 0; fd < 3; fd++)
                if (stdio[fd] > 2)
                        close(stdio[fd]);
        if (chdir("/workspace") < 0)
                die("chdir /workspace");
        keep_capabilities();
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
                die("PR_SET_NO_NEW_PRIVS");
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        if (job->exec)
                start_execution(job);
        struct sock_fprog program = {.len = job->filter_len,
                                     .filter = (struct sock_filter *)job->filter};
        if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &program) < 0)
                die("seccomp");
        execve(job->argv[0], job->argv, job->env);
        dprintf(2, "sandboxd: cannot run %s: %s\n", job->argv[0], strerror(errno));
        _exit(127);
}

/* The program's /dev, as the native sandbox's (mount.c): null, zero, full, random, urandom and
 * tty; its own devpts; /dev/shm, the scratch tmpfs's; the usual links. Made beside the guest's
 * devtmpfs, then moved over it: init's mounts there (cgroup2, the scratch) are out of sight. */
static void make_dev(void)
{
        if (mount("tmpfs", PROGRAM_DEV, "tmpfs", MS_NOSUID | MS_NOEXEC, "size=64k,mode=0755") < 0)
                die("mount the program's /dev");
        static const struct {
                const char *name;
                unsigned major, minor;
        } devices[] = {{"null", 1, 3},   {"zero", 1, 5},    {"full", 1, 7},
                       {"random", 1, 8}, {"urandom", 1, 9}, {"tty", 5, 0}};
        for (size_t i = 0; i < sizeof devices / sizeof devices[0]; i++) {
                char path[64];
                snprintf(path, sizeof path, PROGRAM_DEV "/%s", devices[i].name);
                if (mknod(path, S_IFCHR | 0666, makedev(devices[i].major, devices[i].minor)) < 0 ||
                    chmod(path, 0666) < 0)
                        die(path);
        }
        if (mkdir(PROGRAM_DEV "/shm", 01777) < 0 || mkdir(PROGRAM_DEV "/pts", 0755) < 0)
                die("mkdir /dev/shm, /dev/pts");
        if (mount(SCRATCH "/shm", PROGRAM_DEV "/shm", NULL, MS_BIND, NULL) < 0)
                die("bind /dev/shm");
        if (mount("devpts", PROGRAM_DEV "/pts", "devpts", MS_NOSUID | MS_NOEXEC,
                  "newinstance,ptmxmode=0666,mode=620") < 0)
                die("mount /dev/pts");
        static const struct {
                const char *target, *path;
        } links[] = {
                {"/proc/self/fd", PROGRAM_DEV "/fd"},
                {"/proc/self/fd/0", PROGRAM_DEV "/stdin"},
                {"/proc/self/fd/1", PROGRAM_DEV "/stdout"},
                {"/proc/self/fd/2", PROGRAM_DEV "/stderr"},
                {"pts/ptmx", PROGRAM_DEV "/ptmx"},
        };
        for (size_t i = 0; i < sizeof links / sizeof links[0]; i++)
                if (symlink(links[i].target, links[i].path) < 0)
                        die(links[i].path);
        /* Read-only, as natively: nothing can be added to it (a node, a link, a FIFO). */
        if (mount(NULL, PROGRAM_DEV, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NOEXEC,
                  NULL) < 0)
                die("make the program's /dev read-only");
        /* Init's mounts leave the program's mount namespace (the binds of /workspace, /tmp and
         * /dev/shm are mounts of their own); then its /dev covers the guest's. */
        if (umount2(CGROUP_ROOT, MNT_DETACH) < 0 || umount2(SCRATCH, MNT_DETACH) < 0)
                die("unmount init's mounts");
        if (mount(PROGRAM_DEV, "/dev", NULL, MS_MOVE, NULL) < 0)
                die("move the program's /dev");
}

/* Writes the program's uid and gid maps: its ids 0..PROGRAM_IDS-1 are the guest's PROGRAM_UID
 * on, as a native sandbox's are a range of the host's. */
static void map_ids(pid_t program)
{
        char path[64], map[64];
        snprintf(map, sizeof map, "0 %d %d\n", PROGRAM_UID, PROGRAM_IDS);
        static const char *const files[] = {"setgroups", "uid_map", "gid_map"};
        for (size_t i = 0; i < 3; i++) {
                snprintf(path, sizeof path, "/proc/%d/%s", program, files[i]);
                int fd = open(path, O_WRONLY | O_CLOEXEC);
                const char *text = i == 0 ? "deny" : map;
                if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text))
                        die(path);
                close(fd);
        }
}

/* The keeper: the guest's root, pid 1 of the program's pid namespace, in the job's cgroup and a
 * cgroup namespace rooted there, with a mount namespace of its own. It builds the program's view
 * (its /dev, a /proc of its pids only), runs the program as pid 2, maps its ids, reaps, and
 * writes the program's wait status on status_fd. Its exit ends its pid namespace: whatever the
 * program left is killed with it. The program cannot signal or trace it: it is another user
 * (the guest's root), and hidden (hidepid). */
static _Noreturn void run_keeper(struct job *job, int status_fd, const int stdio[3])
{
        in_init = false;
        int procs = open(JOB_CGROUP "/cgroup.procs", O_WRONLY | O_CLOEXEC);
        if (procs < 0 || write(procs, "0", 1) != 1)
                die("join the job's cgroup");
        close(procs);
        if (unshare(CLONE_NEWCGROUP) < 0)
                die("unshare the cgroup namespace");
        if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
                die("make the mounts private");
        make_dev();
        if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC,
                  "hidepid=invisible,subset=pid") < 0)
                die("mount /proc");
        int ready[2], go[2];
        if (pipe2(ready, O_CLOEXEC) < 0 || pipe2(go, O_CLOEXEC) < 0)
                die("pipes");
        pid_t program = fork();
        if (program < 0)
                die("fork");
        if (program == 0) {
                close(status_fd);
                close(ready[0]);
                close(go[1]);
                run_program(job, stdio, ready[1], go[0]);
        }
        if (execution_fd >= 0)
                close(execution_fd);
        for (int fd = 0; fd < 3; fd++)
                close(stdio[fd]);
        close(ready[1]);
        close(go[0]);
        char ready_byte;
        if (read(ready[0], &ready_byte, 1) == 1) {
                map_ids(program);
                if (write(go[1], "g", 1) != 1)
                        die("start the program");
        }
        close(ready[0]);
        close(go[1]);
        int status = 0;
        for (;;) {
                int st;
                pid_t pid = waitpid(-1, &st, 0);
                if (pid == program) {
                        status = st;
                        break;
                }
                if (pid < 0 && errno != EINTR)
                        break;
        }
        if (write(status_fd, &status, sizeof status) != (ssize_t)sizeof status)
                _exit(126);
        _exit(0);
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

/* The guest kernel has no PSI, so no OOM daemon could see this; init is the guest's. A cgroup at
 * its memory cap whose page cache is evicted and faulted back without end (memory.stat's
 * workingset_refault_file) makes progress for the kernel's OOM logic, which so never fires: the
 * program runs on, at a crawl, to its CPU or wall limit. When the cgroup keeps meeting its cap
 * (memory.events max grows) and refaults THRASH_REFAULT_PAGES pages or more, in each of
 * THRASH_SAMPLES samples in a row (one every THRASH_SAMPLE_MS), init ends it as the OOM killer
 * would have: a thrash kill, which the report counts apart (thrash_kills) and the host counts as
 * an OOM kill. */
#define THRASH_SAMPLE_MS     250
#define THRASH_SAMPLES       4
#define THRASH_REFAULT_PAGES 256

struct thrash_guard {
        uint64_t last_max_events;
        uint64_t last_refaults;
        int hot_samples;
        uint64_t next_us;
};

static bool thrash_guard(struct thrash_guard *guard, uint64_t now)
{
        if (now < guard->next_us)
                return false;
        guard->next_us = now + THRASH_SAMPLE_MS * 1000u;
        uint64_t refaults = read_key(JOB_CGROUP "/memory.stat", "workingset_refault_file");
        uint64_t max_events = read_key(JOB_CGROUP "/memory.events", "max");
        bool at_cap = max_events > guard->last_max_events;
        bool refaulting = refaults - guard->last_refaults >= THRASH_REFAULT_PAGES;
        guard->last_refaults = refaults;
        guard->last_max_events = max_events;
        guard->hot_samples = at_cap && refaulting ? guard->hot_samples + 1 : 0;
        return guard->hot_samples >= THRASH_SAMPLES;
}

/* The job cgroup's counters the report gives as deltas from the program's start (a pool entry's
 * take). Its peaks are not among them: Linux 6.1 cannot reset memory.peak or pids.peak, so a pool
 * entry's count from the guest's boot, its waiting loader's included. */
struct counters {
        uint64_t oom_kills, max_events, pids_max_events, cpu_usage_us, cpu_throttled_us,
                cpu_nr_throttled;
};

static struct counters read_counters(void)
{
        return (struct counters){
                .oom_kills = read_key(JOB_CGROUP "/memory.events", "oom_kill"),
                .max_events = read_key(JOB_CGROUP "/memory.events", "max"),
                .pids_max_events = read_key(JOB_CGROUP "/pids.events", "max"),
                .cpu_usage_us = read_key(JOB_CGROUP "/cpu.stat", "usage_usec"),
                .cpu_throttled_us = read_key(JOB_CGROUP "/cpu.stat", "throttled_usec"),
                .cpu_nr_throttled = read_key(JOB_CGROUP "/cpu.stat", "nr_throttled"),
        };
}

/* Pool mode: waits until the take's first bytes are there; a loader that ends before (the
 * keeper, init's one child, with it) is init's failure, not a request's result. */
static void await_take(int tty, int child_fd, pid_t keeper)
{
        for (;;) {
                struct pollfd fds[2] = {{.fd = tty, .events = POLLIN},
                                        {.fd = child_fd, .events = POLLIN}};
                if (poll(fds, 2, -1) < 0 && errno != EINTR)
                        fail("poll: %s", strerror(errno));
                if (fds[0].revents != 0)
                        return;
                if (fds[1].revents != 0) {
                        struct signalfd_siginfo info;
                        while (read(child_fd, &info, sizeof info) > 0)
                                ;
                        if (waitpid(keeper, NULL, WNOHANG) == keeper)
                                fail("the pool's program ended before its take");
                }
        }
}

/* Pool mode: the bytes of console 4 after the take, copied to the loader's stdin as the loader
 * reads them (it may never read the program's stdin: nothing blocks init then). */
struct feed {
        int from, to;      /* console 4, the write end of the loader's stdin; -1 once done */
        uint64_t left;     /* bytes yet to read from console 4 */
        size_t start, end; /* buffer[start, end): read, not yet written */
        char buffer[65536];
};

static void feed_stop(struct feed *feed)
{
        if (feed->to >= 0)
                close(feed->to);
        feed->to = -1;
}

static short feed_events(const struct feed *feed, bool reading)
{
        if (feed->to < 0)
                return 0;
        if (reading)
                return feed->start == feed->end && feed->left > 0 ? POLLIN : 0;
        return feed->start < feed->end ? POLLOUT : 0;
}

static void feed_read(struct feed *feed)
{
        size_t want = feed->left < sizeof feed->buffer ? (size_t)feed->left : sizeof feed->buffer;
        ssize_t n = read(feed->from, feed->buffer, want);
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
                return;
        if (n <= 0) { /* the host's end is gone: the run is over anyway */
                feed_stop(feed);
                return;
        }
        feed->start = 0;
        feed->end = (size_t)n;
        feed->left -= (uint64_t)n;
}

static void feed_write(struct feed *feed)
{
        ssize_t n = write(feed->to, feed->buffer + feed->start, feed->end - feed->start);
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
                return;
        if (n < 0) { /* the loader closed its stdin */
                feed_stop(feed);
                return;
        }
        feed->start += (size_t)n;
        if (feed->start == feed->end && feed->left == 0)
                feed_stop(feed); /* the program's stdin ends here */
}

/* Copies what is readable on from to the console to; false at end of file. */
static bool relay(int from, int to)
{
        static char buffer[65536];
        ssize_t n = read(from, buffer, sizeof buffer);
        if (n < 0)
                return errno == EAGAIN || errno == EINTR;
        if (n == 0)
                return false;
        for (ssize_t done = 0; done < n;) {
                ssize_t w = write(to, buffer + done, (size_t)(n - done));
                if (w < 0 && errno != EINTR)
                        return true; /* the host's end is gone: the run is over anyway */
                if (w > 0)
                        done += w;
        }
        return true;
}

/* Starts the program's keeper (run_keeper) in new pid and mount namespaces with stdio as the
 * program's; inits are init's n_inits descriptors (-1: none), closed in the keeper, and init
 * closes its copies of the keeper's. */
static pid_t start_keeper(struct job *job, const int *inits, size_t n_inits, const int stdio[3],
                          int status_fd)
{
        pid_t keeper = (pid_t)syscall(SYS_clone, CLONE_NEWPID | CLONE_NEWNS | SIGCHLD, NULL, NULL,
                                      NULL, 0);
        if (keeper < 0)
                fail("clone the program's keeper: %s", strerror(errno));
        if (keeper == 0) {
                for (size_t i = 0; i < n_inits; i++)
                        if (inits[i] >= 0)
                                close(inits[i]);
                for (int fd = 0; fd < 3; fd++) /* kept across the program's exec */
                        if (fcntl(stdio[fd], F_SETFD, 0) < 0)
                                _exit(126);
                run_keeper(job, status_fd, stdio);
        }
        close(status_fd);
        for (int fd = 0; fd < 3; fd++)
                close(stdio[fd]);
        return keeper;
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
        if (mkdir(CGROUP_ROOT, 0700) < 0 || mkdir(SCRATCH, 0700) < 0 ||
            mkdir(PROGRAM_DEV, 0700) < 0)
                fail("make init's directories: %s", strerror(errno));
        if (mount("cgroup2", CGROUP_ROOT, "cgroup2", MS_NOSUID | MS_NODEV | MS_NOEXEC,
                  "nsdelegate") < 0)
                fail("mount cgroup2: %s", strerror(errno));
        if (sethostname(HOSTNAME, strlen(HOSTNAME)) < 0)
                fail("sethostname: %s", strerror(errno));

        static struct job job;
        read_job(&job);
        nr_open = read_number("/proc/sys/fs/nr_open");

        /* The program's scratch: one tmpfs of the job's disk size, its /workspace, /tmp and
         * /dev/shm, owned by the uid its namespace maps to root. */
        char options[64];
        snprintf(options, sizeof options, "size=%" PRIu64 ",mode=0755", job.disk);
        if (mount("tmpfs", SCRATCH, "tmpfs", MS_NOSUID | MS_NODEV, options) < 0)
                fail("mount the scratch tmpfs: %s", strerror(errno));
        static const struct {
                const char *path;
                mode_t mode;
        } dirs[] = {{SCRATCH "/workspace", 0755}, {SCRATCH "/tmp", 01777}, {SCRATCH "/shm", 01777}};
        for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++)
                if (mkdir(dirs[i].path, dirs[i].mode) < 0 ||
                    chmod(dirs[i].path, dirs[i].mode) < 0 ||
                    chown(dirs[i].path, PROGRAM_UID, PROGRAM_UID) < 0)
                        fail("make %s: %s", dirs[i].path, strerror(errno));
        copy_tree(STAGING "/files", SCRATCH "/workspace");
        /* A pool entry's program's stdin (a loader's, an exec entry's) is init's to feed (struct
         * feed); a cold program's is the staged file. */
        static struct feed feed = {.from = -1, .to = -1};
        int stdin_fd = -1;
        if (job.pool) {
                int pipe_fds[2];
                if (pipe2(pipe_fds, O_CLOEXEC) < 0)
                        fail("pipe: %s", strerror(errno));
                stdin_fd = pipe_fds[0];
                feed.to = pipe_fds[1];
        } else {
                stdin_fd =
                        open(job.stdin_file ? STAGING "/stdin" : "/dev/null", O_RDONLY | O_CLOEXEC);
        }
        if (stdin_fd < 0)
                fail("open the program's stdin: %s", strerror(errno));
        if (mount(SCRATCH "/workspace", "/workspace", NULL, MS_BIND, NULL) < 0 ||
            mount(SCRATCH "/tmp", "/tmp", NULL, MS_BIND, NULL) < 0)
                fail("bind the scratch directories: %s", strerror(errno));

        set_up_cgroup(&job);
        preload(job.argv[0]);
        int out_tty = open_tty("/dev/tty1");
        int err_tty = open_tty("/dev/tty2");
        int out[2], err[2], status[2];
        if (pipe2(out, O_CLOEXEC) < 0 || pipe2(err, O_CLOEXEC) < 0 || pipe2(status, O_CLOEXEC) < 0)
                fail("pipes: %s", strerror(errno));
        /* The program's own, as a native sandbox's are (launch.c): it may reopen them by name
         * (/dev/stdout, /dev/stdin), and the pipe's owner is checked then. */
        int program_pipes[] = {out[1], err[1], job.pool ? stdin_fd : -1};
        for (size_t i = 0; i < sizeof program_pipes / sizeof program_pipes[0]; i++)
                if (program_pipes[i] >= 0 && fchown(program_pipes[i], PROGRAM_UID, PROGRAM_UID) < 0)
                        fail("chown the program's pipes: %s", strerror(errno));

        sigset_t child;
        sigemptyset(&child);
        sigaddset(&child, SIGCHLD);
        sigprocmask(SIG_BLOCK, &child, NULL);
        int child_fd = signalfd(-1, &child, SFD_CLOEXEC | SFD_NONBLOCK);
        if (child_fd < 0)
                fail("signalfd: %s", strerror(errno));
        /* Exec mode: the pipe that carries the execution's header to the program. */
        int execution_to = -1;
        if (job.exec) {
                int fds[2];
                if (pipe2(fds, O_CLOEXEC) < 0)
                        fail("pipe: %s", strerror(errno));
                execution_fd = fds[0];
                execution_to = fds[1];
        }
        /* Nothing of init's goes with the keeper: its report channel least of all. */
        const int inits[] = {report_fd, child_fd,  out_tty,      err_tty, out[0],
                             err[0],    status[0], execution_to, feed.to};
        int stdio[3] = {stdin_fd, out[1], err[1]};
        uint64_t started = now_us();
        pid_t keeper = start_keeper(&job, inits, sizeof inits / sizeof inits[0], stdio, status[1]);
        if (execution_fd >= 0)
                close(execution_fd);

        struct counters before = {0};
        if (job.pool) {
                /* The program's "R" first on its stdout (a loader's, guest/python_loader.py, or
                 * an exec entry's at its exec: start_execution), then init's on console 3: the
                 * host's native start returns, and the entry waits for its take, from which on
                 * the program's caps and clock are the request's. */
                char ready = 0;
                if (read(out[0], &ready, 1) != 1 || ready != 'R') {
                        char said[200] = "";
                        fcntl(err[0], F_SETFL, O_NONBLOCK);
                        ssize_t n = read(err[0], said, sizeof said - 1);
                        fail("the pool's program did not become ready: %.*s", n > 0 ? (int)n : 0,
                             said);
                }
                feed.from = open("/dev/tty4", O_RDONLY | O_NOCTTY | O_CLOEXEC);
                if (feed.from < 0)
                        fail("open /dev/tty4: %s", strerror(errno));
                make_raw(feed.from, "/dev/tty4");
                if (write(report_fd, "R", 1) != 1)
                        fail("say ready: %s", strerror(errno));
                await_take(feed.from, child_fd, keeper);
                read_take(feed.from, &job);
                set_caps(&job);
                before = read_counters();
                started = now_us();
                /* An exec entry's files are written here, as a loader writes them on its clock;
                 * then its program execs. */
                uint64_t taken = job.exec ? read_execution(feed.from, &job, execution_to) : 0;
                if (taken > job.input)
                        fail("the execution is larger than the take's input");
                feed.left = job.input - taken;
                if (feed.left == 0)
                        feed_stop(&feed);
                fcntl(feed.from, F_SETFL, O_NONBLOCK);
                fcntl(feed.to, F_SETFL, O_NONBLOCK);
        }
        fcntl(out[0], F_SETFL, O_NONBLOCK);
        fcntl(err[0], F_SETFL, O_NONBLOCK);
        struct thrash_guard guard = {.next_us = started};
        bool out_open = true, err_open = true, keeper_done = false, wall_timeout = false,
             thrash_kill = false;
        uint64_t deadline = started + job.wall_ms * 1000u;
        while (!keeper_done || out_open || err_open) {
                uint64_t now = now_us();
                if (!keeper_done && !wall_timeout && now >= deadline) {
                        wall_timeout = true;
                        write_file(JOB_CGROUP "/cgroup.kill", "1");
                }
                if (!keeper_done && !wall_timeout && !thrash_kill && thrash_guard(&guard, now)) {
                        thrash_kill = true;
                        write_file(JOB_CGROUP "/cgroup.kill", "1");
                }
                uint64_t wake = guard.next_us < deadline ? guard.next_us : deadline;
                int timeout_ms = keeper_done || wall_timeout || thrash_kill
                                         ? -1
                                         : (int)((wake > now ? wake - now : 0) / 1000u + 1);
                struct pollfd fds[5] = {{.fd = out_open ? out[0] : -1, .events = POLLIN},
                                        {.fd = err_open ? err[0] : -1, .events = POLLIN},
                                        {.fd = keeper_done ? -1 : child_fd, .events = POLLIN},
                                        {.fd = feed.from, .events = feed_events(&feed, true)},
                                        {.fd = feed.to, .events = feed_events(&feed, false)}};
                for (int i = 3; i < 5; i++)
                        if (fds[i].events == 0)
                                fds[i].fd = -1;
                if (poll(fds, 5, timeout_ms) < 0 && errno != EINTR)
                        fail("poll: %s", strerror(errno));
                if (fds[3].revents != 0)
                        feed_read(&feed);
                if (fds[4].revents != 0)
                        feed_write(&feed);
                if (fds[0].revents != 0)
                        out_open = relay(out[0], out_tty);
                if (fds[1].revents != 0)
                        err_open = relay(err[0], err_tty);
                if (fds[2].revents != 0) {
                        struct signalfd_siginfo info;
                        while (read(child_fd, &info, sizeof info) > 0)
                                ;
                        int st;
                        pid_t pid;
                        while ((pid = waitpid(-1, &st, WNOHANG)) > 0)
                                if (pid == keeper)
                                        keeper_done = true;
                        /* The keeper's end ended its pid namespace; a process that holds the
                         * pipes and escaped it (none can: its filter refuses setns) would keep
                         * them open: the cgroup's kill ends that too. */
                        if (keeper_done) {
                                write_file(JOB_CGROUP "/cgroup.kill", "1");
                                feed_stop(&feed);
                        }
                }
        }
        int program_status = 0;
        bool program_ended = read(status[0], &program_status, sizeof program_status) ==
                             (ssize_t)sizeof program_status;
        uint64_t wall_us = now_us() - started;
        for (int i = 0; i < 1000 && read_key(JOB_CGROUP "/cgroup.events", "populated") != 0; i++)
                usleep(1000);

        struct statvfs disk = {0};
        statvfs(SCRATCH, &disk);
        uint64_t disk_total = (uint64_t)disk.f_blocks * disk.f_frsize;
        uint64_t disk_used = disk_total - (uint64_t)disk.f_bfree * disk.f_frsize;
        /* Killed by init (its deadline, the thrash guard) before its keeper could say: SIGKILL. */
        int exited = program_ended && WIFEXITED(program_status);
        int code = exited ? WEXITSTATUS(program_status) : 0;
        int killed_by = !program_ended                ? SIGKILL
                        : WIFSIGNALED(program_status) ? WTERMSIG(program_status)
                                                      : 0;
        struct counters after = read_counters();
        dprintf(report_fd,
                "sandboxd-uml-report 1 exited=%d code=%d signal=%d wall_timeout=%d "
                "thrash_kills=%d wall_us=%" PRIu64 " oom_kills=%" PRIu64
                " memory_max_events=%" PRIu64 " memory_peak_bytes=%" PRIu64
                " pids_max_events=%" PRIu64 " pids_peak=%" PRIu64 " cpu_usage_us=%" PRIu64
                " cpu_throttled_us=%" PRIu64 " cpu_nr_throttled=%" PRIu64
                " disk_used_bytes=%" PRIu64 " disk_total_bytes=%" PRIu64 " inodes_free=%" PRIu64
                "\n",
                exited, code, killed_by, wall_timeout, thrash_kill, wall_us,
                after.oom_kills - before.oom_kills, after.max_events - before.max_events,
                read_number(JOB_CGROUP "/memory.peak"),
                after.pids_max_events - before.pids_max_events,
                read_number(JOB_CGROUP "/pids.peak"), after.cpu_usage_us - before.cpu_usage_us,
                after.cpu_throttled_us - before.cpu_throttled_us,
                after.cpu_nr_throttled - before.cpu_nr_throttled, disk_used, disk_total,
                (uint64_t)disk.f_ffree);
        power_off();
}
