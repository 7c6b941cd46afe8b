/* A session worker (worker.h): one forked worker per session, holding its sandbox
 * (engine/session.h) for the session's life and serving the operations the engine forwards.
 *
 * Everything in a SESSION message's fields is checked here, field by field, as the RUN decoder
 * checks a request: the API process built it, but the engine trusts nothing it did not check. */
#define _GNU_SOURCE
#include <errno.h>
#include <jansson.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/session.h"
#include "engine/session_frame.h"
#include "engine/worker.h"
#include "model/limits.h"
#include "model/request.h"
#include "protocol/transport.h"
#include "util/cleanup.h"
#include "util/log.h"
#include "util/time.h"

/* How a session may end; the reason travels in SESSION_ENDED. */
#define END_DELETED     "deleted"
#define END_IDLE        "idle_timeout"
#define END_LIFETIME    "max_lifetime"
#define END_AGENT_GONE  "agent_died"
#define END_SHUTDOWN    "shutdown"
#define END_ENGINE_LOST "engine_lost"

struct session_worker {
        const struct sbx_worker_context *context;
        int control_fd;
        int cancel_fd;
        char session_id[SBX_EXECUTION_ID_CHARS + 1];
        struct sbx_session *session;
        uint64_t idle_timeout_us; /* 0: none */
        uint64_t lifetime_end_us; /* 0: none */
        uint64_t last_activity_us;
        bool stopping;             /* SIGTERM came during an operation: end after answering it */
        uint64_t canceled_request; /* the request of the last other run cancel taken, else 0 */
        uint64_t stream_request;   /* the streamed run's request, for its events */
        uint64_t running_request;  /* the run (or episode operation) under way, else 0 */
        bool running_canceled;     /* a cancel of running_request came */
        /* The session's own channel to the API process (handed over with the OPEN's answer),
         * or -1: operations come on it or from the engine, and each is answered where it came
         * from (reply_fd), so that a run's round trip skips the engine's loop. */
        int channel;
        int reply_fd;
};

/* Reads the signals that came (cancel_fd): SIGTERM marks the worker stopping; a run cancel
 * names its request (the signal's value): the run under way, or one that has not begun yet
 * (noted: it never starts), or one already over (dropped when the next is noted). */
static void take_signals(struct session_worker *sw)
{
        struct signalfd_siginfo info;
        while (read(sw->cancel_fd, &info, sizeof(info)) == (ssize_t)sizeof(info)) {
                if (info.ssi_signo == SIGTERM)
                        sw->stopping = true;
                else if ((int)info.ssi_signo == SBX_SESSION_WORKER_CANCEL_RUN &&
                         sw->running_request != 0 && info.ssi_ptr == sw->running_request)
                        sw->running_canceled = true;
                else if ((int)info.ssi_signo == SBX_SESSION_WORKER_CANCEL_RUN)
                        sw->canceled_request = info.ssi_ptr;
        }
}

/* Sends a SESSION_REPLY where the operation came from (or, with request_id 0, a SESSION_ENDED
 * to the engine's socket), passing passed (an fd, or -1) with it. Takes fields. */
