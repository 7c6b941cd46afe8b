/* The forked side of the engine's workers (worker.h). */
#define _GNU_SOURCE
#include "engine/worker.h"

#include <errno.h>
#include <jansson.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "engine/compile_cache.h"
#include "engine/execution.h"
#include "model/result_json.h"
#include "protocol/spool.h"
#include "protocol/transport.h"
#include "util/cleanup.h"
#include "util/file.h"
#include "util/log.h"

/* Room for everything of a RESULT but its two output streams (error text, names, counters). */
#define RESULT_OVERHEAD_BYTES (64u * 1024u)

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

/* Encodes and sends result; when the outputs are too large for a message they are cut, and when
 * it cannot be encoded at all an internal_error without output goes instead. When it cannot be
 * sent (the API process is gone), it goes to the spool for the next API process to record. */
static int deliver_result(const struct sbx_worker_context *context, uint64_t request_id,
                          struct sbx_result *result, struct sbx_error *err)
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
                sbx_result_set_internal_error(&fallback, result->id, &result->limits,
                                              result->backend, err->message);
                if (sbx_message_encode_result(request_id, &fallback, &buf, &len, err) < 0)
                        return -1;
        }
        if (sbx_message_send(context->api_fd, buf, len, err) == 0)
                return 0;
        if (context->spool_dir == NULL)
                return -1;
        struct sbx_error spool_err = {0};
        if (sbx_spool_write(context->spool_dir, context->spool_owner, result->id, buf, len,
                            &spool_err) < 0) {
                sbx_error_prefix(err, "spool: %s; send", spool_err.message);
                return -1;
        }
        sbx_info("worker: execution %s: the API is gone (%s); its result is in the spool",
                 result->id, err->message);
        return 0;
}

/* ---- Streamed output ---- */

/* A streamed execution's output goes to the API as it is read: SESSION_EVENTs under the RUN's
 * request id, each {"event": "stdout"|"stderr", "data": {"text"}}, cut at UTF-8 character
 * boundaries (the bytes of a character split between two reads wait for the next). */
struct output_stream {
        const struct sbx_worker_context *context;
        uint64_t request_id;
        const char *execution_id;
        uint8_t pending[2][4]; /* per stream, a character's first bytes */
        size_t n_pending[2];
};

static void send_output_event(struct output_stream *out, int stream, const uint8_t *data,
                              size_t len)
{
        json_t *fields = json_pack("{s:s,s:{s:o}}", "event", stream == 1 ? "stdout" : "stderr",
                                   "data", "text", sbx_json_string_from_bytes(data, len));
        char *text = fields != NULL ? json_dumps(fields, JSON_COMPACT) : NULL;
        json_decref(fields);
        if (text == NULL)
                return;
        struct sbx_message_session message = {.fields = text, .fields_len = strlen(text)};
        snprintf(message.session_id, sizeof(message.session_id), "%s", out->execution_id);
        void *buf = NULL;
        size_t buf_len = 0;
        struct sbx_error err = {0};
        if (sbx_message_encode_session(SBX_MESSAGE_SESSION_EVENT, out->request_id, &message, &buf,
                                       &buf_len, &err) == 0 &&
            sbx_message_send(out->context->api_fd, buf, buf_len, &err) < 0)
                sbx_debug("worker: output event: %s", err.message);
        free(buf);
        free(text);
}

static void on_output(void *ctx, int stream, const void *data, size_t len)
{
        struct output_stream *out = ctx;
        int i = stream == 1 ? 0 : 1;
        /* The held bytes first, then this piece, in one buffer cut at a character's end. */
        uint8_t *joined = malloc(out->n_pending[i] + len);
        if (joined == NULL)
                return;
        memcpy(joined, out->pending[i], out->n_pending[i]);
        memcpy(joined + out->n_pending[i], data, len);
        size_t total = out->n_pending[i] + len;
        /* At most 3 bytes held back: they fit pending. */
        size_t whole = sbx_utf8_whole_prefix(joined, total);
        if (whole > 0)
                send_output_event(out, stream, joined, whole);
        out->n_pending[i] = total - whole;
        memcpy(out->pending[i], joined + whole, out->n_pending[i]);
        free(joined);
}

/* What is held at the end goes as it is. */
static void flush_output(struct output_stream *out)
{
        for (int i = 0; i < 2; i++)
                if (out->n_pending[i] > 0) {
                        send_output_event(out, i + 1, out->pending[i], out->n_pending[i]);
                        out->n_pending[i] = 0;
                }
}

/* What every forked worker (cold, pool or session) does first; keeps fds 0-2, the API socket,
 * control_fd and the compile cache's directory. Returns the cancel fd (the SIGTERM signalfd), or
 * -1 when it has none. Ends the process when the engine is already gone or the fds cannot be
 * closed: nothing was run, nothing to answer. */
