/* The engine loop and its workers; the theory of operation is in server.h. */
#define _GNU_SOURCE
#include "engine/server.h"

#include <errno.h>
#include <jansson.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine/compile_cache.h"
#include "engine/execution.h"
#include "protocol/protocol.h"
#include "protocol/transport.h"
#include "engine/server_state.h"
#include "model/backend.h"
#include "engine/worker.h"
#include "sandbox/sandbox.h"
#include "util/cleanup.h"
#include "util/file.h"
#include "util/log.h"
#include "util/time.h"

/* After SIGKILL the workers are gone within milliseconds; this only bounds a kernel surprise so
 * that shutdown always returns. */
#define KILL_WAIT_MS 5000

static void engine_freep(struct engine **e)
{
        if (*e == NULL)
                return;
        free((*e)->workers);
        free((*e)->fds);
        free(*e);
}

int engine_pidfd_open(pid_t pid)
{
        return (int)syscall(SYS_pidfd_open, pid, 0);
}

/* Sends sig with value as its si_value (sigqueue's), which a signalfd reads as ssi_ptr. */
static int pidfd_send_signal(int pidfd, int sig, uint64_t value)
{
        siginfo_t info = {.si_signo = sig, .si_code = SI_QUEUE};
        info.si_pid = getpid();
        info.si_uid = getuid();
        info.si_value.sival_ptr = (void *)(uintptr_t)value;
        return (int)syscall(SYS_pidfd_send_signal, pidfd, sig, &info, 0);
}

struct sbx_worker_context engine_worker_context(const struct engine *e)
{
        return (struct sbx_worker_context){.api_fd = e->api_fd,
                                           .engine_pid = e->pid,
                                           .spool_dir = e->spool_dir,
                                           .spool_owner = e->spool_owner,
                                           .compile_cache = e->compile_cache,
                                           .python_template_fd = e->template.process.fd};
}

/* ---- The engine's replies ------------------------------------------------------------------ */

/* The loop's own replies never wait: an API that stopped reading must not stop the loop (and with
 * it shutdown). The reply is dropped instead, and its caller times out. */
static void send_message(struct engine *e, void *buf, size_t len)
{
        struct sbx_error err = {0};
        if (e->api_open && sbx_message_send_nowait(e->api_fd, buf, len, &err) < 0)
                sbx_warn("engine: reply dropped: %s", err.message);
        free(buf);
}

/* A RESULT internal_error for a RUN whose worker ended without sending one. */
static void reply_error(struct engine *e, uint64_t request_id, const char *execution_id,
                        const struct sbx_request *request, const char *fmt, ...)
        __attribute__((format(printf, 5, 6)));

static void reply_error(struct engine *e, uint64_t request_id, const char *execution_id,
                        const struct sbx_request *request, const char *fmt, ...)
{
        char text[SBX_ERROR_MESSAGE_MAX];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(text, sizeof(text), fmt, ap);
        va_end(ap);
        struct sbx_result result;
        sbx_result_set_internal_error(&result, execution_id, request ? &request->limits : NULL,
                                      request ? request->backend : NULL, text);
        void *buf;
        size_t len;
        struct sbx_error err = {0};
        if (sbx_message_encode_result(request_id, &result, &buf, &len, &err) < 0) {
                sbx_warn("engine: request %llu: %s", (unsigned long long)request_id, err.message);
                return;
        }
        send_message(e, buf, len);
}

