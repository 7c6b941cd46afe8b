/* The engine client: calls register themselves (request_id, the reply type they expect, a
 * condvar of their own) in a list under one mutex BEFORE they send, so that a reply can never
 * arrive unclaimed; the dispatcher thread completes them by request_id. Each waiting caller owns
 * its call struct on its stack and takes it off the list itself when it stops waiting, so a
 * late reply finds nothing and is dropped. */
#define _GNU_SOURCE
#include "api/engine_client.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "protocol/transport.h"
#include "util/cleanup.h"
#include "util/log.h"
#include "util/time.h"

/* A SESSION_EVENT waiting for its streaming caller. */
struct queued_event {
        struct queued_event *next;
        void *message;
        size_t len;
};

struct call {
        struct call *next;
        /* A streamed session run: its SESSION_EVENTs queue here, oldest first, until the
         * caller takes them. */
        bool streaming;
        struct queued_event *events, **events_tail;
        uint64_t request_id;
        uint16_t reply_type;
        const char *execution_id; /* RUN only: what cancel looks for */
        pthread_cond_t done_cond;
        bool done;
        struct sbx_error error; /* when done without a reply */
        void *reply;            /* when done with one: the whole message, owned by the call */
        size_t reply_len;
        int passed; /* an fd that came with the reply (an OPEN's channel), owned; or -1 */
};

struct sbx_engine_client {
        int fd;
        pthread_t dispatcher;
        bool dispatcher_running; /* joinable */
        struct sbx_engine_client_events events;

        pthread_mutex_t lock; /* everything below */
        struct call *calls;
        uint64_t next_request_id;
        bool dead;                     /* no call may start any more */
        bool shutting_down;            /* the dead state comes from sbx_engine_client_shutdown */
        pthread_mutex_t shutdown_lock; /* serialises shutdown and join */
};

static int unavailable(struct sbx_error *err, const char *why)
{
        sbx_error_set(err, 0, "engine unavailable: %s", why);
        err->code = EPIPE;
        return -1;
}

/* ---- The dispatcher ------------------------------------------------------------------------ */

/* Called with the lock held. */
static struct call *take_call(struct sbx_engine_client *client, uint64_t request_id)
{
        for (struct call **p = &client->calls; *p != NULL; p = &(*p)->next) {
                if ((*p)->request_id == request_id) {
                        struct call *call = *p;
                        *p = call->next;
                        call->next = NULL;
                        return call;
                }
        }
        return NULL;
}

/* A CONFIG: decoded and handed to on_config. */
static void deliver_config(struct sbx_engine_client *client, void *buf, size_t len)
{
        struct sbx_error err = {0};
        _cleanup_free_ struct sbx_message *message = malloc(sizeof(*message));
        if (message == NULL || sbx_message_decode(buf, len, message, &err) < 0)
                sbx_warn("engine client: dropped a CONFIG: %s",
                         message ? err.message : "out of memory");
        else if (client->events.on_config != NULL)
                client->events.on_config(client->events.ctx, message->body.config.text,
                                         message->body.config.size);
        free(buf);
}

/* A SESSION_EVENT: queued for its streaming caller, or dropped. */
static void deliver_session_event(struct sbx_engine_client *client, uint64_t request_id, void *buf,
                                  size_t len)
{
        struct queued_event *event = malloc(sizeof(*event));
        pthread_mutex_lock(&client->lock);
        struct call *call = client->calls;
        while (call != NULL && call->request_id != request_id)
                call = call->next;
        if (call != NULL && call->streaming && event != NULL) {
                *event = (struct queued_event){.message = buf, .len = len};
                *call->events_tail = event;
                call->events_tail = &event->next;
                pthread_cond_signal(&call->done_cond);
                buf = NULL;
                event = NULL;
        }
        pthread_mutex_unlock(&client->lock);
        free(event);
        free(buf);
}

