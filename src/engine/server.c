/* The engine loop and its workers; the theory of operation is in server.h. */
#define _GNU_SOURCE
#include "engine/server.h"

#include <errno.h>
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

#include "engine/execution.h"
#include "engine/protocol.h"
#include "sandbox/sandbox.h"
#include "util/cleanup.h"
#include "util/log.h"
#include "util/time.h"

/* A worker's exit code: 0 means its RESULT was sent; anything else (or a signal) makes the engine
 * send one for it. */
#define WORKER_EXIT_NO_RESULT 1

/* After SIGKILL the workers are gone within milliseconds; this only bounds a kernel surprise so
 * that shutdown always returns. */
#define KILL_WAIT_MS 5000

/* Room for everything of a RESULT but its two output streams (error text, names, counters). */
#define RESULT_OVERHEAD_BYTES (64u * 1024u)

struct worker {
        uint64_t request_id;
        char execution_id[SBX_EXECUTION_ID_LENGTH + 1];
        pid_t pid;
        int pidfd; /* -1 when pidfd_open failed; the worker is then killed and only reaped */
};

struct engine {
        int api_fd;
        int signal_fd;
        pid_t api_pid;
        struct worker *workers;
        size_t n_workers;
        size_t max_workers;
        uint64_t grace_ms;

        bool api_open;          /* still reading api_fd */
        bool stopping;          /* shutdown begun: no new workers */
        bool killed;            /* the grace period ran out and SIGKILL went out */
        bool unclean;           /* a worker died without cleaning up: reconcile at the end */
        uint64_t deadline_us;   /* SIGKILL at this time while stopping; give up at it once killed */
        struct sbx_error fatal; /* the API socket's failure, reported after the cleanup */
        bool failed;

        struct sbx_message_stats stats;
        struct sbx_message message; /* decode scratch: the loop handles one message at a time */
};

static int pidfd_open(pid_t pid)
{
        return (int)syscall(SYS_pidfd_open, pid, 0);
}

static int pidfd_send_signal(int pidfd, int sig)
{
        return (int)syscall(SYS_pidfd_send_signal, pidfd, sig, NULL, 0);
}

/* ---- The worker ---------------------------------------------------------------------------- */

/* Closes every fd but 0-2 and keep: the other workers' pidfds, the engine's signalfd and whatever
 * else the engine holds are none of this execution's business. */
static int close_fds_except(int keep)
{
        if (keep < 3)
                return close_range(3, ~0U, 0);
        if (keep > 3 && close_range(3, (unsigned)keep - 1, 0) < 0)
                return -1;
        return close_range((unsigned)keep + 1, ~0U, 0);
}

/* Default dispositions, except SIGPIPE which stays ignored: a program that closes its stdin must
 * show up as EPIPE in the supervisor, not kill it. Then the mask holds SIGTERM alone, which is
 * read through the returned signalfd: the request's cancel fd. */
static int worker_signals(void)
{
        for (int sig = 1; sig < NSIG; sig++) {
                if (sig == SIGKILL || sig == SIGSTOP)
                        continue;
                signal(sig, sig == SIGPIPE ? SIG_IGN : SIG_DFL); /* EINVAL for glibc's own */
        }
        sigset_t cancel;
        sigemptyset(&cancel);
        sigaddset(&cancel, SIGTERM);
        /* The signalfd comes first: SIGTERM is blocked (inherited from the engine) all along, so
         * one that arrived since fork() is still pending and makes the fd readable at once. */
        int fd = signalfd(-1, &cancel, SFD_CLOEXEC | SFD_NONBLOCK);
        if (fd < 0)
                return -1;
        if (sigprocmask(SIG_SETMASK, &cancel, NULL) < 0) {
                close(fd);
                return -1;
        }
        return fd;
}

/* Cuts the output streams so that the RESULT fits in one message; a cut stream is marked
 * truncated like one that hit its cap. Only reachable with output caps over ~24 MiB. */
static void fit_output(struct sbx_result *result)
{
        const size_t budget = SBX_MESSAGE_MAX_BYTES - RESULT_OVERHEAD_BYTES;
        struct sbx_buffer *out = &result->run.out, *err = &result->run.err;
        if (out->len + err->len <= budget)
                return;
        size_t half = budget / 2;
        size_t out_len = out->len, err_len = err->len;
        if (out_len <= half)
                err_len = budget - out_len;
        else if (err_len <= half)
                out_len = budget - err_len;
        else
                out_len = err_len = half;
        if (out_len < out->len) {
                out->len = out_len;
                out->overflow = true;
        }
        if (err_len < err->len) {
                err->len = err_len;
                err->overflow = true;
        }
}