/* REFUSED: the RUN gets no worker; nothing ran. */
static void reply_refused(struct engine *e, uint64_t request_id, enum sbx_refusal reason,
                          const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static void reply_refused(struct engine *e, uint64_t request_id, enum sbx_refusal reason,
                          const char *fmt, ...)
{
        char detail[SBX_ERROR_MESSAGE_MAX];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(detail, sizeof(detail), fmt, ap);
        va_end(ap);
        e->stats.executions_rejected++;
        void *buf;
        size_t len;
        struct sbx_error err = {0};
        if (sbx_message_encode_refused(request_id, reason, detail, &buf, &len, &err) < 0) {
                sbx_warn("engine: request %llu: %s", (unsigned long long)request_id, err.message);
                return;
        }
        send_message(e, buf, len);
}

static void reply_empty(struct engine *e, enum sbx_message_type type, uint64_t request_id)
{
        void *buf;
        size_t len;
        struct sbx_error err = {0};
        if (sbx_message_encode_empty(type, request_id, &buf, &len, &err) < 0) {
                sbx_warn("engine: %s", err.message);
                return;
        }
        send_message(e, buf, len);
}

static void reply_stats(struct engine *e, uint64_t request_id)
{
        /* Each worker owns one sandbox, or one warm pool entry (a compiled language's is two
         * sandboxes: the run's and its compile's), and destroys it before it exits: the figure
         * counts executions and entries, as max_sandboxes does. */
        e->stats.workers_alive = e->n_workers;
        e->stats.sandboxes_alive = e->n_workers;
        struct sbx_error err = {0};
        pools_count(e, &e->stats);
        /* Walking the cache stats every entry: at most every few seconds, not at every scrape
         * (this loop serves every request meanwhile). */
        uint64_t now = sbx_now_us();
        if (e->compile_cache != NULL && now - e->compile_cache_counted_us > 5 * 1000000) {
                e->compile_cache_counted_us = now;
                if (sbx_compile_cache_usage(e->compile_cache, &e->stats.compile_cache_bytes,
                                            &e->stats.compile_cache_entries,
                                            &e->stats.compile_cache_evictions, &err) < 0)
                        sbx_warn("engine: compile cache: %s", err.message);
        }
        void *buf;
        size_t len;
        if (sbx_message_encode_stats_reply(request_id, &e->stats, &buf, &len, &err) < 0) {
                sbx_warn("engine: %s", err.message);
                return;
        }
        send_message(e, buf, len);
}

/* ---- Workers ------------------------------------------------------------------------------- */

static struct worker *find_worker_by_request(struct engine *e, uint64_t request_id)
{
        for (size_t i = 0; i < e->n_workers; i++)
                if (e->workers[i].request_id == request_id)
                        return &e->workers[i];
        return NULL;
}

static struct worker *find_worker_by_pid(struct engine *e, pid_t pid)
{
        for (size_t i = 0; i < e->n_workers; i++)
                if (e->workers[i].pid == pid)
                        return &e->workers[i];
        return NULL;
}

/* A worker not reaped yet cannot have had its pid reused, so kill() is a safe fallback when
 * there is no pidfd. */
void engine_signal_worker(const struct worker *w, int sig)
{
        engine_signal_worker_value(w, sig, 0);
}

void engine_signal_worker_value(const struct worker *w, int sig, uint64_t value)
{
        sbx_debug("engine: signal %d (%llu) to worker %d (request %llu)", sig,
                  (unsigned long long)value, (int)w->pid, (unsigned long long)w->request_id);
        int rc;
        if (w->pidfd >= 0) {
                rc = pidfd_send_signal(w->pidfd, sig, value);
        } else {
                union sigval sigval = {.sival_ptr = (void *)(uintptr_t)value};
                rc = sigqueue(w->pid, sig, sigval);
        }
        if (rc < 0 && errno != ESRCH)
                sbx_warn("engine: signal %d to worker %d: %s", sig, (int)w->pid, strerror(errno));
}

/* A new zeroed entry at the end of the workers table (grown when full), or NULL when memory
 * runs out. */
static struct worker *add_worker(struct engine *e)
{
        if (e->n_workers == e->workers_allocated) {
                size_t allocated = e->workers_allocated * 2;
                struct worker *workers = realloc(e->workers, allocated * sizeof(*workers));
                if (workers == NULL)
                        return NULL;
                e->workers = workers;
                e->workers_allocated = allocated;
        }
        struct worker *w = &e->workers[e->n_workers++];
        *w = (struct worker){.pidfd = -1, .control_fd = -1};
        return w;
}

/* A control socket pair for a new worker: [0] the engine's (non-blocking: the loop never waits on
 * a worker), [1] the worker's. */
static int control_socket_pair(int pair[2])
{
        if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) < 0)
                return -1;
        if (fcntl(pair[0], F_SETFL, O_NONBLOCK) < 0) {
                close(pair[0]);
                close(pair[1]);
                return -1;
        }
        return 0;
}

struct worker *engine_fork_worker(struct engine *e, enum worker_kind kind, uint64_t request_id,
                                  const struct sbx_engine_pool *pool, struct sbx_error *err)
{
        int pair[2];
        struct worker *w = add_worker(e);
        if (w == NULL || control_socket_pair(pair) < 0) {
                sbx_error_set(err, w == NULL ? ENOMEM : errno, "engine: a worker's control socket");
                if (w != NULL)
                        e->n_workers--;
                return NULL;
        }
        pid_t pid = fork();
        if (pid < 0) {
                sbx_error_set(err, errno, "engine: fork a worker");
                e->n_workers--;
                close(pair[0]);
                close(pair[1]);
                return NULL;
        }
        if (pid == 0) {
                close(pair[0]);
                const struct sbx_worker_context context = engine_worker_context(e);
                switch (kind) {
                case SESSION_WORKER:
                        sbx_session_worker_run_and_exit(&context, pair[1], request_id,
                                                        &e->message.body.session);
                case POOL_WORKER:
                        if (pool->sessions)
                                sbx_session_pool_worker_run_and_exit(&context, pair[1],
                                                                     pool->language);
                        sbx_pool_worker_run_and_exit(&context, pair[1], pool->language,
                                                     pool->backend, pool->memory_bytes);
                case EXECUTION_WORKER:
                        break;
                }
                sbx_worker_run_and_exit(&context, pair[1], request_id, &e->message.body.run);
        }
        close(pair[1]);
        *w = (struct worker){.request_id = request_id,
                             .pid = pid,
                             .pidfd = engine_pidfd_open(pid),
                             .control_fd = pair[0],
                             .pool = pool};
        if (w->pidfd < 0) {
                /* Without a pidfd the loop would not see it end in time; the reaper still
                 * answers its request when it is gone. */
                sbx_warn("engine: pidfd_open(%d): %s; killing the worker", (int)pid,
                         strerror(errno));
                kill(pid, SIGKILL);
        }
        return w;
}

