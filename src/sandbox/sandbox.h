/* The sandbox layer's public interface: what a sandbox is asked to run (struct sbx_spec), what
 * the supervisor saw (struct sbx_run), what the kernel counted (struct sbx_evidence), and the
 * backend operations every isolation boundary implements (struct sbx_backend).
 *
 * Lifecycle, driven by the engine:
 *
 *   create  -> a sandbox exists with its resources (slot, cgroups, limits); no process yet
 *   start   -> the isolated process is set up and has exec'd the program, or setup failed and the
 *              program never ran (fail closed)
 *   wait    -> stdin fed, stdout/stderr drained under their caps, wall deadline enforced; returns
 *              when the program and everything it started are gone
 *   kill    -> every process of the sandbox killed at once (idempotent)
 *   read_evidence -> the kernel's counters for this sandbox, as deltas since create (for a pool
 * entry: since acquire) destroy -> everything the sandbox owned removed; always safe to call, also
 * after failures
 *
 * A sandbox runs one execution and is then destroyed, never reused. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/buffer.h"
#include "util/error.h"

/* Host uids and gids from here on belong to sandboxes: each live sandbox maps a range of them
 * (sandbox/native/userns.h). No other process may run as one of them: it would own, and could
 * signal or ptrace, a sandbox's processes. */
#define SBX_SANDBOX_HOST_IDS_FIRST 2000000000u

/* Every cap a sandbox enforces. 0 means "no cap" only where noted. */
struct sbx_limits {
        uint64_t wall_ms;        /* wall-clock deadline; the supervisor kills the cgroup */
        uint64_t cpu_ms;         /* CPU time per process (RLIMIT_CPU, rounded up to seconds) */
        uint64_t memory_bytes;   /* cgroup memory cap, swap included */
        uint64_t pids;           /* cgroup pids.max, and RLIMIT_NPROC as a second line */
        uint64_t disk_bytes;     /* size of the tmpfs behind /workspace, /tmp, /dev/shm */
        uint64_t output_bytes;   /* per stream (stdout, stderr) */
        uint64_t open_files;     /* RLIMIT_NOFILE */
        uint32_t cpu_millicores; /* CPU bandwidth quota: 1000 = one core */
};

enum sbx_network {
        SBX_NETWORK_NONE, /* a fresh network namespace with only loopback */
};

/* Layers a test can turn off one at a time (the hostile suite's `without:<layer>` controls).
 * Only `sandboxd run`'s test flags set these; no API request or config can. */
enum sbx_layer {
        SBX_LAYER_SECCOMP = 1u << 0,
        SBX_LAYER_LANDLOCK = 1u << 1,
        SBX_LAYER_CAPS = 1u << 2,
        SBX_LAYER_NO_NEW_PRIVS = 1u << 3,
        SBX_LAYER_RLIMITS = 1u << 4,
        SBX_LAYER_NETNS = 1u << 5,
};

struct sbx_test_hooks {
        const char *fail_step;    /* setup step forced to fail, by name; NULL for none */
        unsigned disabled_layers; /* enum sbx_layer bits */
};

/* A file delivered into /workspace before the program starts. */
struct sbx_file {
        const char *path; /* relative to /workspace; already validated: no "..", not absolute */
        const void *data;
        size_t size;
        bool executable;
};

/* What to run. Everything is borrowed: it must outlive the sandbox. */
struct sbx_spec {
        const char *const *argv; /* argv[0] is an absolute path inside the sandbox */
        const char *const *envp; /* the complete environment */
        const struct sbx_file *files;
        size_t n_files;
        const void *stdin_data;
        size_t stdin_size;
        struct sbx_limits limits;
        enum sbx_network network;
        struct sbx_test_hooks test;
        /* Pool mode: the program (a warm-pool loader, guest/) gets the read end of the agent
         * channel as fd 3 and waits there for its execution (backend acquire). */
        bool agent;
        int cancel_fd; /* readable = kill the sandbox and end the run (canceled); <= 0 for none */
};