static void reply_passing(struct session_worker *sw, uint64_t request_id, int error, json_t *fields,
                          const void *data, size_t data_len, int passed)
{
        char *text = fields != NULL ? json_dumps(fields, JSON_COMPACT) : NULL;
        json_decref(fields);
        struct sbx_message_session message = {
                .error = error,
                .fields = text != NULL ? text : "{}",
                .fields_len = text != NULL ? strlen(text) : 2,
                .data = data,
                .data_len = data_len,
        };
        memcpy(message.session_id, sw->session_id, sizeof(message.session_id));
        void *buf = NULL;
        size_t len = 0;
        struct sbx_error err = {0};
        enum sbx_message_type type =
                request_id == 0 ? SBX_MESSAGE_SESSION_ENDED : SBX_MESSAGE_SESSION_REPLY;
        if (sbx_message_encode_session(type, request_id, &message, &buf, &len, &err) < 0) {
                /* Too large (a run's output beyond the message): say so instead. */
                message.error = err.code == 0 ? EIO : err.code;
                char detail[SBX_ERROR_MESSAGE_MAX + 32];
                snprintf(detail, sizeof(detail), "{\"detail\":\"engine: %s\"}",
                         err.code == EINVAL ? "the answer is larger than a message"
                                            : "cannot encode the answer");
                message.fields = detail;
                message.fields_len = strlen(detail);
                message.data_len = 0;
                free(buf);
                buf = NULL;
                if (sbx_message_encode_session(type, request_id, &message, &buf, &len, &err) < 0) {
                        free(text);
                        return;
                }
        }
        int fd = request_id == 0 ? sw->context->api_fd : sw->reply_fd;
        if ((passed >= 0 ? sbx_message_send_passing(fd, buf, len, passed, &err)
                         : sbx_message_send(fd, buf, len, &err)) < 0)
                sbx_warn("session %s: reply: %s", sw->session_id, err.message);
        free(buf);
        free(text);
}

static void reply(struct session_worker *sw, uint64_t request_id, int error, json_t *fields,
                  const void *data, size_t data_len)
{
        reply_passing(sw, request_id, error, fields, data, data_len, -1);
}

static void reply_error(struct session_worker *sw, uint64_t request_id, const struct sbx_error *err)
{
        reply(sw, request_id, err->code > 0 && err->code < 4096 ? err->code : EIO,
              json_pack("{s:s}", "detail", err->message), NULL, 0);
}

/* ---- Checking the fields ------------------------------------------------------------------- */

static json_t *parse_fields(const struct sbx_message_session *message, struct sbx_error *err)
{
        json_error_t json_error;
        json_t *fields = json_loadb(message->fields, message->fields_len, JSON_REJECT_DUPLICATES,
                                    &json_error);
        if (fields == NULL || !json_is_object(fields)) {
                json_decref(fields);
                sbx_error_set(err, EINVAL, "engine: SESSION fields are not a JSON object");
                return NULL;
        }
        return fields;
}

/* env: an array of at most SBX_MAX_ENV "NAME=value" strings (checked again by the session). */
static int env_of(const json_t *env, const char **out, size_t *n, struct sbx_error *err)
{
        *n = 0;
        if (env == NULL)
                return 0;
        if (!json_is_array(env) || json_array_size(env) > SBX_MAX_ENV)
                return sbx_error_set(err, EINVAL, "env: not an array of at most %d", SBX_MAX_ENV);
        size_t i;
        json_t *entry;
        json_array_foreach(env, i, entry)
        {
                if (!json_is_string(entry) || !sbx_request_env_valid(json_string_value(entry)))
                        return sbx_error_set(err, EINVAL,
                                             "env[%zu]: not an entry a program may "
                                             "set",
                                             i);
                out[(*n)++] = json_string_value(entry);
        }
        return 0;
}

/* limits: {member: value} for every row of SBX_LIMITS, in member units. */
static int limits_of(const json_t *limits, struct sbx_limits *out, struct sbx_error *err)
{
        sbx_limits_default(out);
        if (!json_is_object(limits))
                return sbx_error_set(err, EINVAL, "limits: not an object");
        for (size_t i = 0; i < SBX_LIMIT_COUNT; i++) {
                const struct sbx_limit_field *field = &sbx_limit_fields[i];
                const json_t *value = json_object_get(limits, field->member);
                if (value == NULL)
                        continue;
                if (!json_is_integer(value) || json_integer_value(value) < 0)
                        return sbx_error_set(err, EINVAL, "limits.%s: not a count", field->member);
                sbx_limit_set(out, field, (uint64_t)json_integer_value(value));
        }
        const char *bad = NULL;
        if (!sbx_limits_valid(out, &bad))
                return sbx_error_set(err, EINVAL, "limits.%s: out of range", bad);
        return 0;
}

