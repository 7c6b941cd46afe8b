/* The limits of one execution: every cap a sandbox enforces. Both processes know them: the API
 * process sets and clamps them, the engine checks them again and the sandbox enforces them.
 *
 * Each limit is one row of SBX_LIMITS, and everything else is derived from the rows: struct
 * sbx_limits, the range check (sbx_limits_valid), the defaults (sbx_limits_default), the limits
 * of the engine protocol's RUN and RESULT, the "limits" object of a result, the OpenAPI schemas
 * RequestLimits, EffectiveLimits and LimitName, a tier's config keys max_NAME and default_NAME,
 * and the options of `sandboxd run`. Adding a limit is one row here plus its enforcement
 * (sandbox/native/). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* How a limit appears outside the engine. */
enum sbx_limit_kind {
        /* A request may set it and a tier caps it (max_NAME) and sets its default (default_NAME),
         * as an integer in API units: the value divided by unit. */
        SBX_LIMIT_SETTABLE,
        /* Only reported, as a JSON number of cores: the value (millicores) / 1000. */
        SBX_LIMIT_CORES,
};

/* How `sandboxd run --OPTION VALUE` reads a limit's value. */
enum sbx_limit_cli {
        SBX_LIMIT_CLI_DURATION, /* "10s", "1500ms" (sbx_parse_duration_ms): milliseconds */
        SBX_LIMIT_CLI_SIZE,     /* "256M" (sbx_parse_size): bytes */
        SBX_LIMIT_CLI_COUNT,    /* a plain number */
        SBX_LIMIT_CLI_CORES,    /* "0.5" cores: millicores */
};

#define SBX_LIMIT_DAY_MS (24ull * 3600 * 1000)
#define SBX_LIMIT_MIB    (1024ull * 1024)

/* One row per limit: X(member, C type, columns of struct sbx_limit_field below). The range
 * [min, max] is in the member's unit; no limit may be "none" (0): a request always runs capped.
 * Rows are in struct order, which is also the order of the protocol, the JSON and the config. */
// clang-format off
#define SBX_LIMITS(X)                                                                              \
        /* The supervisor kills the cgroup at the deadline. A day is far past any sane ceiling    \
         * and keeps every deadline computation far from overflow. */                              \
        X(wall_ms, uint64_t, .name = "wall_ms", .kind = SBX_LIMIT_SETTABLE, .unit = 1,             \
          .min = 1, .max = SBX_LIMIT_DAY_MS, .config_max = SBX_LIMIT_DAY_MS,                       \
          .fallback = 10 * 1000,                                                                   \
          .option = "timeout", .cli = SBX_LIMIT_CLI_DURATION, .help = "wall-clock deadline")      \
        /* RLIMIT_CPU, rounded up to seconds. */                                                   \
        X(cpu_ms, uint64_t, .name = "cpu_ms", .kind = SBX_LIMIT_SETTABLE, .unit = 1,               \
          .min = 1, .max = SBX_LIMIT_DAY_MS, .config_max = SBX_LIMIT_DAY_MS,                       \
          .fallback = 10 * 1000,                                                                   \
          .option = "cpu-time", .cli = SBX_LIMIT_CLI_DURATION, .help = "CPU time per process")    \
        /* The cgroup's memory cap, swap included. An interpreter needs a few MiB to start; 1 TiB \
         * is above any machine this runs on, so a larger value is a typo, not a plan. */          \
        X(memory_bytes, uint64_t, .name = "memory_mb", .kind = SBX_LIMIT_SETTABLE,                 \
          .unit = SBX_LIMIT_MIB, .min = 4 * SBX_LIMIT_MIB, .max = 1ull << 40,                      \
          .config_max = 1024 * 1024, .fallback = 256 * SBX_LIMIT_MIB,                              \
          .option = "memory", .cli = SBX_LIMIT_CLI_SIZE, .help = "memory cap incl. swap")         \
        /* The cgroup's pids.max, and RLIMIT_NPROC as a second line: at least the sandbox's init  \
         * and the program; at most PID_MAX_LIMIT on 64-bit kernels. */                            \
        X(pids, uint64_t, .name = "pids", .kind = SBX_LIMIT_SETTABLE, .unit = 1,                   \
          .min = 2, .max = 4ull << 20, .config_max = 4ull << 20, .fallback = 64,                   \
          .option = "pids", .cli = SBX_LIMIT_CLI_COUNT, .help = "processes and threads")          \
        /* The size of the tmpfs behind /workspace, /tmp and /dev/shm. */                          \
        X(disk_bytes, uint64_t, .name = "disk_mb", .kind = SBX_LIMIT_SETTABLE,                     \
          .unit = SBX_LIMIT_MIB, .min = SBX_LIMIT_MIB, .max = 1ull << 40,                          \
          .config_max = 1024 * 1024, .fallback = 64 * SBX_LIMIT_MIB,                               \
          .option = "disk", .cli = SBX_LIMIT_CLI_SIZE,                                             \
          .help = "tmpfs behind /workspace, /tmp, /dev/shm")                                       \
        /* Per stream (stdout, stderr). A tier's ceiling is lower than the range: both streams    \
         * travel back in one engine RESULT message of at most 48 MiB. */                          \
        X(output_bytes, uint64_t, .name = "output_bytes", .kind = SBX_LIMIT_SETTABLE, .unit = 1,   \
          .min = 1, .max = 1ull << 30, .config_max = 16 * SBX_LIMIT_MIB,                           \
          .fallback = SBX_LIMIT_MIB,                                                               \
          .option = "output", .cli = SBX_LIMIT_CLI_SIZE, .help = "byte cap per stream")           \
        /* RLIMIT_NOFILE: stdio and a few more at least; at most the kernel's default fs.nr_open. \
         * The default is the usual soft limit of a Linux login: socket-heavy programs (servers,  \
         * test suites, asyncio) hit EMFILE below it. */                                           \
        X(open_files, uint64_t, .name = "open_files", .kind = SBX_LIMIT_SETTABLE, .unit = 1,       \
          .min = 8, .max = 1ull << 20, .config_max = 1ull << 20, .fallback = 1024,                 \
          .option = "open-files", .cli = SBX_LIMIT_CLI_COUNT, .help = "open file descriptors")    \
        /* The cgroup's CPU bandwidth quota, 1000 = one core; at least the kernel's 1 ms quota    \
         * per 100 ms period. */                                                                   \
        X(cpu_millicores, uint32_t, .name = "cpus", .kind = SBX_LIMIT_CORES, .unit = 1000,         \
          .min = 10, .max = 1024000, .fallback = 1000,                                             \
          .option = "cpus", .cli = SBX_LIMIT_CLI_CORES, .help = "CPU quota in cores, e.g. 0.5")
