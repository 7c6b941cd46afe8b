/* cgroups for the native backend: the system-call side of cgroup.h (the parsers are in
 * cgroup_parse.c).
 *
 * A sandbox's cgroup is one directory per hierarchy in use, all named by the slot number:
 *   UNIFIED  <cgroup2>/sandboxd/<slot>                     (controllers are files in it)
 *   HYBRID   <cgroup2>/sandboxd/<slot> for tracking, clone3 and cgroup.kill,
 *            <memory|pids|cpu|cpuacct>/sandboxd/<slot> for limits and counters
 *   LEGACY   <memory|pids|cpu|cpuacct|freezer>/sandboxd/<slot>
 * The primary directory (cgroup2, else v1 memory) is created first and removed last, and its
 * locked fd is closed after its rmdir: so a v1 directory without a primary one, or a primary one
 * nobody holds a lock on, is always an orphan of a crashed sandboxd. */
#include "sandbox/native/cgroup.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "util/cleanup.h"
#include "util/file.h"
#include "util/log.h"
#include "util/time.h"

#define CGROUP_PARENT_NAME "sandboxd"

/* cgroup_kill_all's bound: cgroup.kill empties a cgroup of 64 processes in ~7 ms here and the
 * v1 freezer sweep takes ~80 ms; 2 s leaves room for a loaded machine without hanging a request. */
#define KILL_WAIT_US (2 * 1000 * 1000)
/* Freezing waits for every task to reach the refrigerator; one stuck in uninterruptible sleep
 * can delay it. Past this bound the SIGKILL sweep runs anyway and the wait loop catches up. */
#define FREEZE_WAIT_US (1000 * 1000)
/* An unlocked slot directory younger than this may be one another process has just made and is
 * about to lock (mkdir, then flock): only older ones are reclaimed as orphans. */
#define ORPHAN_MIN_AGE_S 2

/* rmdir can briefly see EBUSY right after the last task left (v1 memory css offlining). */
#define RMDIR_WAIT_US (200 * 1000)
/* Polling starts fine-grained, since an emptied cgroup usually reports it within a few ms, and
 * backs off so that a slow one does not cost a busy loop. */
#define POLL_FIRST_US 200
#define POLL_MAX_US   5000

/* CFS bandwidth: a 100 ms period is the kernel default and what cpu.max shows; the kernel
 * refuses a quota under 1 ms. */
#define CPU_PERIOD_US    100000
#define CPU_MIN_QUOTA_US 1000

enum cgroup_hierarchy {
        HIERARCHY_UNIFIED,
        HIERARCHY_MEMORY,
        HIERARCHY_PIDS,
        HIERARCHY_CPU,
        HIERARCHY_CPUACCT,
        HIERARCHY_FREEZER,
        HIERARCHY_COUNT,
};

static const char *const hierarchy_names[HIERARCHY_COUNT] = {
        "unified", "memory", "pids", "cpu", "cpuacct", "freezer",
};

/* One hierarchy's part of a cgroup. Co-mounted controllers ("cpu,cpuacct") share one directory:
 * the later one is an alias and owns no fd. */
struct cgroup_dir {
        bool in_use;
        int alias_of;  /* index of the hierarchy that owns the directory, or -1 */
        int parent_fd; /* <mount>/sandboxd */
        int fd;        /* <mount>/sandboxd/<slot>; for the primary, the locked fd */
};

struct cgroup {
        const struct cgroup_mounts *mounts;
        enum cgroup_hierarchy primary;
        unsigned slot;
        char name[16]; /* the slot in decimal: the directory name in every hierarchy */
        struct cgroup_dir dirs[HIERARCHY_COUNT];
        struct sbx_evidence baseline;
        /* kill_all found it empty: nothing can enter an empty sandbox cgroup again (only its
         * processes' children are ever born there), so later kills have nothing to do. */
        bool emptied;
        /* cgroup_enter_self: the v1 directories the calling thread came from, to go back to. */
        int return_fds[HIERARCHY_COUNT];
};

/* ---- detection ---------------------------------------------------------------------------- */

static pthread_once_t detect_once = PTHREAD_ONCE_INIT;
static struct cgroup_mounts detected_mounts;
static struct sbx_error detect_error;
static int detect_result;

static void detect_run(void)
{
        _cleanup_free_ char *mountinfo = NULL;
        detect_result =
                sbx_read_text_at(AT_FDCWD, "/proc/self/mountinfo", &mountinfo, &detect_error);
        if (detect_result == 0)
                detect_result = cgroup_parse_mountinfo(mountinfo, &detected_mounts, &detect_error);
        if (detect_result < 0)
                sbx_error_prefix(&detect_error, "cgroup: detect");
}

int cgroup_detect(const struct cgroup_mounts **out, struct sbx_error *err)
{
        pthread_once(&detect_once, detect_run);
        if (detect_result < 0) {
                if (err != NULL)
                        *err = detect_error;
                return -1;
        }
        *out = &detected_mounts;
        return 0;
}

/* ---- small helpers ------------------------------------------------------------------------ */

