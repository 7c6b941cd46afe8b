/* The files in a sandbox's cgroup directories: the limits written at acquire time, the v1
 * `tasks` files that attach the calling thread before it clones (and the cgroup.procs files a
 * forked child joins), and the counters read as
 * evidence (the mapping per layout is at the top of cgroup.h). */
#include "sandbox/native/cgroup.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sandbox/native/cgroup_internal.h"
#include "util/cleanup.h"
#include "util/file.h"

/* CFS bandwidth: a 100 ms period is the kernel default and what cpu.max shows; the kernel
 * refuses a quota under 1 ms. */
#define CPU_PERIOD_US    100000
#define CPU_MIN_QUOTA_US 1000

/* ---- limits ------------------------------------------------------------------------------- */

static int write_limit(int dirfd, const char *name, const char *value, struct sbx_error *err)
{
        if (sbx_write_file_at(dirfd, name, value, err) < 0)
                return sbx_error_prefix(err, "cgroup: limit");
        return 0;
}

/* Writes name when the file exists: for knobs the kernel only has in some configurations. */
static int write_optional(int dirfd, const char *name, const char *value, struct sbx_error *err)
{
        struct stat st;
        if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0 && errno == ENOENT)
                return 0;
        return write_limit(dirfd, name, value, err);
}

static int set_v1_memory(int memory_fd, const char *value, struct sbx_error *err)
{
        struct stat st;
        bool has_memsw =
                fstatat(memory_fd, "memory.memsw.limit_in_bytes", &st, AT_SYMLINK_NOFOLLOW) == 0;
        /* The kernel keeps memory <= memory+swap: lowering goes memory first, raising memsw
         * first. The order that fails with EINVAL is the wrong one for this change. */
        struct sbx_error ignored;
        if (sbx_write_file_at(memory_fd, "memory.limit_in_bytes", value, &ignored) == 0)
                return has_memsw ? write_limit(memory_fd, "memory.memsw.limit_in_bytes", value, err)
                                 : 0;
        if (!has_memsw || ignored.code != EINVAL)
                return write_limit(memory_fd, "memory.limit_in_bytes", value, err);
        if (write_limit(memory_fd, "memory.memsw.limit_in_bytes", value, err) < 0)
                return -1;
        return write_limit(memory_fd, "memory.limit_in_bytes", value, err);
}

int cgroup_set_limits(struct cgroup *cg, const struct sbx_limits *limits, bool oom_kills_all,
                      struct sbx_error *err)
{
        bool unified = cg->mounts->layout == CGROUP_LAYOUT_UNIFIED;
        int memory_fd = controller_fd(cg, HIERARCHY_MEMORY);
        int pids_fd = controller_fd(cg, HIERARCHY_PIDS);
        int cpu_fd = controller_fd(cg, HIERARCHY_CPU);

        char memory[32];
        if (limits->memory_bytes == 0)
                snprintf(memory, sizeof(memory), "%s", unified ? "max" : "-1");
        else
                snprintf(memory, sizeof(memory), "%" PRIu64, limits->memory_bytes);
        char pids[32];
        if (limits->pids == 0)
                snprintf(pids, sizeof(pids), "max");
        else
                snprintf(pids, sizeof(pids), "%" PRIu64, limits->pids);
        uint64_t quota_us = (uint64_t)limits->cpu_millicores * CPU_PERIOD_US / 1000;
        if (limits->cpu_millicores != 0 && quota_us < CPU_MIN_QUOTA_US)
                quota_us = CPU_MIN_QUOTA_US;

        if (unified) {
                /* swap.max 0: a memory hog is OOM-killed at memory.max instead of swapping;
                 * oom.group: the OOM killer takes the whole sandbox, not one victim of it
                 * (written either way: a pooled cgroup's earlier value must not carry over). */
                if (write_limit(memory_fd, "memory.max", memory, err) < 0 ||
                    write_optional(memory_fd, "memory.swap.max", "0", err) < 0 ||
                    write_optional(memory_fd, "memory.oom.group", oom_kills_all ? "1" : "0", err) <
                            0 ||
                    write_limit(pids_fd, "pids.max", pids, err) < 0)
                        return -1;
                struct stat st;
                bool has_cpu = fstatat(cpu_fd, "cpu.max", &st, AT_SYMLINK_NOFOLLOW) == 0;
                if (!has_cpu) {
                        if (limits->cpu_millicores != 0)
                                return sbx_error_set(err, ENOTSUP,
                                                     "cgroup: cpu controller not available");
                        return 0;
                }
                char cpu[64];
                if (limits->cpu_millicores == 0)
                        snprintf(cpu, sizeof(cpu), "max %d", CPU_PERIOD_US);
                else
                        snprintf(cpu, sizeof(cpu), "%" PRIu64 " %d", quota_us, CPU_PERIOD_US);
                return write_limit(cpu_fd, "cpu.max", cpu, err);
        }

