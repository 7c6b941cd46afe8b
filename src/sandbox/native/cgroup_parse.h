/* Pure parsers for cgroup text: /proc/self/mountinfo, /proc/<pid>/cgroup and the flat files the
 * kernel exposes in a cgroup directory. No system calls, so tests/unit/test_cgroup_parse.c and
 * tests/fuzz/fuzz_mountinfo.c can feed them any text; cgroup.c and its siblings make the calls. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "util/error.h"

enum cgroup_layout {
        CGROUP_LAYOUT_UNIFIED, /* pure v2 */
        CGROUP_LAYOUT_HYBRID,  /* v1 controllers, controller-less v2 for tracking and kill */
        CGROUP_LAYOUT_LEGACY,  /* pure v1 */
};

/* Where each hierarchy sandboxd uses is mounted; empty string when absent. */
struct cgroup_mounts {
        enum cgroup_layout layout;
        char unified[256]; /* the cgroup2 mount */
        char memory[256];  /* v1 controller mounts (empty on pure v2) */
        char pids[256];
        char cpu[256];
        char cpuacct[256];
        char freezer[256];
};

/* Pure: finds the cgroup mounts in the text of /proc/self/mountinfo and decides the layout:
 * UNIFIED with cgroup2 and no v1 memory controller, HYBRID with cgroup2 and v1 memory+pids,
 * LEGACY with v1 memory+pids+freezer only. Fails (ENOTSUP) otherwise: no usable hierarchy, v1
 * memory without v1 pids, or pure v1 without the freezer (kill could not stop a fork loop). */
int cgroup_parse_mountinfo(const char *mountinfo, struct cgroup_mounts *out, struct sbx_error *err);

/* Pure: finds "key value" in a flat-keyed cgroup file's text (pids.events, memory.events,
 * memory.oom_control, cpu.stat) and parses value. Fails (ENOENT) when the key is missing. */
int cgroup_parse_keyed(const char *text, const char *key, uint64_t *value, struct sbx_error *err);

/* Pure: parses a single-value file ("123\n", or "max\n" as UINT64_MAX). */
int cgroup_parse_value(const char *text, uint64_t *value, struct sbx_error *err);

/* Pure: finds the path of the hierarchy that carries controller in the text of
 * /proc/<pid>/cgroup ("4:memory:/a/b" -> "/a/b"; controllers may be co-mounted: "1:cpu,cpuacct:/").
 */
int cgroup_parse_proc_path(const char *proc_cgroup, const char *controller, char *path, size_t size,
                           struct sbx_error *err);
