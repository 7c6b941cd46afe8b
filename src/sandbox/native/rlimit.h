/* Resource limits set inside the sandbox: NOFILE, FSIZE, CORE=0, STACK, NPROC (a second line
 * behind pids.max), SIGPENDING and MSGQUEUE (per-user kernel counters) and CPU (per-process CPU
 * time, SIGXCPU then SIGKILL); and the ceilings a new user namespace takes from its creator. */
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

#define RLIMIT_PLAN_MAX 10

/* Pure: the rlimits for these limits, in the order they are applied (NOFILE, FSIZE, CORE, STACK,
 * NPROC, SIGPENDING, MSGQUEUE, CPU). Returns the count. A zero open_files, disk_bytes, pids or
 * cpu_ms means "no cap": RLIM_INFINITY here. STACK is soft 8 MiB, hard max(8 MiB, memory_bytes)
 * (infinity without a memory cap); CPU is ceil(cpu_ms / 1000) s soft, one second more hard. */
size_t rlimit_plan(const struct sbx_limits *limits, struct rlimit_setting out[RLIMIT_PLAN_MAX]);

/* Child side: applies rlimit_plan() with setrlimit, in order. A hard limit above the inherited
 * one (infinity included) is lowered to the inherited one: raising it would need
 * CAP_SYS_RESOURCE in the initial user namespace. The error names the failing limit. */
int rlimit_apply(const struct sbx_limits *limits, struct sbx_error *err);

/* Supervisor side: applies rlimit_plan() to the process pid (a pool entry's waiting program) with
 * prlimit; as real root it may raise limits as well as lower them. */
int rlimit_apply_to(pid_t pid, const struct sbx_limits *limits, struct sbx_error *err);

#define RLIMIT_SAVED_MAX 2

/* The soft limits rlimit_namespace_ceilings lowered, to put back. */
struct rlimit_saved {
        size_t n;
        int resource[RLIMIT_SAVED_MAX];
        struct rlimit value[RLIMIT_SAVED_MAX];
};

/* Creator side, right before clone(CLONE_NEWUSER): lowers this process's soft SIGPENDING and
 * MSGQUEUE limits, which the new user namespace keeps as the ceiling of what all its users
 * together may charge to its owner (host root). saved gets what to restore, right after the
 * clone; on failure nothing stays changed. */
int rlimit_namespace_ceilings(struct rlimit_saved *saved, struct sbx_error *err);
void rlimit_restore(const struct rlimit_saved *saved);