int sbx_worker_begin(const struct sbx_worker_context *context, int control_fd, bool *engine_gone)
{
        pid_t engine_pid = context->engine_pid;
        /* Dies with the engine: SIGTERM, i.e. cancel and clean up. Checked after setting it, in
         * case the engine died in between (we would then belong to someone else already). */
        if (prctl(PR_SET_PDEATHSIG, SIGTERM) < 0)
                _exit(SBX_WORKER_EXIT_NO_RESULT);
        bool gone = getppid() != engine_pid;
        if (gone && engine_gone == NULL) {
                sbx_debug("worker %d: the engine is gone already", (int)getpid());
                _exit(SBX_WORKER_EXIT_NO_RESULT);
        }
        if (engine_gone != NULL)
                *engine_gone = gone;
        /* The sandbox's init and anything re-parented below it are reaped here. */
        if (prctl(PR_SET_CHILD_SUBREAPER, 1) < 0)
                sbx_warn("worker: PR_SET_CHILD_SUBREAPER: %s", strerror(errno));
        /* Out of the terminal's session: Ctrl-C and hang-ups reach the engine, which cancels us
         * through SIGTERM; a direct SIGINT would kill us without cleaning up. */
        (void)setsid();
        const int keep[] = {context->api_fd, control_fd,
                            context->compile_cache ? context->compile_cache->dir_fd : -1,
                            context->python_template_fd};
        if (sbx_close_fds_except(keep, SBX_ARRAY_SIZE(keep)) < 0)
                _exit(SBX_WORKER_EXIT_NO_RESULT);
        return worker_signals();
}

/* Says "D" on the control socket: the execution is over and its sandbox destroyed. Sent before
 * the RESULT, so that the engine can read it before any RUN the API sends after reading that
 * RESULT: the engine then never counts a finished worker against max_sandboxes. A failed write
 * changes nothing: the engine then learns it when the worker exits. */
void sbx_worker_say_done(int control_fd)
{
        const char done = SBX_WORKER_DONE;
        if (write(control_fd, &done, 1) != 1)
                sbx_debug("worker: control socket: %s", strerror(errno));
}

/* One execution's answer: where it goes, and whether it went already (early_answer). */
struct answer {
        const struct sbx_worker_context *context;
        int control_fd;
        uint64_t request_id;
        const struct sbx_message_run *run;
        struct output_stream *streamed;
        bool given;
        bool delivered;
};

/* The result is whole and its sandbox not yet removed: answer now (the held output first, then
 * "D", then the RESULT), and let the removal happen after (request.h, on_result). "D" before the
 * sandbox is gone: the engine counts an execution as running until its answer, and one being
 * removed as it counts an idle pool entry, outside max_sandboxes (issue 10's rule). */
static void early_answer(void *ctx, struct sbx_result *result)
{
        struct answer *answer = ctx;
        flush_output(answer->streamed);
        snprintf(result->id, sizeof(result->id), "%s", answer->run->execution_id);
        sbx_worker_say_done(answer->control_fd);
        struct sbx_error err = {0};
        answer->given = true;
        answer->delivered = deliver_result(answer->context, answer->request_id, result, &err) == 0;
        if (!answer->delivered)
                sbx_warn("worker: request %llu: %s", (unsigned long long)answer->request_id,
                         err.message);
}

/* The end every worker shares: the RESULT of run (rc < 0: sbx_execute's err instead), "D",
 * delivery, exit; only the exit when early_answer answered already. */
static _Noreturn void finish_and_exit(const struct sbx_worker_context *context, int control_fd,
                                      uint64_t request_id, const struct sbx_message_run *run,
                                      int rc, struct sbx_result *result, struct sbx_error *err,
                                      const struct answer *answered)
{
        if (answered != NULL && answered->given)
                _exit(answered->delivered ? 0 : SBX_WORKER_EXIT_NO_RESULT);
        if (rc < 0)
                sbx_result_set_internal_error(result, run->execution_id, &run->request.limits,
                                              run->request.backend, err->message);
        snprintf(result->id, sizeof(result->id), "%s", run->execution_id);
        sbx_worker_say_done(control_fd);
        if (deliver_result(context, request_id, result, err) < 0) {
                sbx_warn("worker: request %llu: %s", (unsigned long long)request_id, err->message);
                _exit(SBX_WORKER_EXIT_NO_RESULT);
        }
        _exit(0);
}