static void spawn_worker(struct engine *e, uint64_t request_id)
{
        const struct sbx_message_run *run = &e->message.body.run;
        struct sbx_error err = {0};
        /* Said before the fork: an engine killed right after it leaves a worker that runs the
         * execution and answers it (canceled), so the log, which the tests take for the ground
         * truth of what started, must name it already. */
        sbx_debug("engine: execution %s starting (request %llu)", run->execution_id,
                  (unsigned long long)request_id);
        struct worker *w = engine_fork_worker(e, EXECUTION_WORKER, request_id, NULL, &err);
        if (w == NULL) {
                sbx_debug("engine: execution %s not started: %s", run->execution_id, err.message);
                reply_refused(e, request_id, SBX_REFUSAL_FAILED, "%s", err.message);
                return;
        }
        memcpy(w->execution_id, run->execution_id, sizeof(w->execution_id));
        e->stats.executions_started++;
        sbx_debug("engine: execution %s started (request %llu, worker %d)", run->execution_id,
                  (unsigned long long)request_id, (int)w->pid);
}

/* Answers a session operation from the loop itself (the session's worker answers the rest). */
static void reply_session(struct engine *e, uint64_t request_id, const char *session_id,
                          enum sbx_message_type type, int error, const char *detail)
{
        char fields[SBX_ERROR_MESSAGE_MAX + 64];
        json_t *object = json_pack("{s:s}", "detail", detail);
        char *text = object != NULL ? json_dumps(object, JSON_COMPACT) : NULL;
        snprintf(fields, sizeof(fields), "%s", text != NULL ? text : "{}");
        free(text);
        json_decref(object);
        struct sbx_message_session message = {
                .error = error, .fields = fields, .fields_len = strlen(fields)};
        snprintf(message.session_id, sizeof(message.session_id), "%s", session_id);
        void *buf = NULL;
        size_t len = 0;
        struct sbx_error err = {0};
        if (sbx_message_encode_session(type, request_id, &message, &buf, &len, &err) < 0) {
                sbx_warn("engine: session reply: %s", err.message);
                return;
        }
        send_message(e, buf, len);
}

/* Forgets a reaped worker (closing its fds); answers its request when it did not. */
static void worker_ended(struct engine *e, struct worker *w, const siginfo_t *info)
{
        sbx_closep(&w->control_fd);
        if (w->pool != NULL && w->request_id == 0) {
                if (info->si_code != CLD_EXITED)
                        e->unclean = true; /* killed: its entry's cgroups may be left behind */
                pools_worker_ended(e, w);
                sbx_closep(&w->pidfd);
                *w = e->workers[--e->n_workers];
                return;
        }
        bool sent = info->si_code == CLD_EXITED && info->si_status == 0;
        if (w->session) {
                /* A session worker answers each operation and says SESSION_ENDED itself. An
                 * operation forwarded while it was ending found nobody to read it: its answer
                 * goes now (if the worker did answer it, the API has stopped waiting and drops
                 * this one). One that died answered nothing: SESSION_ENDED goes for it too. */
                reply_session(e, w->last_request_id, w->session_id, SBX_MESSAGE_SESSION_REPLY,
                              ESRCH, "engine: the session has ended");
                if (!sent) {
                        sbx_warn("engine: session %s: its worker %d died", w->session_id,
                                 (int)w->pid);
                        e->unclean = info->si_code != CLD_EXITED;
                        reply_session(e, 0, w->session_id, SBX_MESSAGE_SESSION_ENDED, EPIPE,
                                      "engine: the session's worker died");
                }
                sbx_closep(&w->pidfd);
                e->stats.executions_finished++;
                *w = e->workers[--e->n_workers];
                return;
        }
        if (!sent) {
                char how[48];
                if (info->si_code == CLD_EXITED)
                        snprintf(how, sizeof(how), "exit code %d", info->si_status);
                else
                        snprintf(how, sizeof(how), "signal %d", info->si_status);
                sbx_warn("engine: worker %d (request %llu) ended without a result: %s", (int)w->pid,
                         (unsigned long long)w->request_id, how);
                if (info->si_code != CLD_EXITED)
                        e->unclean = true; /* its sandbox may be left behind */
                reply_error(e, w->request_id, w->execution_id, NULL,
                            "engine: the worker ended without a result (%s)", how);
        }
        sbx_closep(&w->pidfd);
        e->stats.executions_finished++;
        *w = e->workers[--e->n_workers];
}

/* Reaps the worker behind a readable pidfd. */
static void reap_worker(struct engine *e, size_t index)
{
        struct worker *w = &e->workers[index];
        siginfo_t info = {0};
        if (waitid((idtype_t)P_PIDFD, (id_t)w->pidfd, &info, WEXITED | WNOHANG) < 0) {
                if (errno != ECHILD)
                        sbx_warn("engine: waitid worker %d: %s", (int)w->pid, strerror(errno));
                return;
        }
        if (info.si_pid != 0)
                worker_ended(e, w, &info);
}

/* Reaps every other child that has exited: workers without a pidfd and what was re-parented to
 * the engine (a dead worker's sandbox init). Stops at the caller's API child, which it must not
 * reap: the caller waits for it. */
static void reap_children(struct engine *e)
{
        for (;;) {
                siginfo_t info = {0};
                if (waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT) < 0 || info.si_pid == 0)
                        return;
                if (e->api_pid > 0 && info.si_pid == e->api_pid)
                        return;
                pid_t pid = info.si_pid;
                if (waitid(P_PID, (id_t)pid, &info, WEXITED | WNOHANG) < 0 || info.si_pid == 0)
                        return;
                struct worker *w = find_worker_by_pid(e, pid);
                if (w != NULL)
                        worker_ended(e, w, &info);
                else if (!templates_reaped(e, pid))
                        sbx_debug("engine: reaped %d (a template's init, or an orphan)", (int)pid);
        }
}