        if (set_v1_memory(memory_fd, memory, err) < 0 ||
            write_limit(pids_fd, "pids.max", pids, err) < 0)
                return -1;
        if (cpu_fd < 0) {
                if (limits->cpu_millicores != 0)
                        return sbx_error_set(err, ENOTSUP, "cgroup: no v1 cpu hierarchy");
                return 0;
        }
        /* The period is not written: a new v1 cgroup starts with the kernel's default, which is
         * CPU_PERIOD_US, and every sandbox's cgroup is new. */
        char quota[32];
        if (limits->cpu_millicores == 0)
                snprintf(quota, sizeof(quota), "-1");
        else
                snprintf(quota, sizeof(quota), "%" PRIu64, quota_us);
        return write_limit(cpu_fd, "cpu.cfs_quota_us", quota, err);
}

/* ---- attaching the caller ----------------------------------------------------------------- */

/* The directory this thread is in now in v1 hierarchy h, as an fd. */
static int open_current_v1_dir(const struct cgroup *cg, int h, const char *proc_cgroup,
                               struct sbx_error *err)
{
        char path[PATH_MAX];
        if (cgroup_parse_proc_path(proc_cgroup, cgroup_hierarchy_names[h], path, sizeof(path),
                                   err) < 0)
                return -1;
        char full[PATH_MAX * 2];
        snprintf(full, sizeof(full), "%s%s", hierarchy_mount(cg->mounts, (enum cgroup_hierarchy)h),
                 path);
        int fd = open(full, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0)
                return sbx_error_set(err, errno, "cgroup: open %s", full);
        return fd;
}

int cgroup_enter_self(struct cgroup *cg, struct sbx_error *err)
{
        if (cg->mounts->layout == CGROUP_LAYOUT_UNIFIED)
                return 0;
        _cleanup_free_ char *proc_cgroup = NULL;
        if (sbx_read_text_at(AT_FDCWD, "/proc/thread-self/cgroup", &proc_cgroup, err) < 0)
                return sbx_error_prefix(err, "cgroup");
        for (int h = 0; h < HIERARCHY_COUNT; h++) {
                if (h == HIERARCHY_UNIFIED || !owns_directory(cg, h) || cg->dirs[h].fd < 0)
                        continue;
                if (cg->return_fds[h] < 0) {
                        cg->return_fds[h] = open_current_v1_dir(cg, h, proc_cgroup, err);
                        if (cg->return_fds[h] < 0)
                                return -1;
                }
                if (sbx_write_file_at(cg->dirs[h].fd, "tasks", "0", err) < 0) {
                        struct sbx_error ignored = {0};
                        (void)cgroup_leave_self(cg, &ignored);
                        return sbx_error_prefix(err, "cgroup: enter %s/%s",
                                                cgroup_hierarchy_names[h], cg->name);
                }
        }
        return 0;
}

int cgroup_leave_self(struct cgroup *cg, struct sbx_error *err)
{
        int rc = 0;
        for (int h = 0; h < HIERARCHY_COUNT; h++) {
                if (cg->return_fds[h] < 0)
                        continue;
                if (sbx_write_file_at(cg->return_fds[h], "tasks", "0", err) < 0)
                        rc = sbx_error_prefix(err, "cgroup: leave %s/%s", cgroup_hierarchy_names[h],
                                              cg->name);
        }
        return rc;
}

int cgroup_open_v1_tasks(const struct cgroup *cg, int *fds, size_t max, size_t *n,
                         struct sbx_error *err)
{
        *n = 0;
        if (cg->mounts->layout == CGROUP_LAYOUT_UNIFIED)
                return 0;
        for (int h = 0; h < HIERARCHY_COUNT; h++) {
                if (h == HIERARCHY_UNIFIED || !owns_directory(cg, h) || cg->dirs[h].fd < 0)
                        continue;
                int fd = *n < max ? openat(cg->dirs[h].fd, "tasks", O_WRONLY | O_CLOEXEC) : -1;
                if (fd < 0) {
                        int code = *n < max ? errno : E2BIG;
                        while (*n > 0)
                                close(fds[--*n]);
                        return sbx_error_set(err, code, "cgroup: open %s/%s/tasks",
                                             cgroup_hierarchy_names[h], cg->name);
                }
                fds[(*n)++] = fd;
        }
        return 0;
}

int cgroup_join_child(const struct cgroup *cg)
{
        for (int h = 0; h < HIERARCHY_COUNT; h++) {
                if (!owns_directory(cg, h) || cg->dirs[h].fd < 0)
                        continue;
                int fd = openat(cg->dirs[h].fd, "cgroup.procs", O_WRONLY | O_CLOEXEC);
                if (fd < 0)
                        return -errno;
                ssize_t n = write(fd, "0", 1);
                int code = errno;
                close(fd);
                if (n != 1)
                        return -(n < 0 ? code : EIO);
        }
        return 0;
}