static uint64_t seconds_of(const json_t *value)
{
        return json_is_integer(value) && json_integer_value(value) > 0
                       ? (uint64_t)json_integer_value(value)
                       : 0;
}

/* ---- Opening ------------------------------------------------------------------------------- */

/* Opens the session of open's fields: by taking waiting over (a session opened ahead of time,
 * NULL for none) when it can be (*pooled says so), else a new one (waiting is closed then). */
static int open_session(struct session_worker *sw, const struct sbx_message_session *open,
                        struct sbx_session *waiting, bool *pooled, struct sbx_error *err)
{
        *pooled = false;
        int rc = -1;
        json_t *fields = parse_fields(open, err);
        if (fields == NULL)
                goto out;
        struct sbx_session_options options = {
                .language = json_string_value(json_object_get(fields, "language")),
        };
        const char *env[SBX_MAX_ENV];
        struct sbx_file files[SBX_MAX_FILES];
        const json_t *listed = json_object_get(fields, "files");
        if (limits_of(json_object_get(fields, "limits"), &options.limits, err) < 0 ||
            env_of(json_object_get(fields, "env"), env, &options.n_env, err) < 0)
                goto out;
        options.env = env;
        if (listed != NULL) {
                if (!json_is_array(listed) || json_array_size(listed) > SBX_MAX_FILES) {
                        sbx_error_set(err, EINVAL, "files: not an array of at most %d",
                                      SBX_MAX_FILES);
                        goto out;
                }
                size_t offset = 0, i;
                json_t *file;
                json_array_foreach(listed, i, file)
                {
                        const char *path = json_string_value(json_object_get(file, "path"));
                        const json_t *size = json_object_get(file, "size");
                        if (path == NULL || !sbx_request_path_valid(path) ||
                            !json_is_integer(size) || json_integer_value(size) < 0 ||
                            (uint64_t)json_integer_value(size) > open->data_len - offset) {
                                sbx_error_set(err, EINVAL, "files[%zu]: a bad path or size", i);
                                goto out;
                        }
                        files[i] = (struct sbx_file){
                                .path = path,
                                .data = open->data + offset,
                                .size = (size_t)json_integer_value(size),
                                .executable = json_is_true(json_object_get(file, "executable")),
                        };
                        offset += files[i].size;
                }
                if (offset != open->data_len) {
                        sbx_error_set(err, EINVAL, "files: %zu bytes of data left over",
                                      open->data_len - offset);
                        goto out;
                }
                options.files = files;
                options.n_files = json_array_size(listed);
        }
        uint64_t now = sbx_now_us();
        sw->idle_timeout_us = seconds_of(json_object_get(fields, "idle_timeout_s")) * 1000000;
        uint64_t lifetime = seconds_of(json_object_get(fields, "max_lifetime_s"));
        sw->lifetime_end_us = lifetime ? now + lifetime * 1000000 : 0;
        sw->last_activity_us = now;
        if (waiting != NULL) {
                struct sbx_error refusal = {0};
                if (sbx_session_adopt(waiting, &options, &refusal) == 0) {
                        sw->session = steal_pointer(&waiting);
                        *pooled = true;
                        rc = 0;
                        goto out;
                }
                /* EINVAL: what it asks, a waiting session cannot become (the engine checked,
                 * sbx_session_open_adoptable; this is the last word); anything else failed. */
                if (refusal.code == EINVAL)
                        sbx_debug("session %s: opens a sandbox of its own: %s", sw->session_id,
                                  refusal.message);
                else
                        sbx_warn("session %s: a waiting session could not be taken over (%s); "
                                 "opening one",
                                 sw->session_id, refusal.message);
                sbx_session_close(steal_pointer(&waiting));
        }
        rc = sbx_session_open(&options, &sw->session, err);
out:
        sbx_session_close(waiting);
        json_decref(fields);
        return rc;
}

/* ---- Operations ---------------------------------------------------------------------------- */