/* A SESSION_ENDED: decoded and handed to on_session_ended. */
static void deliver_session_ended(struct sbx_engine_client *client, void *buf, size_t len)
{
        struct sbx_error err = {0};
        _cleanup_free_ struct sbx_message *message = malloc(sizeof(*message));
        if (message == NULL || sbx_message_decode(buf, len, message, &err) < 0)
                sbx_warn("engine client: dropped a SESSION_ENDED: %s",
                         message ? err.message : "out of memory");
        else if (client->events.on_session_ended != NULL)
                client->events.on_session_ended(client->events.ctx, &message->body.session);
        free(buf);
}

/* passed: an fd that came with the message, or -1; only a SESSION_REPLY's is kept (by its
 * call), every other is closed. */
static void deliver(struct sbx_engine_client *client, void *buf, size_t len, int passed)
{
        struct sbx_message_header header;
        struct sbx_error err = {0};
        _cleanup_close_ int fd = passed;
        if (sbx_message_decode_header(buf, len, &header, &err) < 0) {
                sbx_warn("engine client: dropped a reply: %s", err.message);
                free(buf);
                return;
        }
        if (header.type == SBX_MESSAGE_CONFIG) {
                deliver_config(client, buf, len);
                return;
        }
        if (header.type == SBX_MESSAGE_SESSION_ENDED) {
                deliver_session_ended(client, buf, len);
                return;
        }
        if (header.type == SBX_MESSAGE_SESSION_EVENT) {
                deliver_session_event(client, header.request_id, buf, len);
                return;
        }
        pthread_mutex_lock(&client->lock);
        struct call *call = take_call(client, header.request_id);
        if (call == NULL) {
                pthread_mutex_unlock(&client->lock);
                /* Its caller stopped waiting (timeout), or the engine answered for a worker that
                 * had already answered. */
                sbx_debug("engine client: dropped a %s for request %llu nobody waits for",
                          sbx_message_type_name(header.type),
                          (unsigned long long)header.request_id);
                free(buf);
                return;
        }
        bool refused_run = (call->reply_type == SBX_MESSAGE_RESULT ||
                            call->reply_type == SBX_MESSAGE_SESSION_REPLY) &&
                           header.type == SBX_MESSAGE_REFUSED;
        if (header.type == call->reply_type || refused_run) {
                call->reply = buf;
                call->reply_len = len;
                if (header.type == SBX_MESSAGE_SESSION_REPLY)
                        call->passed = take_fd(&fd);
        } else {
                sbx_error_set(&call->error, 0, "engine answered %s with %s",
                              sbx_message_type_name(call->reply_type),
                              sbx_message_type_name(header.type));
                call->error.code = EBADMSG;
                free(buf);
        }
        call->done = true;
        pthread_cond_signal(&call->done_cond);
        pthread_mutex_unlock(&client->lock);
}

static void *dispatch(void *arg)
{
        struct sbx_engine_client *client = arg;
        struct sbx_error err = {0};
        for (;;) {
                void *buf = NULL;
                size_t len = 0;
                int passed = -1;
                int rc = sbx_message_receive_passed(client->fd, &buf, &len, &passed, &err);
                if (rc > 0) {
                        deliver(client, buf, len, passed);
                        continue;
                }
                if (rc < 0 && sbx_message_dropped(&err)) {
                        sbx_warn("engine client: %s", err.message);
                        continue;
                }
                break;
        }

        pthread_mutex_lock(&client->lock);
        bool lost = !client->shutting_down;
        const char *why = lost ? "the engine hung up" : "the engine client was shut down";
        client->dead = true;
        for (struct call *call = client->calls; call != NULL; call = call->next) {
                unavailable(&call->error, why);
                call->done = true;
                pthread_cond_signal(&call->done_cond);
        }
        client->calls = NULL;
        pthread_mutex_unlock(&client->lock);
        if (lost) {
                sbx_warn("engine client: %s", why);
                if (client->events.on_lost != NULL)
                        client->events.on_lost(client->events.ctx);
        }
        return NULL;
}

/* ---- Calls --------------------------------------------------------------------------------- */

