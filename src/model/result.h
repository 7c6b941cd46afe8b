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

/* The kernel's counters for one sandbox, as deltas since create (pooled: since acquire): one row
 * per counter, X(member, where the result's JSON reports it). From the rows: the struct, the
 * engine protocol's evidence field (every row, u64, in order), the result's "evidence" object
 * (the rows marked EVIDENCE; "usage" reports the others) and the OpenAPI Evidence schema. */
// clang-format off
#define SBX_EVIDENCE(X)                                                                            \
        X(oom_kills, EVIDENCE)         /* v2 memory.events oom_kill; v1 memory.oom_control */      \
        X(memory_max_events, EVIDENCE) /* v2 memory.events max; v1 memory.failcnt */               \
        X(memory_peak_bytes, USAGE)    /* v2 memory.peak; v1 memory.max_usage_in_bytes */          \
        X(pids_max_events, EVIDENCE)   /* pids.events max: forks refused at pids.max */            \
        X(pids_peak, USAGE)            /* pids.peak where the kernel has it, else 0 */             \
        X(cpu_usage_us, EVIDENCE)      /* v2 cpu.stat usage_usec; v1 cpuacct.usage */              \
        X(cpu_throttled_us, EVIDENCE)  /* v2 cpu.stat throttled_usec; v1 cpu.stat throttled_time */\
        X(cpu_nr_throttled, EVIDENCE)  /* periods in which the quota throttled the sandbox */
// clang-format on

struct sbx_evidence {
#define SBX_EVIDENCE_MEMBER(member, json) uint64_t member;
        SBX_EVIDENCE(SBX_EVIDENCE_MEMBER)
#undef SBX_EVIDENCE_MEMBER
};

/* What a backend with a kernel of its own (uml) counts inside that kernel, beside the host
 * cgroup's evidence: the guest kernel's counters for the program's cgroup (every SBX_EVIDENCE row;
 * deltas from the program's start, but for the peaks) and the kills of its init's thrash guard,
 * the OOM kills the guest's OOM killer would not make (guest/uml_init.c). The result's evidence
 * counts both; its "evidence" object shows these as "guest". */
struct sbx_guest_evidence {
        bool known; /* the backend has a guest kernel, and it reported */
        struct sbx_evidence counters;
        uint64_t thrash_kills;
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
        SBX_STATUS_COMPILE_ERROR,  /* the compile stage failed (its own status says how) */
        SBX_STATUS_INTERNAL_ERROR, /* sandboxd failed; the program did not run (fail closed) */
        SBX_STATUS_CANCELED,       /* stopped before it ended: shutdown, or its caller gave up */
};

/* The number of statuses: each one's number is also its code on the engine protocol's wire. */
#define SBX_STATUS_COUNT ((size_t)SBX_STATUS_CANCELED + 1)

/* Where the time of one execution went, in microseconds: one row per phase. From the rows: the
 * struct, the engine protocol's timing field (u64 each, in order), the result's "timing" object
 * and the OpenAPI Timing schema. */
// clang-format off
#define SBX_TIMING(X)                                                                              \
        X(acquire_us)  /* slot + cgroups + limits */                                               \
        X(setup_us)    /* clone to exec: namespaces, mounts, Landlock, caps, seccomp */            \
        X(run_us)      /* exec to the end of the last process */                                   \
        X(teardown_us) /* kill, evidence, cgroup removal */                                        \
        X(total_us)
// clang-format on

struct sbx_timing {
#define SBX_TIMING_MEMBER(member) uint64_t member;
        SBX_TIMING(SBX_TIMING_MEMBER)
#undef SBX_TIMING_MEMBER
};

struct sbx_result {
        char id[40];
        enum sbx_status status;
        int exit_code; /* -1 when the program did not exit normally */
        int signal;    /* 0 unless killed by a signal */
        struct sbx_run run;
        struct sbx_evidence evidence;
        struct sbx_guest_evidence guest;
        struct sbx_limits limits; /* effective */
        struct sbx_timing timing;
        const char *backend;
        bool pooled;
        char error[SBX_ERROR_MESSAGE_MAX]; /* internal_error: what failed; canceled: why */
        /* A compiled language's compile stage, a result of its own (its id empty, its compile
         * NULL), or NULL. Owned: sbx_result_free frees it; a decoded result's points into its
         * message (protocol.h). */
        struct sbx_result *compile;
        bool cached; /* a compile stage: its artifact came from the compile cache */
};

/* The name of a status as it appears in JSON ("memory_limit"). */
const char *sbx_status_name(enum sbx_status status);

/* Whether a result of this status says what went wrong in its error text (internal_error,
 * canceled, compile_error: no program ran) rather than in the program's exit code or signal. */
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

/* The CPU time the execution cost, in ms, its compile stage's included: what the tenant's CPU
 * budget is charged. */
uint64_t sbx_result_cpu_ms(const struct sbx_result *result);

/* Frees the output buffers, and the compile stage. */
void sbx_result_free(struct sbx_result *result);
