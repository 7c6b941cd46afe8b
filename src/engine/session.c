/* Sessions (session.h): the engine's side of the session agent. */
#define _GNU_SOURCE
#include "engine/session.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/session_frame.h"
#include "model/language.h"
#include "model/result_json.h"
#include "protocol/protocol.h"
#include "sandbox/sandbox.h"
#include "util/buffer.h"
#include "util/log.h"
#include "util/time.h"

/* The agent's source, compiled in (meson: guest/session_agent.py). */
extern const char sbx_session_agent_source[];

/* How long the agent may take to answer a file operation. */
#define REPLY_TIMEOUT_MS 30000

/* How much one drain of an output pipe reads, and how many frames one run may send (a flood of
 * tiny frames costs the engine, outside the sandbox's cgroup, more than it costs the agent). */
#define DRAIN_MAX_BYTES    (1024u * 1024u)
#define MAX_FRAMES_PER_RUN 100000u

struct sbx_session {
        const struct sbx_backend *backend;
        struct sbx_sandbox *sandbox;
        struct sbx_spec spec;
        const char *argv[6];
        char language[16];
        /* The environment: the base one, then the session's entries (owned copies). */
        char **env_owned;
        const char **envp;
        int agent_fd, stdout_fd, stderr_fd; /* the sandbox's: not closed here */
        struct sbx_session_reader reader;
        /* The counters as the last run ended: an episode's operation starts from them instead
         * of reading them again (its delta then includes what ran between operations). */
        struct sbx_evidence last_evidence;
        bool last_evidence_known;
        bool dead;
        char dead_reason[SBX_ERROR_MESSAGE_MAX];
};

bool sbx_session_language_supported(const char *language)
{
        /* By its name: a session's language is named exactly as it is answered. */
        const struct sbx_language *row = sbx_language_find(language);
        return row != NULL && row->sessions && strcmp(row->name, language) == 0;
}

bool sbx_session_alive(const struct sbx_session *session)
{
        return session != NULL && !session->dead;
}

static int mark_dead(struct sbx_session *session, const struct sbx_error *why,
                     struct sbx_error *err)
{
        if (!session->dead) {
                session->dead = true;
                snprintf(session->dead_reason, sizeof(session->dead_reason), "%s", why->message);
        }
        return sbx_error_set(err, EPIPE, "session: the agent is gone: %s", session->dead_reason);
}

/* Writes a whole frame to the agent (the agent reads as it goes). */
static int send_frame(struct sbx_session *session, const json_t *header, const void *payload,
                      size_t payload_size, struct sbx_error *err)
{
        if (session->dead)
                return sbx_error_set(err, EPIPE, "session: the agent is gone: %s",
                                     session->dead_reason);
        void *frame = NULL;
        size_t len = 0;
        if (sbx_session_frame_encode(header, payload, payload_size, &frame, &len, err) < 0)
                return -1;
        size_t done = 0;
        int rc = 0;
        uint64_t deadline = sbx_now_us() + (uint64_t)REPLY_TIMEOUT_MS * 1000;
        while (done < len) {
                ssize_t n = write(session->agent_fd, (const char *)frame + done, len - done);
                if (n > 0) {
                        done += (size_t)n;
                        continue;
                }
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
                        uint64_t now = sbx_now_us();
                        struct pollfd pfd = {.fd = session->agent_fd, .events = POLLOUT};
                        if (now >= deadline ||
                            poll(&pfd, 1, (int)((deadline - now) / 1000) + 1) == 0) {
                                struct sbx_error why = {0};
                                sbx_error_set(&why, ETIMEDOUT, "it stopped reading its channel");
                                rc = mark_dead(session, &why, err);
                                break;
                        }
                        continue;
                }
                struct sbx_error why = {0};
                sbx_error_set(&why, errno, "write its channel");
                rc = mark_dead(session, &why, err);
                break;
        }
        free(frame);
        return rc;
}

/* The next frame from the agent, waiting up to deadline_us (0: not at all). 1 with a frame
 * (header: a new reference; the payload until consume), 0 at the deadline, -1 with err (and the
 * session dead) when the channel ended or broke its bounds. */
static int receive_frame(struct sbx_session *session, uint64_t deadline_us, json_t **header,
                         const uint8_t **payload, size_t *payload_size, struct sbx_error *err)
{
        for (;;) {
                struct sbx_error why = {0};
                int rc = sbx_session_reader_next(&session->reader, header, payload, payload_size,
                                                 &why);
                if (rc != 0)
                        return rc > 0 ? 1 : mark_dead(session, &why, err);
                uint64_t now = sbx_now_us();
                if (now >= deadline_us)
                        return 0;
                struct pollfd pfd = {.fd = session->agent_fd, .events = POLLIN};
                int ready = poll(&pfd, 1, (int)((deadline_us - now + 999) / 1000));
                if (ready < 0 && errno != EINTR)
                        return sbx_error_set(err, errno, "session: poll");
                if (ready <= 0)
                        continue;
                rc = sbx_session_reader_fill(&session->reader, session->agent_fd, &why);
                if (rc == 0)
                        sbx_error_set(&why, EPIPE, "its channel ended");
                if (rc <= 0)
                        return mark_dead(session, &why, err);
        }
}

static const char *op_of(const json_t *header)
{
        const char *op = json_string_value(json_object_get(header, "op"));
        return op != NULL ? op : "";
}

