/* cgroups for the native backend: v2 unified, hybrid (v1 controllers + controller-less v2) and
 * pure v1, behind one API. Everything lives under one parent per hierarchy, `sandboxd/`, with one
 * child per sandbox named by its slot number ("sandboxd/17").
 *
 * Slots: the slot directory in the primary hierarchy (unified where it exists, else v1 memory) is
 * created with mkdir and then held with flock(LOCK_EX) on its directory fd for the sandbox's life.
 * mkdir makes a slot unique among live sandboxes of all sandboxd processes; the lock tells a live
 * owner from an orphan left by a crash (the kernel drops the lock when its owner dies).
 * The lock belongs to the fd's open file description: a child forked while it is open shares it
 * until it execs (the fd is O_CLOEXEC) or closes it, so a child that outlives a crashed supervisor
 * without exec'ing keeps the slot looking live.
 *
 * Evidence mapping (DESIGN.md):
 *   oom kills      v2 memory.events oom_kill       v1 memory.oom_control oom_kill
 *   memory max     v2 memory.events max            v1 memory.failcnt
 *   memory peak    v2 memory.peak                  v1 memory.max_usage_in_bytes
 *   pids max       pids.events max (both)          pids.peak where present
 *   cpu used       cgroup2 cpu.stat usage_usec     pure v1: cpuacct.usage (ns); hybrid: the
 *                  (also on the hybrid layout)     cgroup2 cpu.stat, so no cpuacct directory
 *   cpu throttled  v2 cpu.stat throttled_usec      v1 cpu.stat throttled_time (ns), nr_throttled
 *   kill all       cgroup.kill (v2, or the hybrid's unified dir)
 *                  v1 without unified: freezer FROZEN, SIGKILL each pid, THAWED */
#pragma once

#include <sys/types.h>

#include "sandbox/native/cgroup_parse.h"
#include "sandbox/sandbox.h"
#include "util/error.h"

struct cgroup; /* one sandbox's cgroups in every hierarchy */

/* Reads /proc/self/mountinfo once and caches the result. */
int cgroup_detect(const struct cgroup_mounts **out, struct sbx_error *err);

/* Creates a fresh cgroup for a sandbox in every hierarchy in use, with a unique slot number in
 * [0, max_slots), and holds the slot's lock. Creates the `sandboxd` parents when missing; on the
 * unified layout also enables memory, pids and cpu in the root's and the parent's
 * cgroup.subtree_control (only those missing; fails with ENOTSUP without memory or pids). An
 * unlocked slot found on the way is a crash's orphan: its processes are killed and it is reused.
 * Fails with EAGAIN when every slot is taken. */
int cgroup_create(unsigned max_slots, struct cgroup **out, struct sbx_error *err);

/* The slot number this cgroup holds. */
unsigned cgroup_slot(const struct cgroup *cg);

/* A directory fd of the cgroup in the cgroup2 hierarchy, for clone3(CLONE_INTO_CGROUP); -1 on
 * the pure v1 layout. Owned by the cgroup. */
int cgroup_unified_fd(const struct cgroup *cg);

/* Applies the cgroup's share of limits: memory_bytes (also the memory+swap cap, so a hog is
 * OOM-killed, not swapped), pids and cpu_millicores (0 = no quota); 0 memory or pids = none.
 * oom_kills_all: where the kernel has memory.oom.group (cgroup v2), an OOM kill takes every
 * process of the cgroup, not only the victim: right for a run, which ends with its program,
 * wrong for a session, whose agent must outlive its interpreter to start a new one. */
int cgroup_set_limits(struct cgroup *cg, const struct sbx_limits *limits, bool oom_kills_all,
                      struct sbx_error *err);