static const char *hierarchy_mount(const struct cgroup_mounts *mounts, enum cgroup_hierarchy h)
{
        switch (h) {
        case HIERARCHY_UNIFIED:
                return mounts->unified;
        case HIERARCHY_MEMORY:
                return mounts->memory;
        case HIERARCHY_PIDS:
                return mounts->pids;
        case HIERARCHY_CPU:
                return mounts->cpu;
        case HIERARCHY_CPUACCT:
                return mounts->cpuacct;
        case HIERARCHY_FREEZER:
                return mounts->freezer;
        case HIERARCHY_COUNT:
                break;
        }
        return "";
}

/* Whether sandboxd puts a directory in hierarchy h on this layout (see the top of the file). */
static bool hierarchy_in_use(const struct cgroup_mounts *mounts, enum cgroup_hierarchy h)
{
        if (hierarchy_mount(mounts, h)[0] == '\0')
                return false;
        switch (mounts->layout) {
        case CGROUP_LAYOUT_UNIFIED:
                return h == HIERARCHY_UNIFIED;
        case CGROUP_LAYOUT_HYBRID:
                /* cgroup.kill replaces the freezer, and the cgroup2 directory's cpu.stat counts
                 * CPU usage without any controller: one hierarchy less to create and remove. */
                return h != HIERARCHY_FREEZER && h != HIERARCHY_CPUACCT;
        case CGROUP_LAYOUT_LEGACY:
                return h != HIERARCHY_UNIFIED;
        }
        return false;
}

static void sleep_us(uint64_t microseconds)
{
        struct timespec ts = {.tv_sec = (time_t)(microseconds / 1000000),
                              .tv_nsec = (long)(microseconds % 1000000) * 1000};
        while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
                ;
}

static uint64_t next_poll_us(uint64_t current)
{
        return current * 2 > POLL_MAX_US ? POLL_MAX_US : current * 2;
}

static bool is_slot_name(const char *name, unsigned *slot)
{
        if (name[0] < '0' || name[0] > '9' || (name[0] == '0' && name[1] != '\0'))
                return false;
        unsigned long value = 0;
        for (const char *p = name; *p != '\0'; p++) {
                if (*p < '0' || *p > '9' || value > (unsigned long)UINT32_MAX / 10)
                        return false;
                value = value * 10 + (unsigned long)(*p - '0');
        }
        if (value > UINT32_MAX)
                return false;
        *slot = (unsigned)value;
        return true;
}

static bool word_in_list(const char *list, const char *word)
{
        size_t length = strlen(word);
        for (const char *p = list; *p != '\0';) {
                while (*p == ' ' || *p == '\n')
                        p++;
                const char *end = p;
                while (*end != '\0' && *end != ' ' && *end != '\n')
                        end++;
                if ((size_t)(end - p) == length && memcmp(p, word, length) == 0)
                        return true;
                p = end;
        }
        return false;
}

static int open_directory_at(int dirfd, const char *name)
{
        return openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
}

/* ---- struct cgroup lifetime --------------------------------------------------------------- */

static struct cgroup *cgroup_new(const struct cgroup_mounts *mounts, struct sbx_error *err)
{
        struct cgroup *cg = calloc(1, sizeof(*cg));
        if (cg == NULL) {
                sbx_error_set(err, ENOMEM, "cgroup: allocate");
                return NULL;
        }
        cg->mounts = mounts;
        cg->primary = mounts->layout == CGROUP_LAYOUT_LEGACY ? HIERARCHY_MEMORY : HIERARCHY_UNIFIED;
        for (int h = 0; h < HIERARCHY_COUNT; h++) {
                struct cgroup_dir *dir = &cg->dirs[h];
                dir->parent_fd = dir->fd = -1;
                cg->return_fds[h] = -1;
                dir->alias_of = -1;
                dir->in_use = hierarchy_in_use(mounts, (enum cgroup_hierarchy)h);
                if (!dir->in_use)
                        continue;
                for (int earlier = 0; earlier < h; earlier++) {
                        if (cg->dirs[earlier].in_use &&
                            strcmp(hierarchy_mount(mounts, (enum cgroup_hierarchy)earlier),
                                   hierarchy_mount(mounts, (enum cgroup_hierarchy)h)) == 0) {
                                dir->alias_of = earlier;
                                break;
                        }
                }
        }
        return cg;
}

/* Whether cg owns a directory in h: in use, and not an alias of another hierarchy's. */
static bool owns_directory(const struct cgroup *cg, int h)
{
        return cg->dirs[h].in_use && cg->dirs[h].alias_of < 0;
}

/* The directory fd serving hierarchy h (through an alias), or -1. */
static int dir_fd(const struct cgroup *cg, enum cgroup_hierarchy h)
{
        const struct cgroup_dir *dir = &cg->dirs[h];
        if (!dir->in_use)
                return -1;
        return dir->alias_of >= 0 ? cg->dirs[dir->alias_of].fd : dir->fd;
}

/* Where a controller's files are: in the cgroup2 directory on the unified layout, else in the
 * controller's own v1 directory. */
static int controller_fd(const struct cgroup *cg, enum cgroup_hierarchy h)
{
        if (cg->mounts->layout == CGROUP_LAYOUT_UNIFIED)
                return dir_fd(cg, HIERARCHY_UNIFIED);
        return dir_fd(cg, h);
}