/* Waits for the agent's "ready" (at open, after a restart). */
static int wait_ready(struct sbx_session *session, struct sbx_error *err)
{
        uint64_t deadline = sbx_now_us() + (uint64_t)SBX_SESSION_READY_TIMEOUT_MS * 1000;
        for (;;) {
                json_t *header = NULL;
                const uint8_t *payload;
                size_t size;
                int rc = receive_frame(session, deadline, &header, &payload, &size, err);
                if (rc < 0)
                        return -1;
                if (rc == 0) {
                        struct sbx_error why = {0};
                        sbx_error_set(&why, ETIMEDOUT, "it did not become ready within %d ms",
                                      SBX_SESSION_READY_TIMEOUT_MS);
                        return mark_dead(session, &why, err);
                }
                bool ready = strcmp(op_of(header), "ready") == 0;
                json_decref(header);
                sbx_session_reader_consume(&session->reader);
                if (ready)
                        return 0;
                /* An "ended" before it: the interpreter that was asked to go went. */
        }
}

static char **copy_env(const char *const *env, size_t n)
{
        char **copy = calloc(n + 1, sizeof(*copy));
        if (copy == NULL)
                return NULL;
        for (size_t i = 0; i < n; i++) {
                copy[i] = strdup(env[i]);
                if (copy[i] == NULL) {
                        for (size_t j = 0; j < i; j++)
                                free(copy[j]);
                        free(copy);
                        return NULL;
                }
        }
        return copy;
}

int sbx_session_open(const struct sbx_session_options *options, struct sbx_session **out,
                     struct sbx_error *err)
{
        if (!sbx_session_language_supported(options->language))
                return sbx_error_set(err, EINVAL, "sessions run python or bash, not '%s'",
                                     options->language ? options->language : "");
        const struct sbx_backend *backend = sbx_backend_find(options->backend);
        if (backend == NULL || backend->session_fds == NULL || backend->signal_program == NULL)
                return sbx_error_set(err, EINVAL, "backend '%s' has no sessions",
                                     options->backend ? options->backend : "");
        for (size_t i = 0; i < options->n_env; i++)
                if (!sbx_request_env_valid(options->env[i]))
                        return sbx_error_set(err, EINVAL,
                                             "env[%zu]: not a NAME=value entry "
                                             "sandboxd lets a program set",
                                             i);
        struct sbx_session *session = calloc(1, sizeof(*session));
        if (session == NULL)
                return sbx_error_set(err, ENOMEM, "allocate a session");
        session->agent_fd = session->stdout_fd = session->stderr_fd = -1;
        session->backend = backend;
        snprintf(session->language, sizeof(session->language), "%s", options->language);
        session->env_owned = copy_env(options->env, options->n_env);
        size_t base = SBX_REQUEST_BASE_ENVIRONMENT_SIZE;
        session->envp = calloc(base + options->n_env + 1, sizeof(*session->envp));
        if (session->env_owned == NULL || session->envp == NULL) {
                sbx_session_close(session);
                return sbx_error_set(err, ENOMEM, "allocate a session's environment");
        }
        for (size_t i = 0; i < base; i++)
                session->envp[i] = sbx_request_base_environment[i];
        for (size_t i = 0; i < options->n_env; i++)
                session->envp[base + i] = session->env_owned[i];

        const struct sbx_language *python = sbx_language_find("python");
        /* -P: no working directory first on sys.path (python3 -c would put it there), so that
         * a file of the workspace cannot stand in for a module the agent imports. */
        session->argv[0] = python->interpreter;
        session->argv[1] = "-P";
        session->argv[2] = "-c";
        session->argv[3] = sbx_session_agent_source;
        session->argv[4] = session->language;
        session->argv[5] = NULL;
        session->spec = (struct sbx_spec){
                .argv = session->argv,
                .envp = session->envp,
                .files = options->files,
                .n_files = options->n_files,
                .limits = options->limits,
                .network = SBX_NETWORK_NONE,
                .agent = true,
                .session = true,
                .cancel_fd = -1,
        };
        /* RLIMIT_CPU counts a process's whole life: the interpreter lives for many runs. A
         * run's CPU is a delta of the cgroup's counter instead. */
        session->spec.limits.cpu_ms = 0;

        int fds[3];
        if (backend->create(&session->spec, &session->sandbox, err) < 0 ||
            backend->start(session->sandbox, err) < 0 ||
            backend->session_fds(session->sandbox, fds, err) < 0) {
                sbx_session_close(session);
                return -1;
        }
        /* Delivered by the sandbox's setup; not kept past it. */
        session->spec.files = NULL;
        session->spec.n_files = 0;
        session->agent_fd = fds[0];
        session->stdout_fd = fds[1];
        session->stderr_fd = fds[2];
        if (wait_ready(session, err) < 0) {
                sbx_error_prefix(err, "session: start the agent");
                sbx_session_close(session);
                return -1;
        }
        *out = session;
        return 0;
}

int sbx_session_open_waiting(const char *language, struct sbx_session **out, struct sbx_error *err)
{
        struct sbx_session_options options = {.language = language};
        sbx_limits_default(&options.limits);
        options.limits.memory_bytes = 0;
        options.limits.pids = 0;
        options.limits.open_files = 0;
        return sbx_session_open(&options, out, err);
}

