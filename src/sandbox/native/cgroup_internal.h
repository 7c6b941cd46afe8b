/* What the cgroup files of the native backend share, and nothing outside them uses:
 *   cgroup.c        layout detection, struct cgroup's lifetime, the sandboxd parents, create and
 *                   destroy (the public API of cgroup.h, with the three below)
 *   cgroup_slot.c   slots: claim (mkdir + flock), a crash's orphans, reconciliation at start-up
 *   cgroup_kill.c   killing every process of a cgroup, removing its directories
 *   cgroup_files.c  the files in a cgroup's directories: limits, attaching the caller, counters
 *   cgroup_parse.c  the pure parsers (cgroup_parse.h)
 * Pure accessors of struct cgroup are inline here; every function that makes system calls lives
 * in the file of its mechanism. */
#pragma once

#include <fcntl.h>
#include <stdbool.h>

#include "sandbox/native/cgroup.h"
#include "sandbox/sandbox.h"
#include "util/error.h"

enum cgroup_hierarchy {
        HIERARCHY_UNIFIED,
        HIERARCHY_MEMORY,
        HIERARCHY_PIDS,
        HIERARCHY_CPU,
        HIERARCHY_CPUACCT,
        HIERARCHY_FREEZER,
        HIERARCHY_COUNT,
};

/* By enum cgroup_hierarchy: the v1 controller's name as /proc/<pid>/cgroup spells it, "unified"
 * for cgroup2. */
extern const char *const cgroup_hierarchy_names[HIERARCHY_COUNT];

/* One hierarchy's part of a cgroup. Co-mounted controllers ("cpu,cpuacct") share one directory:
 * the later one is an alias and owns no fd. */
struct cgroup_dir {
        bool in_use;
        int alias_of;  /* index of the hierarchy that owns the directory, or -1 */
        int parent_fd; /* <mount>/sandboxd */
        int fd;        /* <mount>/sandboxd/<slot>; for the primary, the locked fd */
};

/* The counter files evidence is read from (cgroup_files.c), by layout. */
enum evidence_file {
        EVIDENCE_PIDS_EVENTS,
        EVIDENCE_PIDS_PEAK,
        EVIDENCE_MEMORY_EVENTS,    /* v2 */
        EVIDENCE_MEMORY_PEAK,      /* v2 */
        EVIDENCE_CPU_STAT,         /* v2's, or v1 cpu's */
        EVIDENCE_OOM_CONTROL,      /* v1 */
        EVIDENCE_MEMORY_FAILCNT,   /* v1 */
        EVIDENCE_MEMORY_MAX_USAGE, /* v1 */
        EVIDENCE_UNIFIED_CPU_STAT, /* hybrid: the controller-less v2's usage_usec */
        EVIDENCE_CPUACCT_USAGE,    /* v1 */
        EVIDENCE_FILE_COUNT,
};

/* An evidence fd that is not open yet; and one whose optional file does not exist. */
#define EVIDENCE_FD_UNOPENED (-1)
#define EVIDENCE_FD_MISSING  (-2)

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
        /* The counter files, opened at their first read and kept: a session's sandbox is read
         * at every run, and a read at offset 0 makes a cgroup file anew (a third of the system
         * calls of opening, reading to the end and closing). */
        int evidence_fds[EVIDENCE_FILE_COUNT];
};

/* ---- pure helpers ------------------------------------------------------------------------- */

static inline const char *hierarchy_mount(const struct cgroup_mounts *mounts,
                                          enum cgroup_hierarchy h)
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

static inline int open_directory_at(int dirfd, const char *name)
{
        return openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
}

/* Whether cg owns a directory in h: in use, and not an alias of another hierarchy's. */
static inline bool owns_directory(const struct cgroup *cg, int h)
{
        return cg->dirs[h].in_use && cg->dirs[h].alias_of < 0;
}

/* The directory fd serving hierarchy h (through an alias), or -1. */
static inline int dir_fd(const struct cgroup *cg, enum cgroup_hierarchy h)
{
        const struct cgroup_dir *dir = &cg->dirs[h];
        if (!dir->in_use)
                return -1;
        return dir->alias_of >= 0 ? cg->dirs[dir->alias_of].fd : dir->fd;
}

/* Where a controller's files are: in the cgroup2 directory on the unified layout, else in the
 * controller's own v1 directory. */
static inline int controller_fd(const struct cgroup *cg, enum cgroup_hierarchy h)
{
        if (cg->mounts->layout == CGROUP_LAYOUT_UNIFIED)
                return dir_fd(cg, HIERARCHY_UNIFIED);
        return dir_fd(cg, h);
}

/* Keeps the first of several failures in err, and marks the result failed. */
static inline void note_first(int *result, struct sbx_error *err, const struct sbx_error *failure)
{
        if (*result == 0 && err != NULL)
                *err = *failure;
        *result = -1;
}

/* ---- cgroup.c ----------------------------------------------------------------------------- */

/* An unopened cgroup of the layout's hierarchies (no slot, every fd -1, a zero baseline). */
struct cgroup *cgroup_new(const struct cgroup_mounts *mounts, struct sbx_error *err);

/* Closes every fd, the slot's lock last, and frees cg. NULL is a no-op. */
void cgroup_free(struct cgroup *cg);

/* Names cg's directories after slot. */
void cgroup_set_slot(struct cgroup *cg, unsigned slot);

/* Opens <mount>/sandboxd in every hierarchy cg owns a directory in (cached per process), creating
 * it when create is set; with create unset a missing parent leaves its parent_fd at -1. */
int cgroup_open_parents(struct cgroup *cg, bool create, struct sbx_error *err);

/* ---- cgroup_slot.c ------------------------------------------------------------------------ */

/* Takes the first free slot in [0, max_slots) and holds its lock in the primary directory's fd;
 * EAGAIN when every slot is taken. */
int cgroup_claim_slot(struct cgroup *cg, unsigned max_slots, struct sbx_error *err);

/* Creates the claimed slot's directories in the v1 hierarchies, replacing a crash's leftovers. */
int cgroup_make_v1_directories(struct cgroup *cg, struct sbx_error *err);

/* ---- cgroup_kill.c ------------------------------------------------------------------------ */

/* Sends SIGKILL to every process listed in dirfd's cgroup.procs; returns how many were listed. */
int cgroup_kill_listed(int dirfd, struct sbx_error *err);

/* Removes cg's v1 directories (all but the primary) and closes their fds. */
int cgroup_remove_v1_directories(struct cgroup *cg, struct sbx_error *err);

/* Kills everything in cg and removes its directories, the primary last; the primary fd (the
 * slot's lock) stays open until cgroup_free. */
int cgroup_remove_all(struct cgroup *cg, struct sbx_error *err);