static void set_slot(struct cgroup *cg, unsigned slot)
{
        cg->slot = slot;
        snprintf(cg->name, sizeof(cg->name), "%u", slot);
}

/* Closes every fd, the primary's (which holds the slot lock) last, and frees cg. */
static void cgroup_free(struct cgroup *cg)
{
        if (cg == NULL)
                return;
        for (int h = 0; h < HIERARCHY_COUNT; h++) {
                if (cg->return_fds[h] >= 0)
                        close(cg->return_fds[h]);
                if (h != (int)cg->primary && cg->dirs[h].fd >= 0)
                        close(cg->dirs[h].fd);
        }
        if (cg->dirs[cg->primary].fd >= 0)
                close(cg->dirs[cg->primary].fd);
        free(cg);
}

/* <mount>/sandboxd of every hierarchy, opened once per process and shared by every cgroup (they
 * borrow the fd): a sandbox then costs no open/close of its parents. */
static pthread_mutex_t parent_cache_lock = PTHREAD_MUTEX_INITIALIZER;
static int parent_cache[HIERARCHY_COUNT] = {-1, -1, -1, -1, -1, -1};
/* What each cached fd was opened on: a forked engine worker closes every fd it inherits, and the
 * number may since name another file. A cached fd is used only while fstat() still finds this. */
static struct stat parent_cache_stat[HIERARCHY_COUNT];

static bool parent_cache_valid(int h)
{
        struct stat now;
        return parent_cache[h] >= 0 && fstat(parent_cache[h], &now) == 0 &&
               now.st_dev == parent_cache_stat[h].st_dev &&
               now.st_ino == parent_cache_stat[h].st_ino && S_ISDIR(now.st_mode);
}

/* Opens <mount>/sandboxd in hierarchy h, creating it when create is set. With create unset a
 * missing parent leaves parent_fd at -1 and is not an error. */
