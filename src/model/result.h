/* The result of one execution and how its status is decided from kernel evidence. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "model/limits.h"
#include "util/buffer.h"
#include "util/error.h"

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

/* Frees the buffers of a run. */
void sbx_run_free(struct sbx_run *run);

enum sbx_status {
        SBX_STATUS_OK,             /* exited 0, no cap hit */
        SBX_STATUS_EXIT_NONZERO,   /* exited with a non-zero code, no cap hit */
        SBX_STATUS_SIGNALED,       /* killed by a signal no cap explains */
        SBX_STATUS_TIMEOUT,        /* wall deadline, or the CPU-time rlimit (SIGXCPU) */
        SBX_STATUS_MEMORY_LIMIT,   /* the cgroup's OOM killer fired */
        SBX_STATUS_PIDS_LIMIT,     /* the kernel refused a fork at pids.max */
        SBX_STATUS_OUTPUT_LIMIT,   /* a stream passed its byte cap; the run was ended */
        SBX_STATUS_DISK_FULL,      /* the scratch tmpfs filled up, or SIGXFSZ */
        SBX_STATUS_COMPILE_ERROR,  /* reserved for compiled languages */
        SBX_STATUS_INTERNAL_ERROR, /* sandboxd failed; the program did not run (fail closed) */
        SBX_STATUS_CANCELED,       /* stopped before it ended: shutdown, or its caller gave up */
};

/* The number of statuses: each one's number is also its code on the engine protocol's wire. */
#define SBX_STATUS_COUNT ((size_t)SBX_STATUS_CANCELED + 1)

struct sbx_timing {
        uint64_t acquire_us;  /* slot + cgroups + limits */
        uint64_t setup_us;    /* clone to exec: namespaces, mounts, Landlock, caps, seccomp */
        uint64_t run_us;      /* exec to the end of the last process */
        uint64_t teardown_us; /* kill, evidence, cgroup removal */
        uint64_t total_us;
};

struct sbx_result {
        char id[40];
        enum sbx_status status;
        int exit_code; /* -1 when the program did not exit normally */
        int signal;    /* 0 unless killed by a signal */
        struct sbx_run run;
        struct sbx_evidence evidence;
        struct sbx_limits limits; /* effective */
        struct sbx_timing timing;
        const char *backend;
        bool pooled;
        char error[SBX_ERROR_MESSAGE_MAX]; /* internal_error: what failed; canceled: why */
};

/* The name of a status as it appears in JSON ("memory_limit"). */
const char *sbx_status_name(enum sbx_status status);

/* Whether a result of this status says what went wrong in its error text (internal_error,
 * canceled) rather than in the program's exit code or signal. */
bool sbx_status_has_error(enum sbx_status status);

/* Pure: decides the status from what the supervisor saw and the kernel's counters. A cap's
 * status wins over the exit code, most specific first: output_limit, timeout (wall), memory_limit
 * (OOM kill counter moved), pids_limit (pids.events max moved), disk_full (scratch full or
 * SIGXFSZ), timeout (SIGXCPU), then signaled, exit_nonzero, ok. */
enum sbx_status sbx_classify(const struct sbx_run *run, const struct sbx_evidence *evidence,
                             const struct sbx_limits *limits);

/* The documented exit code of `sandboxd run` for a result: the program's exit code for ok and
 * exit_nonzero, 128+signal for signaled, and a fixed code per cap (see README). */
int sbx_result_cli_exit_code(const struct sbx_result *result);

/* Makes result an internal_error of execution_id (NULL: none) saying error, with limits (NULL:
 * zeroed) and backend, and no output. */
void sbx_result_set_internal_error(struct sbx_result *result, const char *execution_id,
                                   const struct sbx_limits *limits, const char *backend,
                                   const char *error);

/* Frees the output buffers. */
void sbx_result_free(struct sbx_result *result);