// clang-format on

/* Every cap a sandbox enforces. */
struct sbx_limits {
#define SBX_LIMIT_MEMBER(member, type, ...) type member;
        SBX_LIMITS(SBX_LIMIT_MEMBER)
#undef SBX_LIMIT_MEMBER
};

/* A row of SBX_LIMITS, for code that handles every limit alike. */
struct sbx_limit_field {
        const char *member; /* in struct sbx_limits and on the engine protocol: "memory_bytes" */
        size_t offset;      /* of the member in struct sbx_limits */
        size_t size;        /* of the member: 4 or 8 */
        const char *name;   /* in requests, responses, config keys and errors: "memory_mb" */
        enum sbx_limit_kind kind;
        uint64_t unit;       /* member units per API unit: memory_mb -> 1 MiB */
        uint64_t min, max;   /* the range, in member units */
        uint64_t config_max; /* settable: the largest ceiling a tier may configure, in API units */
        uint64_t fallback;   /* the built-in default, in member units (README documents them) */
        const char *option;  /* sandboxd run --OPTION */
        enum sbx_limit_cli cli;
        const char *help; /* the option's line in `sandboxd run --help` */
};

#define SBX_LIMIT_ONE(...) +1
#define SBX_LIMIT_COUNT    (0 SBX_LIMITS(SBX_LIMIT_ONE))

/* The rows, in SBX_LIMITS order. */
extern const struct sbx_limit_field sbx_limit_fields[SBX_LIMIT_COUNT];

/* The row called name (API spelling, "memory_mb"), or NULL. */
const struct sbx_limit_field *sbx_limit_field_find(const char *name);

/* The member of limits that field describes, widened to 64 bits ... */
uint64_t sbx_limit_get(const struct sbx_limits *limits, const struct sbx_limit_field *field);

/* ... and set (a value wider than the member is cut to it: check the range first). */
void sbx_limit_set(struct sbx_limits *limits, const struct sbx_limit_field *field, uint64_t value);

/* The smallest value a request or tier may give, in API units (field->min / field->unit,
 * rounded up). */
uint64_t sbx_limit_api_min(const struct sbx_limit_field *field);

/* Whether every limit is within its range; when not, *field names the first that is not, as
 * requests and responses spell it ("memory_mb"). */
bool sbx_limits_valid(const struct sbx_limits *limits, const char **field);

/* The built-in default limits. */
void sbx_limits_default(struct sbx_limits *limits);