bool sbx_session_adoptable(const struct sbx_session_options *options)
{
        struct sbx_limits defaults;
        sbx_limits_default(&defaults);
        const struct sbx_limits *wanted = &options->limits;
        return options->n_env == 0 && wanted->disk_bytes == defaults.disk_bytes &&
               (wanted->memory_bytes == 0 ||
                wanted->memory_bytes >= SBX_SESSION_ADOPT_MIN_MEMORY_BYTES) &&
               (wanted->pids == 0 || wanted->pids >= SBX_SESSION_ADOPT_MIN_PIDS);
}

int sbx_session_adopt(struct sbx_session *session, const struct sbx_session_options *options,
                      struct sbx_error *err)
{
        const struct sbx_limits *wanted = &options->limits;
        if (strcmp(options->language ? options->language : "", session->language) != 0 ||
            !sbx_session_adoptable(options) || session->backend->session_limits == NULL)
                return sbx_error_set(err, EINVAL, "session: this one cannot be taken over");
        /* Nothing may have happened while it waited (its interpreter ended and came back, say):
         * a frame waiting unread would be taken for the first run's. */
        struct pollfd unread = {.fd = session->agent_fd, .events = POLLIN};
        if (!sbx_session_alive(session) || poll(&unread, 1, 0) != 0)
                return sbx_error_set(err, EPIPE, "session: the waiting agent is not as it was");
        struct sbx_limits limits = *wanted;
        limits.cpu_ms = 0;                    /* as sbx_session_open: a run's CPU is a delta */
        session->last_evidence_known = false; /* the counters start again from here */
        if (session->backend->session_limits(session->sandbox, &limits, err) < 0)
                return -1;
        session->spec.limits = limits;
        for (size_t i = 0; i < options->n_files; i++) {
                const struct sbx_file *file = &options->files[i];
                if (sbx_session_put(session, file->path, file->data, file->size,
                                    file->executable ? 0755 : 0644, err) < 0)
                        return sbx_error_prefix(err, "session: files[%zu]", i);
        }
        return 0;
}

void sbx_session_close(struct sbx_session *session)
{
        if (session == NULL)
                return;
        if (session->sandbox != NULL)
                session->backend->destroy(session->sandbox);
        sbx_session_reader_free(&session->reader);
        if (session->env_owned != NULL)
                for (size_t i = 0; session->env_owned[i] != NULL; i++)
                        free(session->env_owned[i]);
        free(session->env_owned);
        free(session->envp);
        free(session);
}

/* ---- Runs ---- */

struct run_state {
        struct sbx_buffer out, err;
        json_t *results;
        size_t results_bytes;
        bool results_truncated;
        json_t *error;     /* the agent's {name, value, traceback} */
        json_t *exit_code; /* bash: the cell's status */
        json_t *execution_count;
        json_t *value;  /* an episode operation's answer */
        bool done;      /* the agent said "done" */
        bool ended;     /* the interpreter ended ("ended") */
        bool restarted; /* ... and a new one is ready */
        bool timed_out, canceled, output_limit;
        uint64_t interrupted_us; /* when SIGINT went out; 0: not yet */
        bool restart_asked;
        /* Streaming (request->on_event): how much of each stream went out, and when. */
        const struct sbx_session_run_request *request;
        size_t out_sent, err_sent;
        uint64_t flushed_us;
        unsigned frames; /* frames of this run so far */
};

static void stream_one(struct run_state *state, const char *event, const struct sbx_buffer *buf,
                       size_t *sent, bool force)
{
        size_t end = force ? buf->len : sbx_utf8_whole_prefix(buf->data, buf->len);
        if (end <= *sent)
                return;
        json_t *payload = json_pack("{s:o}", "text",
                                    sbx_json_string_from_bytes(buf->data + *sent, end - *sent));
        if (payload != NULL)
                state->request->on_event(state->request->event_ctx, event, payload);
        json_decref(payload);
        *sent = end;
}

/* Sends the output not streamed yet: all of it when forced, else when a batch is full or the
 * last one went out SBX_SESSION_STREAM_DELAY_MS ago. */
static void stream_output(struct run_state *state, bool force)
{
        if (state->request->on_event == NULL)
                return;
        size_t pending = (state->out.len - state->out_sent) + (state->err.len - state->err_sent);
        uint64_t now = sbx_now_us();
        if (pending == 0 || (!force && pending < SBX_SESSION_STREAM_BATCH &&
                             now - state->flushed_us < SBX_SESSION_STREAM_DELAY_MS * 1000ull))
                return;
        stream_one(state, "stdout", &state->out, &state->out_sent, force);
        stream_one(state, "stderr", &state->err, &state->err_sent, force);
        state->flushed_us = now;
}

/* Whether output waits to be streamed (the loop then wakes for it). */
static bool stream_pending(const struct run_state *state)
{
        return state->request->on_event != NULL &&
               (state->out.len > state->out_sent || state->err.len > state->err_sent);
}

static void run_state_free(struct run_state *state)
{
        sbx_buffer_free(&state->out);
        sbx_buffer_free(&state->err);
        json_decref(state->results);
        json_decref(state->error);
        json_decref(state->exit_code);
        json_decref(state->execution_count);
        json_decref(state->value);
}

/* Reads what a stream pipe has into buf (past the cap: counted as overflow). 0 at end of file
 * or EAGAIN; the pipe's end means the agent is gone, which the channel reports. */