/* What the supervisor saw while the program ran. */
struct sbx_run {
        bool exited; /* the program exited (exit_code valid) ... */
        int exit_code;
        int signal;            /* ... or was killed by this signal (0 when it exited) */
        bool wall_timeout;     /* the wall deadline fired and the sandbox was killed */
        bool output_limit;     /* a stream exceeded output_bytes and the sandbox was killed */
        bool canceled;         /* spec.cancel_fd became readable and the sandbox was killed */
        struct sbx_buffer out; /* stdout, at most output_bytes; .overflow = truncated */
        struct sbx_buffer err; /* stderr, likewise */
        bool disk_known;       /* the fields below were read from the sandbox's tmpfs */
        uint64_t disk_used_bytes;
        uint64_t disk_total_bytes;
        uint64_t inodes_free;
        uint64_t wall_us; /* from exec to the end of the program */
};

/* The kernel's counters for one sandbox, as deltas since create (pooled: since acquire). */
struct sbx_evidence {
        uint64_t oom_kills;         /* v2 memory.events oom_kill; v1 memory.oom_control oom_kill */
        uint64_t memory_max_events; /* v2 memory.events max; v1 memory.failcnt */
        uint64_t memory_peak_bytes; /* v2 memory.peak; v1 memory.max_usage_in_bytes */
        uint64_t pids_max_events;   /* pids.events max: forks refused at pids.max */
        uint64_t pids_peak;         /* pids.peak where the kernel has it, else 0 */
        uint64_t cpu_usage_us;      /* v2 cpu.stat usage_usec; v1 cpuacct.usage */
        uint64_t cpu_throttled_us;  /* v2 cpu.stat throttled_usec; v1 cpu.stat throttled_time */
        uint64_t cpu_nr_throttled;  /* periods in which the quota throttled the sandbox */
};

struct sbx_sandbox; /* a backend's own state */

struct sbx_backend {
        const char *name;

        /* Reserves a slot and creates the sandbox's cgroups with spec->limits applied. */
        int (*create)(const struct sbx_spec *spec, struct sbx_sandbox **out, struct sbx_error *err);
        /* Sets up isolation and execs the program. On failure the program never ran and err
         * names the setup step ("setup step 'pivot_root': ..."). */
        int (*start)(struct sbx_sandbox *sandbox, struct sbx_error *err);
        /* Hands a sandbox started in pool mode (spec.agent) its execution: applies request's
         * limits (cgroup files, prlimit), resets the evidence baseline, delivers request's files,
         * argv and environment through the agent channel. From here the sandbox runs request:
         * wait() feeds its stdin and enforces its deadline. */
        int (*acquire)(struct sbx_sandbox *sandbox, const struct sbx_spec *request,
                       struct sbx_error *err);
        /* Feeds stdin, drains output, enforces the wall deadline and output cap; fills run.
         * Returns when every process of the sandbox is gone. */
        int (*wait)(struct sbx_sandbox *sandbox, struct sbx_run *run, struct sbx_error *err);
        /* Kills every process of the sandbox at once. Idempotent. */
        int (*kill)(struct sbx_sandbox *sandbox, struct sbx_error *err);
        /* Reads the kernel's counters as deltas since create (pooled: since acquire). */
        int (*read_evidence)(struct sbx_sandbox *sandbox, struct sbx_evidence *evidence,
                             struct sbx_error *err);
        /* Kills what is left, removes cgroups and frees the sandbox. NULL is a no-op. */
        void (*destroy)(struct sbx_sandbox *sandbox);
        /* Removes what a crashed earlier process left behind (orphan cgroups). Called once at
         * start-up, before any sandbox of this process exists. */
        int (*reconcile)(struct sbx_error *err);
};

/* The backend called name ("native"), or NULL. */
const struct sbx_backend *sbx_backend_find(const char *name);

/* Frees the buffers of a run. */
void sbx_run_free(struct sbx_run *run);