_Noreturn void sbx_worker_run_and_exit(const struct sbx_worker_context *context, int control_fd,
                                       uint64_t request_id, const struct sbx_message_run *run)
{
        bool engine_gone = false;
        int cancel_fd = sbx_worker_begin(context, control_fd, &engine_gone);
        struct sbx_request request = run->request;
        request.cancel_fd = cancel_fd;
        request.compile_cache = context->compile_cache;
        struct output_stream streamed = {
                .context = context, .request_id = request_id, .execution_id = run->execution_id};
        if (request.stream) {
                request.on_output = on_output;
                request.output_ctx = &streamed;
        }
        /* From here the execution is answered (run, or canceled below): the tests' ground truth
         * of what started, which the engine's "starting" (said before the fork, so possibly of
         * an execution an engine killed at once never handed over) only bounds. */
        sbx_debug("worker: execution %s taken (worker %d)", run->execution_id, (int)getpid());
        struct sbx_result result;
        struct sbx_error err = {0};
        if (engine_gone) {
                /* The engine died right after it started this execution (and logged it): say so
                 * in a RESULT, so that the execution has its record like every other one. */
                sbx_result_set_internal_error(&result, run->execution_id, &run->request.limits,
                                              run->request.backend,
                                              "the engine was gone before the execution began");
                result.status = SBX_STATUS_CANCELED;
                finish_and_exit(context, control_fd, request_id, run, 0, &result, &err, NULL);
        }
        struct answer answer = {.context = context,
                                .control_fd = control_fd,
                                .request_id = request_id,
                                .run = run,
                                .streamed = &streamed};
        request.on_result = early_answer;
        request.result_ctx = &answer;
        int rc = cancel_fd < 0 ? sbx_error_set(&err, errno, "engine: worker: cancel signalfd")
                               : sbx_execute_with_template(&request, context->python_template_fd,
                                                           &result, &err);
        flush_output(&streamed);
        finish_and_exit(context, control_fd, request_id, run, rc, &result, &err, &answer);
}

int sbx_worker_await_assignment(int control_fd, int cancel_fd, struct sbx_message *message)
{
        const char ready = SBX_WORKER_READY;
        if (write(control_fd, &ready, 1) != 1)
                return -1;
        struct pollfd fds[2] = {{.fd = control_fd, .events = POLLIN},
                                {.fd = cancel_fd, .events = POLLIN}};
        while (poll(fds, 2, -1) < 0 && errno == EINTR)
                ;
        /* What arrived is taken even when SIGTERM came too (a RUN is then canceled at once and
         * answered, a session ended at once): the engine counts on an answer from an assigned
         * worker. The message's buffer stays with it for the worker's life. */
        void *buf = NULL;
        size_t len = 0;
        struct sbx_error err = {0};
        if ((fds[0].revents & POLLIN) == 0 ||
            sbx_message_receive(control_fd, &buf, &len, &err) <= 0 ||
            sbx_message_decode(buf, len, message, &err) < 0)
                return 0;
        return 1;
}

_Noreturn void sbx_pool_worker_run_and_exit(const struct sbx_worker_context *context,
                                            int control_fd, const char *language,
                                            const char *backend, uint64_t memory_bytes)
{
        int cancel_fd = sbx_worker_begin(context, control_fd, NULL);
        if (cancel_fd < 0)
                _exit(SBX_WORKER_EXIT_NO_RESULT);

        struct sbx_pool_entry *entry = NULL;
        struct sbx_error err = {0};
        if (sbx_pool_entry_create(language, backend, memory_bytes, context->python_template_fd,
                                  NULL, &entry, &err) < 0) {
                sbx_warn("pool worker (%s, %s): %s", language, backend, err.message);
                _exit(SBX_WORKER_EXIT_NO_RESULT);
        }
        struct sbx_message message;
        int assigned = sbx_worker_await_assignment(control_fd, cancel_fd, &message);
        if (assigned <= 0 || message.header.type != SBX_MESSAGE_RUN) {
                /* Retired, or the engine is gone: nothing ran, nothing to answer. */
                sbx_pool_entry_destroy(entry);
                _exit(assigned < 0 ? SBX_WORKER_EXIT_NO_RESULT : 0);
        }
        const struct sbx_message_run *run = &message.body.run;
        sbx_debug("worker: execution %s taken (pool worker %d)", run->execution_id, (int)getpid());
        struct sbx_request request = run->request;
        request.cancel_fd = cancel_fd;
        request.compile_cache = context->compile_cache;
        struct output_stream streamed = {.context = context,
                                         .request_id = message.header.request_id,
                                         .execution_id = run->execution_id};
        if (request.stream) {
                request.on_output = on_output;
                request.output_ctx = &streamed;
        }
        struct answer answer = {.context = context,
                                .control_fd = control_fd,
                                .request_id = message.header.request_id,
                                .run = run,
                                .streamed = &streamed};
        request.on_result = early_answer;
        request.result_ctx = &answer;
        struct sbx_result result;
        int rc = sbx_pool_entry_execute(entry, &request, &result, &err);
        flush_output(&streamed);
        finish_and_exit(context, control_fd, message.header.request_id, run, rc, &result, &err,
                        &answer);
}