static void drain(int fd, struct sbx_buffer *buf)
{
        char chunk[16384];
        /* At most DRAIN_MAX_BYTES a call: writers that keep a pipe from ever emptying must not
         * keep the loop from its deadlines (the next call takes the rest). */
        for (size_t taken = 0; taken < DRAIN_MAX_BYTES; taken += sizeof(chunk)) {
                ssize_t n = read(fd, chunk, sizeof(chunk));
                if (n > 0) {
                        if (sbx_buffer_append(buf, chunk, (size_t)n) < 0)
                                return;
                        continue;
                }
                if (n < 0 && errno == EINTR)
                        continue;
                return;
        }
}

/* A MIME bundle as the agent sent it: an object of MIME type to a string (or, for JSON types,
 * any JSON value). */
static bool bundle_valid(const json_t *bundle)
{
        if (!json_is_object(bundle) || json_object_size(bundle) == 0 ||
            json_object_size(bundle) > 16)
                return false;
        const char *mime;
        json_t *value;
        json_object_foreach((json_t *)bundle, mime, value)
        {
                if (strlen(mime) > 128 || strchr(mime, '/') == NULL)
                        return false;
                if (!json_is_string(value) && strstr(mime, "json") == NULL)
                        return false;
        }
        return true;
}

static bool error_valid(const json_t *error)
{
        if (json_is_null(error))
                return true;
        if (!json_is_object(error) || !json_is_string(json_object_get(error, "name")) ||
            !json_is_string(json_object_get(error, "value")))
                return false;
        const json_t *traceback = json_object_get(error, "traceback");
        if (!json_is_array(traceback) || json_array_size(traceback) > 1000)
                return false;
        size_t i;
        json_t *line;
        json_array_foreach(traceback, i, line) if (!json_is_string(line)) return false;
        return true;
}

/* One frame of a run. Returns -1 with err (session dead) for a frame that does not belong. */
static int run_frame(struct sbx_session *session, struct run_state *state, json_t *header,
                     struct sbx_error *err)
{
        const char *op = op_of(header);
        if (++state->frames > MAX_FRAMES_PER_RUN) {
                struct sbx_error why = {0};
                sbx_error_set(&why, EPROTO, "over %u frames in one run", MAX_FRAMES_PER_RUN);
                return mark_dead(session, &why, err);
        }
        if (strcmp(op, "display") == 0) {
                json_t *bundle = json_object_get(header, "bundle");
                if (state->request->op != NULL)
                        return 0; /* an episode's answer is its value: displays are dropped */
                if (!bundle_valid(bundle)) {
                        struct sbx_error why = {0};
                        sbx_error_set(&why, EPROTO, "a malformed display frame");
                        return mark_dead(session, &why, err);
                }
                char *text = json_dumps(bundle, JSON_COMPACT);
                size_t size = text != NULL ? strlen(text) : 0;
                free(text);
                if (json_array_size(state->results) >= SBX_SESSION_MAX_RESULTS ||
                    state->results_bytes + size > SBX_SESSION_MAX_RESULTS_BYTES) {
                        state->results_truncated = true;
                        return 0;
                }
                state->results_bytes += size;
                json_array_append(state->results, bundle);
                if (state->request->on_event != NULL) {
                        stream_output(state, true); /* what was printed before it first */
                        state->request->on_event(state->request->event_ctx, "result", bundle);
                }
                return 0;
        }
        if (strcmp(op, "done") == 0) {
                json_t *error = json_object_get(header, "error");
                json_t *exit_code = json_object_get(header, "exit_code");
                json_t *count = json_object_get(header, "execution_count");
                if (!error_valid(error) ||
                    !(json_is_null(exit_code) || json_is_integer(exit_code)) ||
                    !json_is_integer(count)) {
                        struct sbx_error why = {0};
                        sbx_error_set(&why, EPROTO, "a malformed done frame");
                        return mark_dead(session, &why, err);
                }
                state->error = json_is_null(error) ? NULL : json_incref(error);
                state->exit_code = json_is_null(exit_code) ? NULL : json_incref(exit_code);
                state->execution_count = json_incref(count);
                json_t *value = json_object_get(header, "value");
                size_t size = value != NULL ? json_dumpb(value, NULL, 0, JSON_COMPACT) : 0;
                /* A batch's value is its operations' answers, bounded by the frame's header. */
                if (state->request->op != NULL && strcmp(state->request->op, "batch") != 0 &&
                    size > SBX_SESSION_MAX_VALUE_BYTES) {
                        json_decref(state->error);
                        state->error = json_pack(
                                "{s:s,s:s,s:[]}", "name", "ValueError", "value",
                                "the environment's answer is over the 1 MiB of JSON an episode's "
                                "operation carries",
                                "traceback");
                        value = NULL;
                }
                state->value = json_incref(value);
                state->done = true;
                return 0;
        }
        if (strcmp(op, "ended") == 0 && !state->ended) {
                state->ended = true;
                return 0;
        }
        if (strcmp(op, "ready") == 0 && state->ended) {
                state->restarted = true;
                return 0;
        }
        struct sbx_error why = {0};
        sbx_error_set(&why, EPROTO, "an unexpected '%.32s' frame during a run", op);
        return mark_dead(session, &why, err);
}