/* A streamed run's event, as a SESSION_EVENT under the run's request. */
static void send_event(void *ctx, const char *event, const json_t *payload)
{
        struct session_worker *sw = ctx;
        json_t *fields = json_pack("{s:s,s:O}", "event", event, "data", payload);
        char *text = fields != NULL ? json_dumps(fields, JSON_COMPACT) : NULL;
        json_decref(fields);
        if (text == NULL)
                return;
        struct sbx_message_session message = {.fields = text, .fields_len = strlen(text)};
        memcpy(message.session_id, sw->session_id, sizeof(message.session_id));
        void *buf = NULL;
        size_t len = 0;
        struct sbx_error err = {0};
        if (sbx_message_encode_session(SBX_MESSAGE_SESSION_EVENT, sw->stream_request, &message,
                                       &buf, &len, &err) == 0 &&
            sbx_message_send(sw->reply_fd, buf, len, &err) < 0)
                sbx_debug("session %s: event: %s", sw->session_id, err.message);
        free(buf);
        free(text);
}

/* A run's (or an episode operation's) timeout_ms: absent, or 1 ms to a day. */
static bool timeout_valid(const json_t *timeout)
{
        return timeout == NULL || (json_is_integer(timeout) && json_integer_value(timeout) >= 1 &&
                                   (uint64_t)json_integer_value(timeout) <= SBX_LIMIT_DAY_MS);
}

/* Asked by a run when a signal came: a cancel of this run, or SIGTERM, interrupts it; a cancel
 * meant for an earlier one (its client left just after its end) does not. */
static bool run_canceled(void *ctx)
{
        struct session_worker *sw = ctx;
        take_signals(sw);
        return sw->stopping || sw->running_canceled;
}

/* Runs run and answers its request with the result. A cancel meant for an earlier run must not
 * cancel this one; one for this run that came before its message did (its caller gave up at
 * once) means it never starts. */
static void run_and_reply(struct session_worker *sw, uint64_t request_id,
                          struct sbx_session_run_request *run)
{
        struct sbx_error err = {0};
        take_signals(sw);
        if (sw->canceled_request == request_id) {
                sbx_error_set(&err, ECANCELED, "run canceled before it began");
                reply_error(sw, request_id, &err);
                return;
        }
        run->canceled = run_canceled;
        run->cancel_ctx = sw;
        sw->running_request = request_id;
        sw->running_canceled = false;
        json_t *result = sbx_session_run(sw->session, run, &err);
        sw->running_request = 0;
        take_signals(sw);
        if (result == NULL)
                reply_error(sw, request_id, &err);
        else
                reply(sw, request_id, 0, result, NULL, 0);
}

static void do_run(struct session_worker *sw, uint64_t request_id, const json_t *fields,
                   const struct sbx_message_session *message)
{
        struct sbx_error err = {0};
        const json_t *code = json_object_get(fields, "code");
        const json_t *timeout = json_object_get(fields, "timeout_ms");
        const char *env[SBX_MAX_ENV];
        size_t n_env = 0;
        if (!json_is_string(code) || json_string_length(code) > SBX_MAX_CODE_BYTES ||
            message->data_len > SBX_MAX_STDIN_BYTES || !timeout_valid(timeout) ||
            env_of(json_object_get(fields, "env"), env, &n_env, &err) < 0) {
                if (err.code == 0)
                        sbx_error_set(&err, EINVAL, "engine: a malformed run");
                reply_error(sw, request_id, &err);
                return;
        }
        const char *id = json_string_value(json_object_get(fields, "id"));
        if (id != NULL && !sbx_execution_id_valid(id)) {
                sbx_error_set(&err, EINVAL, "engine: a run id that is not an id");
                reply_error(sw, request_id, &err);
                return;
        }
        struct sbx_session_run_request run = {
                .id = id,
                .code = json_string_value(code),
                .code_size = json_string_length(code),
                .stdin_data = message->data,
                .stdin_size = message->data_len,
                .env = env,
                .n_env = n_env,
                .timeout_ms = timeout ? (uint64_t)json_integer_value(timeout) : 0,
                .not_after_us = sw->lifetime_end_us, /* the lifetime holds during a run too */
                .cancel_fd = sw->cancel_fd,
                .on_event = json_is_true(json_object_get(fields, "stream")) ? send_event : NULL,
                .event_ctx = sw,
        };
        sw->stream_request = request_id;
        run_and_reply(sw, request_id, &run);
}