/* Registers call and assigns its request_id. Fails at once when the engine is gone. */
static int call_begin(struct sbx_engine_client *client, struct call *call, uint16_t reply_type,
                      const char *execution_id, struct sbx_error *err)
{
        *call = (struct call){.reply_type = reply_type, .execution_id = execution_id, .passed = -1};
        call->events_tail = &call->events;
        int rc = sbx_cond_init_monotonic(&call->done_cond);
        if (rc != 0)
                return sbx_error_set(err, rc, "engine client: condition variable");

        pthread_mutex_lock(&client->lock);
        if (client->dead) {
                bool shut = client->shutting_down;
                pthread_mutex_unlock(&client->lock);
                pthread_cond_destroy(&call->done_cond);
                return unavailable(err,
                                   shut ? "the engine client was shut down" : "the engine hung up");
        }
        call->request_id = ++client->next_request_id;
        call->next = client->calls;
        client->calls = call;
        pthread_mutex_unlock(&client->lock);
        return 0;
}

/* Takes call off the list (if the dispatcher has not) and frees what it still holds. */
static void call_end(struct sbx_engine_client *client, struct call *call)
{
        pthread_mutex_lock(&client->lock);
        take_call(client, call->request_id);
        pthread_mutex_unlock(&client->lock);
        pthread_cond_destroy(&call->done_cond);
        free(call->reply);
        call->reply = NULL;
        if (call->passed >= 0)
                close(call->passed);
        call->passed = -1;
        while (call->events != NULL) {
                struct queued_event *event = call->events;
                call->events = event->next;
                free(event->message);
                free(event);
        }
}

static int send_message(struct sbx_engine_client *client, void *buf, size_t len,
                        struct sbx_error *err)
{
        int rc = sbx_message_send(client->fd, buf, len, err);
        free(buf);
        if (rc < 0 && (err->code == EPIPE || err->code == ECONNRESET || err->code == ENOTCONN)) {
                char why[SBX_ERROR_MESSAGE_MAX];
                memcpy(why, err->message, sizeof(why));
                return unavailable(err, why);
        }
        return rc;
}

/* Waits until the call is done or timeout_ms have passed; a streamed call's events that come
 * before its reply go to on_event, in order, from this thread (message: room to decode them).
 * Returns 0 with call->reply set, or -1 with err (ETIMEDOUT: a late reply is dropped; the caller
 * decides whether to cancel). */
static int call_wait(struct sbx_engine_client *client, struct call *call, uint64_t timeout_ms,
                     sbx_engine_event_fn on_event, void *ctx, struct sbx_message *message,
                     struct sbx_error *err)
{
        struct timespec deadline;
        clock_gettime(CLOCK_MONOTONIC, &deadline);
        deadline.tv_sec += (time_t)(timeout_ms / 1000);
        deadline.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
        if (deadline.tv_nsec >= 1000000000L) {
                deadline.tv_sec++;
                deadline.tv_nsec -= 1000000000L;
        }
        /* Events first, in order; the reply after every event that came before it. */
        pthread_mutex_lock(&client->lock);
        int wait_rc = 0;
        for (;;) {
                if (call->events != NULL) {
                        struct queued_event *event = call->events;
                        call->events = event->next;
                        if (call->events == NULL)
                                call->events_tail = &call->events;
                        pthread_mutex_unlock(&client->lock);
                        struct sbx_error ignored = {0};
                        if (sbx_message_decode(event->message, event->len, message, &ignored) == 0)
                                on_event(ctx, &message->body.session);
                        free(event->message);
                        free(event);
                        pthread_mutex_lock(&client->lock);
                        continue;
                }
                if (call->done || wait_rc == ETIMEDOUT)
                        break;
                wait_rc = pthread_cond_timedwait(&call->done_cond, &client->lock, &deadline);
        }
        bool done = call->done;
        if (!done)
                take_call(client, call->request_id);
        pthread_mutex_unlock(&client->lock);
        if (!done)
                return sbx_error_set(err, ETIMEDOUT, "engine did not answer %s within %llu ms",
                                     sbx_message_type_name((uint16_t)(call->reply_type)),
                                     (unsigned long long)timeout_ms);
        if (call->reply == NULL) {
                *err = call->error;
                return -1;
        }
        return 0;
}