static int64_t evidence_delta(uint64_t after, uint64_t before)
{
        return after >= before ? (int64_t)(after - before) : 0;
}

static json_t *evidence_json(const struct sbx_evidence *e)
{
        return json_pack("{s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "oom_kills", (json_int_t)e->oom_kills,
                         "memory_max_events", (json_int_t)e->memory_max_events, "memory_peak_bytes",
                         (json_int_t)e->memory_peak_bytes, "pids_max_events",
                         (json_int_t)e->pids_max_events, "pids_peak", (json_int_t)e->pids_peak,
                         "cpu_usage_us", (json_int_t)e->cpu_usage_us, "cpu_throttled_us",
                         (json_int_t)e->cpu_throttled_us, "cpu_nr_throttled",
                         (json_int_t)e->cpu_nr_throttled);
}

static const char *run_status(const struct run_state *state, const struct sbx_evidence *delta)
{
        if (state->canceled)
                return "canceled";
        if (delta->oom_kills > 0)
                return "memory_limit";
        if (state->timed_out)
                return "timeout";
        if (state->output_limit)
                return "output_limit";
        if (delta->pids_max_events > 0)
                return "pids_limit";
        if (state->ended)
                return "exit_nonzero"; /* the interpreter ended on its own (os._exit, exit) */
        if (state->error != NULL) {
                const char *value = json_string_value(json_object_get(state->error, "value"));
                if (value != NULL && (strstr(value, "[Errno 28]") || strstr(value, "[Errno 122]")))
                        return "disk_full";
                return "error";
        }
        if (state->exit_code != NULL && json_integer_value(state->exit_code) != 0)
                return "exit_nonzero";
        return "ok";
}

/* A result must fit in one SESSION_REPLY: output under the cap can still be larger once it is
 * JSON (a byte below 0x20 is six characters, 16 MiB per stream is allowed), and rich outputs add
 * to it. What does not fit is cut, and the result says so: the rich outputs first
 * (results_truncated), then the longer of stdout and stderr, halved at a character's end until
 * it fits (truncated.stdout/stderr). */
#define RESULT_MAX_BYTES (SBX_MESSAGE_MAX_SESSION_FIELDS - 64 * 1024)

static void fit_in_a_message(json_t *result)
{
        if (json_dumpb(result, NULL, 0, JSON_COMPACT) <= RESULT_MAX_BYTES)
                return;
        json_object_set_new(result, "results", json_array());
        json_object_set_new(result, "results_truncated", json_true());
        for (;;) {
                size_t size = json_dumpb(result, NULL, 0, JSON_COMPACT);
                if (size <= RESULT_MAX_BYTES)
                        return;
                const char *longer =
                        json_string_length(json_object_get(result, "stdout")) >=
                                        json_string_length(json_object_get(result, "stderr"))
                                ? "stdout"
                                : "stderr";
                const json_t *text = json_object_get(result, longer);
                size_t len = json_string_length(text);
                if (len == 0)
                        return; /* nothing left to cut: the reply says it is too large */
                size_t keep =
                        sbx_utf8_whole_prefix((const uint8_t *)json_string_value(text), len / 2);
                json_object_set_new(result, longer,
                                    json_stringn_nocheck(json_string_value(text), keep));
                json_object_set_new(json_object_get(result, "truncated"), longer, json_true());
        }
}

bool sbx_session_episode_op(const char *op)
{
        return op != NULL && (strcmp(op, "reset") == 0 || strcmp(op, "step") == 0 ||
                              strcmp(op, "close") == 0 || strcmp(op, "batch") == 0);
}

/* The frame that starts a run. */
static json_t *run_header(const struct sbx_session_run_request *request, struct sbx_error *err)
{
        if (request->op != NULL) {
                if (!sbx_session_episode_op(request->op) ||
                    (request->op_fields != NULL && !json_is_object(request->op_fields))) {
                        sbx_error_set(err, EINVAL, "not an episode operation");
                        return NULL;
                }
                json_t *header = request->op_fields != NULL
                                         ? json_copy((json_t *)request->op_fields)
                                         : json_object();
                if (header == NULL ||
                    json_object_set_new(header, "op", json_string(request->op)) < 0) {
                        json_decref(header);
                        sbx_error_set(err, ENOMEM, "session: build the operation");
                        return NULL;
                }
                return header;
        }
        json_t *env = json_object();
        json_t *code = json_stringn(request->code, request->code_size);
        if (env == NULL || code == NULL) {
                json_decref(env);
                json_decref(code);
                sbx_error_set(err, EINVAL, "code: not UTF-8 text");
                return NULL;
        }
        for (size_t i = 0; i < request->n_env; i++) {
                if (!sbx_request_env_valid(request->env[i])) {
                        json_decref(env);
                        json_decref(code);
                        sbx_error_set(err, EINVAL,
                                      "env[%zu]: not a NAME=value entry sandboxd "
                                      "lets a program set",
                                      i);
                        return NULL;
                }
                const char *eq = strchr(request->env[i], '=');
                char name[80];
                snprintf(name, sizeof(name), "%.*s", (int)(eq - request->env[i]), request->env[i]);
                json_object_set_new(env, name, json_string(eq + 1));
        }
        return json_pack("{s:s,s:o,s:o}", "op", "run", "code", code, "env", env);
}

/* Sends sig to the agent's keeper; a failure means the keeper is gone, which the channel's end
 * reports next. */
