/* Slots: which sandbox owns which cgroup directory. The primary directory of a slot is made
 * with mkdir (unique among live sandboxes of every sandboxd process) and held with flock for the
 * sandbox's life (the kernel drops the lock when its owner dies, so an unlocked one is a crash's
 * orphan). Orphans are removed when cgroup_create meets them and by cgroup_reconcile at start-up.
 */
#include "sandbox/native/cgroup.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "sandbox/native/cgroup_internal.h"
#include "util/cleanup.h"
#include "util/log.h"

/* An unlocked slot directory younger than this may be one another process has just made and is
 * about to lock (mkdir, then flock): only older ones are reclaimed as orphans. */
#define ORPHAN_MIN_AGE_S 2

/* ---- orphans ------------------------------------------------------------------------------ */

/* Opens the v1 directories of cg's slot that exist, to take over an orphan. */
static int open_existing_v1(struct cgroup *cg, struct sbx_error *err)
{
        for (int h = 0; h < HIERARCHY_COUNT; h++) {
                if (h == (int)cg->primary || !owns_directory(cg, h) || cg->dirs[h].parent_fd < 0)
                        continue;
                int fd = open_directory_at(cg->dirs[h].parent_fd, cg->name);
                if (fd < 0 && errno != ENOENT)
                        return sbx_error_set(err, errno, "cgroup: open %s/%s",
                                             cgroup_hierarchy_names[h], cg->name);
                cg->dirs[h].fd = fd;
        }
        return 0;
}

static void (*orphan_cleaner)(unsigned slot);

void cgroup_set_orphan_cleaner(void (*clean)(unsigned slot))
{
        orphan_cleaner = clean;
}

/* Removes the orphan slot whose primary directory the caller has locked (locked_fd, consumed):
 * kills its processes in every hierarchy, lets the orphan cleaner remove the rest of the slot,
 * and removes its directories. */
static int remove_orphan(const struct cgroup_mounts *mounts, unsigned slot, int locked_fd,
                         struct sbx_error *err)
{
        struct cgroup *orphan = cgroup_new(mounts, err);
        if (orphan == NULL) {
                close(locked_fd);
                return -1;
        }
        cgroup_set_slot(orphan, slot);
        orphan->dirs[orphan->primary].fd = locked_fd;
        int result = cgroup_open_parents(orphan, false, err);
        if (result == 0)
                result = open_existing_v1(orphan, err);
        if (result == 0 && orphan_cleaner != NULL) {
                result = cgroup_kill_all(orphan, err);
                if (result == 0)
                        orphan_cleaner(slot);
        }
        if (result == 0)
                result = cgroup_remove_all(orphan, err);
        if (result == 0)
                sbx_info("cgroup: removed orphan slot %u", slot);
        cgroup_free(orphan);
        return result;
}

/* ---- claiming ----------------------------------------------------------------------------- */

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
int cgroup_claim_slot(struct cgroup *cg, unsigned max_slots, struct sbx_error *err)
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
                                cgroup_set_slot(cg, slot);
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
int cgroup_make_v1_directories(struct cgroup *cg, struct sbx_error *err)
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
                                (void)cgroup_kill_listed(cg->dirs[k].fd, &ignored);
                }
                if (cgroup_remove_v1_directories(cg, err) < 0)
                        return -1;
                break;
        }
        for (int h = 0; h < HIERARCHY_COUNT; h++) {
                struct cgroup_dir *dir = &cg->dirs[h];
                if (h == (int)cg->primary || !owns_directory(cg, h))
                        continue;
                if (mkdirat(dir->parent_fd, cg->name, 0755) < 0)
                        return sbx_error_set(err, errno, "cgroup: mkdir %s/%s",
                                             cgroup_hierarchy_names[h], cg->name);
                dir->fd = open_directory_at(dir->parent_fd, cg->name);
                if (dir->fd < 0)
                        return sbx_error_set(err, errno, "cgroup: open %s/%s",
                                             cgroup_hierarchy_names[h], cg->name);
        }
        return 0;
}

/* ---- reconciliation ----------------------------------------------------------------------- */

/* Reports the first failure in err and keeps going: one stuck orphan must not keep the others. */
static void note_failure(int *result, struct sbx_error *err, const struct sbx_error *failure)
{
        sbx_warn("%s", failure->message);
        note_first(result, err, failure);
}

/* Whether name is a slot directory's ("17": digits, no leading zero, within 32 bits): the
 * parents may hold other entries, which are not sandboxd's to remove. */
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
        int result = cgroup_open_parents(probe, false, err);
        if (result == 0 && probe->dirs[probe->primary].parent_fd >= 0)
                result = reconcile_primary(mounts, probe->dirs[probe->primary].parent_fd, &removed,
                                           err);
        /* Only the primary hierarchy is walked: create makes the primary directory first and
         * destroy removes it last, so every leftover of a crash has an unlocked primary
         * directory, and removing an orphan removes its directories in every hierarchy. */
        cgroup_free(probe);
        return result < 0 ? -1 : removed;
}