/* One request with an empty body (PING, STATS) and its reply, decoded into *message. */
static int simple_call(struct sbx_engine_client *client, enum sbx_message_type type,
                       uint16_t reply_type, unsigned timeout_ms, struct sbx_message *message,
                       struct sbx_error *err)
{
        struct call call;
        if (call_begin(client, &call, reply_type, NULL, err) < 0)
                return -1;
        void *buf;
        size_t len;
        int rc = sbx_message_encode_empty(type, call.request_id, &buf, &len, err);
        if (rc == 0)
                rc = send_message(client, buf, len, err);
        if (rc == 0)
                rc = call_wait(client, &call, timeout_ms, NULL, NULL, message, err);
        if (rc == 0 && sbx_message_decode(call.reply, call.reply_len, message, err) < 0)
                rc = sbx_error_prefix(err, "engine client: %s", sbx_message_type_name(reply_type));
        call_end(client, &call);
        return rc;
}

int sbx_engine_client_ping(struct sbx_engine_client *client, unsigned timeout_ms,
                           struct sbx_error *err)
{
        _cleanup_free_ struct sbx_message *message = malloc(sizeof(*message));
        if (message == NULL)
                return sbx_error_set(err, ENOMEM, "engine client: allocate");
        return simple_call(client, SBX_MESSAGE_PING, SBX_MESSAGE_PONG, timeout_ms, message, err);
}

int sbx_engine_client_stats(struct sbx_engine_client *client, unsigned timeout_ms,
                            struct sbx_message_stats *stats, struct sbx_error *err)
{
        _cleanup_free_ struct sbx_message *message = malloc(sizeof(*message));
        if (message == NULL)
                return sbx_error_set(err, ENOMEM, "engine client: allocate");
        if (simple_call(client, SBX_MESSAGE_STATS, SBX_MESSAGE_STATS_REPLY, timeout_ms, message,
                        err) < 0)
                return -1;
        *stats = message->body.stats;
        return 0;
}

/* The err->code sbx_engine_client_run reports for a REFUSED (engine_client.h). */
static int refusal_error_code(enum sbx_refusal reason)
{
        switch (reason) {
        case SBX_REFUSAL_BUSY:
                return EBUSY;
        case SBX_REFUSAL_STOPPING:
                return ESHUTDOWN;
        case SBX_REFUSAL_FAILED:
                return EAGAIN;
        case SBX_REFUSAL_INVALID:
                break;
        }
        return EPROTO;
}

static void send_cancel(struct sbx_engine_client *client, uint64_t request_id)
{
        void *buf;
        size_t len;
        struct sbx_error err = {0};
        if (sbx_message_encode_empty(SBX_MESSAGE_CANCEL, request_id, &buf, &len, &err) < 0 ||
            send_message(client, buf, len, &err) < 0)
                sbx_warn("engine client: cancel request %llu: %s", (unsigned long long)request_id,
                         err.message);
}

/* out's result is message's (its buffers still message's bytes), its compile stage in out. */
static void engine_result_take(struct sbx_engine_result *out, const struct sbx_message *message)
{
        out->result = message->body.result;
        if (out->result.compile != NULL) {
                out->compile = message->compile;
                out->result.compile = &out->compile;
        }
}

/* Registers a call whose events are queued for it (streamed) or not, and tells request_id
 * (NULL: nobody) its id before anything is sent. */
static int begin_call(struct sbx_engine_client *client, struct call *call, uint16_t reply_type,
                      const char *execution_id, bool streamed, _Atomic uint64_t *request_id,
                      struct sbx_error *err)
{
        if (call_begin(client, call, reply_type, execution_id, err) < 0)
                return -1;
        if (streamed) {
                pthread_mutex_lock(&client->lock);
                call->streaming = true;
                pthread_mutex_unlock(&client->lock);
        }
        if (request_id != NULL)
                atomic_store(request_id, call->request_id);
        return 0;
}

