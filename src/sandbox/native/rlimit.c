/* Resource limits set in the sandbox's child right before exec. They are per process (or per uid
 * for NPROC) and back up the cgroup limits, which are per sandbox. */
#define _GNU_SOURCE
#include "sandbox/native/rlimit.h"

#include <errno.h>

#include "util/log.h"

#define MIB (1024ull * 1024ull)

/* How far RLIMIT_NPROC sits above pids.max (see rlimit_plan). */
#define RLIMIT_NPROC_MARGIN 8

/* Pending queued signals (sigqueue, POSIX timers) per uid of a sandbox, and for the sandbox as a
 * whole (rlimit_namespace_ceilings). Programs here queue a handful at most. */
#define RLIMIT_SIGPENDING_MAX 1024

/* The usual default soft stack: deep enough for every runtime here, small enough that runaway
 * recursion ends in SIGSEGV quickly instead of eating the memory cap. */
#define STACK_SOFT_BYTES (8 * MIB)

static rlim_t rlimit_or_infinity(uint64_t value)
{
        return value == 0 ? RLIM_INFINITY : (rlim_t)value;
}

static void rlimit_add(struct rlimit_setting out[RLIMIT_PLAN_MAX], size_t *n, int resource,
                       const char *name, rlim_t soft, rlim_t hard)
{
        out[*n] = (struct rlimit_setting){
                .resource = resource,
                .name = name,
                .value = {.rlim_cur = soft, .rlim_max = hard},
        };
        (*n)++;
}

size_t rlimit_plan(const struct sbx_limits *limits, struct rlimit_setting out[RLIMIT_PLAN_MAX])
{
        size_t n = 0;

        /* soft = hard: the program cannot raise it, and EMFILE comes at the stated bound. */
        rlim_t files = rlimit_or_infinity(limits->open_files);
        rlimit_add(out, &n, RLIMIT_NOFILE, "RLIMIT_NOFILE", files, files);

        /* No single file larger than the whole scratch tmpfs (writes past it: SIGXFSZ/EFBIG). */
        rlim_t file_size = rlimit_or_infinity(limits->disk_bytes);
        rlimit_add(out, &n, RLIMIT_FSIZE, "RLIMIT_FSIZE", file_size, file_size);

        /* No core dumps: they would be written into the workspace (filling it) or piped to the
         * host's core_pattern handler, outside the sandbox. */
        rlimit_add(out, &n, RLIMIT_CORE, "RLIMIT_CORE", 0, 0);

        /* Soft 8 MiB; hard at the memory cap. Compilers raise their own soft limit (gcc's cc1
         * asks for 64 MiB) and must be able to; a stack bigger than the memory cap could never
         * be backed anyway. A finite hard limit also keeps the program from switching to the
         * legacy mmap layout (chosen when the stack is unlimited), which randomises less.
         * Without a memory cap there is nothing better to bound it by. */
        rlim_t stack_hard = RLIM_INFINITY;
        if (limits->memory_bytes != 0)
                stack_hard = limits->memory_bytes > STACK_SOFT_BYTES ? limits->memory_bytes
                                                                     : STACK_SOFT_BYTES;
        rlimit_add(out, &n, RLIMIT_STACK, "RLIMIT_STACK", STACK_SOFT_BYTES, stack_hard);

        /* A second line behind pids.max, per uid: it counts the processes of one uid of the
         * sandbox's user namespace (whose ids map to host uids of its slot alone). A program
         * that switches to another of its ids starts a new count, so pids.max, which counts
         * every task of the sandbox, is the bound that holds; this one sits a little above it
         * so that the cgroup refuses first and the refusal shows as kernel evidence
         * (pids.events max). NPROC refuses at count >= limit where pids.max refuses at
         * count > max. */
        rlim_t processes =
                limits->pids == 0 ? RLIM_INFINITY : (rlim_t)limits->pids + RLIMIT_NPROC_MARGIN;
        rlimit_add(out, &n, RLIMIT_NPROC, "RLIMIT_NPROC", processes, processes);

        /* Queued signals and POSIX message queue bytes are counted per user, and the kernel
         * charges them to the user namespace's owner (host root) too; see
         * rlimit_namespace_ceilings for the ceiling of the whole sandbox. Per uid: few pending
         * real-time signals, and no message queues (Landlock refuses the mqueue mount on
         * hosts that have it; without it they would be created with these counters). */
        rlimit_add(out, &n, RLIMIT_SIGPENDING, "RLIMIT_SIGPENDING", RLIMIT_SIGPENDING_MAX,
                   RLIMIT_SIGPENDING_MAX);
        rlimit_add(out, &n, RLIMIT_MSGQUEUE, "RLIMIT_MSGQUEUE", 0, 0);

        /* CPU seconds per process, rounded up so a limit is never shorter than asked. SIGXCPU
         * (catchable, terminates by default) at the soft limit, SIGKILL one second later at the
         * hard limit for a program that catches it. */
        rlim_t cpu_soft = RLIM_INFINITY;
        rlim_t cpu_hard = RLIM_INFINITY;
        if (limits->cpu_ms != 0) {
                cpu_soft = (rlim_t)(limits->cpu_ms / 1000 + (limits->cpu_ms % 1000 != 0));
                cpu_hard = cpu_soft + 1;
        }
        rlimit_add(out, &n, RLIMIT_CPU, "RLIMIT_CPU", cpu_soft, cpu_hard);

        return n;
}

