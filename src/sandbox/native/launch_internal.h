/* What the two sides of a native launch share, and nothing else uses: launch.c (the supervisor)
 * and launch_child.c (the sandbox's init and program), which a template (template.c) runs too. */
#pragma once

#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "sandbox/sandbox.h"

/* The kernel's clone3 arguments (linux/sched.h), declared here because that header clashes with
 * glibc's <sched.h>. Fields up to `cgroup` exist since Linux 5.7. */
struct launch_clone_args {
        uint64_t flags;
        uint64_t pidfd;
        uint64_t child_tid;
        uint64_t parent_tid;
        uint64_t exit_signal;
        uint64_t stack;
        uint64_t stack_size;
        uint64_t tls;
        uint64_t set_tid;
        uint64_t set_tid_size;
        uint64_t cgroup;
};

#ifndef CLONE_PIDFD
#define CLONE_PIDFD 0x00001000
#endif
#ifndef CLONE_INTO_CGROUP
#define CLONE_INTO_CGROUP 0x200000000ULL
#endif
#ifndef P_PIDFD
#define P_PIDFD 3
#endif

/* The fd numbers in the program: the agent channel (pool mode) or the artifact file (a compile
 * stage) for the program to keep, the error pipe between setup and execve (close-on-exec), and
 * a loader's writable fd to its entry's read-only file (sbx_file.loader_writes). */
#define PROGRAM_AGENT_FD        3
#define PROGRAM_ERROR_FD        4
#define PROGRAM_LOADER_WRITE_FD 5

/* Both ends of every pipe of a launch; each side closes the other's. -1: none. */
struct launch_pipes {
        int stdin_r, stdin_w;
        int stdout_r, stdout_w;
        int stderr_r, stderr_w;
        int sync_r, sync_w;
        int error_r, error_w;
        int report_r, report_w;
        int agent_r, agent_w; /* pool mode only, else -1 */
};

/* How init came to be, and what that changes for it. */
struct launch_child {
        const struct sbx_spec *spec;
        struct launch_pipes *pipes;
        /* Cloned by a template (template.c) rather than by the supervisor: init first moves
         * itself into the sandbox's v1 cgroups (v1_tasks: their "tasks" files, open for
         * writing), and the program is a fork of the template's interpreter that returns from
         * launch_child_main instead of exec'ing. */
        bool from_template;
        const int *v1_tasks;
        size_t n_v1_tasks;
};

/* Init: builds the sandbox, starts the program, reaps and reports. Never returns, except in
 * the program of a launch from a template, once it is locked down: the caller (the template's
 * interpreter) then runs the program itself. */
void launch_child_main(const struct launch_child *child);

static inline bool launch_hook_forces(const struct sbx_spec *spec, const char *step)
{
        return spec->test.fail_step != NULL && strcmp(spec->test.fail_step, step) == 0;
}

static inline bool launch_layer_on(const struct sbx_spec *spec, enum sbx_layer layer)
{
        return (spec->test.disabled_layers & layer) == 0;
}

/* The namespaces init is cloned into (the cgroup namespace comes later: launch_child.c). */
static inline uint64_t launch_clone_flags(const struct sbx_spec *spec)
{
        uint64_t flags = CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS;
        if (launch_layer_on(spec, SBX_LAYER_NETNS))
                flags |= CLONE_NEWNET;
        return flags;
}
