/* Resource limits set inside the sandbox: NOFILE, FSIZE, CORE=0, STACK, NPROC (a second line
 * behind pids.max) and CPU (per-process CPU time, SIGXCPU then SIGKILL). */
#pragma once

#include <stddef.h>
#include <sys/resource.h>
#include <sys/types.h>

#include "sandbox/sandbox.h"
#include "util/error.h"

struct rlimit_setting {
        int resource; /* RLIMIT_* */
        const char *name;
        struct rlimit value;
};

#define RLIMIT_PLAN_MAX 8

/* Pure: the rlimits for these limits, in the order they are applied (NOFILE, FSIZE, CORE, STACK,
 * NPROC, CPU). Returns the count. A zero open_files, disk_bytes, pids or cpu_ms means "no cap":
 * RLIM_INFINITY here. STACK is soft 8 MiB, hard max(8 MiB, memory_bytes) (infinity without a
 * memory cap); CPU is ceil(cpu_ms / 1000) s soft, one second more hard. */
size_t rlimit_plan(const struct sbx_limits *limits, struct rlimit_setting out[RLIMIT_PLAN_MAX]);

/* Child side: applies rlimit_plan() with setrlimit, in order. A hard limit above the inherited
 * one (infinity included) is lowered to the inherited one: raising it would need
 * CAP_SYS_RESOURCE in the initial user namespace. The error names the failing limit. */
int rlimit_apply(const struct sbx_limits *limits, struct sbx_error *err);

/* Supervisor side: applies rlimit_plan() to the process pid (a pool entry's waiting program) with
 * prlimit; as real root it may raise limits as well as lower them. */
int rlimit_apply_to(pid_t pid, const struct sbx_limits *limits, struct sbx_error *err);