/* The most operations one batch carries (the agent's MAX_ENVS). */
#define EPISODE_MAX_BATCH 256

/* Whether args are what an episode's operation takes: reset {entrypoint, env_class, seed,
 * options}, step {action}, close {}, each with an optional index; batch {ops: [those, each with
 * its "op"]}. The agent checks their values again. */
static bool episode_args_valid(const char *operation, const json_t *args, bool in_batch)
{
        if (!json_is_object(args))
                return false;
        if (strcmp(operation, "batch") == 0) {
                const json_t *ops = json_object_get(args, "ops");
                if (in_batch || json_object_size(args) != 1 || !json_is_array(ops) ||
                    json_array_size(ops) > EPISODE_MAX_BATCH)
                        return false;
                size_t i;
                const json_t *op;
                json_array_foreach(ops, i, op)
                {
                        const char *name = json_string_value(json_object_get(op, "op"));
                        if (!sbx_session_episode_op(name) || !episode_args_valid(name, op, true))
                                return false;
                }
                return true;
        }
        const char *key;
        const json_t *value;
        json_object_foreach((json_t *)args, key, value)
        {
                bool known = (in_batch && strcmp(key, "op") == 0) ||
                             (strcmp(key, "index") == 0 && json_is_integer(value) &&
                              json_integer_value(value) >= 0 &&
                              json_integer_value(value) < EPISODE_MAX_BATCH);
                if (strcmp(operation, "reset") == 0) {
                        known = known ||
                                (strcmp(key, "entrypoint") == 0 && json_is_string(value) &&
                                 sbx_request_path_valid(json_string_value(value))) ||
                                (strcmp(key, "env_class") == 0 &&
                                 (json_is_null(value) || json_is_string(value))) ||
                                (strcmp(key, "seed") == 0 &&
                                 (json_is_null(value) || json_is_integer(value))) ||
                                strcmp(key, "options") == 0;
                } else if (strcmp(operation, "step") == 0) {
                        known = known || strcmp(key, "action") == 0;
                }
                if (!known)
                        return false;
        }
        return strcmp(operation, "reset") != 0 ||
               json_is_string(json_object_get(args, "entrypoint"));
}

/* An episode's reset, step or close: a run of the environment's method, answered as a run. */
static void do_episode(struct session_worker *sw, uint64_t request_id, const json_t *fields)
{
        struct sbx_error err = {0};
        const char *operation = json_string_value(json_object_get(fields, "operation"));
        const json_t *args = json_object_get(fields, "args");
        const json_t *timeout = json_object_get(fields, "timeout_ms");
        if (!sbx_session_episode_op(operation) || !episode_args_valid(operation, args, false) ||
            !timeout_valid(timeout)) {
                sbx_error_set(&err, EINVAL, "engine: a malformed episode operation");
                reply_error(sw, request_id, &err);
                return;
        }
        struct sbx_session_run_request run = {
                .op = operation,
                .op_fields = args,
                .code = "",
                .timeout_ms = timeout ? (uint64_t)json_integer_value(timeout) : 0,
                .not_after_us = sw->lifetime_end_us,
                .cancel_fd = sw->cancel_fd,
        };
        run_and_reply(sw, request_id, &run);
}