/* Workers running an execution: given a request and not done. These, and only these, count
 * against max_sandboxes: idle pool workers never keep a request out, and a worker that said "D"
 * has destroyed its sandbox and is only sending its RESULT and exiting. Because "D" comes
 * before the RESULT, the API's count of executions in flight (from sending a RUN to reading
 * its RESULT) is never below this one: an API that keeps its own count under max_sandboxes is
 * never refused for being busy. */
static size_t running_workers(const struct engine *e)
{
        size_t running = 0;
        for (size_t i = 0; i < e->n_workers; i++)
                if (e->workers[i].request_id != 0 && !e->workers[i].done)
                        running++;
        return running;
}

/* Whether the loop waits for the worker to say something: "R" from a starting pool worker, "D"
 * from one running an execution. */
static bool worker_listened_to(const struct worker *w)
{
        if (w->control_fd < 0)
                return false;
        return w->request_id != 0 ? !w->done : w->pool != NULL && !w->ready && !w->retiring;
}

/* Whether the loop wakes for what the worker says: "R" from a starting pool worker, a session
 * worker's "D" or hang-up (its session is over). A one-shot execution's "D" is read when the
 * engine looks full (read_done_notices) or the worker is reaped: a wake of its own would come
 * between the worker's "D" and its RESULT, on the answer's path (on two CPUs, the engine then
 * preempts the worker that is about to send it). */
static bool worker_polled(const struct worker *w)
{
        if (w->request_id == 0 || w->session)
                return worker_listened_to(w);
        return false;
}

/* Reads what the worker said on its control socket, if anything (it never blocks). */
static void read_control(struct engine *e, struct worker *w)
{
        char byte = 0;
        ssize_t n = recv(w->control_fd, &byte, 1, MSG_DONTWAIT);
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
                return;
        if (n == 1 && byte == SBX_WORKER_READY && w->request_id == 0 && w->pool != NULL) {
                pools_worker_ready(e, w);
                return;
        }
        /* "D", or it hung up: either way it runs nothing any more. A pool worker that hangs up
         * before it is ready failed (it says why in the log); the reaper forgets it. */
        sbx_closep(&w->control_fd);
        if (w->request_id != 0)
                w->done = true;
        else
                w->retiring = true;
}

/* ---- Shutdown ------------------------------------------------------------------------------ */

/* Stops taking work. With drain (SIGTERM, SIGINT), running executions may finish within the
 * grace period and answer; the API process is told to stop accepting too. Without (the API is
 * gone: nobody would read a result), they are canceled at once. Idle pool workers always go. */
static void begin_stop(struct engine *e, const char *why, bool drain)
{
        if (e->stopping)
                return;
        e->stopping = true;
        size_t running = running_workers(e);
        sbx_info("engine: stopping (%s): %s %zu execution(s)", why,
                 drain ? "finishing" : "cancelling", running);
        if (drain && e->api_pid > 0)
                kill(e->api_pid, SIGTERM); /* it stops accepting, drains, then hangs up */
        /* Sessions end now too: nobody could use them past the drain. */
        for (size_t i = 0; i < e->n_workers; i++)
                if (!drain || pool_worker_idle(&e->workers[i]) || e->workers[i].session)
                        engine_signal_worker(&e->workers[i], SIGTERM);
        e->canceled = !drain;
        e->deadline_us = sbx_now_us() + e->grace_ms * 1000;
}

/* The grace period ran out while draining: cancel what still runs, then wait a little more. */
static void cancel_running_workers(struct engine *e)
{
        sbx_warn("engine: %zu execution(s) still running after %llu ms; cancelling them",
                 e->n_workers, (unsigned long long)e->grace_ms);
        for (size_t i = 0; i < e->n_workers; i++)
                engine_signal_worker(&e->workers[i], SIGTERM);
        e->canceled = true;
        e->deadline_us = sbx_now_us() + KILL_WAIT_MS * 1000ull;
}

static void kill_all_workers(struct engine *e)
{
        sbx_warn("engine: %zu worker(s) still running after %llu ms; killing them", e->n_workers,
                 (unsigned long long)e->grace_ms);
        for (size_t i = 0; i < e->n_workers; i++)
                engine_signal_worker(&e->workers[i], SIGKILL);
        e->killed = true;
        e->unclean = true;
        e->deadline_us = sbx_now_us() + KILL_WAIT_MS * 1000ull;
}

/* ---- Messages from the API ----------------------------------------------------------------- */

/* Reads every "D" already said: called when the engine looks full, since a worker's "D" may not
 * have been read yet when the RUN that follows its RESULT arrives (see running_workers). */
static void read_done_notices(struct engine *e)
{
        for (size_t i = 0; i < e->n_workers; i++)
                if (e->workers[i].request_id != 0 && worker_listened_to(&e->workers[i]))
                        read_control(e, &e->workers[i]);
}

