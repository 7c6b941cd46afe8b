/* The engine's state, shared by its loop (server.c) and its warm pools (pools.c): the table of
 * workers and the few operations on it both need. Engine-private; server.h has the theory of
 * operation. */
#pragma once

#include <poll.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "engine/execution.h"
#include "protocol/protocol.h"
#include "engine/server.h"
#include "engine/templates.h"
#include "engine/worker.h"

struct worker {
        uint64_t request_id; /* 0: a pool worker no request was given to yet */
        char execution_id[SBX_EXECUTION_ID_CHARS + 1];
        pid_t pid;
        int pidfd; /* -1 when pidfd_open failed; the worker is then killed and only reaped */
        /* The engine's end of the worker's control socket, until the worker is done: pool
         * workers say "R" on it and get their RUN on it; every worker says "D" on it before it
         * sends its RESULT (see running_workers). */
        int control_fd;
        bool done; /* said "D" (or hung up): no longer counts as running */
        /* Session workers only (session): the session they hold, and the last operation the
         * engine forwarded (answered for them should they die). */
        bool session;
        char session_id[SBX_EXECUTION_ID_CHARS + 1];
        uint64_t last_request_id;
        /* Pool workers only (pool != NULL): a warm sandbox waiting for its one request. */
        const struct sbx_engine_pool *pool;
        bool ready;              /* it said "R": its sandbox and loader are up */
        bool retiring;           /* idle too long: told to go, never assigned */
        uint64_t ready_since_us; /* for max_idle_s */
        uint64_t spawned_us;     /* for the refill time */
};

struct engine {
        int api_fd;
        int signal_fd;
        pid_t pid; /* the engine's own: workers die with it */
        pid_t api_pid;
        const char *spool_dir;                         /* sbx_engine_options */
        const struct sbx_compile_cache *compile_cache; /* sbx_engine_options */
        uint64_t compile_cache_counted_us;             /* when its usage was last walked (STATS) */
        uid_t spool_owner;
        const char *config_path;
        /* Every worker not yet reaped: running ones, idle and starting pool workers, and done
         * ones on their way out. The table grows as needed: only running workers are bounded. */
        struct worker *workers;
        size_t n_workers;
        size_t workers_allocated;
        struct pollfd *fds; /* poll's array (poll_array) */
        size_t fds_allocated;
        size_t max_workers; /* executions at once (max_sandboxes); idle pool workers not counted */
        uint64_t grace_ms;

        bool api_open;          /* still reading api_fd */
        bool stopping;          /* shutdown begun: no new workers */
        bool canceled;          /* draining ran out of grace: running executions were canceled */
        bool killed;            /* the grace period ran out and SIGKILL went out */
        bool unclean;           /* a worker died without cleaning up: reconcile at the end */
        uint64_t deadline_us;   /* SIGKILL at this time while stopping; give up at it once killed */
        struct sbx_error fatal; /* the API socket's failure, reported after the cleanup */
        bool failed;

        struct sbx_message_stats stats;
        struct sbx_message message; /* decode scratch: the loop handles one message at a time */

        const struct sbx_engine_pool *pools;
        size_t n_pools;
        unsigned pool_failures; /* pool workers that died before ready, in a row */
        uint64_t pool_retry_us; /* after failures, no refill before this time */
        /* After handing an entry a RUN, no refill before this time: making a sandbox (clone3
         * into new namespaces, mounts, pivot_root) beside a running execution slows that one
         * (the kernel's mount and namespace locks, the second CPU); most end well within it. */
        uint64_t pool_refill_after_us;

        /* The Python template (templates.c): wanted when a python pool is on and the config
         * allows it ([server] templates). process.fd is the engine's end of its socket, inherited
         * by every worker; -1 while none runs. */
        struct {
                bool wanted;
                struct sbx_template process; /* pid 0 while none runs */
                unsigned failures; /* in a row: starts that ended before the next one was due */
                uint64_t retry_us; /* no start before this time */
                uint64_t started_us;
        } template;
};

