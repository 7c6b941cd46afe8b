/* The forked side of the engine's workers (engine/server.h has the theory of operation). A worker
 * is a fork of the engine that runs one execution: a cold one straight away, a pool worker after
 * making a warm sandbox and waiting for its one RUN. Either says "D" on its control socket when
 * the execution is over and its sandbox destroyed, then delivers the RESULT itself (to the API
 * socket, or to the spool when the API process is gone) and exits. Engine-private. */
#pragma once

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "protocol/protocol.h"

/* What a worker says on its control socket (one byte each). */
#define SBX_WORKER_READY 'R' /* pool workers: the warm sandbox and its loader are up */
#define SBX_WORKER_DONE  'D' /* the execution is over and its sandbox gone; the RESULT goes next */

/* A worker's exit code: 0 means its RESULT was delivered; anything else (or a signal) makes the
 * engine send one for it. */
#define SBX_WORKER_EXIT_NO_RESULT 1

/* What a worker needs of the engine that forked it. */
struct sbx_worker_context {
        int api_fd;            /* the API socket: RESULTs go here */
        pid_t engine_pid;      /* the worker dies with it */
        const char *spool_dir; /* for a RESULT the API process is gone for; NULL: none */
        uid_t spool_owner;
        const struct sbx_compile_cache *compile_cache; /* NULL: none */
        /* The Python template's socket (sandbox/native/template.h): python pool entries of the
         * native backend are forked from it. -1: none, each starts its own interpreter. */
        int python_template_fd;
};

/* What every forked worker does first: dies with the engine (PR_SET_PDEATHSIG SIGTERM), is the
 * subreaper of its sandbox, leaves the terminal's session, keeps fds 0-2, the API socket,
 * control_fd, the compile cache's directory and the template's socket. Returns the cancel fd (a
 * SIGTERM signalfd), or -1 when it has none. Ends the process when the fds cannot be closed, and
 * when the engine is already gone unless engine_gone is given (then it says so there, for a worker
 * that still answers). */
int sbx_worker_begin(const struct sbx_worker_context *context, int control_fd, bool *engine_gone);

/* Says "D" on the control socket: the worker's sandbox is destroyed (see server.h). */
void sbx_worker_say_done(int control_fd);

/* Runs run (request_id's) in a fresh sandbox, says "D" on control_fd, delivers the RESULT and
 * exits. Never returns. */
_Noreturn void sbx_worker_run_and_exit(const struct sbx_worker_context *context, int control_fd,
                                       uint64_t request_id, const struct sbx_message_run *run);

/* A pool worker's wait, once its entry is ready: says "R" on control_fd, then waits for the one
 * message the engine forwards on it (decoded into *message) or for SIGTERM (cancel_fd). 1 when
 * the message came (also when SIGTERM came too), 0 when retired or the engine is gone, -1 when
 * "R" could not be said. */
int sbx_worker_await_assignment(int control_fd, int cancel_fd, struct sbx_message *message);

/* Makes a warm sandbox for language on backend (a uml guest with the RAM of memory_bytes: the
 * pool's sbx_engine_pool.memory_bytes), says "R" on control_fd, waits for the engine to
 * forward one RUN on it (or for SIGTERM: retire, nothing run), then runs it as above. Never
 * returns. */
_Noreturn void sbx_pool_worker_run_and_exit(const struct sbx_worker_context *context,
                                            int control_fd, const char *language,
                                            const char *backend, uint64_t memory_bytes);

/* What a session worker takes as "cancel the run of request R" (SIGTERM ends the session): the
 * engine queues it with R as its value (engine_signal_worker_value), because the cancel may come
 * before the worker has read R's RUN: the API sends it as soon as R's audit record fails. */
#define SBX_SESSION_WORKER_CANCEL_RUN (SIGRTMIN + 2) /* queued: two cancels never merge */

/* A session worker (session_worker.c): opens the session of open (request_id's OPEN), answers it,
 * then serves the operations the engine forwards on control_fd until the session is closed or
 * ends on its own (idle, lifetime, its agent gone, SIGTERM); then destroys it, says "D", sends
 * SESSION_ENDED and exits. Never returns. */
_Noreturn void sbx_session_worker_run_and_exit(const struct sbx_worker_context *context,
                                               int control_fd, uint64_t request_id,
                                               const struct sbx_message_session *open);

/* A session pool's worker: opens a session of language with the default limits, says "R" on
 * control_fd and waits for the engine to forward one OPEN on it (or for SIGTERM: retire). The
 * OPEN adopts the waiting session when it can (engine/session.h, sbx_session_adopt), else opens
 * its own; then as sbx_session_worker_run_and_exit. Never returns. */
_Noreturn void sbx_session_pool_worker_run_and_exit(const struct sbx_worker_context *context,
                                                    int control_fd, const char *language);

/* Whether a session waiting in a session pool could become the one open asks for (its language
 * aside: engine/session.h, sbx_session_adoptable), so that the engine hands it only such; then
 * the language it names, into language[size]. */
bool sbx_session_open_adoptable(const struct sbx_message_session *open, char *language,
                                size_t size);