static void do_file(struct session_worker *sw, uint64_t request_id, uint32_t op,
                    const json_t *fields, const struct sbx_message_session *message)
{
        struct sbx_error err = {0};
        const char *path = json_string_value(json_object_get(fields, "path"));
        if (path == NULL) {
                sbx_error_set(&err, EINVAL, "path: not a string");
                reply_error(sw, request_id, &err);
                return;
        }
        switch (op) {
        case SBX_SESSION_PUT: {
                const json_t *mode = json_object_get(fields, "mode");
                if (sbx_session_put(sw->session, path, message->data, message->data_len,
                                    json_is_integer(mode) ? (unsigned)json_integer_value(mode)
                                                          : 0644,
                                    &err) < 0)
                        reply_error(sw, request_id, &err);
                else
                        reply(sw, request_id, 0,
                              json_pack("{s:I}", "size", (json_int_t)message->data_len), NULL, 0);
                return;
        }
        case SBX_SESSION_GET: {
                uint64_t max = seconds_of(json_object_get(fields, "max_size"));
                if (max == 0 || max > SBX_MESSAGE_MAX_SESSION_DATA)
                        max = SBX_MESSAGE_MAX_SESSION_DATA;
                void *data = NULL;
                size_t size = 0;
                if (sbx_session_get(sw->session, path, (size_t)max, &data, &size, &err) < 0)
                        reply_error(sw, request_id, &err);
                else
                        reply(sw, request_id, 0, json_pack("{s:I}", "size", (json_int_t)size), data,
                              size);
                free(data);
                return;
        }
        case SBX_SESSION_LIST: {
                json_t *entries = sbx_session_list(sw->session, path, &err);
                if (entries == NULL)
                        reply_error(sw, request_id, &err);
                else
                        reply(sw, request_id, 0, json_pack("{s:o}", "entries", entries), NULL, 0);
                return;
        }
        default:
                if (sbx_session_delete(sw->session, path, &err) < 0)
                        reply_error(sw, request_id, &err);
                else
                        reply(sw, request_id, 0, json_object(), NULL, 0);
                return;
        }
}

/* One forwarded message. Returns the reason the session ends with, or NULL to go on; *closer
 * is set to the request to answer after the end (CLOSE). */
static const char *serve_one(struct session_worker *sw, const void *buf, size_t len,
                             uint64_t *closer)
{
        struct sbx_message message;
        struct sbx_error err = {0};
        if (sbx_message_decode(buf, len, &message, &err) < 0 ||
            message.header.type != SBX_MESSAGE_SESSION ||
            strcmp(message.body.session.session_id, sw->session_id) != 0) {
                sbx_warn("session %s: dropped a forwarded message: %s", sw->session_id,
                         err.code ? err.message : "not this session's");
                return NULL;
        }
        uint64_t request_id = message.header.request_id;
        const struct sbx_message_session *session = &message.body.session;
        if (session->op == SBX_SESSION_CLOSE) {
                *closer = request_id;
                return END_DELETED;
        }
        if (session->op == SBX_SESSION_OPEN) {
                sbx_error_set(&err, EEXIST, "engine: the session is open already");
                reply_error(sw, request_id, &err);
                return NULL;
        }
        if (session->op == SBX_SESSION_CANCEL) {
                /* The engine's to signal (a run in progress reads no messages); unanswered. */
                sbx_warn("session %s: dropped a CANCEL that was sent to it", sw->session_id);
                return NULL;
        }
        json_t *fields = parse_fields(session, &err);
        if (fields == NULL) {
                reply_error(sw, request_id, &err);
                return NULL;
        }
        if (session->op == SBX_SESSION_RUN)
                do_run(sw, request_id, fields, session);
        else if (session->op == SBX_SESSION_EPISODE)
                do_episode(sw, request_id, fields);
        else
                do_file(sw, request_id, session->op, fields, session);
        json_decref(fields);
        sw->last_activity_us = sbx_now_us();
        if (!sbx_session_alive(sw->session))
                return END_AGENT_GONE;
        return sw->stopping ? END_SHUTDOWN : NULL;
}