/* ---- processes ---------------------------------------------------------------------------- */

int cgroup_processes(const struct cgroup *cg, pid_t *pids, size_t max, size_t *n,
                     struct sbx_error *err)
{
        *n = 0;
        _cleanup_free_ char *text = NULL;
        if (sbx_read_text_at(dir_fd(cg, cg->primary), "cgroup.procs", &text, err) < 0)
                return sbx_error_prefix(err, "cgroup: %s", cg->name);
        for (char *p = text, *end; *p != '\0'; p = end) {
                long pid = strtol(p, &end, 10);
                if (end == p)
                        break;
                if (pid <= 0)
                        continue;
                if (*n == max)
                        return sbx_error_set(err, E2BIG, "cgroup: %s: over %zu processes", cg->name,
                                             max);
                pids[(*n)++] = (pid_t)pid;
        }
        return 0;
}

/* ---- evidence ----------------------------------------------------------------------------- */

/* Reads counter file `file` (name, in the directory dirfd) into buf (NUL-terminated): through
 * its kept fd, opened at the first read. 1 when read, 0 when an optional file does not exist,
 * -1 with err. */
static int read_counter_file(struct cgroup *cg, enum evidence_file file, int dirfd,
                             const char *name, bool optional, char *buf, size_t size,
                             struct sbx_error *err)
{
        int *fd = &cg->evidence_fds[file];
        if (*fd == EVIDENCE_FD_MISSING)
                return 0;
        if (*fd == EVIDENCE_FD_UNOPENED) {
                *fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
                if (*fd < 0) {
                        int code = errno;
                        *fd = EVIDENCE_FD_UNOPENED;
                        if (optional && code == ENOENT) {
                                *fd = EVIDENCE_FD_MISSING;
                                return 0;
                        }
                        if (err != NULL)
                                sbx_error_set(err, code, "open %s", name);
                        return -1;
                }
        }
        /* These files are far smaller than buf: one read from offset 0 has all of it. */
        ssize_t n;
        do
                n = pread(*fd, buf, size - 1, 0);
        while (n < 0 && errno == EINTR);
        if (n < 0) {
                if (err != NULL)
                        sbx_error_set(err, errno, "read %s", name);
                return -1;
        }
        buf[n] = '\0';
        return 1;
}

/* Reads a single-value file; an optional file that does not exist reads as 0. */
static int read_value(struct cgroup *cg, enum evidence_file file, int dirfd, const char *name,
                      bool optional, uint64_t *value, struct sbx_error *err)
{
        *value = 0;
        if (dirfd < 0)
                return 0;
        char text[64];
        int got = read_counter_file(cg, file, dirfd, name, optional, text, sizeof(text), err);
        if (got <= 0)
                return got;
        if (cgroup_parse_value(text, value, err) < 0)
                return sbx_error_prefix(err, "%s", name);
        return 0;
}

/* One "key value" line of a flat-keyed file; an optional one that is missing reads as 0. */
struct keyed_field {
        const char *key;
        uint64_t *value;
        bool optional;
};

/* Reads a flat-keyed file once and takes every field from it; a missing file reads as 0 for
 * optional fields. */
static int read_keyed(struct cgroup *cg, enum evidence_file file, int dirfd, const char *name,
                      const struct keyed_field *fields, size_t n, struct sbx_error *err)
{
        for (size_t i = 0; i < n; i++)
                *fields[i].value = 0;
        if (dirfd < 0)
                return 0;
        char text[1024];
        struct sbx_error failure = {0};
        int got = read_counter_file(cg, file, dirfd, name, false, text, sizeof(text), &failure);
        for (size_t i = 0; i < n; i++) {
                if (got > 0 &&
                    cgroup_parse_keyed(text, fields[i].key, fields[i].value, &failure) == 0)
                        continue;
                if (fields[i].optional && failure.code == ENOENT)
                        continue;
                sbx_error_prefix(&failure, "%s", name);
                if (err != NULL)
                        *err = failure;
                return -1;
        }
        return 0;
}