static void handle_run(struct engine *e, const void *buf, size_t len, uint64_t request_id)
{
        struct sbx_error err = {0};
        if (sbx_message_decode(buf, len, &e->message, &err) < 0) {
                sbx_warn("engine: request %llu: refused: %s", (unsigned long long)request_id,
                         err.message);
                reply_refused(e, request_id, SBX_REFUSAL_INVALID, "engine: invalid RUN: %s",
                              err.message);
                return;
        }
        const struct sbx_message_run *run = &e->message.body.run;
        if (e->stopping) {
                reply_refused(e, request_id, SBX_REFUSAL_STOPPING, "engine shutting down");
                return;
        }
        if (find_worker_by_request(e, request_id) != NULL) {
                reply_refused(e, request_id, SBX_REFUSAL_INVALID,
                              "engine: request id %llu is already running",
                              (unsigned long long)request_id);
                return;
        }
        if (running_workers(e) >= e->max_workers)
                read_done_notices(e);
        if (running_workers(e) >= e->max_workers) {
                reply_refused(e, request_id, SBX_REFUSAL_BUSY,
                              "engine busy: %zu executions running, the maximum", e->max_workers);
                return;
        }
        if (sbx_pool_request_eligible(&run->request)) {
                const char *backend =
                        run->request.backend ? run->request.backend : SBX_BACKEND_DEFAULT;
                struct worker *w = pools_find_ready(e, run->request.language, backend,
                                                    run->request.limits.memory_bytes, false);
                if (w != NULL) {
                        /* Said before the entry has it, as spawn_worker says why. */
                        sbx_debug("engine: execution %s starting (request %llu, pool worker %d)",
                                  run->execution_id, (unsigned long long)request_id, (int)w->pid);
                        if (pools_assign(e, w, buf, len, request_id)) {
                                memcpy(w->execution_id, run->execution_id, sizeof(w->execution_id));
                                return;
                        }
                        sbx_debug("engine: execution %s not started by pool worker %d",
                                  run->execution_id, (int)w->pid);
                }
                if (sbx_pool_supports(run->request.language))
                        e->stats.pool_misses++;
        }
        spawn_worker(e, request_id);
}

static struct worker *find_session_worker(struct engine *e, const char *session_id)
{
        for (size_t i = 0; i < e->n_workers; i++)
                if (e->workers[i].session && !e->workers[i].done &&
                    strcmp(e->workers[i].session_id, session_id) == 0)
                        return &e->workers[i];
        return NULL;
}

/* OPEN: a session worker of its own, counted against max_sandboxes for the session's life. */
static void spawn_session_worker(struct engine *e, uint64_t request_id)
{
        const struct sbx_message_session *open = &e->message.body.session;
        struct sbx_error err = {0};
        struct worker *w = engine_fork_worker(e, SESSION_WORKER, request_id, NULL, &err);
        if (w == NULL) {
                reply_refused(e, request_id, SBX_REFUSAL_FAILED, "%s", err.message);
                return;
        }
        w->session = true;
        w->last_request_id = request_id;
        memcpy(w->session_id, open->session_id, sizeof(w->session_id));
        e->stats.executions_started++;
        sbx_debug("engine: session %s opening (request %llu, worker %d)", open->session_id,
                  (unsigned long long)request_id, (int)w->pid);
}

/* OPEN: a ready entry of the language's session pool takes it (it is the session's worker from
 * now on), when there is one. */
static bool take_session_entry(struct engine *e, const void *buf, size_t len, uint64_t request_id)
{
        bool pooled_sessions = false;
        for (size_t i = 0; i < e->n_pools; i++)
                pooled_sessions = pooled_sessions || e->pools[i].sessions;
        if (!pooled_sessions)
                return false; /* no fields to look at */
        const struct sbx_message_session *open = &e->message.body.session;
        char language[32];
        struct worker *w = sbx_session_open_adoptable(open, language, sizeof(language))
                                   ? pools_find_ready(e, language, SBX_BACKEND_DEFAULT, 0, true)
                                   : NULL;
        if (w == NULL || !pools_assign(e, w, buf, len, request_id))
                return false;
        w->pool = NULL; /* a session's worker now, no longer an entry of its pool */
        w->session = true;
        w->last_request_id = request_id;
        memcpy(w->session_id, open->session_id, sizeof(w->session_id));
        sbx_debug("engine: session %s opening (request %llu, pool worker %d)", open->session_id,
                  (unsigned long long)request_id, (int)w->pid);
        return true;
}

static void handle_session(struct engine *e, const void *buf, size_t len, uint64_t request_id)
{
        struct sbx_error err = {0};
        if (sbx_message_decode(buf, len, &e->message, &err) < 0) {
                sbx_warn("engine: request %llu: refused: %s", (unsigned long long)request_id,
                         err.message);
                reply_refused(e, request_id, SBX_REFUSAL_INVALID, "engine: invalid SESSION: %s",
                              err.message);
                return;
        }
        const struct sbx_message_session *session = &e->message.body.session;
        struct worker *w = find_session_worker(e, session->session_id);
        if (session->op == SBX_SESSION_CANCEL) {
                /* The run may have come through the session's own channel, which the engine
                 * does not see: the worker knows its request. */
                if (w != NULL)
                        engine_signal_worker_value(w, SBX_SESSION_WORKER_CANCEL_RUN, request_id);
                return;
        }
        if (session->op != SBX_SESSION_OPEN) {
                if (w == NULL) {
                        reply_session(e, request_id, session->session_id, SBX_MESSAGE_SESSION_REPLY,
                                      ESRCH, "engine: no such session");
                        return;
                }
                /* Never waits: a worker busy with a run reads the next operation after it, and
                 * the API sends one operation per session at a time. */
                if (sbx_message_send_nowait(w->control_fd, buf, len, &err) < 0) {
                        reply_session(e, request_id, session->session_id, SBX_MESSAGE_SESSION_REPLY,
                                      err.code == EAGAIN ? EBUSY : EPIPE, err.message);
                        return;
                }
                w->last_request_id = request_id;
                return;
        }
        if (e->stopping) {
                reply_refused(e, request_id, SBX_REFUSAL_STOPPING, "engine shutting down");
                return;
        }
        if (w != NULL || find_worker_by_request(e, request_id) != NULL) {
                reply_refused(e, request_id, SBX_REFUSAL_INVALID,
                              "engine: session or request id in use");
                return;
        }
        if (running_workers(e) >= e->max_workers)
                read_done_notices(e);
        if (running_workers(e) >= e->max_workers) {
                reply_refused(e, request_id, SBX_REFUSAL_BUSY,
                              "engine busy: %zu sandboxes running, the maximum", e->max_workers);
                return;
        }
        if (take_session_entry(e, buf, len, request_id))
                return;
        spawn_session_worker(e, request_id);
}

