/* The limits of one execution: every cap a sandbox enforces, the range each must be in, and the
 * built-in defaults. Both processes know them: the API process sets and clamps them, the engine
 * checks them again and the sandbox enforces them. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

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

/* The range every limit must be in; the CLI, the settings pipeline and the engine (again, on
 * every RUN) enforce it. No limit may be "none" (0): a request always runs capped. */
#define SBX_MIN_MEMORY_BYTES   (4ull << 20) /* an interpreter needs a few MiB to start */
#define SBX_MIN_PIDS           2            /* the sandbox's init and the program */
#define SBX_MIN_DISK_BYTES     (1ull << 20)
#define SBX_MIN_OPEN_FILES     8                     /* stdio and a few more */
#define SBX_MIN_CPU_MILLICORES 10                    /* the kernel's 1 ms quota per 100 ms period */
#define SBX_MAX_LIMIT_MS       (24ull * 3600 * 1000) /* wall and CPU: a day */
#define SBX_MAX_MEMORY_BYTES   (1ull << 40)
#define SBX_MAX_PIDS           (4ull << 20) /* PID_MAX_LIMIT on 64-bit */
#define SBX_MAX_DISK_BYTES     (1ull << 40)
#define SBX_MAX_OUTPUT_BYTES   (1ull << 30)
#define SBX_MAX_OPEN_FILES     (1ull << 20) /* the default fs.nr_open */
#define SBX_MAX_CPU_MILLICORES 1024000u

/* Whether every limit is within the SBX_MIN_* / SBX_MAX_* range above; when not, *field names
 * the first that is not. */
bool sbx_limits_valid(const struct sbx_limits *limits, const char **field);

/* The built-in default limits (README documents them). */
void sbx_limits_default(struct sbx_limits *limits);