static void signal_keeper(struct sbx_session *session, int sig)
{
        struct sbx_error ignored = {0};
        if (session->backend->signal_program(session->sandbox, sig, &ignored) < 0)
                sbx_debug("session: signal %d: %s", sig, ignored.message);
}

json_t *sbx_session_run(struct sbx_session *session, const struct sbx_session_run_request *request,
                        struct sbx_error *err)
{
        if (session->dead) {
                sbx_error_set(err, EPIPE, "session: the agent is gone: %s", session->dead_reason);
                return NULL;
        }
        if (request->stdin_size > SBX_MAX_STDIN_BYTES || request->code_size > SBX_MAX_CODE_BYTES) {
                sbx_error_set(err, EINVAL, "code or stdin over 4 MiB");
                return NULL;
        }
        uint64_t started = sbx_now_us();
        uint64_t timeout_ms =
                request->timeout_ms != 0 ? request->timeout_ms : session->spec.limits.wall_ms;
        char id[SBX_EXECUTION_ID_CHARS + 1];
        if (request->id != NULL && sbx_execution_id_valid(request->id))
                snprintf(id, sizeof(id), "%s", request->id);
        else if (sbx_execution_id_new(id, err) < 0)
                return NULL;
        json_t *header = run_header(request, err);
        if (header == NULL)
                return NULL;

        struct run_state state = {.results = json_array(), .request = request};
        size_t cap = (size_t)session->spec.limits.output_bytes;
        sbx_buffer_init(&state.out, cap);
        sbx_buffer_init(&state.err, cap);
        /* What earlier runs' background processes printed since is not this run's. */
        struct sbx_buffer stale;
        sbx_buffer_init(&stale, 0);
        drain(session->stdout_fd, &stale);
        drain(session->stderr_fd, &stale);
        sbx_buffer_free(&stale);

        struct sbx_evidence before = {0}, after = {0};
        struct sbx_error evidence_err = {0};
        bool evidence_ok = true;
        if (request->op != NULL && session->last_evidence_known)
                before = session->last_evidence;
        else
                evidence_ok = session->backend->read_evidence(session->sandbox, &before,
                                                              &evidence_err) == 0;
        int rc = send_frame(session, header, request->stdin_data, request->stdin_size, err);
        json_decref(header);
        uint64_t deadline = started + timeout_ms * 1000;
        if (request->not_after_us != 0 && request->not_after_us < deadline)
                deadline = request->not_after_us;
        /* Until "done", or a new interpreter's "ready" once a restart was asked for or the
         * interpreter ended on its own (its "done" may still come before that). */
        while (rc == 0 && !state.restarted &&
               !(state.done && !state.restart_asked && !state.ended)) {
                uint64_t now = sbx_now_us();
                bool stop = false;
                if (!state.interrupted_us && now >= deadline) {
                        state.timed_out = true;
                        stop = true;
                }
                if (!state.interrupted_us && state.out.overflow + state.err.overflow > 0) {
                        state.output_limit = true;
                        stop = true;
                }
                if (stop) {
                        signal_keeper(session, SIGINT);
                        state.interrupted_us = now;
                }
                uint64_t grace_end =
                        state.interrupted_us + (uint64_t)SBX_SESSION_INTERRUPT_GRACE_MS * 1000;
                if (state.interrupted_us && !state.restart_asked && now >= grace_end) {
                        signal_keeper(session, SIGUSR1);
                        state.restart_asked = true;
                }
                uint64_t wake = state.interrupted_us == 0 ? deadline
                                : state.restart_asked
                                        ? now + (uint64_t)SBX_SESSION_READY_TIMEOUT_MS * 1000
                                        : grace_end;
                if (stream_pending(&state) &&
                    state.flushed_us + SBX_SESSION_STREAM_DELAY_MS * 1000ull < wake)
                        wake = state.flushed_us + SBX_SESSION_STREAM_DELAY_MS * 1000ull;
                if (state.restart_asked &&
                    now > grace_end + SBX_SESSION_READY_TIMEOUT_MS * 1000ull) {
                        struct sbx_error why = {0};
                        sbx_error_set(&why, ETIMEDOUT, "it did not restart");
                        rc = mark_dead(session, &why, err);
                        break;
                }
                struct pollfd fds[4] = {
                        {.fd = session->agent_fd, .events = POLLIN},
                        {.fd = session->stdout_fd, .events = POLLIN},
                        {.fd = session->stderr_fd, .events = POLLIN},
                        {.fd = request->cancel_fd > 0 && !state.canceled ? request->cancel_fd : -1,
                         .events = POLLIN},
                };
                /* What is buffered first: a frame may already be whole. */
                json_t *frame = NULL;
                const uint8_t *payload;
                size_t payload_size;
                int got = receive_frame(session, 0, &frame, &payload, &payload_size, err);
                if (got < 0) {
                        rc = -1;
                        break;
                }
                if (got > 0) {
                        rc = run_frame(session, &state, frame, err);
                        json_decref(frame);
                        sbx_session_reader_consume(&session->reader);
                        continue;
                }
                int timeout = wake > now ? (int)((wake - now + 999) / 1000) : 0;
                int ready = poll(fds, 4, timeout);
                if (ready < 0 && errno != EINTR) {
                        rc = sbx_error_set(err, errno, "session: poll");
                        break;
                }
                if (ready <= 0) {
                        stream_output(&state, false);
                        continue;
                }
                if (fds[1].revents)
                        drain(session->stdout_fd, &state.out);
                if (fds[2].revents)
                        drain(session->stderr_fd, &state.err);
                stream_output(&state, false);
                if (fds[3].revents && !state.canceled &&
                    (request->canceled == NULL || request->canceled(request->cancel_ctx))) {
                        state.canceled = true;
                        if (!state.interrupted_us) {
                                signal_keeper(session, SIGINT);
                                state.interrupted_us = sbx_now_us();
                        }
                }
                if (fds[0].revents) {
                        struct sbx_error why = {0};
                        int filled =
                                sbx_session_reader_fill(&session->reader, session->agent_fd, &why);
                        if (filled == 0)
                                sbx_error_set(&why, EPIPE, "its channel ended");
                        if (filled <= 0) {
                                rc = mark_dead(session, &why, err);
                                break;
                        }
                }
        }
        /* The agent flushed its streams before "done": what it printed is in the pipes. */
        drain(session->stdout_fd, &state.out);
        drain(session->stderr_fd, &state.err);
        stream_output(&state, true);
        if (request->on_event != NULL && state.error != NULL)
                request->on_event(request->event_ctx, "error", state.error);
        if (evidence_ok &&
            session->backend->read_evidence(session->sandbox, &after, &evidence_err) < 0)
                evidence_ok = false;
        session->last_evidence = after;
        session->last_evidence_known = evidence_ok;
        uint64_t ended = sbx_now_us();