static int open_parent(struct cgroup *cg, int h, bool create, struct sbx_error *err)
{
        pthread_mutex_lock(&parent_cache_lock);
        int cached = parent_cache_valid(h) ? parent_cache[h] : -1;
        if (cached < 0)
                parent_cache[h] = -1; /* stale: the number is not ours to close any more */
        pthread_mutex_unlock(&parent_cache_lock);
        if (cached >= 0) {
                cg->dirs[h].parent_fd = cached;
                return 0;
        }
        const char *mount = hierarchy_mount(cg->mounts, (enum cgroup_hierarchy)h);
        _cleanup_close_ int mount_fd = open(mount, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
        if (mount_fd < 0)
                return sbx_error_set(err, errno, "cgroup: open %s", mount);
        int fd = open_directory_at(mount_fd, CGROUP_PARENT_NAME);
        if (fd < 0 && errno == ENOENT && create) {
                if (mkdirat(mount_fd, CGROUP_PARENT_NAME, 0755) < 0 && errno != EEXIST)
                        return sbx_error_set(err, errno, "cgroup: mkdir %s/" CGROUP_PARENT_NAME,
                                             mount);
                fd = open_directory_at(mount_fd, CGROUP_PARENT_NAME);
        }
        if (fd < 0) {
                if (!create && errno == ENOENT)
                        return 0;
                return sbx_error_set(err, errno, "cgroup: open %s/" CGROUP_PARENT_NAME, mount);
        }
        struct stat st;
        if (fstat(fd, &st) < 0) {
                int saved = errno;
                close(fd);
                return sbx_error_set(err, saved, "cgroup: fstat %s/" CGROUP_PARENT_NAME, mount);
        }
        pthread_mutex_lock(&parent_cache_lock);
        if (parent_cache[h] < 0) {
                parent_cache[h] = fd;
                parent_cache_stat[h] = st;
        } else {
                close(fd); /* another thread was first */
                fd = parent_cache[h];
        }
        pthread_mutex_unlock(&parent_cache_lock);
        cg->dirs[h].parent_fd = fd;
        return 0;
}

static int open_parents(struct cgroup *cg, bool create, struct sbx_error *err)
{
        for (int h = 0; h < HIERARCHY_COUNT; h++)
                if (owns_directory(cg, h) && open_parent(cg, h, create, err) < 0)
                        return -1;
        return 0;
}

/* ---- killing ------------------------------------------------------------------------------ */

/* Sends SIGKILL to every process listed in dirfd's cgroup.procs and returns how many were listed
 * (0: the directory holds no live process). A frozen process keeps its pid, so the kill reaches
 * the process that was listed; an unfrozen one could exit and have its pid reaped and handed out
 * again in between, which takes a wrap of the whole pid space in microseconds. */
static int kill_listed(int dirfd, struct sbx_error *err)
{
        _cleanup_free_ char *text = NULL;
        if (sbx_read_text_at(dirfd, "cgroup.procs", &text, err) < 0)
                return -1;
        int listed = 0;
        for (char *p = text; *p != '\0';) {
                char *end;
                long pid = strtol(p, &end, 10);
                if (end == p)
                        break;
                if (pid > 0) {
                        listed++;
                        if (kill((pid_t)pid, SIGKILL) < 0 && errno != ESRCH)
                                sbx_warn("cgroup: kill %ld: %s", pid, strerror(errno));
                }
                p = end;
                while (*p == '\n')
                        p++;
        }
        return listed;
}

static int freezer_freeze(int freezer_fd, struct sbx_error *err)
{
        if (sbx_write_file_at(freezer_fd, "freezer.state", "FROZEN", err) < 0)
                return sbx_error_prefix(err, "cgroup: freeze");
        uint64_t deadline = sbx_now_us() + FREEZE_WAIT_US;
        uint64_t poll = POLL_FIRST_US;
        for (;;) {
                char state[32];
                if (sbx_read_file_at(freezer_fd, "freezer.state", state, sizeof(state), err) < 0)
                        return sbx_error_prefix(err, "cgroup: freeze");
                if (strncmp(state, "FROZEN", 6) == 0)
                        return 0;
                if (sbx_now_us() > deadline) {
                        sbx_warn("cgroup: freezer still %.*s after %d ms; killing anyway",
                                 (int)strcspn(state, "\n"), state, FREEZE_WAIT_US / 1000);
                        return 0;
                }
                sleep_us(poll);
                poll = next_poll_us(poll);
        }
}

/* Whether any process of cg is still alive. The cgroup2 directory's "populated" covers the
 * whole sandbox on the unified and hybrid layouts; the v1 directories are checked too once it is
 * empty (or absent), and any process found there (one that a crash left half-attached, or one
 * the freezer sweep missed) is sent SIGKILL. Zombies do not count: the kernel takes an exiting
 * task out of its cgroups before it becomes a zombie. */
static int still_populated(struct cgroup *cg, bool *populated, struct sbx_error *err)
{
        *populated = false;
        int unified_fd = dir_fd(cg, HIERARCHY_UNIFIED);
        if (unified_fd >= 0) {
                char events[256];
                uint64_t value;
                if (sbx_read_file_at(unified_fd, "cgroup.events", events, sizeof(events), err) <
                            0 ||
                    cgroup_parse_keyed(events, "populated", &value, err) < 0)
                        return sbx_error_prefix(err, "cgroup: %s", cg->name);
                /* Every process of the sandbox is born into the cgroup2 directory and never
                 * leaves it, so its word is final; the v1 lists are for the pure v1 layout. */
                *populated = value != 0;
                return 0;
        }
        for (int h = 0; h < HIERARCHY_COUNT; h++) {
                if (h == HIERARCHY_UNIFIED || !owns_directory(cg, h) || cg->dirs[h].fd < 0)
                        continue;
                int listed = kill_listed(cg->dirs[h].fd, err);
                if (listed < 0)
                        return sbx_error_prefix(err, "cgroup: %s/%s", hierarchy_names[h], cg->name);
                if (listed > 0)
                        *populated = true;
        }
        return 0;
}

int cgroup_kill_all(struct cgroup *cg, struct sbx_error *err)
{
        if (cg->emptied)
                return 0;
        int unified_fd = dir_fd(cg, HIERARCHY_UNIFIED);
        int freezer_fd = dir_fd(cg, HIERARCHY_FREEZER);
        if (unified_fd >= 0) {
                /* One write kills every process of the cgroup, including ones forking right
                 * now (kernel 5.14+). */
                if (sbx_write_file_at(unified_fd, "cgroup.kill", "1", err) < 0)
                        return sbx_error_prefix(err, "cgroup: kill %s", cg->name);
        } else if (freezer_fd >= 0) {
                /* v1 has no cgroup.kill: frozen processes cannot fork or exit, so one sweep over
                 * the list reaches all of them and no listed pid is reused meanwhile. */
                int frozen = freezer_freeze(freezer_fd, err);
                for (int h = 0; frozen == 0 && h < HIERARCHY_COUNT; h++) {
                        struct sbx_error sweep_error;
                        /* A failed sweep is retried by the wait loop below. */
                        if (owns_directory(cg, h) && cg->dirs[h].fd >= 0 &&
                            kill_listed(cg->dirs[h].fd, &sweep_error) < 0)
                                sbx_warn("cgroup: kill %s/%s: %s", hierarchy_names[h], cg->name,
                                         sweep_error.message);
                }
                /* Thaw even after a failure: SIGKILL is only acted on by a thawed task. */
                struct sbx_error thaw_error;
                if (sbx_write_file_at(freezer_fd, "freezer.state", "THAWED", &thaw_error) < 0)
                        sbx_warn("cgroup: thaw %s: %s", cg->name, thaw_error.message);
                if (frozen < 0)
                        return -1;
        }

        uint64_t deadline = sbx_now_us() + KILL_WAIT_US;
        uint64_t poll = POLL_FIRST_US;
        for (;;) {
                bool populated;
                if (still_populated(cg, &populated, err) < 0)
                        return -1;
                if (!populated) {
                        cg->emptied = true;
                        return 0;
                }
                if (sbx_now_us() > deadline)
                        return sbx_error_set(err, ETIMEDOUT,
                                             "cgroup: %s still has processes after %d ms", cg->name,
                                             KILL_WAIT_US / 1000);
                sleep_us(poll);
                poll = next_poll_us(poll);
        }
}

/* ---- removing ----------------------------------------------------------------------------- */

static int remove_directory(int parent_fd, const char *name, struct sbx_error *err)
{
        uint64_t deadline = sbx_now_us() + RMDIR_WAIT_US;
        uint64_t poll = POLL_FIRST_US;
        while (unlinkat(parent_fd, name, AT_REMOVEDIR) < 0) {
                if (errno == ENOENT)
                        return 0;
                if (errno != EBUSY || sbx_now_us() > deadline)
                        return sbx_error_set(err, errno, "rmdir %s", name);
                sleep_us(poll);
                poll = next_poll_us(poll);
        }
        return 0;
}

static void note_first(int *result, struct sbx_error *err, const struct sbx_error *failure)
{
        if (*result == 0 && err != NULL)
                *err = *failure;
        *result = -1;
}

/* Removes cg's v1 directories (all but the primary) and closes their fds. */
static int remove_v1_directories(struct cgroup *cg, struct sbx_error *err)
{
        int result = 0;
        for (int h = 0; h < HIERARCHY_COUNT; h++) {
                struct cgroup_dir *dir = &cg->dirs[h];
                if (h == (int)cg->primary || !owns_directory(cg, h) || dir->fd < 0)
                        continue;
                struct sbx_error failure;
                if (remove_directory(dir->parent_fd, cg->name, &failure) < 0) {
                        sbx_error_prefix(&failure, "cgroup: %s", hierarchy_names[h]);
                        sbx_warn("%s", failure.message);
                        note_first(&result, err, &failure);
                }
                close(dir->fd);
                dir->fd = -1;
        }
        return result;
}

/* Kills everything in cg and removes its directories, the primary last, so that a crash midway
 * leaves a state cgroup_reconcile recognises. Keeps going after a failure and reports the first.
 * The primary fd stays open (and locked) until cgroup_free. */
static int remove_all(struct cgroup *cg, struct sbx_error *err)
{
        int result = cgroup_kill_all(cg, err);
        struct sbx_error failure;
        if (remove_v1_directories(cg, &failure) < 0)
                note_first(&result, err, &failure);
        struct cgroup_dir *primary = &cg->dirs[cg->primary];
        if (primary->fd >= 0 && remove_directory(primary->parent_fd, cg->name, &failure) < 0) {
                sbx_error_prefix(&failure, "cgroup: %s", hierarchy_names[cg->primary]);
                sbx_warn("%s", failure.message);
                note_first(&result, err, &failure);
        }
        return result;
}

/* Opens the v1 directories of cg's slot that exist, to take over an orphan. */
static int open_existing_v1(struct cgroup *cg, struct sbx_error *err)
{
        for (int h = 0; h < HIERARCHY_COUNT; h++) {
                if (h == (int)cg->primary || !owns_directory(cg, h) || cg->dirs[h].parent_fd < 0)
                        continue;
                int fd = open_directory_at(cg->dirs[h].parent_fd, cg->name);
                if (fd < 0 && errno != ENOENT)
                        return sbx_error_set(err, errno, "cgroup: open %s/%s", hierarchy_names[h],
                                             cg->name);
                cg->dirs[h].fd = fd;
        }
        return 0;
}

/* Removes the orphan slot whose primary directory the caller has locked (locked_fd, consumed):
 * kills its processes in every hierarchy and removes its directories. */
static int remove_orphan(const struct cgroup_mounts *mounts, unsigned slot, int locked_fd,
                         struct sbx_error *err)
{
        struct cgroup *orphan = cgroup_new(mounts, err);
        if (orphan == NULL) {
                close(locked_fd);
                return -1;
        }
        set_slot(orphan, slot);
        orphan->dirs[orphan->primary].fd = locked_fd;
        int result = open_parents(orphan, false, err);
        if (result == 0)
                result = open_existing_v1(orphan, err);
        if (result == 0)
                result = remove_all(orphan, err);
        if (result == 0)
                sbx_info("cgroup: removed orphan slot %u", slot);
        cgroup_free(orphan);
        return result;
}

/* ---- creating ----------------------------------------------------------------------------- */

/* The unified layout only offers a controller's files in a child when every ancestor enables it
 * in cgroup.subtree_control. Writes only what is missing: the files are shared by every sandboxd
 * process and by whatever else manages the hierarchy. */
static int enable_controllers(int dirfd, const char *where, const char *available,
                              struct sbx_error *err)
{
        char enabled[512];
        if (sbx_read_file_at(dirfd, "cgroup.subtree_control", enabled, sizeof(enabled), err) < 0)
                return sbx_error_prefix(err, "cgroup: %s", where);
        char request[64] = "";
        static const char *const wanted[] = {"memory", "pids", "cpu"};
        for (size_t i = 0; i < SBX_ARRAY_SIZE(wanted); i++) {
                if (!word_in_list(available, wanted[i]) || word_in_list(enabled, wanted[i]))
                        continue;
                strcat(request, request[0] ? " +" : "+");
                strcat(request, wanted[i]);
        }
        if (request[0] != '\0' &&
            sbx_write_file_at(dirfd, "cgroup.subtree_control", request, err) < 0)
                return sbx_error_prefix(err, "cgroup: %s", where);
        return 0;
}

static int prepare_unified_controllers(struct cgroup *cg, struct sbx_error *err)
{
        const char *mount = cg->mounts->unified;
        _cleanup_close_ int root_fd = open(mount, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
        if (root_fd < 0)
                return sbx_error_set(err, errno, "cgroup: open %s", mount);
        char available[512];
        if (sbx_read_file_at(root_fd, "cgroup.controllers", available, sizeof(available), err) < 0)
                return sbx_error_prefix(err, "cgroup: %s", mount);
        /* Fail closed: without these a sandbox would run without its memory or process cap. */
        if (!word_in_list(available, "memory") || !word_in_list(available, "pids"))
                return sbx_error_set(err, ENOTSUP, "cgroup: %s lacks the memory or pids controller",
                                     mount);
        if (enable_controllers(root_fd, mount, available, err) < 0)
                return -1;
        return enable_controllers(cg->dirs[HIERARCHY_UNIFIED].parent_fd, CGROUP_PARENT_NAME,
                                  available, err);
}

/* Opens and locks the slot directory name under parent_fd. Returns the locked fd, -1 when the
 * directory vanished or someone else holds it (errno EWOULDBLOCK), or -1 with err filled on a
 * real failure (*failed set). */
static int lock_slot_directory(int parent_fd, const char *name, bool wait, bool *failed,
                               struct sbx_error *err)
{
        *failed = false;
        _cleanup_close_ int fd = open_directory_at(parent_fd, name);
        if (fd < 0) {
                if (errno == ENOENT)
                        return -1;
                *failed = true;
                return sbx_error_set(err, errno, "cgroup: open slot %s", name);
        }
        /* wait: the caller made the directory just now. Then another process can hold its lock
         * only for a moment (to see that it is young, slot_just_made); giving up instead would
         * leave the directory behind, empty and unlocked. */
        if (flock(fd, wait ? LOCK_EX : LOCK_EX | LOCK_NB) < 0) {
                if (errno == EWOULDBLOCK)
                        return -1;
                *failed = true;
                return sbx_error_set(err, errno, "cgroup: lock slot %s", name);
        }
        /* The lock may have been won on a directory a reconciler removed (and unlocked) after
         * this open: only a directory that still exists is a slot. */
        struct stat st;
        if (fstatat(fd, "cgroup.procs", &st, AT_SYMLINK_NOFOLLOW) < 0)
                return -1;
        return take_fd(&fd);
}

/* Whether an unlocked slot directory was made in the last moments: then it is another process's
 * slot between its mkdir and its flock, not an orphan, and must be left to it. */
static bool slot_just_made(int fd)
{
        struct stat st;
        return fstat(fd, &st) == 0 && time(NULL) - st.st_ctime < ORPHAN_MIN_AGE_S;
}

/* Takes the first free slot: mkdir makes it unique among live sandboxes, the lock marks it
 * live. A directory that exists but is unlocked is an orphan of a crash: removed, and the slot
 * tried once more. */
static int claim_slot(struct cgroup *cg, unsigned max_slots, struct sbx_error *err)
{
        int parent_fd = cg->dirs[cg->primary].parent_fd;
        for (unsigned slot = 0; slot < max_slots; slot++) {
                char name[16];
                snprintf(name, sizeof(name), "%u", slot);
                for (int attempt = 0; attempt < 2; attempt++) {
                        bool created = mkdirat(parent_fd, name, 0755) == 0;
                        if (!created && errno != EEXIST)
                                return sbx_error_set(err, errno, "cgroup: mkdir slot %s", name);
                        bool failed;
                        int fd = lock_slot_directory(parent_fd, name, created, &failed, err);
                        if (failed)
                                return -1;
                        if (fd < 0)
                                break; /* a live owner, or a reconciler got there first */
                        if (created) {
                                set_slot(cg, slot);
                                cg->dirs[cg->primary].fd = fd;
                                return 0;
                        }
                        if (slot_just_made(fd)) {
                                close(fd);
                                break;
                        }
                        sbx_warn("cgroup: slot %u was left by a crashed process; removing it",
                                 slot);
                        struct sbx_error failure;
                        if (remove_orphan(cg->mounts, slot, fd, &failure) < 0) {
                                /* One stuck orphan must not block every sandbox: try the
                                 * next slot; cgroup_reconcile retries it later. */
                                sbx_warn("%s", failure.message);
                                break;
                        }
                }
        }
        return sbx_error_set(err, EAGAIN, "cgroup: all %u slots are in use", max_slots);
}

/* Creates the slot's directories in the v1 hierarchies. Any that already exist were left by a
 * crash between a v1 rmdir and the primary one; the primary lock is ours, so no live sandbox
 * owns them: their processes are killed and they are recreated empty. */
static int make_v1_directories(struct cgroup *cg, struct sbx_error *err)
{
        if (open_existing_v1(cg, err) < 0)
                return -1;
        for (int h = 0; h < HIERARCHY_COUNT; h++) {
                if (h == (int)cg->primary || cg->dirs[h].fd < 0)
                        continue;
                sbx_warn("cgroup: slot %u has directories left by a crashed process; removing them",
                         cg->slot);
                /* Their processes, if any, are only in these v1 directories (not in the new
                 * primary one): kill them by their lists, which cgroup_kill_all would not read on
                 * the hybrid layout (and it would mark this cgroup emptied). */
                for (int k = 0; k < HIERARCHY_COUNT; k++) {
                        struct sbx_error ignored;
                        if (k != (int)cg->primary && cg->dirs[k].fd >= 0)
                                (void)kill_listed(cg->dirs[k].fd, &ignored);
                }
                if (remove_v1_directories(cg, err) < 0)
                        return -1;
                break;
        }
        for (int h = 0; h < HIERARCHY_COUNT; h++) {
                struct cgroup_dir *dir = &cg->dirs[h];
                if (h == (int)cg->primary || !owns_directory(cg, h))
                        continue;
                if (mkdirat(dir->parent_fd, cg->name, 0755) < 0)
                        return sbx_error_set(err, errno, "cgroup: mkdir %s/%s", hierarchy_names[h],
                                             cg->name);
                dir->fd = open_directory_at(dir->parent_fd, cg->name);
                if (dir->fd < 0)
                        return sbx_error_set(err, errno, "cgroup: open %s/%s", hierarchy_names[h],
                                             cg->name);
        }
        return 0;
}

/* Reads a single-value file; an optional file that does not exist reads as 0. */
static int read_value(int dirfd, const char *name, bool optional, uint64_t *value,
                      struct sbx_error *err)
{
        *value = 0;
        if (dirfd < 0)
                return 0;
        char text[64];
        struct sbx_error failure;
        if (sbx_read_file_at(dirfd, name, text, sizeof(text), &failure) < 0) {
                if (optional && failure.code == ENOENT)
                        return 0;
                if (err != NULL)
                        *err = failure;
                return -1;
        }
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
static int read_keyed(int dirfd, const char *name, const struct keyed_field *fields, size_t n,
                      struct sbx_error *err)
{
        for (size_t i = 0; i < n; i++)
                *fields[i].value = 0;
        if (dirfd < 0)
                return 0;
        char text[1024];
        struct sbx_error failure;
        bool read_ok = sbx_read_file_at(dirfd, name, text, sizeof(text), &failure) >= 0;
        for (size_t i = 0; i < n; i++) {
                if (read_ok &&
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
static int read_counters(const struct cgroup *cg, struct sbx_evidence *raw, struct sbx_error *err)
{
        memset(raw, 0, sizeof(*raw));
        int memory_fd = controller_fd(cg, HIERARCHY_MEMORY);
        int pids_fd = controller_fd(cg, HIERARCHY_PIDS);
        int cpu_fd = controller_fd(cg, HIERARCHY_CPU);
        const struct keyed_field pids_events[] = {{"max", &raw->pids_max_events, false}};
        if (read_keyed(pids_fd, "pids.events", pids_events, 1, err) < 0 ||
            read_value(pids_fd, "pids.peak", true, &raw->pids_peak, err) < 0)
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
                if (read_keyed(memory_fd, "memory.events", memory_events, 2, err) < 0 ||
                    read_value(memory_fd, "memory.peak", true, &raw->memory_peak_bytes, err) < 0 ||
                    read_keyed(cpu_fd, "cpu.stat", cpu_stat, 3, err) < 0)
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
        if (read_keyed(memory_fd, "memory.oom_control", oom_control, 1, err) < 0 ||
            read_value(memory_fd, "memory.failcnt", false, &raw->memory_max_events, err) < 0 ||
            read_value(memory_fd, "memory.max_usage_in_bytes", false, &raw->memory_peak_bytes,
                       err) < 0 ||
            read_keyed(cpu_fd, "cpu.stat", cpu_stat, 2, err) < 0)
                return -1;
        if (cg->mounts->layout == CGROUP_LAYOUT_HYBRID) {
                uint64_t usage_us = 0;
                const struct keyed_field unified_cpu_stat[] = {{"usage_usec", &usage_us, false}};
                if (read_keyed(dir_fd(cg, HIERARCHY_UNIFIED), "cpu.stat", unified_cpu_stat, 1,
                               err) < 0)
                        return -1;
                usage_ns = usage_us * 1000;
        } else if (read_value(controller_fd(cg, HIERARCHY_CPUACCT), "cpuacct.usage", false,
                              &usage_ns, err) < 0) {
                return -1;
        }
        raw->cpu_usage_us = usage_ns / 1000;
        raw->cpu_throttled_us = throttled_ns / 1000;
        return 0;
}

static void cgroup_destroyp(struct cgroup **cg)
{
        cgroup_destroy(*cg);
}

int cgroup_create(unsigned max_slots, struct cgroup **out, struct sbx_error *err)
{
        const struct cgroup_mounts *mounts;
        if (cgroup_detect(&mounts, err) < 0)
                return -1;
        _cleanup_(cgroup_destroyp) struct cgroup *cg = cgroup_new(mounts, err);
        if (cg == NULL)
                return -1;
        if (open_parents(cg, true, err) < 0)
                return -1;
        if (mounts->layout == CGROUP_LAYOUT_UNIFIED && prepare_unified_controllers(cg, err) < 0)
                return -1;
        if (claim_slot(cg, max_slots, err) < 0)
                return -1;
        if (make_v1_directories(cg, err) < 0)
                return -1;
        /* Every directory was just made (claim_slot only returns a slot it created, and
         * make_v1_directories recreates any it finds), so every counter starts at zero: the
         * baseline is the zeroed one cgroup_new left. A warm-pool entry moves it with
         * cgroup_reset_baseline once its loader is up. */
        *out = steal_pointer(&cg);
        return 0;
}

unsigned cgroup_slot(const struct cgroup *cg)
{
        return cg->slot;
}

int cgroup_unified_fd(const struct cgroup *cg)
{
        return dir_fd(cg, HIERARCHY_UNIFIED);
}

/* ---- limits, attach, evidence ------------------------------------------------------------- */

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

int cgroup_set_limits(struct cgroup *cg, const struct sbx_limits *limits, struct sbx_error *err)
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
                 * oom.group: the OOM killer takes the whole sandbox, not one victim of it. */
                if (write_limit(memory_fd, "memory.max", memory, err) < 0 ||
                    write_optional(memory_fd, "memory.swap.max", "0", err) < 0 ||
                    write_optional(memory_fd, "memory.oom.group", "1", err) < 0 ||
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

/* The directory this thread is in now in v1 hierarchy h, as an fd. */
static int open_current_v1_dir(const struct cgroup *cg, int h, const char *proc_cgroup,
                               struct sbx_error *err)
{
        char path[PATH_MAX];
        if (cgroup_parse_proc_path(proc_cgroup, hierarchy_names[h], path, sizeof(path), err) < 0)
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
                        return sbx_error_prefix(err, "cgroup: enter %s/%s", hierarchy_names[h],
                                                cg->name);
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
                        rc = sbx_error_prefix(err, "cgroup: leave %s/%s", hierarchy_names[h],
                                              cg->name);
        }
        return rc;
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

void cgroup_destroy(struct cgroup *cg)
{
        if (cg == NULL)
                return;
        struct sbx_error err;
        sbx_error_clear(&err);
        if (remove_all(cg, &err) < 0)
                sbx_warn("cgroup: destroy slot %u: %s", cg->slot, err.message);
        cgroup_free(cg);
}

/* ---- reconciliation ----------------------------------------------------------------------- */

/* Reports the first failure in err and keeps going: one stuck orphan must not keep the others. */
static void note_failure(int *result, struct sbx_error *err, const struct sbx_error *failure)
{
        sbx_warn("%s", failure->message);
        note_first(result, err, failure);
}

/* Removes every primary slot directory nobody holds a lock on. */
static int reconcile_primary(const struct cgroup_mounts *mounts, int parent_fd, int *removed,
                             struct sbx_error *err)
{
        /* A new open file description, not a dup: a dup would share the cached parent fd's
         * directory offset, and every walk after the first would find nothing. */
        int walk_fd = open_directory_at(parent_fd, ".");
        if (walk_fd < 0)
                return sbx_error_set(err, errno, "cgroup: reconcile");
        _cleanup_closedir_ DIR *dir = fdopendir(walk_fd);
        if (dir == NULL) {
                close(walk_fd);
                return sbx_error_set(err, errno, "cgroup: reconcile");
        }
        int result = 0;
        struct dirent *entry;
        while ((entry = readdir(dir)) != NULL) {
                unsigned slot;
                if (!is_slot_name(entry->d_name, &slot))
                        continue;
                struct sbx_error failure;
                bool failed;
                int fd = lock_slot_directory(parent_fd, entry->d_name, false, &failed, &failure);
                if (fd < 0) {
                        if (failed)
                                note_failure(&result, err, &failure);
                        continue;
                }
                if (slot_just_made(fd)) {
                        close(fd);
                        continue;
                }
                if (remove_orphan(mounts, slot, fd, &failure) < 0)
                        note_failure(&result, err, &failure);
                else
                        (*removed)++;
        }
        return result;
}

int cgroup_reconcile(struct sbx_error *err)
{
        const struct cgroup_mounts *mounts;
        if (cgroup_detect(&mounts, err) < 0)
                return -1;
        /* probe holds the parents' fds; it never owns a slot. */
        struct cgroup *probe = cgroup_new(mounts, err);
        if (probe == NULL)
                return -1;
        int removed = 0;
        int result = open_parents(probe, false, err);
        if (result == 0 && probe->dirs[probe->primary].parent_fd >= 0)
                result = reconcile_primary(mounts, probe->dirs[probe->primary].parent_fd, &removed,
                                           err);
        /* Only the primary hierarchy is walked: create makes the primary directory first and
         * destroy removes it last, so every leftover of a crash has an unlocked primary
         * directory, and removing an orphan removes its directories in every hierarchy. */
        cgroup_free(probe);
        return result < 0 ? -1 : removed;
}