/* Reads the raw counters into evidence's fields (absolute values, microseconds for CPU). */
static int read_counters(struct cgroup *cg, struct sbx_evidence *raw, struct sbx_error *err)
{
        memset(raw, 0, sizeof(*raw));
        int memory_fd = controller_fd(cg, HIERARCHY_MEMORY);
        int pids_fd = controller_fd(cg, HIERARCHY_PIDS);
        int cpu_fd = controller_fd(cg, HIERARCHY_CPU);
        const struct keyed_field pids_events[] = {{"max", &raw->pids_max_events, false}};
        if (read_keyed(cg, EVIDENCE_PIDS_EVENTS, pids_fd, "pids.events", pids_events, 1, err) < 0 ||
            read_value(cg, EVIDENCE_PIDS_PEAK, pids_fd, "pids.peak", true, &raw->pids_peak, err) <
                    0)
                return -1;
        if (cg->mounts->layout == CGROUP_LAYOUT_UNIFIED) {
                const struct keyed_field memory_events[] = {
                        {"oom_kill", &raw->oom_kills, false},
                        {"max", &raw->memory_max_events, false},
                };
                /* The throttling keys are present only while the cpu controller is enabled for
                 * the cgroup. */
                const struct keyed_field cpu_stat[] = {
                        {"usage_usec", &raw->cpu_usage_us, false},
                        {"throttled_usec", &raw->cpu_throttled_us, true},
                        {"nr_throttled", &raw->cpu_nr_throttled, true},
                };
                if (read_keyed(cg, EVIDENCE_MEMORY_EVENTS, memory_fd, "memory.events",
                               memory_events, 2, err) < 0 ||
                    read_value(cg, EVIDENCE_MEMORY_PEAK, memory_fd, "memory.peak", true,
                               &raw->memory_peak_bytes, err) < 0 ||
                    read_keyed(cg, EVIDENCE_CPU_STAT, cpu_fd, "cpu.stat", cpu_stat, 3, err) < 0)
                        return -1;
                return 0;
        }
        uint64_t usage_ns = 0;
        uint64_t throttled_ns = 0;
        const struct keyed_field oom_control[] = {{"oom_kill", &raw->oom_kills, false}};
        const struct keyed_field cpu_stat[] = {
                {"throttled_time", &throttled_ns, false},
                {"nr_throttled", &raw->cpu_nr_throttled, false},
        };
        if (read_keyed(cg, EVIDENCE_OOM_CONTROL, memory_fd, "memory.oom_control", oom_control, 1,
                       err) < 0 ||
            read_value(cg, EVIDENCE_MEMORY_FAILCNT, memory_fd, "memory.failcnt", false,
                       &raw->memory_max_events, err) < 0 ||
            read_value(cg, EVIDENCE_MEMORY_MAX_USAGE, memory_fd, "memory.max_usage_in_bytes", false,
                       &raw->memory_peak_bytes, err) < 0 ||
            read_keyed(cg, EVIDENCE_CPU_STAT, cpu_fd, "cpu.stat", cpu_stat, 2, err) < 0)
                return -1;
        if (cg->mounts->layout == CGROUP_LAYOUT_HYBRID) {
                uint64_t usage_us = 0;
                const struct keyed_field unified_cpu_stat[] = {{"usage_usec", &usage_us, false}};
                if (read_keyed(cg, EVIDENCE_UNIFIED_CPU_STAT, dir_fd(cg, HIERARCHY_UNIFIED),
                               "cpu.stat", unified_cpu_stat, 1, err) < 0)
                        return -1;
                usage_ns = usage_us * 1000;
        } else if (read_value(cg, EVIDENCE_CPUACCT_USAGE, controller_fd(cg, HIERARCHY_CPUACCT),
                              "cpuacct.usage", false, &usage_ns, err) < 0) {
                return -1;
        }
        raw->cpu_usage_us = usage_ns / 1000;
        raw->cpu_throttled_us = throttled_ns / 1000;
        return 0;
}

static uint64_t delta(uint64_t now, uint64_t then)
{
        return now >= then ? now - then : 0;
}

int cgroup_reset_baseline(struct cgroup *cg, struct sbx_error *err)
{
        return read_counters(cg, &cg->baseline, err);
}

int cgroup_read_evidence(struct cgroup *cg, struct sbx_evidence *evidence, struct sbx_error *err)
{
        struct sbx_evidence now;
        if (read_counters(cg, &now, err) < 0)
                return sbx_error_prefix(err, "cgroup: %s: evidence", cg->name);
        const struct sbx_evidence *base = &cg->baseline;
        *evidence = (struct sbx_evidence){
                .oom_kills = delta(now.oom_kills, base->oom_kills),
                .memory_max_events = delta(now.memory_max_events, base->memory_max_events),
                .memory_peak_bytes = now.memory_peak_bytes, /* a peak is not a count */
                .pids_max_events = delta(now.pids_max_events, base->pids_max_events),
                .pids_peak = now.pids_peak,
                .cpu_usage_us = delta(now.cpu_usage_us, base->cpu_usage_us),
                .cpu_throttled_us = delta(now.cpu_throttled_us, base->cpu_throttled_us),
                .cpu_nr_throttled = delta(now.cpu_nr_throttled, base->cpu_nr_throttled),
        };
        return 0;
}