/* A SESSION_REPLY (or REFUSED) decoded into *out, or -1 with err. message: room to decode. */
static int session_reply_take(struct call *call, struct sbx_message *message,
                              struct sbx_engine_session_reply *out, struct sbx_error *err)
{
        if (sbx_message_decode(call->reply, call->reply_len, message, err) < 0)
                return sbx_error_prefix(err, "engine client: SESSION_REPLY");
        if (message->header.type == SBX_MESSAGE_REFUSED) {
                const struct sbx_message_refused *refused = &message->body.refused;
                sbx_error_set(err, 0, "%s", refused->detail);
                err->code = refusal_error_code(refused->reason);
                return -1;
        }
        out->reply = message->body.session;
        out->message = steal_pointer(&call->reply);
        out->channel = take_fd(&call->passed);
        return 0;
}

static int session_send(struct sbx_engine_client *client, struct call *call,
                        const struct sbx_message_session *session, struct sbx_error *err)
{
        void *buf;
        size_t len;
        if (sbx_message_encode_session(SBX_MESSAGE_SESSION, call->request_id, session, &buf, &len,
                                       err) < 0)
                return -1;
        return send_message(client, buf, len, err);
}

static void send_session_cancel(struct sbx_engine_client *client, const char *session_id,
                                uint64_t request_id)
{
        struct sbx_message_session cancel = {
                .op = SBX_SESSION_CANCEL, .fields = "{}", .fields_len = 2};
        memcpy(cancel.session_id, session_id, sizeof(cancel.session_id));
        void *buf;
        size_t len;
        struct sbx_error err = {0};
        if (sbx_message_encode_session(SBX_MESSAGE_SESSION, request_id, &cancel, &buf, &len, &err) <
                    0 ||
            send_message(client, buf, len, &err) < 0)
                sbx_warn("engine client: cancel session %s's request %llu: %s", session_id,
                         (unsigned long long)request_id, err.message);
}

/* A session call that timed out is not left going: an OPEN's session ends (CANCEL: the OPEN's
 * request is its worker's), an operation is interrupted (SESSION CANCEL). */
static void send_timeout_cancel(struct sbx_engine_client *client,
                                const struct sbx_message_session *session, uint64_t request_id)
{
        if (session->op == SBX_SESSION_OPEN)
                send_cancel(client, request_id);
        else
                send_session_cancel(client, session->session_id, request_id);
}

/* What direct_session_call returns when the worker hung up: the session has ended. */
#define WORKER_HUNG_UP 1

/* sbx_engine_client_session through the session's channel (with->direct): sent there, and
 * every message on it read here until the reply to this request; what answers an earlier
 * request (one that timed out) is dropped. Returns WORKER_HUNG_UP when the worker is gone,
 * *sent telling whether with->on_sent was called. */
