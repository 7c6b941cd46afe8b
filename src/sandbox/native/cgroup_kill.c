/* Killing every process of a sandbox's cgroup (cgroup.kill where a cgroup2 directory exists,
 * else the v1 freezer and a SIGKILL sweep) and removing its directories. */
#include "sandbox/native/cgroup.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "sandbox/native/cgroup_internal.h"
#include "util/cleanup.h"
#include "util/file.h"
#include "util/log.h"
#include "util/time.h"

/* cgroup_kill_all's bound: cgroup.kill empties a cgroup of 64 processes in ~7 ms here and the
 * v1 freezer sweep takes ~80 ms; 2 s leaves room for a loaded machine without hanging a request. */
#define KILL_WAIT_US (2 * 1000 * 1000)
/* Freezing waits for every task to reach the refrigerator; one stuck in uninterruptible sleep
 * can delay it. Past this bound the SIGKILL sweep runs anyway and the wait loop catches up. */
#define FREEZE_WAIT_US (1000 * 1000)

/* rmdir can briefly see EBUSY right after the last task left (v1 memory css offlining). */
#define RMDIR_WAIT_US (200 * 1000)
/* Polling starts fine-grained, since an emptied cgroup usually reports it within a few ms, and
 * backs off so that a slow one does not cost a busy loop. */
#define POLL_FIRST_US 200
#define POLL_MAX_US   5000

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

/* ---- killing ------------------------------------------------------------------------------ */

/* Sends SIGKILL to every process listed in dirfd's cgroup.procs and returns how many were listed
 * (0: the directory holds no live process). A frozen process keeps its pid, so the kill reaches
 * the process that was listed; an unfrozen one could exit and have its pid reaped and handed out
 * again in between, which takes a wrap of the whole pid space in microseconds. */
int cgroup_kill_listed(int dirfd, struct sbx_error *err)
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
                int listed = cgroup_kill_listed(cg->dirs[h].fd, err);
                if (listed < 0)
                        return sbx_error_prefix(err, "cgroup: %s/%s", cgroup_hierarchy_names[h],
                                                cg->name);
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
                            cgroup_kill_listed(cg->dirs[h].fd, &sweep_error) < 0)
                                sbx_warn("cgroup: kill %s/%s: %s", cgroup_hierarchy_names[h],
                                         cg->name, sweep_error.message);
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

/* Removes cg's v1 directories (all but the primary) and closes their fds. */
int cgroup_remove_v1_directories(struct cgroup *cg, struct sbx_error *err)
{
        int result = 0;
        for (int h = 0; h < HIERARCHY_COUNT; h++) {
                struct cgroup_dir *dir = &cg->dirs[h];
                if (h == (int)cg->primary || !owns_directory(cg, h) || dir->fd < 0)
                        continue;
                struct sbx_error failure;
                if (remove_directory(dir->parent_fd, cg->name, &failure) < 0) {
                        sbx_error_prefix(&failure, "cgroup: %s", cgroup_hierarchy_names[h]);
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
int cgroup_remove_all(struct cgroup *cg, struct sbx_error *err)
{
        int result = cgroup_kill_all(cg, err);
        struct sbx_error failure;
        if (cgroup_remove_v1_directories(cg, &failure) < 0)
                note_first(&result, err, &failure);
        struct cgroup_dir *primary = &cg->dirs[cg->primary];
        if (primary->fd >= 0 && remove_directory(primary->parent_fd, cg->name, &failure) < 0) {
                sbx_error_prefix(&failure, "cgroup: %s", cgroup_hierarchy_names[cg->primary]);
                sbx_warn("%s", failure.message);
                note_first(&result, err, &failure);
        }
        return result;
}