/* Moves the calling thread into the cgroup's v1 directories (every hierarchy but cgroup2, which
 * clone3(CLONE_INTO_CGROUP) handles) by writing "0" to each `tasks` file, so that a child it
 * clones before cgroup_leave_self() is born in them. Why not write the child's pid instead: a
 * write of another task's pid takes the cgroup_threadgroup_rwsem for writing, which costs an RCU
 * grace period (7-15 ms on these machines) per sandbox; a thread moving itself does not take it
 * (0.2 ms for four hierarchies). The caller must be the thread that then clones, and must call
 * cgroup_leave_self() before the child may fork (the thread counts in pids.current meanwhile).
 * A no-op on the unified layout. */
int cgroup_enter_self(struct cgroup *cg, struct sbx_error *err);

/* Moves the calling thread back to the v1 cgroups it was in before cgroup_enter_self(). */
int cgroup_leave_self(struct cgroup *cg, struct sbx_error *err);

/* Opens, for writing, the "tasks" file of each v1 hierarchy's directory of cg (none on a
 * unified layout) into fds (at most max), their number in *n: what a process launched by a
 * template (template.h) writes "0" into to move itself there, as cgroup_enter_self does. */
int cgroup_open_v1_tasks(const struct cgroup *cg, int *fds, size_t max, size_t *n,
                         struct sbx_error *err);

/* Child side, right after fork() (single-threaded, before exec): moves the calling process into
 * the cgroup in every hierarchy, the unified one included, by writing "0" to each cgroup.procs.
 * Only openat, write and close: safe in the child of a threaded process. 0, or -errno. (A whole
 * process's move takes the threadgroup lock's RCU grace period, 7-15 ms: cgroup_enter_self is the
 * fast way for a launch that clones; this is for a backend that execs another program, runsc.) */
int cgroup_join_child(const struct cgroup *cg);

/* Kills every process in the cgroup at once and waits (bounded, ~2 s) until none is alive;
 * fails with ETIMEDOUT when some still is. Reaps nothing: zombies do not keep a cgroup
 * populated, and the caller reaps its own child (through its pidfd). Idempotent. */
int cgroup_kill_all(struct cgroup *cg, struct sbx_error *err);

/* Reads the counters as deltas against the values read when the cgroup was created (all zero for
 * a fresh cgroup; read anyway, as HOSTILE.md asks). */
int cgroup_read_evidence(struct cgroup *cg, struct sbx_evidence *evidence, struct sbx_error *err);

/* The processes in cg (its primary hierarchy's cgroup.procs) into pids, at most max (E2BIG
 * beyond), their number in *n. */
int cgroup_processes(const struct cgroup *cg, pid_t *pids, size_t max, size_t *n,
                     struct sbx_error *err);

/* Takes the counters' current values as the new baseline of cgroup_read_evidence(): a pool
 * entry's start-up (the interpreter's CPU) is not its execution's. Peaks are not reset. */
int cgroup_reset_baseline(struct cgroup *cg, struct sbx_error *err);

/* Kills what is left, removes the cgroup in every hierarchy, releases the slot and frees cg.
 * NULL is a no-op. Logs (does not return) errors: it runs on every path out. */
void cgroup_destroy(struct cgroup *cg);

/* What else a slot may hold besides its cgroups (a gVisor sandbox's directory): clean(slot) is
 * called for every orphan slot removed (by cgroup_reconcile, or by cgroup_create meeting one),
 * after its processes are killed and while its lock is still held, so that no new owner of the
 * slot can have made anything yet. One cleaner per process; NULL for none. */
void cgroup_set_orphan_cleaner(void (*clean)(unsigned slot));

/* Removes every orphaned slot under the sandboxd parents (primary slot dirs nobody holds a lock
 * on): kills their processes and removes their dirs in every hierarchy. A v1 dir left without a
 * primary one cannot come from sandboxd (the primary is made first and removed last); if one
 * appears anyway, cgroup_create() recreates it empty when its slot is next used. Returns the
 * number of slots removed, or -1 (err names the first failure; the other orphans are still
 * handled). */
int cgroup_reconcile(struct sbx_error *err);