static int direct_session_call(struct sbx_engine_client *client,
                               const struct sbx_message_session *session, uint64_t timeout_ms,
                               const struct sbx_engine_session_call *with,
                               struct sbx_engine_session_reply *out, bool *sent,
                               struct sbx_error *err)
{
        pthread_mutex_lock(&client->lock);
        bool dead = client->dead, shut = client->shutting_down;
        uint64_t request_id = ++client->next_request_id;
        pthread_mutex_unlock(&client->lock);
        if (dead)
                return unavailable(err,
                                   shut ? "the engine client was shut down" : "the engine hung up");
        _cleanup_free_ struct sbx_message *message = malloc(sizeof(*message));
        if (message == NULL)
                return sbx_error_set(err, ENOMEM, "engine client: allocate");
        if (with->request_id != NULL)
                atomic_store(with->request_id, request_id);
        void *buf;
        size_t len;
        if (sbx_message_encode_session(SBX_MESSAGE_SESSION, request_id, session, &buf, &len, err) <
            0)
                return -1;
        /* Never waits: the worker reads the next operation once it answered this one. */
        int rc = sbx_message_send_nowait(with->channel, buf, len, err);
        free(buf);
        if (rc < 0 && (err->code == EPIPE || err->code == ECONNRESET))
                return WORKER_HUNG_UP;
        if (rc < 0 && err->code == EAGAIN)
                return sbx_error_set(err, EBUSY, "engine client: the session's channel is full");
        if (rc < 0)
                return -1;
        *sent = true;
        if (with->on_sent != NULL && with->on_sent(with->ctx) < 0)
                send_session_cancel(client, session->session_id, request_id);
        uint64_t deadline = sbx_now_ms() + timeout_ms;
        for (;;) {
                uint64_t now = sbx_now_ms();
                if (now >= deadline) {
                        send_session_cancel(client, session->session_id, request_id);
                        return sbx_error_set(err, ETIMEDOUT,
                                             "engine did not answer SESSION_REPLY within %llu ms",
                                             (unsigned long long)timeout_ms);
                }
                struct pollfd pfd = {.fd = with->channel, .events = POLLIN};
                uint64_t left = deadline - now;
                int ready = poll(&pfd, 1, left > INT_MAX ? INT_MAX : (int)left);
                if (ready < 0 && errno != EINTR)
                        return sbx_error_set(err, errno, "engine client: poll the session");
                if (ready <= 0)
                        continue;
                void *got = NULL;
                size_t got_len = 0;
                struct sbx_error bad = {0};
                rc = sbx_message_receive(with->channel, &got, &got_len, &bad);
                if (rc == 0 || (rc < 0 && !sbx_message_dropped(&bad)))
                        return WORKER_HUNG_UP;
                if (rc < 0) {
                        sbx_warn("engine client: session %s: %s", session->session_id, bad.message);
                        continue;
                }
                if (sbx_message_decode(got, got_len, message, &bad) < 0 ||
                    message->header.request_id != request_id) {
                        free(got);
                        continue;
                }
                if (message->header.type == SBX_MESSAGE_SESSION_REPLY) {
                        out->reply = message->body.session;
                        out->message = got;
                        out->channel = -1;
                        return 0;
                }
                if (message->header.type == SBX_MESSAGE_SESSION_EVENT && with->on_event != NULL)
                        with->on_event(with->ctx, &message->body.session);
                free(got);
        }
}

int sbx_engine_client_session(struct sbx_engine_client *client,
                              const struct sbx_message_session *session, uint64_t timeout_ms,
                              const struct sbx_engine_session_call *with,
                              struct sbx_engine_session_reply *out, struct sbx_error *err)
{
        static const struct sbx_engine_session_call plain = {0};
        if (with == NULL)
                with = &plain;
        *out = (struct sbx_engine_session_reply){0};
        struct sbx_engine_session_call engine_way;
        if (with->direct) {
                bool sent = false;
                int rc = direct_session_call(client, session, timeout_ms, with, out, &sent, err);
                if (rc != WORKER_HUNG_UP)
                        return rc;
                /* The worker ended: the engine's way answers (ESRCH, or EPIPE while it reaps
                 * the worker) after the SESSION_ENDED the worker sent before it went, so that
                 * the session's end is known first, with its reason. */
                engine_way = *with;
                engine_way.direct = false;
                if (sent)
                        engine_way.on_sent = NULL;
                with = &engine_way;
        }
        _cleanup_free_ struct sbx_message *message = malloc(sizeof(*message));
        if (message == NULL)
                return sbx_error_set(err, ENOMEM, "engine client: allocate");
        struct call call;
        if (begin_call(client, &call, SBX_MESSAGE_SESSION_REPLY, NULL, with->on_event != NULL,
                       with->request_id, err) < 0)
                return -1;
        int rc = session_send(client, &call, session, err);
        if (rc == 0 && with->on_sent != NULL && with->on_sent(with->ctx) < 0)
                send_session_cancel(client, session->session_id, call.request_id);
        if (rc == 0) {
                rc = call_wait(client, &call, timeout_ms, with->on_event, with->ctx, message, err);
                /* Do not leave it going: an OPEN's session ends, a run is interrupted. */
                if (rc < 0 && err->code == ETIMEDOUT)
                        send_timeout_cancel(client, session, call.request_id);
        }
        if (rc == 0)
                rc = session_reply_take(&call, message, out, err);
        call_end(client, &call);
        return rc;
}

