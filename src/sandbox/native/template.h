/* Templates (DESIGN.md "Warm pools: templates"): an interpreter started once, outside any
 * sandbox, that imports nothing of a tenant's and runs no tenant's code, from which a launch has
 * each sandbox's init forked (clone3 into fresh namespaces) instead of cloned by the supervisor;
 * the program is then init's fork of that interpreter, locked down like any program, which
 * returns into the interpreter instead of exec'ing a new one. The interpreter's start-up is paid
 * once per template, not once per sandbox.
 *
 * The template runs sbx_template_serve() (template.c, in the shared module sandboxd-template.so,
 * which guest/python_loader.py loads) on a SOCK_SEQPACKET socket that every engine worker
 * shares. A launch (launch.c) sends one message per sandbox: struct template_request, with these
 * fds (SCM_RIGHTS), in this order: enum template_fd, then the cgroup's unified directory when
 * has_cgroup_fd, then n_v1_tasks "tasks" files of its v1 cgroups. The template clones init with
 * CLONE_PARENT (init is the engine's child, as a worker's would be its worker's: the engine
 * reaps it) and answers on the reply socket: struct template_reply, with init's pidfd when
 * pid > 0. Every other step of the launch stays the supervisor's. */
#pragma once

#include <stdint.h>

#include "model/limits.h"

#define TEMPLATE_VERSION 1
#define TEMPLATE_MAX_V1  8 /* v1 hierarchies a sandbox's cgroup spans (cgroup_internal.h) */
#define TEMPLATE_MAX_FDS (TEMPLATE_FIXED_FDS + 1 + TEMPLATE_MAX_V1)

enum template_fd {
        TEMPLATE_FD_REPLY, /* a SOCK_SEQPACKET socket for the answer */
        TEMPLATE_FD_STDIN, /* the child's ends of the launch's pipes (launch_internal.h) */
        TEMPLATE_FD_STDOUT,
        TEMPLATE_FD_STDERR,
        TEMPLATE_FD_SYNC,
        TEMPLATE_FD_ERROR,
        TEMPLATE_FD_REPORT,
        TEMPLATE_FD_AGENT,
        TEMPLATE_FIXED_FDS,
};

struct template_request {
        uint32_t version; /* TEMPLATE_VERSION */
        uint32_t size;    /* sizeof(struct template_request): both sides are one build */
        struct sbx_limits limits;
        uint32_t network;         /* enum sbx_network */
        uint32_t disabled_layers; /* the spec's test hooks */
        char fail_step[32];
        uint32_t has_cgroup_fd;
        uint32_t n_v1_tasks;
};

struct template_reply {
        int32_t error; /* errno of the failed clone, or 0 */
        int32_t pid;   /* init's, in the template's (the host's) pid namespace */
};

/* Serves launches on fd until it reaches end of file, then ends the process. Returns 0 only in
 * a sandbox's program, locked down: the interpreter then runs it. The shared module's only
 * exported symbol. */
int sbx_template_serve(int fd);