/* Waits for the next message, from the engine or on the channel, or the end. */
static const char *serve(struct session_worker *sw, uint64_t *closer)
{
        for (;;) {
                uint64_t now = sbx_now_us();
                uint64_t wake = UINT64_MAX;
                if (sw->idle_timeout_us != 0) {
                        uint64_t idle_end = sw->last_activity_us + sw->idle_timeout_us;
                        if (now >= idle_end)
                                return END_IDLE;
                        wake = idle_end;
                }
                if (sw->lifetime_end_us != 0) {
                        if (now >= sw->lifetime_end_us)
                                return END_LIFETIME;
                        if (sw->lifetime_end_us < wake)
                                wake = sw->lifetime_end_us;
                }
                struct pollfd fds[3] = {{.fd = sw->control_fd, .events = POLLIN},
                                        {.fd = sw->cancel_fd, .events = POLLIN},
                                        {.fd = sw->channel, .events = POLLIN}};
                int timeout = wake == UINT64_MAX ? -1 : (int)((wake - now + 999) / 1000);
                int ready = poll(fds, 3, timeout);
                if (ready < 0 && errno != EINTR)
                        return END_ENGINE_LOST;
                if (ready <= 0)
                        continue;
                if (fds[1].revents) {
                        take_signals(sw);
                        if (sw->stopping)
                                return END_SHUTDOWN;
                }
                /* The engine first: a CLOSE waits for no run the channel has queued. */
                int from = fds[0].revents ? sw->control_fd : fds[2].revents ? sw->channel : -1;
                if (from < 0)
                        continue;
                void *buf = NULL;
                size_t len = 0;
                struct sbx_error err = {0};
                int rc = sbx_message_receive(from, &buf, &len, &err);
                if (from == sw->channel && (rc == 0 || (rc < 0 && !sbx_message_dropped(&err)))) {
                        /* The API process let the channel go: the engine's way is left. */
                        close(sw->channel);
                        sw->channel = -1;
                        continue;
                }
                if (rc == 0 || (rc < 0 && !sbx_message_dropped(&err)))
                        return END_ENGINE_LOST;
                if (rc < 0)
                        continue;
                sw->reply_fd = from == sw->channel ? sw->channel : sw->context->api_fd;
                const char *end = serve_one(sw, buf, len, closer);
                free(buf);
                if (end != NULL)
                        return end;
        }
}

bool sbx_session_open_adoptable(const struct sbx_message_session *open, char *language, size_t size)
{
        struct sbx_error ignored = {0};
        json_t *fields = parse_fields(open, &ignored);
        const char *named = json_string_value(json_object_get(fields, "language"));
        const char *env[SBX_MAX_ENV];
        struct sbx_session_options options = {0};
        bool adoptable =
                named != NULL && strlen(named) < size &&
                limits_of(json_object_get(fields, "limits"), &options.limits, &ignored) == 0 &&
                env_of(json_object_get(fields, "env"), env, &options.n_env, &ignored) == 0 &&
                sbx_session_adoptable(&options);
        if (adoptable)
                snprintf(language, size, "%s", named);
        json_decref(fields);
        return adoptable;
}

/* The worker's signals: SIGTERM ends the session, SBX_SESSION_WORKER_CANCEL_RUN cancels a run,
 * both read from one signalfd (sw->cancel_fd, which a run takes as its cancel fd: take_signals
 * tells them apart). False when it cannot be had. */
static bool session_signals(struct session_worker *sw)
{
        sigset_t cancel;
        sigemptyset(&cancel);
        sigaddset(&cancel, SIGTERM);
        sigaddset(&cancel, SBX_SESSION_WORKER_CANCEL_RUN);
        if (sw->cancel_fd >= 0 &&
            (sigprocmask(SIG_BLOCK, &cancel, NULL) < 0 ||
             signalfd(sw->cancel_fd, &cancel, SFD_NONBLOCK | SFD_CLOEXEC) < 0)) {
                close(sw->cancel_fd);
                sw->cancel_fd = -1;
        }
        return sw->cancel_fd >= 0;
}

/* Opens the session of open (taking waiting over when it can), answers request_id, serves it to
 * its end, and exits. */