static void handle_message(struct engine *e, const void *buf, size_t len)
{
        struct sbx_error err = {0};
        struct sbx_message_header header;
        if (sbx_message_decode_header(buf, len, &header, &err) < 0) {
                sbx_warn("engine: dropped a message: %s", err.message);
                /* A RUN with a sound start but a broken header still gets an answer. */
                if (header.magic == SBX_PROTOCOL_MAGIC && header.type == SBX_MESSAGE_RUN)
                        reply_refused(e, header.request_id, SBX_REFUSAL_INVALID,
                                      "engine: invalid RUN: %s", err.message);
                return;
        }
        /* Request id 0 is how the table marks an idle pool worker: no request may use it. */
        if (header.request_id == 0 &&
            (header.type == SBX_MESSAGE_RUN || header.type == SBX_MESSAGE_CANCEL ||
             header.type == SBX_MESSAGE_SESSION)) {
                sbx_warn("engine: %s with request id 0 dropped",
                         sbx_message_type_name(header.type));
                return;
        }
        switch ((enum sbx_message_type)header.type) {
        case SBX_MESSAGE_RUN:
                handle_run(e, buf, len, header.request_id);
                return;
        case SBX_MESSAGE_CANCEL: {
                struct worker *w = find_worker_by_request(e, header.request_id);
                if (len != SBX_MESSAGE_HEADER_BYTES) {
                        sbx_warn("engine: CANCEL with a body dropped");
                } else if (w != NULL) {
                        /* A RUN's worker, or an OPEN's: its session ends. A session's run is
                         * interrupted by a SESSION CANCEL instead (handle_session). */
                        engine_signal_worker(w, SIGTERM);
                }
                return;
        }
        case SBX_MESSAGE_PING:
        case SBX_MESSAGE_STATS:
                if (len != SBX_MESSAGE_HEADER_BYTES) {
                        sbx_warn("engine: %s with a body dropped",
                                 sbx_message_type_name(header.type));
                        return;
                }
                if (header.type == SBX_MESSAGE_PING)
                        reply_empty(e, SBX_MESSAGE_PONG, header.request_id);
                else
                        reply_stats(e, header.request_id);
                return;
        case SBX_MESSAGE_SESSION:
                handle_session(e, buf, len, header.request_id);
                return;
        case SBX_MESSAGE_SESSION_REPLY:
        case SBX_MESSAGE_SESSION_ENDED:
        case SBX_MESSAGE_SESSION_EVENT:
        case SBX_MESSAGE_RESULT:
        case SBX_MESSAGE_REFUSED:
        case SBX_MESSAGE_CONFIG:
        case SBX_MESSAGE_PONG:
        case SBX_MESSAGE_STATS_REPLY:
                break;
        }
        sbx_warn("engine: unexpected %s from the API dropped", sbx_message_type_name(header.type));
}

static void read_api(struct engine *e)
{
        void *buf = NULL;
        size_t len = 0;
        struct sbx_error err = {0};
        int rc = sbx_message_receive(e->api_fd, &buf, &len, &err);
        if (rc > 0) {
                handle_message(e, buf, len);
                free(buf);
                return;
        }
        if (rc < 0 && sbx_message_dropped(&err)) {
                sbx_warn("engine: %s", err.message);
                return;
        }
        e->api_open = false;
        if (rc < 0) {
                e->fatal = err;
                e->failed = true;
                sbx_warn("engine: API socket: %s", err.message);
                begin_stop(e, "API socket failed", false);
        } else {
                begin_stop(e, "the API hung up", false);
        }
}

/* SIGHUP: reads the config file again and hands it to the API process, which takes its tiers
 * and tenants from it (the file may be readable by root alone). The engine's own settings
 * (listen, max_sandboxes, pools) take a restart. */
static void forward_config(struct engine *e)
{
        if (e->config_path == NULL) {
                sbx_info("engine: SIGHUP: no config file to read again (embedded defaults)");
                return;
        }
        struct sbx_error err = {0};
        _cleanup_close_ int fd = open(e->config_path, O_RDONLY | O_CLOEXEC);
        _cleanup_free_ char *text = NULL;
        size_t size = 0;
        void *buf;
        size_t len;
        if (fd < 0) {
                sbx_error_set(&err, errno, "open %s", e->config_path);
        } else if (sbx_read_all_fd(fd, SBX_MESSAGE_MAX_CONFIG_BYTES, &text, &size, &err) == 0 &&
                   sbx_message_encode_config(text, size, &buf, &len, &err) == 0) {
                sbx_info("engine: SIGHUP: %s read again; the API process takes its tiers and "
                         "tenants",
                         e->config_path);
                send_message(e, buf, len);
                return;
        }
        sbx_warn("engine: SIGHUP: %s; nothing changes", err.message);
}