static void result_internal_error(struct sbx_result *result, const char *execution_id,
                                  const struct sbx_limits *limits, const char *backend,
                                  const char *error)
{
        *result = (struct sbx_result){
                .status = SBX_STATUS_INTERNAL_ERROR,
                .exit_code = -1,
                .backend = backend,
        };
        if (limits != NULL)
                result->limits = *limits;
        snprintf(result->id, sizeof(result->id), "%s", execution_id ? execution_id : "");
        snprintf(result->error, sizeof(result->error), "%s", error);
}

/* Encodes and sends result; when the outputs are too large for a message they are cut, and when
 * it cannot be encoded at all an internal_error without output goes instead. */
static int send_result(int api_fd, uint64_t request_id, struct sbx_result *result,
                       struct sbx_error *err)
{
        _cleanup_free_ void *buf = NULL;
        size_t len = 0;
        int rc = sbx_message_encode_result(request_id, result, &buf, &len, err);
        if (rc < 0 && err->code == EMSGSIZE) {
                fit_output(result);
                rc = sbx_message_encode_result(request_id, result, &buf, &len, err);
        }
        if (rc < 0) {
                sbx_error_prefix(err, "engine: cannot encode the result");
                struct sbx_result fallback;
                result_internal_error(&fallback, result->id, &result->limits, result->backend,
                                      err->message);
                if (sbx_message_encode_result(request_id, &fallback, &buf, &len, err) < 0)
                        return -1;
        }
        return sbx_message_send(api_fd, buf, len, err);
}

