/* cgroups for the native backend: layout detection, struct cgroup's lifetime, the sandboxd
 * parents, and cgroup_create / cgroup_destroy. The rest of cgroup.h is in cgroup_slot.c (slots,
 * orphans, reconciliation), cgroup_kill.c (kill and remove) and cgroup_files.c (limits, attach,
 * evidence); the parsers are in cgroup_parse.c. What they share is cgroup_internal.h.
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

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sandbox/native/cgroup_internal.h"
#include "util/cleanup.h"
#include "util/file.h"
#include "util/log.h"

#define CGROUP_PARENT_NAME "sandboxd"

const char *const cgroup_hierarchy_names[HIERARCHY_COUNT] = {
        "unified", "memory", "pids", "cpu", "cpuacct", "freezer",
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

/* ---- layout ------------------------------------------------------------------------------- */

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

/* ---- struct cgroup lifetime --------------------------------------------------------------- */

struct cgroup *cgroup_new(const struct cgroup_mounts *mounts, struct sbx_error *err)
{
        struct cgroup *cg = calloc(1, sizeof(*cg));
        if (cg == NULL) {
                sbx_error_set(err, ENOMEM, "cgroup: allocate");
                return NULL;
        }
        cg->mounts = mounts;
        cg->primary = mounts->layout == CGROUP_LAYOUT_LEGACY ? HIERARCHY_MEMORY : HIERARCHY_UNIFIED;
        for (int f = 0; f < EVIDENCE_FILE_COUNT; f++)
                cg->evidence_fds[f] = EVIDENCE_FD_UNOPENED;
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

void cgroup_set_slot(struct cgroup *cg, unsigned slot)
{
        cg->slot = slot;
        snprintf(cg->name, sizeof(cg->name), "%u", slot);
}

/* Closes every fd, the primary's (which holds the slot lock) last, and frees cg. */
void cgroup_free(struct cgroup *cg)
{
        if (cg == NULL)
                return;
        for (int f = 0; f < EVIDENCE_FILE_COUNT; f++)
                if (cg->evidence_fds[f] >= 0)
                        close(cg->evidence_fds[f]);
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

int cgroup_open_parents(struct cgroup *cg, bool create, struct sbx_error *err)
{
        for (int h = 0; h < HIERARCHY_COUNT; h++)
                if (owns_directory(cg, h) && open_parent(cg, h, create, err) < 0)
                        return -1;
        return 0;
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
        if (cgroup_open_parents(cg, true, err) < 0)
                return -1;
        if (mounts->layout == CGROUP_LAYOUT_UNIFIED && prepare_unified_controllers(cg, err) < 0)
                return -1;
        if (cgroup_claim_slot(cg, max_slots, err) < 0)
                return -1;
        if (cgroup_make_v1_directories(cg, err) < 0)
                return -1;
        /* Every directory was just made (cgroup_claim_slot only returns a slot it created, and
         * cgroup_make_v1_directories recreates any it finds), so every counter starts at zero: the
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

/* ---- destroying --------------------------------------------------------------------------- */

void cgroup_destroy(struct cgroup *cg)
{
        if (cg == NULL)
                return;
        struct sbx_error err;
        sbx_error_clear(&err);
        if (cgroup_remove_all(cg, &err) < 0)
                sbx_warn("cgroup: destroy slot %u: %s", cg->slot, err.message);
        cgroup_free(cg);
}