static void read_signals(struct engine *e)
{
        struct signalfd_siginfo info;
        while (read(e->signal_fd, &info, sizeof(info)) == (ssize_t)sizeof(info)) {
                if (info.ssi_signo == SIGTERM)
                        begin_stop(e, "SIGTERM", true);
                else if (info.ssi_signo == SIGINT)
                        begin_stop(e, "SIGINT", true);
                else if (info.ssi_signo == SIGHUP && !e->stopping)
                        forward_config(e);
                /* SIGCHLD: reap_children runs after every wake-up anyway. */
        }
}

/* ---- The loop ------------------------------------------------------------------------------ */

static int poll_timeout_ms(const struct engine *e)
{
        if (!e->stopping && e->n_pools > 0) {
                /* At the latest when the refill held back after a RUN may go. */
                uint64_t now = sbx_now_us();
                if (e->pool_refill_after_us > now &&
                    e->pool_refill_after_us - now < (uint64_t)POOL_TICK_MS * 1000)
                        return (int)((e->pool_refill_after_us - now + 999) / 1000);
                return POOL_TICK_MS;
        }
        if (!e->stopping)
                return -1;
        uint64_t now = sbx_now_us();
        if (now >= e->deadline_us)
                return 0;
        return (int)((e->deadline_us - now + 999) / 1000);
}

/* poll's array, with room for the signalfd, the API socket and two fds per worker. */
static struct pollfd *poll_array(struct engine *e)
{
        size_t needed = 2 * e->n_workers + 2;
        if (needed > e->fds_allocated) {
                struct pollfd *fds = realloc(e->fds, needed * 2 * sizeof(*fds));
                if (fds == NULL)
                        return NULL;
                e->fds = fds;
                e->fds_allocated = needed * 2;
        }
        return e->fds;
}

/* Whether the loop goes on: until it stops and its workers are gone, and, in a drain, until the
 * API process hangs up too (or the grace ends): a RUN it sent just before its own SIGTERM is then
 * refused as stopping (it queues it again) instead of lost in a socket nobody reads. */
static bool keeps_serving(const struct engine *e)
{
        if (!e->stopping || e->n_workers > 0)
                return true;
        return e->api_open && !e->canceled && sbx_now_us() < e->deadline_us;
}

static int run_loop(struct engine *e, struct sbx_error *err)
{
        while (keeps_serving(e)) {
                /* Stays put for this iteration: workers added meanwhile wait for the next one. */
                struct pollfd *fds = poll_array(e);
                if (fds == NULL)
                        return sbx_error_set(err, ENOMEM, "engine: allocate the poll array");
                nfds_t n = 0;
                fds[n++] = (struct pollfd){.fd = e->signal_fd, .events = POLLIN};
                nfds_t api_slot = 0;
                if (e->api_open) {
                        api_slot = n;
                        fds[n++] = (struct pollfd){.fd = e->api_fd, .events = POLLIN};
                }
                nfds_t first_worker = n;
                size_t polled = e->n_workers;
                for (size_t i = 0; i < polled; i++)
                        fds[n++] = (struct pollfd){.fd = e->workers[i].pidfd, .events = POLLIN};
                /* Starting pool workers ("R") and session workers. */
                nfds_t first_control = n;
                for (size_t i = 0; i < polled; i++)
                        if (worker_polled(&e->workers[i]))
                                fds[n++] = (struct pollfd){.fd = e->workers[i].control_fd,
                                                           .events = POLLIN};
                nfds_t end_control = n;

                int ready = poll(fds, n, poll_timeout_ms(e));
                if (ready < 0 && errno != EINTR)
                        return sbx_error_set(err, errno, "engine: poll");

                if (ready > 0 && fds[0].revents != 0)
                        read_signals(e);
                /* Before the API: a RUN in the same wake-up may then use a worker just ready, or
                 * the room of one just done. */
                for (nfds_t i = first_control; ready > 0 && i < end_control; i++) {
                        if (fds[i].revents == 0)
                                continue;
                        for (size_t k = 0; k < e->n_workers; k++) {
                                if (e->workers[k].control_fd == fds[i].fd) {
                                        read_control(e, &e->workers[k]);
                                        break;
                                }
                        }
                }
                if (ready > 0 && api_slot != 0 && fds[api_slot].revents != 0)
                        read_api(e); /* may reap and add workers: the table has moved */
                /* By fd, not by index, for that reason. A number reused meanwhile by a new
                 * worker's pidfd only costs one WNOHANG wait that finds nothing. */
                for (size_t i = 0; ready > 0 && i < polled; i++) {
                        if (fds[first_worker + i].revents == 0)
                                continue;
                        for (size_t k = 0; k < e->n_workers; k++) {
                                if (e->workers[k].pidfd == fds[first_worker + i].fd) {
                                        reap_worker(e, k);
                                        break;
                                }
                        }
                }
                reap_children(e);
                templates_maintain(e);
                pools_maintain(e);

                if (e->stopping && e->n_workers > 0 && sbx_now_us() >= e->deadline_us) {
                        if (e->killed) {
                                sbx_warn("engine: %zu worker(s) did not die after SIGKILL",
                                         e->n_workers);
                                break;
                        }
                        if (e->canceled)
                                kill_all_workers(e);
                        else
                                cancel_running_workers(e);
                }
        }
        return 0;
}