        struct sbx_evidence delta = {
                .oom_kills = (uint64_t)evidence_delta(after.oom_kills, before.oom_kills),
                .memory_max_events =
                        (uint64_t)evidence_delta(after.memory_max_events, before.memory_max_events),
                .memory_peak_bytes = after.memory_peak_bytes,
                .pids_max_events =
                        (uint64_t)evidence_delta(after.pids_max_events, before.pids_max_events),
                .pids_peak = after.pids_peak,
                .cpu_usage_us = (uint64_t)evidence_delta(after.cpu_usage_us, before.cpu_usage_us),
                .cpu_throttled_us =
                        (uint64_t)evidence_delta(after.cpu_throttled_us, before.cpu_throttled_us),
                .cpu_nr_throttled =
                        (uint64_t)evidence_delta(after.cpu_nr_throttled, before.cpu_nr_throttled),
        };
        const char *status = rc < 0 ? "internal_error" : run_status(&state, &delta);
        json_t *result = json_pack(
                "{s:s,s:s,s:o,s:o,s:{s:b,s:b},s:O,s:b,s:O,s:O,s:O,s:b,s:o,s:{s:I,s:I,s:I},s:{s:I}}",
                "id", id, "status", status, "stdout",
                sbx_json_string_from_bytes(state.out.data, state.out.len), "stderr",
                sbx_json_string_from_bytes(state.err.data, state.err.len), "truncated", "stdout",
                state.out.overflow, "stderr", state.err.overflow, "results", state.results,
                "results_truncated", state.results_truncated, "error",
                state.error != NULL ? state.error : json_null(), "exit_code",
                state.exit_code != NULL ? state.exit_code : json_null(), "execution_count",
                state.execution_count != NULL ? state.execution_count : json_null(), "restarted",
                state.restarted, "evidence", evidence_ok ? evidence_json(&delta) : json_null(),
                "usage", "cpu_ms", (json_int_t)(delta.cpu_usage_us / 1000), "memory_peak_bytes",
                (json_int_t)delta.memory_peak_bytes, "session_cpu_ms",
                (json_int_t)(evidence_ok ? after.cpu_usage_us / 1000 : 0), "timing", "total_us",
                (json_int_t)(ended - started));
        if (result != NULL && request->op != NULL) {
                json_object_set(result, "value", state.value != NULL ? state.value : json_null());
                json_object_del(result, "results");
                json_object_del(result, "results_truncated");
        }
        if (result != NULL && rc < 0)
                json_object_set_new(result, "internal_error", json_string(err->message));
        if (result != NULL)
                fit_in_a_message(result);
        run_state_free(&state);
        if (result == NULL) {
                sbx_error_set(err, ENOMEM, "session: build the run's result");
                return NULL;
        }
        return result;
}

/* ---- Files ---- */

/* Sends a file operation and waits for its reply; maps a refusal to an errno. 0 with *reply (a
 * new reference) and the payload (until consume). */