/* The forked worker: one execution, its RESULT sent on api_fd, then _exit. Never returns. */
static _Noreturn void worker_run_and_exit(int api_fd, pid_t engine_pid, uint64_t request_id,
                                          const struct sbx_message_run *run)
{
        /* Dies with the engine: SIGTERM, i.e. cancel and clean up. Checked after setting it, in
         * case the engine died in between (we would then belong to someone else already). */
        if (prctl(PR_SET_PDEATHSIG, SIGTERM) < 0 || getppid() != engine_pid)
                _exit(WORKER_EXIT_NO_RESULT);
        /* The sandbox's init and anything re-parented below it are reaped here. */
        if (prctl(PR_SET_CHILD_SUBREAPER, 1) < 0)
                sbx_warn("worker: PR_SET_CHILD_SUBREAPER: %s", strerror(errno));
        /* Out of the terminal's session: Ctrl-C and hang-ups reach the engine, which cancels us
         * through SIGTERM; a direct SIGINT would kill us without cleaning up. */
        (void)setsid();
        if (close_fds_except(api_fd) < 0)
                _exit(WORKER_EXIT_NO_RESULT);
        int cancel_fd = worker_signals();

        struct sbx_request request = run->request;
        request.cancel_fd = cancel_fd;
        struct sbx_result result;
        struct sbx_error err = {0};
        if (cancel_fd < 0) {
                sbx_error_set(&err, errno, "engine: worker: cancel signalfd");
                result_internal_error(&result, run->execution_id, &request.limits, request.backend,
                                      err.message);
        } else if (sbx_execute(&request, &result, &err) < 0) {
                result_internal_error(&result, run->execution_id, &request.limits, request.backend,
                                      err.message);
        }
        snprintf(result.id, sizeof(result.id), "%s", run->execution_id);
        if (send_result(api_fd, request_id, &result, &err) < 0) {
                sbx_warn("worker: request %llu: %s", (unsigned long long)request_id, err.message);
                _exit(WORKER_EXIT_NO_RESULT);
        }
        _exit(0);
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

/* A RESULT internal_error for a RUN that gets no worker (or whose worker failed). */
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
        result_internal_error(&result, execution_id, request ? &request->limits : NULL,
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
        /* Each worker owns at most one sandbox and destroys it before it exits, so the workers
         * alive bound the sandboxes alive from above. */
        e->stats.workers_alive = e->n_workers;
        e->stats.sandboxes_alive = e->n_workers;
        void *buf;
        size_t len;
        struct sbx_error err = {0};
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

/* Signals a worker that has not been reaped: its pid cannot have been reused, so kill() is a
 * safe fallback when there is no pidfd. */
static void signal_worker(const struct worker *w, int sig)
{
        int rc = w->pidfd >= 0 ? pidfd_send_signal(w->pidfd, sig) : kill(w->pid, sig);
        if (rc < 0 && errno != ESRCH)
                sbx_warn("engine: signal %d to worker %d: %s", sig, (int)w->pid, strerror(errno));
}

static void spawn_worker(struct engine *e, uint64_t request_id)
{
        const struct sbx_message_run *run = &e->message.body.run;
        pid_t engine_pid = getpid();
        pid_t pid = fork();
        if (pid < 0) {
                e->stats.executions_rejected++;
                reply_error(e, request_id, run->execution_id, &run->request,
                            "engine: fork a worker: %s", strerror(errno));
                return;
        }
        if (pid == 0)
                worker_run_and_exit(e->api_fd, engine_pid, request_id, run);

        struct worker *w = &e->workers[e->n_workers++];
        *w = (struct worker){.request_id = request_id, .pid = pid, .pidfd = pidfd_open(pid)};
        memcpy(w->execution_id, run->execution_id, sizeof(w->execution_id));
        e->stats.executions_started++;
        if (w->pidfd < 0) {
                /* Without a pidfd the loop would not see it end in time; the reaper still
                 * answers its request when it is gone. */
                sbx_warn("engine: pidfd_open(%d): %s; killing the worker", (int)pid,
                         strerror(errno));
                kill(pid, SIGKILL);
        }
        sbx_debug("engine: request %llu: worker %d runs execution %s",
                  (unsigned long long)request_id, (int)pid, run->execution_id);
}

/* Forgets a reaped worker; answers its request when it did not. */
static void worker_ended(struct engine *e, struct worker *w, const siginfo_t *info)
{
        bool sent = info->si_code == CLD_EXITED && info->si_status == 0;
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
        if (w->pidfd >= 0)
                close(w->pidfd);
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
                else
                        sbx_debug("engine: reaped orphan %d", (int)pid);
        }
}

/* ---- Shutdown ------------------------------------------------------------------------------ */

static void begin_stop(struct engine *e, const char *why)
{
        if (e->stopping)
                return;
        e->stopping = true;
        sbx_info("engine: stopping (%s): cancelling %zu execution(s)", why, e->n_workers);
        for (size_t i = 0; i < e->n_workers; i++)
                signal_worker(&e->workers[i], SIGTERM);
        e->deadline_us = sbx_now_us() + e->grace_ms * 1000;
}

static void kill_all_workers(struct engine *e)
{
        sbx_warn("engine: %zu worker(s) still running after %llu ms; killing them", e->n_workers,
                 (unsigned long long)e->grace_ms);
        for (size_t i = 0; i < e->n_workers; i++)
                signal_worker(&e->workers[i], SIGKILL);
        e->killed = true;
        e->unclean = true;
        e->deadline_us = sbx_now_us() + KILL_WAIT_MS * 1000ull;
}

/* ---- Messages from the API ----------------------------------------------------------------- */

static void handle_run(struct engine *e, const void *buf, size_t len, uint64_t request_id)
{
        struct sbx_error err = {0};
        if (sbx_message_decode(buf, len, &e->message, &err) < 0) {
                sbx_warn("engine: request %llu: refused: %s", (unsigned long long)request_id,
                         err.message);
                e->stats.executions_rejected++;
                reply_error(e, request_id, NULL, NULL, "engine: invalid RUN message: %s",
                            err.message);
                return;
        }
        const struct sbx_message_run *run = &e->message.body.run;
        if (e->n_workers >= e->max_workers) {
                /* A worker sends its RESULT just before it exits, so the API can answer with a new
                 * RUN before the loop has seen that exit: reap what is already gone first. */
                for (size_t i = e->n_workers; i-- > 0;)
                        if (e->workers[i].pidfd >= 0)
                                reap_worker(e, i);
        }
        const char *refusal = NULL;
        if (e->stopping)
                refusal = "engine shutting down";
        else if (e->n_workers >= e->max_workers)
                refusal = "engine busy";
        else if (find_worker_by_request(e, request_id) != NULL)
                refusal = "engine: request id already running";
        if (refusal != NULL) {
                e->stats.executions_rejected++;
                reply_error(e, request_id, run->execution_id, &run->request, "%s", refusal);
                return;
        }
        spawn_worker(e, request_id);
}

static void handle_message(struct engine *e, const void *buf, size_t len)
{
        struct sbx_error err = {0};
        struct sbx_message_header header;
        if (sbx_message_decode_header(buf, len, &header, &err) < 0) {
                sbx_warn("engine: dropped a message: %s", err.message);
                /* A RUN with a sound start but a broken header still gets an answer. */
                if (header.magic == SBX_PROTOCOL_MAGIC && header.type == SBX_MESSAGE_RUN)
                        reply_error(e, header.request_id, NULL, NULL,
                                    "engine: invalid RUN message: %s", err.message);
                return;
        }
        switch ((enum sbx_message_type)header.type) {
        case SBX_MESSAGE_RUN:
                handle_run(e, buf, len, header.request_id);
                return;
        case SBX_MESSAGE_CANCEL: {
                struct worker *w = find_worker_by_request(e, header.request_id);
                if (len != SBX_MESSAGE_HEADER_BYTES)
                        sbx_warn("engine: CANCEL with a body dropped");
                else if (w != NULL)
                        signal_worker(w, SIGTERM);
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
        case SBX_MESSAGE_RESULT:
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
                begin_stop(e, "API socket failed");
        } else {
                begin_stop(e, "the API hung up");
        }
}

static void read_signals(struct engine *e)
{
        struct signalfd_siginfo info;
        while (read(e->signal_fd, &info, sizeof(info)) == (ssize_t)sizeof(info)) {
                if (info.ssi_signo == SIGTERM)
                        begin_stop(e, "SIGTERM");
                else if (info.ssi_signo == SIGINT)
                        begin_stop(e, "SIGINT");
                /* SIGCHLD: reap_children runs after every wake-up anyway. */
        }
}

/* ---- The loop ------------------------------------------------------------------------------ */

static int poll_timeout_ms(const struct engine *e)
{
        if (!e->stopping)
                return -1;
        uint64_t now = sbx_now_us();
        if (now >= e->deadline_us)
                return 0;
        return (int)((e->deadline_us - now + 999) / 1000);
}

static int run_loop(struct engine *e, struct pollfd *fds, struct sbx_error *err)
{
        while (!e->stopping || e->n_workers > 0) {
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

                int ready = poll(fds, n, poll_timeout_ms(e));
                if (ready < 0 && errno != EINTR)
                        return sbx_error_set(err, errno, "engine: poll");

                if (ready > 0 && fds[0].revents != 0)
                        read_signals(e);
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

                if (e->stopping && e->n_workers > 0 && sbx_now_us() >= e->deadline_us) {
                        if (e->killed) {
                                sbx_warn("engine: %zu worker(s) did not die after SIGKILL",
                                         e->n_workers);
                                break;
                        }
                        kill_all_workers(e);
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

        _cleanup_free_ struct engine *e = calloc(1, sizeof(*e));
        _cleanup_free_ struct worker *workers = calloc(max, sizeof(*workers));
        _cleanup_free_ struct pollfd *fds = calloc(max + 2, sizeof(*fds));
        if (e == NULL || workers == NULL || fds == NULL)
                return sbx_error_set(err, ENOMEM, "engine: allocate");
        e->api_fd = api_fd;
        e->signal_fd = signal_fd;
        e->api_pid = options->api_pid;
        e->workers = workers;
        e->max_workers = max;
        e->grace_ms = options->shutdown_grace_ms ? options->shutdown_grace_ms
                                                 : SBX_ENGINE_DEFAULT_GRACE_MS;
        e->api_open = true;

        /* What a crashed earlier engine left behind; no sandbox of ours exists yet. */
        reconcile();
        sbx_info("engine: serving (max_sandboxes=%u, grace=%llu ms)", max,
                 (unsigned long long)e->grace_ms);

        int rc = run_loop(e, fds, err);
        if (rc < 0) {
                /* poll itself failed: without it there is no grace period to wait out, but
                 * still nothing may be left behind. */
                begin_stop(e, "engine loop failed");
                kill_all_workers(e);
                while (e->n_workers > 0 && sbx_now_us() < e->deadline_us) {
                        usleep(10 * 1000);
                        for (size_t i = e->n_workers; i-- > 0;)
                                reap_worker(e, i);
                }
        }
        reap_children(e);
        if (e->unclean && e->n_workers == 0)
                reconcile(); /* killed workers could not remove their cgroups */
        for (size_t i = 0; i < e->n_workers; i++)
                if (e->workers[i].pidfd >= 0)
                        close(e->workers[i].pidfd);
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