static void reconcile(void)
{
        const struct sbx_backend *backend = sbx_backend_find(NULL);
        struct sbx_error err = {0};
        if (backend != NULL && backend->reconcile != NULL && backend->reconcile(&err) < 0)
                sbx_warn("engine: reconcile: %s", err.message);
}

int sbx_engine_serve(int api_fd, const struct sbx_engine_options *options, struct sbx_error *err)
{
        struct sbx_engine_options defaults = {0};
        if (options == NULL)
                options = &defaults;
        unsigned max =
                options->max_sandboxes ? options->max_sandboxes : SBX_ENGINE_DEFAULT_MAX_SANDBOXES;
        if (max > SBX_ENGINE_MAX_SANDBOXES_LIMIT)
                return sbx_error_set(err, EINVAL, "engine: max_sandboxes %u is over %u", max,
                                     SBX_ENGINE_MAX_SANDBOXES_LIMIT);
        int type = 0;
        socklen_t type_len = sizeof(type);
        if (getsockopt(api_fd, SOL_SOCKET, SO_TYPE, &type, &type_len) < 0 || type != SOCK_SEQPACKET)
                return sbx_error_set(err, EINVAL,
                                     "engine: the API fd is not a SOCK_SEQPACKET socket");

        sigset_t handled;
        sigemptyset(&handled);
        sigaddset(&handled, SIGTERM);
        sigaddset(&handled, SIGINT);
        sigaddset(&handled, SIGHUP);
        sigaddset(&handled, SIGCHLD);
        /* Blocked before the signalfd exists, so that none is lost or acted on by default. */
        if (sigprocmask(SIG_BLOCK, &handled, NULL) < 0)
                return sbx_error_set(err, errno, "engine: sigprocmask");
        _cleanup_close_ int signal_fd = signalfd(-1, &handled, SFD_CLOEXEC | SFD_NONBLOCK);
        if (signal_fd < 0)
                return sbx_error_set(err, errno, "engine: signalfd");
        signal(SIGCHLD, SIG_DFL);
        if (prctl(PR_SET_CHILD_SUBREAPER, 1) < 0)
                return sbx_error_set(err, errno, "engine: PR_SET_CHILD_SUBREAPER");

        _cleanup_(engine_freep) struct engine *e = calloc(1, sizeof(*e));
        if (e == NULL)
                return sbx_error_set(err, ENOMEM, "engine: allocate");
        /* A first size that usually suffices: every running worker, a few done ones and the
         * pools (add_worker grows it). */
        e->workers_allocated = 2 * (size_t)max + 8;
        for (size_t i = 0; i < options->n_pools; i++)
                e->workers_allocated += options->pools[i].max_idle + options->pools[i].min_idle;
        e->workers = calloc(e->workers_allocated, sizeof(*e->workers));
        if (e->workers == NULL)
                return sbx_error_set(err, ENOMEM, "engine: allocate");
        e->api_fd = api_fd;
        e->signal_fd = signal_fd;
        e->pid = getpid();
        e->api_pid = options->api_pid;
        e->spool_dir = options->spool_dir;
        e->spool_owner = options->spool_owner;
        e->compile_cache = options->compile_cache;
        e->config_path = options->config_path;
        e->max_workers = max;
        e->grace_ms = options->shutdown_grace_ms ? options->shutdown_grace_ms
                                                 : SBX_ENGINE_DEFAULT_GRACE_MS;
        e->api_open = true;
        e->pools = options->pools;
        e->n_pools = options->n_pools;
        e->template.process = (struct sbx_template){.pid = 0, .fd = -1, .stderr_fd = -1};
        for (size_t i = 0; i < e->n_pools && options->templates; i++)
                if (strcmp(e->pools[i].language, "python") == 0 &&
                    strcmp(e->pools[i].backend, "native") == 0 && !e->pools[i].sessions &&
                    e->pools[i].min_idle > 0)
                        e->template.wanted = true;

        /* What a crashed earlier engine left behind; no sandbox of ours exists yet. */
        reconcile();
        sbx_info("engine: serving (max_sandboxes=%u, grace=%llu ms)", max,
                 (unsigned long long)e->grace_ms);

        int rc = run_loop(e, err);
        if (rc < 0) {
                /* poll itself failed: without it there is no grace period to wait out, but
                 * still nothing may be left behind. */
                begin_stop(e, "engine loop failed", false);
                kill_all_workers(e);
                while (e->n_workers > 0 && sbx_now_us() < e->deadline_us) {
                        usleep(10 * 1000);
                        for (size_t i = e->n_workers; i-- > 0;)
                                reap_worker(e, i);
                }
        }
        templates_stop(e);
        reap_children(e);
        if (e->unclean && e->n_workers == 0)
                reconcile(); /* killed workers could not remove their cgroups */
        for (size_t i = 0; i < e->n_workers; i++) {
                sbx_closep(&e->workers[i].pidfd);
                sbx_closep(&e->workers[i].control_fd);
        }
        sbx_info("engine: stopped (%llu started, %llu finished, %llu rejected)",
                 (unsigned long long)e->stats.executions_started,
                 (unsigned long long)e->stats.executions_finished,
                 (unsigned long long)e->stats.executions_rejected);
        if (rc < 0)
                return -1;
        if (e->failed) {
                *err = e->fatal;
                return -1;
        }
        return 0;
}