size_t sbx_engine_client_sessions(struct sbx_engine_client *client,
                                  const struct sbx_message_session *sessions, size_t n,
                                  uint64_t timeout_ms, struct sbx_engine_session_reply *out,
                                  struct sbx_error *errs, _Atomic uint64_t *const *request_ids)
{
        size_t answered = 0;
        struct call *calls = calloc(n, sizeof(*calls));
        bool *begun = calloc(n, sizeof(*begun));
        _cleanup_free_ struct sbx_message *message = malloc(sizeof(*message));
        for (size_t i = 0; i < n; i++) {
                out[i] = (struct sbx_engine_session_reply){0};
                errs[i] = (struct sbx_error){0};
                if (calls == NULL || begun == NULL || message == NULL)
                        sbx_error_set(&errs[i], ENOMEM, "engine client: allocate");
        }
        if (calls == NULL || begun == NULL || message == NULL)
                goto out;
        /* All of them out first: the engine forwards each to its session's worker, which work
         * side by side; then the replies, in any order they come. */
        for (size_t i = 0; i < n; i++) {
                if (call_begin(client, &calls[i], SBX_MESSAGE_SESSION_REPLY, NULL, &errs[i]) < 0)
                        continue;
                begun[i] = true;
                if (request_ids != NULL && request_ids[i] != NULL)
                        atomic_store(request_ids[i], calls[i].request_id);
                if (session_send(client, &calls[i], &sessions[i], &errs[i]) < 0)
                        errs[i].code = errs[i].code ? errs[i].code : EIO;
        }
        uint64_t deadline_ms = sbx_now_ms() + timeout_ms;
        for (size_t i = 0; i < n; i++) {
                if (!begun[i] || errs[i].code != 0)
                        continue;
                uint64_t now = sbx_now_ms();
                uint64_t left = deadline_ms > now ? deadline_ms - now : 0;
                if (call_wait(client, &calls[i], left, NULL, NULL, message, &errs[i]) < 0) {
                        if (errs[i].code == ETIMEDOUT)
                                send_timeout_cancel(client, &sessions[i], calls[i].request_id);
                        continue;
                }
                if (session_reply_take(&calls[i], message, &out[i], &errs[i]) == 0)
                        answered++;
        }
out:
        for (size_t i = 0; calls != NULL && begun != NULL && i < n; i++)
                if (begun[i])
                        call_end(client, &calls[i]);
        free(calls);
        free(begun);
        return answered;
}

/* A RUN and its RESULT (streamed: its output events to on_event as they come, and its request
 * id told to request_id before anything is sent). */
static int run_call(struct sbx_engine_client *client, const char *execution_id,
                    const struct sbx_request *request, sbx_engine_event_fn on_event, void *ctx,
                    _Atomic uint64_t *request_id, struct sbx_engine_result *out,
                    struct sbx_error *err)
{
        *out = (struct sbx_engine_result){0};
        _cleanup_free_ struct sbx_message *message = malloc(sizeof(*message));
        if (message == NULL)
                return sbx_error_set(err, ENOMEM, "engine client: allocate");
        struct call call;
        /* A streamed run is cancelled by its request id (its caller holds it); a plain one by
         * its execution id too (call.execution_id). */
        if (begin_call(client, &call, SBX_MESSAGE_RESULT, on_event != NULL ? NULL : execution_id,
                       on_event != NULL, request_id, err) < 0)
                return -1;
        void *buf;
        size_t len;
        int rc = sbx_message_encode_run(call.request_id, execution_id, request, &buf, &len, err);
        if (rc == 0)
                rc = send_message(client, buf, len, err);
        else if (request_id != NULL)
                atomic_store(request_id, 0); /* nothing was sent */
        if (rc < 0 && request_id != NULL)
                atomic_store(request_id, 0);
        if (rc == 0) {
                rc = call_wait(client, &call, request->limits.wall_ms + SBX_ENGINE_RUN_SLACK_MS,
                               on_event, ctx, message, err);
                if (rc < 0 && err->code == ETIMEDOUT)
                        send_cancel(client, call.request_id); /* do not leave it running */
        }
        if (rc == 0 && sbx_message_decode(call.reply, call.reply_len, message, err) < 0)
                rc = sbx_error_prefix(err, "engine client: RESULT");
        if (rc == 0 && message->header.type == SBX_MESSAGE_REFUSED) {
                sbx_error_set(err, 0, "%s", message->body.refused.detail);
                err->code = refusal_error_code(message->body.refused.reason);
                rc = -1;
        } else if (rc == 0) {
                engine_result_take(out, message);
                out->message = steal_pointer(&call.reply);
        }
        call_end(client, &call);
        return rc;
}