int rlimit_namespace_ceilings(struct rlimit_saved *saved, struct sbx_error *err)
{
        /* A user namespace takes the SIGPENDING and MSGQUEUE soft limits of the process that
         * creates it as the ceiling of everything its users charge to its owner's count
         * (create_user_ns: set_userns_rlimit_max). The owner is host root, whose count every
         * host root process shares; a sandbox left at root's own ceiling could fill it and
         * refuse root's real-time signals host-wide. Lowered soft limits only: the hard ones
         * stay, and restore puts the soft ones back. */
        const struct {
                int resource;
                rlim_t ceiling;
        } ceilings[RLIMIT_SAVED_MAX] = {
                {RLIMIT_SIGPENDING, RLIMIT_SIGPENDING_MAX},
                {RLIMIT_MSGQUEUE, 0},
        };
        saved->n = 0;
        for (size_t i = 0; i < RLIMIT_SAVED_MAX; i++) {
                struct rlimit current;
                if (getrlimit(ceilings[i].resource, &current) < 0)
                        return sbx_error_set(err, errno, "rlimit: get the namespace ceilings");
                struct rlimit lowered = current;
                if (lowered.rlim_cur > ceilings[i].ceiling)
                        lowered.rlim_cur = ceilings[i].ceiling;
                saved->resource[saved->n] = ceilings[i].resource;
                saved->value[saved->n] = current;
                saved->n++;
                if (setrlimit(ceilings[i].resource, &lowered) < 0) {
                        int code = errno;
                        rlimit_restore(saved);
                        return sbx_error_set(err, code, "rlimit: lower the namespace ceilings");
                }
        }
        return 0;
}

void rlimit_restore(const struct rlimit_saved *saved)
{
        for (size_t i = 0; i < saved->n; i++)
                (void)setrlimit(saved->resource[i], &saved->value[i]);
}

int rlimit_apply_to(pid_t pid, const struct sbx_limits *limits, struct sbx_error *err)
{
        struct rlimit_setting plan[RLIMIT_PLAN_MAX];
        size_t n = rlimit_plan(limits, plan);
        for (size_t i = 0; i < n; i++) {
                /* Never above the process's own hard limit, as rlimit_apply never goes above
                 * what the sandbox inherited: the caller (root) could raise it, a cold sandbox's
                 * program could not. */
                struct rlimit value = plan[i].value, current;
                if (prlimit(pid, plan[i].resource, NULL, &current) < 0)
                        return sbx_error_set(err, errno, "rlimit: get %s of %d", plan[i].name,
                                             (int)pid);
                if (value.rlim_max > current.rlim_max)
                        value.rlim_max = current.rlim_max;
                if (value.rlim_cur > value.rlim_max)
                        value.rlim_cur = value.rlim_max;
                if (prlimit(pid, plan[i].resource, &value, NULL) < 0)
                        return sbx_error_set(err, errno, "rlimit: set %s of %d", plan[i].name,
                                             (int)pid);
        }
        return 0;
}

int rlimit_apply(const struct sbx_limits *limits, struct sbx_error *err)
{
        struct rlimit_setting plan[RLIMIT_PLAN_MAX];
        size_t n = rlimit_plan(limits, plan);

        for (size_t i = 0; i < n; i++) {
                struct rlimit value = plan[i].value;
                struct rlimit current;
                if (getrlimit(plan[i].resource, &current) < 0)
                        return sbx_error_set(err, errno, "rlimit: get %s", plan[i].name);
                /* Raising a hard limit needs CAP_SYS_RESOURCE in the initial user namespace,
                 * which the sandbox's root never has: "no cap" (infinity), or a cap above what
                 * the sandbox inherited, becomes the inherited hard limit. This only ever makes
                 * the limit stricter than planned. */
                if (value.rlim_max > current.rlim_max) {
                        sbx_debug("rlimit: %s hard %llu above inherited %llu, kept at inherited",
                                  plan[i].name, (unsigned long long)value.rlim_max,
                                  (unsigned long long)current.rlim_max);
                        value.rlim_max = current.rlim_max;
                }
                if (value.rlim_cur > value.rlim_max)
                        value.rlim_cur = value.rlim_max;
                if (setrlimit(plan[i].resource, &value) < 0)
                        return sbx_error_set(err, errno, "rlimit: set %s to %llu/%llu",
                                             plan[i].name, (unsigned long long)value.rlim_cur,
                                             (unsigned long long)value.rlim_max);
        }
        return 0;
}