static int file_op(struct sbx_session *session, json_t *header, const void *data, size_t size,
                   json_t **reply, const uint8_t **payload, size_t *payload_size,
                   struct sbx_error *err)
{
        int rc = send_frame(session, header, data, size, err);
        json_decref(header);
        if (rc < 0)
                return -1;
        uint64_t deadline = sbx_now_us() + (uint64_t)REPLY_TIMEOUT_MS * 1000;
        rc = receive_frame(session, deadline, reply, payload, payload_size, err);
        if (rc == 0) {
                struct sbx_error why = {0};
                sbx_error_set(&why, ETIMEDOUT, "no reply to a file operation");
                return mark_dead(session, &why, err);
        }
        if (rc < 0)
                return -1;
        if (strcmp(op_of(*reply), "reply") != 0) {
                json_decref(*reply);
                sbx_session_reader_consume(&session->reader);
                struct sbx_error why = {0};
                sbx_error_set(&why, EPROTO, "an unexpected frame instead of a reply");
                return mark_dead(session, &why, err);
        }
        if (json_is_true(json_object_get(*reply, "ok")))
                return 0;
        const char *kind = json_string_value(json_object_get(*reply, "kind"));
        const char *message = json_string_value(json_object_get(*reply, "message"));
        int code = EIO;
        if (kind != NULL && strcmp(kind, "invalid") == 0)
                code = EINVAL;
        else if (kind != NULL && strcmp(kind, "not_found") == 0)
                code = ENOENT;
        else if (kind != NULL && strcmp(kind, "disk_full") == 0)
                code = ENOSPC;
        else if (kind != NULL && strcmp(kind, "too_large") == 0)
                code = EFBIG;
        sbx_error_set(err, code, "%.200s", message != NULL ? message : "refused");
        json_decref(*reply);
        sbx_session_reader_consume(&session->reader);
        return -1;
}

static int check_path(const char *path, struct sbx_error *err)
{
        size_t len = path != NULL ? strlen(path) : 0;
        if (len == 0 || len > 4096)
                return sbx_error_set(err, EINVAL, "not a path");
        return 0;
}

int sbx_session_put(struct sbx_session *session, const char *path, const void *data, size_t size,
                    unsigned mode, struct sbx_error *err)
{
        if (check_path(path, err) < 0)
                return -1;
        if (size > SBX_SESSION_MAX_FILE_BYTES)
                return sbx_error_set(err, EFBIG, "over %u bytes", SBX_SESSION_MAX_FILE_BYTES);
        json_t *reply;
        const uint8_t *payload;
        size_t payload_size;
        if (file_op(session,
                    json_pack("{s:s,s:s,s:i}", "op", "put", "path", path, "mode",
                              (int)(mode & 07777)),
                    data, size, &reply, &payload, &payload_size, err) < 0)
                return -1;
        json_decref(reply);
        sbx_session_reader_consume(&session->reader);
        return 0;
}

int sbx_session_get(struct sbx_session *session, const char *path, size_t max_size, void **data,
                    size_t *size, struct sbx_error *err)
{
        if (check_path(path, err) < 0)
                return -1;
        if (max_size > SBX_SESSION_MAX_FILE_BYTES)
                max_size = SBX_SESSION_MAX_FILE_BYTES;
        json_t *reply;
        const uint8_t *payload;
        size_t payload_size;
        if (file_op(session,
                    json_pack("{s:s,s:s,s:I}", "op", "get", "path", path, "max_size",
                              (json_int_t)max_size),
                    NULL, 0, &reply, &payload, &payload_size, err) < 0)
                return -1;
        int rc = 0;
        if (payload_size > max_size) {
                rc = sbx_error_set(err, EFBIG, "over %zu bytes", max_size);
        } else {
                *data = malloc(payload_size + 1);
                if (*data == NULL)
                        rc = sbx_error_set(err, ENOMEM, "allocate a file's contents");
                else {
                        memcpy(*data, payload, payload_size);
                        *size = payload_size;
                }
        }
        json_decref(reply);
        sbx_session_reader_consume(&session->reader);
        return rc;
}

json_t *sbx_session_list(struct sbx_session *session, const char *path, struct sbx_error *err)
{
        if (check_path(path, err) < 0)
                return NULL;
        json_t *reply;
        const uint8_t *payload;
        size_t payload_size;
        if (file_op(session, json_pack("{s:s,s:s}", "op", "list", "path", path), NULL, 0, &reply,
                    &payload, &payload_size, err) < 0)
                return NULL;
        json_t *entries = json_object_get(reply, "entries");
        json_t *out = json_array();
        size_t i;
        json_t *entry;
        json_array_foreach(entries, i, entry)
        {
                const char *name = json_string_value(json_object_get(entry, "name"));
                const char *type = json_string_value(json_object_get(entry, "type"));
                if (name == NULL || type == NULL || i >= 10000)
                        continue;
                json_array_append_new(
                        out, json_pack("{s:s,s:s,s:I,s:I,s:I}", "name", name, "type", type, "size",
                                       json_integer_value(json_object_get(entry, "size")), "mtime",
                                       json_integer_value(json_object_get(entry, "mtime")), "mode",
                                       json_integer_value(json_object_get(entry, "mode"))));
        }
        json_decref(reply);
        sbx_session_reader_consume(&session->reader);
        return out;
}

int sbx_session_delete(struct sbx_session *session, const char *path, struct sbx_error *err)
{
        if (check_path(path, err) < 0)
                return -1;
        json_t *reply;
        const uint8_t *payload;
        size_t payload_size;
        if (file_op(session, json_pack("{s:s,s:s}", "op", "delete", "path", path), NULL, 0, &reply,
                    &payload, &payload_size, err) < 0)
                return -1;
        json_decref(reply);
        sbx_session_reader_consume(&session->reader);
        return 0;
}

int sbx_session_evidence(struct sbx_session *session, json_t **evidence, struct sbx_error *err)
{
        struct sbx_evidence e;
        if (session->backend->read_evidence(session->sandbox, &e, err) < 0)
                return -1;
        *evidence = evidence_json(&e);
        return *evidence != NULL ? 0 : sbx_error_set(err, ENOMEM, "session: evidence");
}
