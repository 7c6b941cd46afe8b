// clang-format off: the lifecycle below is a list, which the formatter would reflow.
/* The sandbox layer's public interface: what a sandbox is asked to run (struct sbx_spec), and the
 * backend operations every isolation boundary implements (struct sbx_backend). What they report,
 * what the supervisor saw (struct sbx_run) and what the kernel counted (struct sbx_evidence), are
 * records of model/result.h, which the API process reads too.
 *
 * Lifecycle, driven by the engine:
 *
 *   create         a sandbox exists with its resources (slot, cgroups, limits); no process yet
 *   start          the isolated process is set up and has exec'd the program, or setup failed
 *                  and the program never ran (fail closed)
 *   wait           stdin fed, stdout/stderr drained under their caps, wall deadline enforced;
 *                  returns when the program and everything it started are gone
 *   kill           every process of the sandbox killed at once (idempotent)
 *   read_evidence  the kernel's counters for this sandbox, as deltas since create (for a pool
 *                  entry: since acquire)
 *   destroy        everything the sandbox owned removed; always safe to call, also after
 *                  failures
 *
 * A sandbox runs one execution and is then destroyed, never reused. */
// clang-format on
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/request.h"
#include "model/result.h"
#include "util/error.h"

/* Host uids and gids from here on belong to sandboxes: each live sandbox maps a range of them
 * (sandbox/native/userns.h). No other process may run as one of them: it would own, and could
 * signal or ptrace, a sandbox's processes. */
#define SBX_SANDBOX_HOST_IDS_FIRST 2000000000u

enum sbx_network {
        SBX_NETWORK_NONE, /* a fresh network namespace with only loopback */
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
        /* Exec mode (with agent): a generic pool entry. argv is not used: init finishes every
         * setup step, says "R" on the agent channel and waits there for the execution (argv,
         * environment, files, limits: sandbox/agent.h), writes the files and starts the program
         * as a cold sandbox would (its rlimits included). acquire sets the cgroup's first. */
        bool exec_on_acquire;
        /* Session mode (with agent): the program is a session agent (guest/session_agent.py) that
         * speaks frames on its fd 3 for the sandbox's whole life; start returns once it runs,
         * and the engine's session (engine/session.c) drives it through session_fds. */
        bool session;
        int cancel_fd; /* readable = kill the sandbox and end the run (canceled); <= 0 for none */
        /* Native, with agent: a socket to a template of the program's interpreter
         * (sandbox/native/template.h), which clones init; the program is then a fork of that
         * interpreter, not an exec of argv (argv and envp are the template's). <= 0 for none. */
        int template_fd;
        /* A compile stage: a file the program gets as its fd 3, to write the artifact it built
         * into (the language's compile script ends by copying it there). -1 or 0 for none; not
         * with agent. A compile that acquires an exec-mode entry sends it to init with the
         * execution (sandbox/agent.h). */
        int artifact_fd;
        /* With artifact_fd: the file the program copies to its fd 3 at its end, whose size a
         * backend that can pass no fd sends after it (gvisor/spec.h). */
        const char *artifact_path;
        /* Native: the program is the uml backend's user-mode-linux kernel, whose seccomp filter
         * lets it trace its own processes (seccomp.h's profiles): how it runs its guest's; and
         * which holds no capability (it needs none of the root set). */
        bool uml_kernel;
        /* NULL, or called by the supervisor with each piece of output it keeps, as it reads it
         * (stream 1 stdout, 2 stderr): a streamed execution. */
        void (*on_output)(void *ctx, int stream, const void *data, size_t len);
        void *output_ctx;
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
        /* A backend with a kernel of its own (uml): that kernel's counters for the program,
         * after wait (guest->known stays false when it did not report); NULL elsewhere. */
        void (*read_guest_evidence)(struct sbx_sandbox *sandbox, struct sbx_guest_evidence *guest);
        /* Removes what a crashed earlier process left behind (orphan cgroups). Called once at
         * start-up, before any sandbox of this process exists. */
        int (*reconcile)(struct sbx_error *err);

        /* Sessions (spec.session), NULL where the backend has none. session_fds: the running
         * agent's channel and its stdout and stderr, [0] to [2], non-blocking and still owned by
         * the sandbox (destroy closes them). signal_program: sends sig to the sandbox's program,
         * the agent's keeper. session_limits: a running session sandbox's caps become limits
         * (its cgroup's, and the rlimits of every process in it) and its evidence counts from
         * now: a session opened ahead of time, taken by a session that asks for limits. */
        int (*session_fds)(struct sbx_sandbox *sandbox, int fds[3], struct sbx_error *err);
        int (*signal_program)(struct sbx_sandbox *sandbox, int sig, struct sbx_error *err);
        int (*session_limits)(struct sbx_sandbox *sandbox, const struct sbx_limits *limits,
                              struct sbx_error *err);
};

/* The backend called name (a name of model/backend.h; NULL: SBX_BACKEND_DEFAULT), or NULL. */
const struct sbx_backend *sbx_backend_find(const char *name);