/* What a forked worker does. */
enum worker_kind {
        EXECUTION_WORKER, /* runs the RUN in e->message (request_id) and exits */
        SESSION_WORKER,   /* holds the session the OPEN in e->message (request_id) opens */
        POOL_WORKER,      /* readies a warm sandbox of pool and waits for one RUN */
};

/* Forks a worker of kind with its control socket and adds it to the table: request_id (0 for a
 * pool worker), pid, pidfd (a worker whose pidfd cannot be had is killed at once, and only
 * reaped), control_fd, and pool set; the caller sets the rest. NULL with err when it could not:
 * nothing was added. */
struct worker *engine_fork_worker(struct engine *e, enum worker_kind kind, uint64_t request_id,
                                  const struct sbx_engine_pool *pool, struct sbx_error *err);

/* Signals a worker that has not been reaped (through its pidfd when it has one). */
void engine_signal_worker(const struct worker *w, int sig);
/* The same, with value as the signal's si_value (a session worker's run cancel: the request). */
void engine_signal_worker_value(const struct worker *w, int sig, uint64_t value);

/* A pidfd for pid, or -1 with errno. */
int engine_pidfd_open(pid_t pid);

/* What a forked worker needs of the engine. */
struct sbx_worker_context engine_worker_context(const struct engine *e);

/* ---- Warm pools (pools.c) ---- */

/* How often the loop wakes to retire idle pool workers and retry refills. */
#define POOL_TICK_MS 1000

/* How long refills wait after an entry was handed a RUN (engine.pool_refill_after_us): a
 * native entry's fork and exec is light, but another backend's entry boots a guest kernel or a
 * runsc sandbox (0.5 to 1 s of CPU), which beside the run that took the entry slows it on two
 * CPUs: uml's warm sh `exec /bin/true` ran 88 ms in its guest alone, 131 to 164 ms beside its
 * refill. Counted from the first RUN not yet refilled, so that a steady stream of requests
 * cannot hold refills back. */
#define POOL_REFILL_DELAY_MS       15
#define POOL_REFILL_DELAY_GUEST_MS 200

/* Idle = a pool worker nobody was given a request: starting up, or ready. */
bool pool_worker_idle(const struct worker *w);

/* Keeps every pool at min_idle idle workers (never over max_idle), and retires ready ones idle for
 * longer than max_idle_s. */
void pools_maintain(struct engine *e);

/* A ready, idle pool worker for language on backend (of a session pool: sessions) whose entries
 * take a request for memory_bytes (a uml pool's guests' RAM is its key), or NULL. */
struct worker *pools_find_ready(struct engine *e, const char *language, const char *backend,
                                uint64_t memory_bytes, bool sessions);

/* Hands the RUN (or, to a session pool's worker, the OPEN) in buf to a ready pool worker: it
 * runs it and answers the API itself; counted as a pool hit, and the refills wait
 * POOL_REFILL_DELAY_MS. False when the worker could not take it (it is retired). */
bool pools_assign(struct engine *e, struct worker *w, const void *buf, size_t len,
                  uint64_t request_id);

/* A pool worker said "R". */
void pools_worker_ready(struct engine *e, struct worker *w);

/* A pool worker that ran nothing was reaped: retired, or it failed to get ready (then refills
 * back off). */
void pools_worker_ended(struct engine *e, const struct worker *w);

/* Counts the pool workers into stats (idle, starting, in use). */
void pools_count(const struct engine *e, struct sbx_message_stats *stats);

/* ---- The Python template (templates.c; sandbox/native/template.h) ---- */

/* Starts the template when the engine wants one (engine.template.wanted), none runs and its
 * restart is due; python pool entries are forked from it from then on. A template that cannot
 * start is said once and retried with back-off; meanwhile the entries start their own
 * interpreters. */
void templates_maintain(struct engine *e);

/* Whether pid was the template (then it is gone: its socket closed, a restart scheduled). */
bool templates_reaped(struct engine *e, pid_t pid);

/* Stops the template (its socket closed, SIGKILL by pid) and reaps it. */
void templates_stop(struct engine *e);