static _Noreturn void open_serve_and_exit(struct session_worker *sw, uint64_t request_id,
                                          const struct sbx_message_session *open,
                                          struct sbx_session *waiting)
{
        memcpy(sw->session_id, open->session_id, sizeof(sw->session_id));
        struct sbx_error err = {0};
        bool pooled = false;
        if (sw->cancel_fd < 0 || open_session(sw, open, waiting, &pooled, &err) < 0) {
                if (sw->cancel_fd < 0)
                        sbx_error_set(&err, errno, "engine: worker: cancel signalfd");
                sbx_worker_say_done(sw->control_fd);
                reply_error(sw, request_id, &err);
                _exit(0);
        }
        /* Its channel: the API process's end goes with the answer; without one (no socket
         * could be made), every operation comes through the engine. */
        int pair[2] = {-1, -1};
        if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) < 0)
                sbx_warn("session %s: no channel of its own: socketpair: %s", sw->session_id,
                         strerror(errno));
        sw->channel = pair[0];
        reply_passing(sw, request_id, 0, json_pack("{s:b}", "pooled", pooled), NULL, 0, pair[1]);
        if (pair[1] >= 0)
                close(pair[1]);
        /* Idle from its answer on: an open that took long (a slow machine) is not idle time. */
        sw->last_activity_us = sbx_now_us();
        sbx_info("session %s: open (request %llu%s)", sw->session_id,
                 (unsigned long long)request_id, pooled ? ", taken from its pool" : "");

        uint64_t closer = 0;
        const char *reason = serve(sw, &closer);
        json_t *usage = NULL;
        if (sbx_session_evidence(sw->session, &usage, &err) < 0)
                usage = json_null();
        sbx_session_close(sw->session);
        sbx_worker_say_done(sw->control_fd);
        sbx_info("session %s: ended (%s)", sw->session_id, reason);
        json_t *ended = json_pack("{s:s,s:o}", "reason", reason, "evidence", usage);
        if (closer != 0)
                reply(sw, closer, 0, json_incref(ended), NULL, 0);
        reply(sw, 0, 0, ended, NULL, 0);
        _exit(0);
}

_Noreturn void sbx_session_worker_run_and_exit(const struct sbx_worker_context *context,
                                               int control_fd, uint64_t request_id,
                                               const struct sbx_message_session *open)
{
        struct session_worker sw = {
                .context = context,
                .control_fd = control_fd,
                .cancel_fd = sbx_worker_begin(context, control_fd, NULL),
                .channel = -1,
                .reply_fd = context->api_fd,
        };
        session_signals(&sw);
        open_serve_and_exit(&sw, request_id, open, NULL);
}

_Noreturn void sbx_session_pool_worker_run_and_exit(const struct sbx_worker_context *context,
                                                    int control_fd, const char *language)
{
        struct session_worker sw = {
                .context = context,
                .control_fd = control_fd,
                .cancel_fd = sbx_worker_begin(context, control_fd, NULL),
                .channel = -1,
                .reply_fd = context->api_fd,
        };
        struct sbx_session *waiting = NULL;
        struct sbx_error err = {0};
        if (!session_signals(&sw) || sbx_session_open_waiting(language, &waiting, &err) < 0) {
                sbx_warn("session pool worker (%s): %s", language,
                         sw.cancel_fd < 0 ? "cancel signalfd" : err.message);
                _exit(SBX_WORKER_EXIT_NO_RESULT);
        }
        struct sbx_message message;
        int assigned = sbx_worker_await_assignment(control_fd, sw.cancel_fd, &message);
        if (assigned <= 0 || message.header.type != SBX_MESSAGE_SESSION ||
            message.body.session.op != SBX_SESSION_OPEN) {
                /* Retired, or the engine is gone: nothing to answer. */
                sbx_session_close(waiting);
                _exit(assigned < 0 ? SBX_WORKER_EXIT_NO_RESULT : 0);
        }
        open_serve_and_exit(&sw, message.header.request_id, &message.body.session, waiting);
}