int sbx_engine_client_run(struct sbx_engine_client *client, const char *execution_id,
                          const struct sbx_request *request, struct sbx_engine_result *out,
                          struct sbx_error *err)
{
        return run_call(client, execution_id, request, NULL, NULL, NULL, out, err);
}

int sbx_engine_client_run_stream(struct sbx_engine_client *client, const char *execution_id,
                                 const struct sbx_request *request, sbx_engine_event_fn on_event,
                                 void *ctx, _Atomic uint64_t *request_id,
                                 struct sbx_engine_result *out, struct sbx_error *err)
{
        return run_call(client, execution_id, request, on_event, ctx, request_id, out, err);
}

bool sbx_engine_client_alive(struct sbx_engine_client *client)
{
        pthread_mutex_lock(&client->lock);
        bool alive = !client->dead;
        pthread_mutex_unlock(&client->lock);
        return alive;
}

void sbx_engine_client_cancel(struct sbx_engine_client *client, uint64_t request_id)
{
        send_cancel(client, request_id);
}

void sbx_engine_client_cancel_session(struct sbx_engine_client *client, const char *session_id,
                                      uint64_t request_id)
{
        send_session_cancel(client, session_id, request_id);
}

void sbx_engine_session_reply_free(struct sbx_engine_session_reply *reply)
{
        if (reply == NULL)
                return;
        if (reply->message != NULL && reply->channel >= 0)
                close(reply->channel);
        free(reply->message);
        *reply = (struct sbx_engine_session_reply){0};
}

void sbx_engine_result_free(struct sbx_engine_result *result)
{
        if (result == NULL)
                return;
        free(result->message);
        *result = (struct sbx_engine_result){0};
}

/* ---- Life cycle ---------------------------------------------------------------------------- */

int sbx_engine_client_start(int fd, const struct sbx_engine_client_events *events,
                            struct sbx_engine_client **out, struct sbx_error *err)
{
        struct sbx_engine_client *client = calloc(1, sizeof(*client));
        if (client == NULL) {
                close(fd);
                return sbx_error_set(err, ENOMEM, "engine client: allocate");
        }
        client->fd = fd;
        if (events != NULL)
                client->events = *events;
        pthread_mutex_init(&client->lock, NULL);
        pthread_mutex_init(&client->shutdown_lock, NULL);

        /* The dispatcher inherits this mask: process signals (SIGTERM for the API) must go to a
         * thread that handles them, never interrupt the reader. */
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        int rc = pthread_create(&client->dispatcher, NULL, dispatch, client);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        if (rc != 0) {
                sbx_engine_client_free(client);
                return sbx_error_set(err, rc, "engine client: start the dispatcher thread");
        }
        client->dispatcher_running = true;
        *out = client;
        return 0;
}

void sbx_engine_client_shutdown(struct sbx_engine_client *client)
{
        pthread_mutex_lock(&client->shutdown_lock);
        pthread_mutex_lock(&client->lock);
        if (!client->dead)
                client->shutting_down = true;
        pthread_mutex_unlock(&client->lock);
        /* Wakes the dispatcher's blocked recv with end of file. */
        shutdown(client->fd, SHUT_RDWR);
        if (client->dispatcher_running) {
                pthread_join(client->dispatcher, NULL);
                client->dispatcher_running = false;
        }
        pthread_mutex_lock(&client->lock);
        client->dead = true; /* also when the dispatcher never started */
        pthread_mutex_unlock(&client->lock);
        pthread_mutex_unlock(&client->shutdown_lock);
}

void sbx_engine_client_free(struct sbx_engine_client *client)
{
        if (client == NULL)
                return;
        sbx_engine_client_shutdown(client);
        close(client->fd);
        pthread_mutex_destroy(&client->lock);
        pthread_mutex_destroy(&client->shutdown_lock);
        free(client);
}
