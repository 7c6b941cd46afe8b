/* The engine process of `sandboxd serve`: the root half of the privilege split (DESIGN.md "Two
 * processes"). It speaks only the binary protocol of protocol/protocol.h and owns every sandbox.
 *
 * Theory of operation. One thread, one poll loop over four kinds of fd:
 *
 *   api_fd      the SOCK_SEQPACKET socket to the API process: RUN, CANCEL, PING, STATS arrive here
 *   signalfd    SIGTERM and SIGINT (shut down), SIGHUP (send the config file to the API process
 *               again) and SIGCHLD (reap re-parented orphans)
 *   pidfds      one per worker: readable when the worker has exited
 *   control fds one per worker (a SOCK_SEQPACKET pair): a starting pool worker says "R" when its
 *               warm sandbox is ready (and then gets its RUN on it); every worker says "D" when
 *               its execution is over and its sandbox destroyed, just before it sends its RESULT
 *
 * Each RUN is decoded and checked, then handed to a WORKER: a ready POOL WORKER of its language
 * when the request can use one (the RUN is forwarded on that worker's control socket; warm pools
 * are kept at min_idle in the background), else a plain fork() of the engine (which is
 * single-threaded, so the clone3 the sandbox needs is safe inside it). The worker runs the whole
 * execution with sbx_execute(), says "D", encodes the RESULT and sends it itself on its inherited
 * copy of api_fd, then exits 0. The loop therefore never blocks on an execution: it only tracks
 * workers (request_id -> pid, pidfd) for CANCEL, STATS and shutdown.
 *
 * A RUN the engine does not start gets REFUSED (nothing ran): when max_sandboxes executions are
 * running (a worker stops counting at its "D", which the loop reads before it decides, so that a
 * RUN sent right after a RESULT always finds the room that RESULT made), while shutting down, or
 * when it fails the engine's checks.
 *
 * A worker dies with the engine (PR_SET_PDEATHSIG SIGTERM), is the subreaper of its sandbox, sits
 * in its own session (terminal signals reach only the engine, which then drives the shutdown), and
 * treats SIGTERM as "cancel": its SIGTERM signalfd is the request's cancel_fd, so the sandbox is
 * killed and torn down and the RESULT says status canceled. A worker that exits without
 * having sent its RESULT (crash, SIGKILL) gets one sent for it by the engine: internal_error, so
 * that no caller waits forever. A worker that cannot send its RESULT (the API process is gone)
 * writes it to the spool instead, for the next API process to record (protocol/spool.h).
 *
 * Shutdown on SIGTERM or SIGINT: idle pool workers go at once, running executions may finish
 * within the grace period and are then canceled (SIGTERM), and killed (SIGKILL) if they still do
 * not end; the API process gets SIGTERM to stop accepting. When the API socket reaches end of
 * file nobody can read a result: every worker is canceled at once. Then what killed workers left
 * behind is removed (backend reconcile). RUNs arriving meanwhile: REFUSED stopping. */
#pragma once

#include <stdbool.h>

#include <stdint.h>
#include <sys/types.h>

#include "util/error.h"

#define SBX_ENGINE_DEFAULT_MAX_SANDBOXES 64
/* The native backend has 1024 slots (one host uid and one cgroup name each). */
#define SBX_ENGINE_MAX_SANDBOXES_LIMIT 1024
#define SBX_ENGINE_DEFAULT_GRACE_MS    10000

/* One warm pool: pool workers, each holding a sandbox whose loader waits for one execution. */
struct sbx_engine_pool {
        const char *language; /* sbx_pool_supports() */
        const char *backend;  /* a name of model/backend.h (sbx_backend_pools_language) */
        bool sessions;        /* its entries are sessions opened ahead of an OPEN (python, bash) */
        unsigned min_idle;    /* idle entries kept ready; 0 = the pool is off */
        unsigned max_idle;    /* never more idle entries than this */
        unsigned max_idle_s;  /* an entry idle longer is destroyed (and replaced); 0 = never */
        /* A uml pool's guests boot with the RAM of this memory cap (the pool's key: requests
         * with more run cold); 0 elsewhere (sbx_pool_guest_memory_bytes). */
        uint64_t memory_bytes;
};

struct sbx_engine_options {
        /* Executions running at once; a RUN over it is answered at once with REFUSED busy. Idle
         * warm-pool sandboxes come on top (at most each pool's max_idle) and never keep a request
         * out. 0 = SBX_ENGINE_DEFAULT_MAX_SANDBOXES; at most SBX_ENGINE_MAX_SANDBOXES_LIMIT. */
        unsigned max_sandboxes;
        /* How long workers get to cancel and clean up after SIGTERM before SIGKILL. 0 = default. */
        uint32_t shutdown_grace_ms;
        /* A child of the caller that the loop must leave for the caller to wait for (the API
         * process, when the engine forked it); 0 for none. Every other child that exits while the
         * loop runs is reaped by it: the engine is the subreaper of everything below it. */
        pid_t api_pid;
        /* Warm pools to keep filled (DESIGN.md "Warm pools"); n_pools 0 for none. */
        const struct sbx_engine_pool *pools;
        size_t n_pools;
        /* Where a worker keeps the RESULT it cannot send because the API process is gone
         * (protocol/spool.h), and whose its files become; NULL: such a result is only logged. */
        const char *spool_dir;
        uid_t spool_owner;
        /* Where compiled languages' artifacts are kept between runs (engine/compile_cache.h);
         * NULL: every run compiles. */
        const struct sbx_compile_cache *compile_cache;
        /* The config file, read again on SIGHUP and sent to the API process (CONFIG); NULL when
         * the service runs on its embedded defaults. */
        const char *config_path;
        /* Python pool entries are forked from a template interpreter (templates.c), started
         * when a python pool of the native backend is on. */
        bool templates;
};

/* Runs the engine loop on api_fd (a connected SOCK_SEQPACKET socket; not closed here) until
 * SIGTERM or SIGINT (running executions may then finish within shutdown_grace_ms and are
 * canceled after it; the API process, if any, gets SIGTERM to stop accepting) or the API's
 * hang-up (running executions are canceled at once); options may be NULL for the defaults. Blocks
 * SIGTERM, SIGINT, SIGHUP and SIGCHLD (read through a signalfd) and returns with them still
 * blocked, so that a second SIGTERM cannot kill the caller's own cleanup; sets SIGCHLD to its
 * default disposition (an ignored SIGCHLD would auto-reap the workers) and makes the process a
 * child subreaper. Returns 0 after a clean shutdown, with no worker and (as far as the backend's
 * reconcile could tell) no sandbox left; -1 with err when the loop could not start or the API
 * socket failed (also after the same cleanup). */
int sbx_engine_serve(int api_fd, const struct sbx_engine_options *options, struct sbx_error *err);
