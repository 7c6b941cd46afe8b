/* RL episodes over HTTP (episodes.h). */
#define _GNU_SOURCE
#include "api/episodes.h"

#include <errno.h>
#include <stdarg.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/engine_client.h"
#include "api/metrics.h"
#include "api/respond.h"
#include "api/session_registry.h"
#include "model/request.h"
#include "service/audit.h"
#include "service/placement_pg.h"
#include "service/problem.h"
#include "service/quota.h"
#include "util/cleanup.h"
#include "util/log.h"
#include "util/time.h"

#define EPISODES_PATH "/v1/episodes"

/* The most environments one open makes, and the most steps one batch carries; what the
 * answers of one batch may take together (each is at most SBX_SESSION_MAX_VALUE_BYTES of value
 * and its output: the API process holds them all until the answer is sent). */
#define MAX_COUNT          64
#define MAX_BATCH          256
#define BATCH_ANSWER_BYTES (16u << 20)
/* The module a request's code becomes. */
#define CODE_FILE "env.py"
/* How long close() may take at a DELETE, and how long a DELETE waits for a step in progress to
 * stop once it was canceled (interrupt, then a restart: engine/session.h). */
#define CLOSE_TIMEOUT_MS 5000
#define DELETE_WAIT_MS   (SBX_SESSIONS_RESTART_MS + 3000)

enum phase {
        PHASE_READY,  /* reset: steps may come */
        PHASE_DONE,   /* terminated, truncated or max_steps: a reset first */
        PHASE_FAILED, /* the environment raised or was lost: a reset first */
};

struct episode {
        char *entrypoint; /* the environment's module, under /workspace */
        char *env_class;  /* NULL: the module's reset and step functions */
        uint64_t step_timeout_ms;
        uint64_t max_steps; /* 0: none */
        enum phase phase;
        uint64_t steps;     /* since the last reset */
        double reward;      /* since the last reset */
        uint64_t all_steps; /* over the episode's life */
        double all_reward;  /* ... */
        uint64_t resets;
        unsigned index; /* its environment's in a shared sandbox's interpreter; else 0 */
        /* The engine request of the operation in progress, for a DELETE that cancels it. */
        _Atomic uint64_t request_id;
};

void sbx_episode_free(struct episode *episode)
{
        if (episode == NULL)
                return;
        free(episode->entrypoint);
        free(episode->env_class);
        free(episode);
}

/* A JSON number for a sum that may have run past what a double holds (null then). */
static json_t *real_or_null(double value)
{
        return isfinite(value) ? json_real(value) : json_null();
}

static const char *phase_name(enum phase phase)
{
        switch (phase) {
        case PHASE_READY:
                return "ready";
        case PHASE_DONE:
                return "done";
        case PHASE_FAILED:
                break;
        }
        return "failed";
}

/* With the registry's lock held. */
static json_t *episode_json(const struct session *s)
{
        const struct episode *e = s->episode;
        json_t *object = sbx_sessions_json(s);
        if (object == NULL)
                return NULL;
        json_object_del(object, "language");
        json_object_set_new(object, "state",
                            json_string(s->ended  ? "ended"
                                        : s->busy ? "running"
                                                  : phase_name(e->phase)));
        json_object_set_new(object, "entrypoint", json_string(e->entrypoint));
        json_object_set_new(object, "env_class",
                            e->env_class != NULL ? json_string(e->env_class) : json_null());
        json_object_set_new(object, "step_timeout_ms",
                            json_integer((json_int_t)e->step_timeout_ms));
        json_object_set_new(object, "max_steps",
                            e->max_steps ? json_integer((json_int_t)e->max_steps) : json_null());
        json_object_set_new(object, "steps", json_integer((json_int_t)e->steps));
        json_object_set_new(object, "total_reward", real_or_null(e->reward));
        json_object_set_new(object, "resets", json_integer((json_int_t)e->resets));
        json_object_set_new(object, "lifetime_steps", json_integer((json_int_t)e->all_steps));
        json_object_set_new(object, "lifetime_reward", real_or_null(e->all_reward));
        json_object_set_new(object, "cpu_ms",
                            json_integer((json_int_t)sbx_sessions_cpu_charged_ms(s)));
        json_object_set_new(object, "sandbox", json_string(s->share != NULL ? "shared" : "own"));
        return object;
}

json_t *sbx_episode_summary(const struct session *s)
{
        const struct episode *e = s->episode;
        return json_pack("{s:I,s:I,s:o,s:I}", "steps", (json_int_t)e->all_steps, "resets",
                         (json_int_t)e->resets, "total_reward", real_or_null(e->all_reward),
                         "cpu_ms", (json_int_t)sbx_sessions_cpu_charged_ms(s));
}

/* ---- One operation's round trip and its outcome ---- */

/* An operation to send: the EPISODE message's fields (takes args). */
static json_t *operation_json(const char *operation, json_t *args, uint64_t timeout_ms)
{
        return json_pack("{s:s,s:o,s:I}", "operation", operation, "args", args, "timeout_ms",
                         (json_int_t)timeout_ms);
}

/* The same, as text. */
static char *operation_fields(const char *operation, json_t *args, uint64_t timeout_ms)
{
        json_t *fields = operation_json(operation, args, timeout_ms);
        char *text = fields != NULL ? json_dumps(fields, JSON_COMPACT) : NULL;
        json_decref(fields);
        return text;
}

/* args for s's environment: with its index in a shared sandbox's interpreter (returns args). */
static json_t *environment_args(json_t *args, const struct session *s)
{
        if (args != NULL && s->share != NULL)
                json_object_set_new(args, "index", json_integer(s->episode->index));
        return args;
}

static json_t *reset_args(const struct episode *e, const json_t *seed, const json_t *options)
{
        return json_pack("{s:s,s:o,s:O,s:O}", "entrypoint", e->entrypoint, "env_class",
                         e->env_class != NULL ? json_string(e->env_class) : json_null(), "seed",
                         seed != NULL ? seed : json_null(), "options",
                         options != NULL ? options : json_null());
}

/* What became of one operation (after sbx_engine_client_session[s]). */
struct outcome {
        int code; /* 0: the engine ran it (result); else an errno for sbx_sessions_engine_failure */
        char detail[SBX_ERROR_MESSAGE_MAX + 64];
        json_t *result; /* the run's result (engine/session.h), with its "value" */
};

static void outcome_take(struct sbx_api *api, struct session *s, struct outcome *out, int rc,
                         const struct sbx_error *err, struct sbx_engine_session_reply *reply)
{
        *out = (struct outcome){0};
        if (rc < 0) {
                out->code = err->code ? err->code : EIO;
                snprintf(out->detail, sizeof(out->detail), "%s", err->message);
                return;
        }
        if (reply->reply.error != 0) {
                sbx_sessions_reply_failure(api, s, reply, &out->code, out->detail,
                                           sizeof(out->detail));
                return;
        }
        json_error_t json_error;
        out->result = json_loadb(reply->reply.fields, reply->reply.fields_len, JSON_ALLOW_NUL,
                                 &json_error);
        sbx_engine_session_reply_free(reply);
        if (!json_is_object(out->result)) {
                json_decref(out->result);
                out->result = NULL;
                out->code = EIO;
                snprintf(out->detail, sizeof(out->detail), "the engine's answer is not JSON");
        }
}

static bool is_number(const json_t *value)
{
        return json_is_integer(value) || json_is_real(value);
}

/* The value of a step as the agent answered it, checked: it comes from the sandbox. */
static bool step_value_valid(const json_t *value)
{
        return json_is_object(value) && json_object_get(value, "observation") != NULL &&
               is_number(json_object_get(value, "reward")) &&
               json_is_boolean(json_object_get(value, "terminated")) &&
               json_is_boolean(json_object_get(value, "truncated"));
}

static bool reset_value_valid(const json_t *value)
{
        return json_is_object(value) && json_object_get(value, "observation") != NULL;
}

/* The answer to a reset or step the engine ran, and the episode's new state (with the lock
 * held). *end is set when the episode must end (a step past its deadline). */
static json_t *operation_answer(struct session *s, bool step, json_t *result, const char **end)
{
        struct episode *e = s->episode;
        const char *status = json_string_value(json_object_get(result, "status"));
        json_t *value = json_object_get(result, "value");
        json_t *error = json_object_get(result, "error");
        bool restarted = json_is_true(json_object_get(result, "restarted"));
        bool valid = step ? step_value_valid(value) : reset_value_valid(value);
        json_t *answer = json_pack("{s:s,s:s}", "id", s->id, "status",
                                   status != NULL ? status : "internal_error");
        if (answer == NULL)
                return NULL;
        if (status != NULL && strcmp(status, "timeout") == 0) {
                *end = "step_timeout";
        } else if (valid && json_is_null(error) && !restarted) {
                if (step) {
                        double reward = json_number_value(json_object_get(value, "reward"));
                        bool terminated = json_is_true(json_object_get(value, "terminated"));
                        bool truncated = json_is_true(json_object_get(value, "truncated"));
                        e->steps++;
                        e->all_steps++;
                        e->reward += reward;
                        e->all_reward += reward;
                        /* Gymnasium's TimeLimit: the step that reaches max_steps truncates. */
                        if (e->max_steps != 0 && e->steps >= e->max_steps)
                                truncated = true;
                        if (terminated || truncated)
                                e->phase = PHASE_DONE;
                        json_object_set(answer, "observation",
                                        json_object_get(value, "observation"));
                        json_object_set_new(answer, "reward", json_real(reward));
                        json_object_set_new(answer, "terminated", json_boolean(terminated));
                        json_object_set_new(answer, "truncated", json_boolean(truncated));
                } else {
                        e->phase = PHASE_READY;
                        e->steps = 0;
                        e->reward = 0;
                        e->resets++;
                        json_object_set(answer, "observation",
                                        json_object_get(value, "observation"));
                }
                json_t *info = json_object_get(value, "info");
                json_object_set_new(answer, "info",
                                    info != NULL ? json_incref(info) : json_object());
        } else {
                /* The environment raised, or its interpreter was lost (the memory cap, an exit:
                 * it restarts without the environment): a reset makes it anew. */
                e->phase = PHASE_FAILED;
                if (json_is_null(error) || error == NULL) {
                        const char *why = restarted ? "the environment's interpreter ended and was "
                                                      "restarted; reset the episode"
                                                    : "the environment's answer is malformed";
                        error = json_pack("{s:s,s:s,s:[]}", "name", "EpisodeError", "value", why,
                                          "traceback");
                } else {
                        json_incref(error);
                }
                json_object_set_new(answer, "error", error);
        }
        json_object_set_new(answer, "step", json_integer((json_int_t)e->steps));
        json_object_set_new(answer, "episode_reward", real_or_null(e->reward));
        json_object_set_new(answer, "state", json_string(*end ? "ended" : phase_name(e->phase)));
        static const char *const passed[] = {"stdout", "stderr", "usage", "evidence", "timing"};
        for (size_t i = 0; i < sizeof(passed) / sizeof(passed[0]); i++) {
                json_t *field = json_object_get(result, passed[i]);
                if (field != NULL)
                        json_object_set(answer, passed[i], field);
        }
        return answer;
}

/* An operation is over: its CPU to the tenant's budget (what the sandbox used since the last
 * charge, background included), its reservation back. */
static void operation_account(struct sbx_api *api, const struct sbx_tenant *tenant,
                              struct session *s, const json_t *result, uint64_t reservation,
                              bool ran)
{
        const json_t *usage = json_object_get(result, "usage");
        uint64_t cpu_ms = (uint64_t)json_integer_value(json_object_get(usage, "cpu_ms"));
        uint64_t session_cpu_ms =
                (uint64_t)json_integer_value(json_object_get(usage, "session_cpu_ms"));
        pthread_mutex_lock(&api->sessions->lock);
        uint64_t *charged = sbx_sessions_cpu_charged(s);
        if (session_cpu_ms > *charged + cpu_ms)
                cpu_ms = session_cpu_ms - *charged;
        *charged += cpu_ms;
        pthread_mutex_unlock(&api->sessions->lock);
        if (reservation != 0)
                sbx_quota_release(api->quota, tenant, reservation, ran, cpu_ms, sbx_now_ms());
}

/* The environment's close() (a shared sandbox's: its index's), when the tenant's quota allows
 * one more operation: it runs the tenant's code as a step does, so it takes a concurrency slot
 * and its CPU is charged; refused, the episode ends without it (its sandbox goes all the same,
 * and close() is the environment's courtesy, not a guarantee: Gymnasium's own wrappers skip it
 * on a crash). Whether the interpreter was restarted (close() ran past its deadline): a shared
 * sandbox's other environments went with it. */
static bool environment_close(struct sbx_api *api, const struct sbx_tenant *tenant,
                              struct session *s)
{
        struct sbx_quota_decision decision = {0};
        struct sbx_error err = {0};
        if (sbx_quota_reserve(api->quota, tenant, CLOSE_TIMEOUT_MS, sbx_now_ms(), &decision, &err) <
            0) {
                sbx_warn("episode %s: close() left out: %s", s->id, err.message);
                return false;
        }
        if (decision.verdict != SBX_QUOTA_ALLOWED) {
                sbx_debug("episode %s: close() left out: %s", s->id,
                          sbx_quota_verdict_name(decision.verdict));
                return false;
        }
        json_t *fields =
                operation_json("close", environment_args(json_object(), s), CLOSE_TIMEOUT_MS);
        json_t *result = NULL;
        bool ran = false;
        struct sbx_engine_session_reply reply;
        int code = 0;
        char detail[SBX_ERROR_MESSAGE_MAX + 64];
        if (fields != NULL &&
            sbx_sessions_call_engine(api, s, SBX_SESSION_EPISODE, fields, NULL, 0,
                                     CLOSE_TIMEOUT_MS + SBX_SESSIONS_RESTART_MS +
                                             SBX_ENGINE_RUN_SLACK_MS,
                                     &reply, &code, detail, sizeof(detail)) == 0) {
                ran = true;
                result = json_loadb(reply.reply.fields, reply.reply.fields_len, 0, NULL);
                sbx_engine_session_reply_free(&reply);
        }
        operation_account(api, tenant, s, result, decision.reservation, ran);
        bool restarted = json_is_true(json_object_get(result, "restarted"));
        json_decref(result);
        return restarted;
}

/* Closes s's sandbox in the engine, s already marked ended (its SESSION_ENDED, which may come
 * before CLOSE's reply, must not give its own reason). 0, or -1 with *code and detail when the
 * engine did not close it (gone already is closed). */
static int episode_close_sandbox(struct sbx_api *api, struct session *s, int *code, char *detail,
                                 size_t detail_size)
{
        struct sbx_engine_session_reply reply;
        if (sbx_sessions_call_engine(api, s, SBX_SESSION_CLOSE, json_object(), NULL, 0,
                                     SBX_SESSIONS_FILE_OP_TIMEOUT_MS, &reply, code, detail,
                                     detail_size) == 0) {
                sbx_engine_session_reply_free(&reply);
                return 0;
        }
        return *code == ESRCH || *code == EPIPE ? 0 : -1;
}

/* What an engine failure (an errno) answers, as sbx_sessions_engine_failure does; the
 * operations the API builds itself are never the client's fault (EINVAL is 500). */
static unsigned failure_status(int code, const char **slug)
{
        *slug = NULL;
        switch (code) {
        case EBUSY:
                *slug = SBX_PROBLEM_AT_CAPACITY;
                return 503;
        case ESHUTDOWN:
                *slug = SBX_PROBLEM_SHUTTING_DOWN;
                return 503;
        case EPIPE:
        case EAGAIN:
        case ETIMEDOUT:
                return 503;
        case ESRCH:
        case ENOENT:
                return 404;
        case ECANCELED: /* a DELETE came first */
                return 409;
        case EFBIG:
                return 413;
        default:
                return 500;
        }
}

/* ---- Steps, one or many ---- */

/* One step or reset of a batch (or alone): its entry, what to send, what came back. */
struct job {
        struct session *s; /* held (users), busy while begun */
        bool begun;
        bool step;        /* else a reset */
        json_t *args;     /* the operation's arguments */
        size_t message;   /* in its wave: the message that carries it (its first job's index) */
        json_t *answer;   /* the item's answer: a result or a rejection */
        unsigned refused; /* an HTTP status when the job did not run */
        const char *slug; /* its problem class; NULL: the status's default */
        uint64_t retry_after_s;
        char why[SBX_ERROR_MESSAGE_MAX + 64];
};

/* One EPISODE message of a wave: one job's operation, or a batch of the jobs of one shared
 * sandbox (one reservation: one interpreter runs them one after the other). */
struct message {
        struct session *target; /* whose engine session gets it */
        struct session_share *share;
        size_t first_job, jobs; /* the jobs it carries: the first, and how many */
        uint64_t reservation;
        uint64_t timeout_ms;
        uint64_t started_us;
        char *fields;
};

static void job_refuse(struct job *job, unsigned status, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
static void job_refuse(struct job *job, unsigned status, const char *fmt, ...)
{
        va_list args;
        va_start(args, fmt);
        vsnprintf(job->why, sizeof(job->why), fmt, args);
        va_end(args);
        job->refused = status;
}

/* Takes the entry for the job (as one of owner's operations: a request's jobs on one shared
 * sandbox go together), or refuses it (ended, busy, failed, done). */
static void job_begin(struct sbx_api *api, struct job *job, const void *owner)
{
        bool ended;
        if (!sbx_sessions_begin_operation_of(api, job->s, owner, &ended)) {
                if (ended)
                        job_refuse(job, 404, "the episode has ended: %s", job->s->end_reason);
                else
                        job_refuse(job, 409,
                                   job->s->share != NULL
                                           ? "another operation of this episode or of another "
                                             "episode of its shared sandbox is in progress"
                                           : "another operation of this episode is in progress");
                return;
        }
        job->begun = true;
        if (!job->step)
                return;
        pthread_mutex_lock(&api->sessions->lock);
        enum phase phase = job->s->episode->phase;
        pthread_mutex_unlock(&api->sessions->lock);
        const char *why = phase == PHASE_FAILED ? "the episode failed: reset it"
                          : phase == PHASE_DONE
                                  ? "the episode is done (terminated or truncated): reset it"
                                  : NULL;
        if (why != NULL) {
                job_refuse(job, 409, "%s", why);
                sbx_sessions_end_operation(api, job->s);
                job->begun = false;
        }
}

/* The operation's arguments as the agent takes them: with the environment's index in a shared
 * sandbox, and its name in a batch. */
static json_t *job_operation(const struct job *job, bool in_batch)
{
        json_t *op = environment_args(json_copy(job->args), job->s);
        if (op != NULL && in_batch)
                json_object_set_new(op, "op", json_string(job->step ? "step" : "reset"));
        return op;
}

/* Whether job (of jobs[.. wave_end)) goes in m. */
static bool in_message(const struct job *job, const struct message *m)
{
        return job->begun && job->message == m->first_job;
}

/* The fields of m's EPISODE message (its jobs among jobs[m->first_job .. wave_end)). */
static char *message_fields(const struct message *m, const struct job *jobs, size_t wave_end)
{
        if (m->share == NULL)
                return operation_fields(jobs[m->first_job].step ? "step" : "reset",
                                        job_operation(&jobs[m->first_job], false), m->timeout_ms);
        json_t *ops = json_array();
        for (size_t i = m->first_job; ops != NULL && i < wave_end; i++)
                if (in_message(&jobs[i], m) &&
                    json_array_append_new(ops, job_operation(&jobs[i], true)) < 0) {
                        json_decref(ops); /* an item missing would shift the answers */
                        ops = NULL;
                }
        if (ops == NULL)
                return NULL;
        return operation_fields("batch", json_pack("{s:o}", "ops", ops), m->timeout_ms);
}

/* The result of job's own operation in a batch's result: the batch's, with the item's value and
 * error (a batch that did not finish, timed out say, is every item's outcome). */
static json_t *item_result(json_t *result, size_t item)
{
        const char *status = json_string_value(json_object_get(result, "status"));
        json_t *answer = json_array_get(json_object_get(result, "value"), item);
        json_t *own = json_copy(result);
        if (own == NULL)
                return NULL;
        if (status == NULL || strcmp(status, "ok") != 0 || !json_is_object(answer)) {
                json_object_set_new(own, "value", json_null());
                return own;
        }
        json_t *error = json_object_get(answer, "error");
        if (item > 0) {
                /* The batch's output and counters go with its first item only: one copy. */
                json_object_set_new(own, "stdout", json_string(""));
                json_object_set_new(own, "stderr", json_string(""));
                json_object_del(own, "evidence");
        }
        json_object_set(own, "value", json_object_get(answer, "value") ?: json_null());
        json_object_set(own, "error", error ?: json_null());
        json_object_set_new(own, "status",
                            json_string(error != NULL && !json_is_null(error) ? "error" : "ok"));
        return own;
}

/* The episodes of share (with the lock held): each to fail, or to end with reason. */
static void share_each(struct sbx_api *api, const struct session_share *share, bool fail,
                       const char *reason)
{
        for (size_t i = 0; i < api->sessions->n; i++) {
                struct session *other = api->sessions->items[i];
                if (other->share != share || other->ended)
                        continue;
                if (fail)
                        other->episode->phase = PHASE_FAILED;
                else
                        sbx_sessions_mark_ended(api->sessions, other, reason);
        }
}

/* A message's outcome: the CPU and reservation once, then each job's answer and its episode's
 * state; the entries are free again, or ended (a step past its deadline ends the sandbox: every
 * episode of it). *budget is what the batch's answers may still take: a message whose answer
 * is past it is not parsed, and its items say so (413; their steps ran). */
static void message_finish(struct sbx_api *api, const struct sbx_tenant *tenant, struct message *m,
                           struct job *jobs, size_t wave_end, const struct sbx_error *err,
                           struct sbx_engine_session_reply *reply, size_t *budget)
{
        struct outcome outcome;
        if (err->code == 0 && reply->reply.error == 0 && reply->reply.fields_len > *budget) {
                sbx_engine_session_reply_free(reply);
                outcome = (struct outcome){.code = EFBIG};
                snprintf(outcome.detail, sizeof(outcome.detail),
                         "the batch's answers are over %u MiB together: step fewer at once (this "
                         "step ran; its answer is lost)",
                         BATCH_ANSWER_BYTES >> 20);
        } else {
                /* Its answers are made of it (a batch's output with its first item only): its
                 * size stands for theirs, measured before anything is parsed. */
                if (err->code == 0 && reply->reply.error == 0)
                        *budget -= reply->reply.fields_len; /* at most *budget: above */
                outcome_take(api, m->target, &outcome, err->code != 0 ? -1 : 0, err, reply);
        }
        operation_account(api, tenant, m->target, outcome.result, m->reservation,
                          outcome.result != NULL);
        m->reservation = 0;
        const char *status = json_string_value(json_object_get(outcome.result, "status"));
        const char *end = NULL;
        if (m->share != NULL && json_is_true(json_object_get(outcome.result, "restarted"))) {
                /* The interpreter was lost: every environment in it. */
                pthread_mutex_lock(&api->sessions->lock);
                share_each(api, m->share, true, NULL);
                pthread_mutex_unlock(&api->sessions->lock);
        }
        size_t item = 0;
        for (size_t i = m->first_job; i < wave_end; i++) {
                struct job *job = &jobs[i];
                if (!in_message(job, m))
                        continue;
                if (outcome.result != NULL) {
                        sbx_metrics_count_operation(api->metrics, SBX_METRICS_EPISODES, status,
                                                    sbx_now_us() - m->started_us);
                        json_t *own = m->share != NULL ? item_result(outcome.result, item)
                                                       : json_incref(outcome.result);
                        pthread_mutex_lock(&api->sessions->lock);
                        job->answer =
                                own != NULL ? operation_answer(job->s, job->step, own, &end) : NULL;
                        pthread_mutex_unlock(&api->sessions->lock);
                        json_decref(own);
                        if (job->answer == NULL)
                                job_refuse(job, 500, "out of memory");
                } else {
                        job->refused = failure_status(outcome.code, &job->slug);
                        snprintf(job->why, sizeof(job->why), "%s", outcome.detail);
                        /* It may have run in part: a reset makes the environment sure again. */
                        if (outcome.code != ESRCH && outcome.code != EPIPE &&
                            outcome.code != ECANCELED) {
                                pthread_mutex_lock(&api->sessions->lock);
                                job->s->episode->phase = PHASE_FAILED;
                                pthread_mutex_unlock(&api->sessions->lock);
                        }
                }
                item++;
        }
        json_decref(outcome.result);
        if (end != NULL) {
                /* Ended under the lock that frees them: nothing else begins on them between. */
                pthread_mutex_lock(&api->sessions->lock);
                if (m->share != NULL)
                        share_each(api, m->share, false, end);
                sbx_sessions_mark_ended(api->sessions, m->target, end);
                pthread_mutex_unlock(&api->sessions->lock);
        }
        for (size_t i = m->first_job; i < wave_end; i++) {
                struct job *job = &jobs[i];
                if (!in_message(job, m))
                        continue;
                sbx_sessions_end_operation(api, job->s);
                job->begun = false;
        }
        if (end != NULL) {
                int code;
                char detail[SBX_ERROR_MESSAGE_MAX + 64];
                if (episode_close_sandbox(api, m->target, &code, detail, sizeof(detail)) < 0)
                        sbx_warn("episode %s: close: %s", m->target->id, detail);
        }
}

/* Where the engine request of an operation on s is kept, for a DELETE that cancels it. */
static _Atomic uint64_t *request_slot(struct session *s)
{
        return s->share != NULL ? &s->share->request_id : &s->episode->request_id;
}

/* The jobs that were begun, in waves of what the tenant's concurrency allows: each wave's
 * messages (a job's operation, or one batch per shared sandbox) go to the engine together and
 * run side by side, and are finished as the wave returns. A message that gets no reservation
 * at all refuses its jobs with the quota's answer. */
static void jobs_run(struct sbx_api *api, const struct sbx_tenant *tenant, struct job *jobs,
                     size_t n)
{
        size_t budget = BATCH_ANSWER_BYTES;
        struct message *plan = calloc(n, sizeof(*plan));
        struct sbx_message_session *messages = calloc(n, sizeof(*messages));
        struct sbx_engine_session_reply *replies = calloc(n, sizeof(*replies));
        struct sbx_error *errs = calloc(n, sizeof(*errs));
        _Atomic uint64_t **request_ids = calloc(n, sizeof(*request_ids));
        bool ready = plan != NULL && messages != NULL && replies != NULL && errs != NULL &&
                     request_ids != NULL;
        for (size_t next = 0; next < n;) {
                size_t k = 0;
                uint64_t max_timeout_ms = 0;
                for (; next < n; next++) {
                        struct job *job = &jobs[next];
                        if (!job->begun)
                                continue;
                        pthread_mutex_lock(&api->sessions->lock);
                        bool gone = job->s->ended; /* an earlier wave ended its sandbox */
                        pthread_mutex_unlock(&api->sessions->lock);
                        if (!ready || gone) {
                                if (gone)
                                        job_refuse(job, 404, "the episode has ended: %s",
                                                   job->s->end_reason);
                                else
                                        job_refuse(job, 500, "out of memory");
                                sbx_sessions_end_operation(api, job->s);
                                job->begun = false;
                                continue;
                        }
                        /* A job of a shared sandbox already in this wave joins its batch. */
                        size_t joined = k;
                        for (size_t m = 0; job->s->share != NULL && m < k; m++)
                                if (plan[m].share == job->s->share)
                                        joined = m;
                        if (joined < k) {
                                job->message = plan[joined].first_job;
                                plan[joined].jobs++;
                                continue;
                        }
                        uint64_t timeout_ms = job->s->episode->step_timeout_ms;
                        struct sbx_quota_decision decision = {0};
                        struct sbx_error err = {0};
                        if (sbx_quota_reserve(api->quota, tenant, timeout_ms, sbx_now_ms(),
                                              &decision, &err) < 0)
                                decision.verdict = SBX_QUOTA_OVER_CAPACITY;
                        if (decision.verdict != SBX_QUOTA_ALLOWED) {
                                if (k > 0)
                                        break; /* this wave is full: the job goes in the next */
                                sbx_metrics_count_quota_rejection(
                                        api->metrics, tenant->name,
                                        sbx_quota_verdict_name(decision.verdict));
                                job->retry_after_s = decision.retry_after_s;
                                job_refuse(job,
                                           sbx_quota_verdict_is_server(decision.verdict) ? 503
                                                                                         : 429,
                                           "%s", sbx_quota_verdict_text(decision.verdict));
                                if (sbx_quota_verdict_slug(decision.verdict) != NULL)
                                        job->slug = sbx_quota_verdict_slug(decision.verdict);
                                sbx_sessions_end_operation(api, job->s);
                                job->begun = false;
                                continue;
                        }
                        job->message = next;
                        plan[k++] = (struct message){
                                .target = job->s,
                                .share = job->s->share,
                                .first_job = next,
                                .jobs = 1,
                                .reservation = decision.reservation,
                                .timeout_ms = timeout_ms,
                        };
                        if (timeout_ms > max_timeout_ms)
                                max_timeout_ms = timeout_ms;
                }
                if (k == 0)
                        break;
                for (size_t m = 0; m < k; m++) {
                        plan[m].fields = message_fields(&plan[m], jobs, next);
                        messages[m] = (struct sbx_message_session){
                                .op = SBX_SESSION_EPISODE,
                                .fields = plan[m].fields != NULL ? plan[m].fields : "",
                                .fields_len = plan[m].fields != NULL ? strlen(plan[m].fields) : 0,
                        };
                        memcpy(messages[m].session_id, sbx_sessions_engine_id(plan[m].target),
                               sizeof(messages[m].session_id));
                        request_ids[m] = request_slot(plan[m].target);
                        plan[m].started_us = sbx_now_us();
                }
                uint64_t wave_timeout_ms =
                        max_timeout_ms + SBX_SESSIONS_RESTART_MS + SBX_ENGINE_RUN_SLACK_MS;
                if (k == 1 && plan[0].share == NULL && plan[0].target->channel >= 0) {
                        /* One sandbox of its own (a single episode's step): through its channel,
                         * which skips the engine's loop and the dispatcher. */
                        const struct sbx_engine_session_call with = {
                                .request_id = request_ids[0],
                                .direct = true,
                                .channel = plan[0].target->channel,
                        };
                        errs[0] = (struct sbx_error){0};
                        sbx_engine_client_session(api->engine, &messages[0], wave_timeout_ms, &with,
                                                  &replies[0], &errs[0]);
                } else {
                        sbx_engine_client_sessions(api->engine, messages, k, wave_timeout_ms,
                                                   replies, errs, request_ids);
                }
                for (size_t m = 0; m < k; m++) {
                        atomic_store(request_ids[m], 0);
                        message_finish(api, tenant, &plan[m], jobs, next, &errs[m], &replies[m],
                                       &budget);
                        free(plan[m].fields);
                }
        }
        free(plan);
        free(messages);
        free(replies);
        free(errs);
        free(request_ids);
}

/* Each refused job's answer: its rejection, with its problem. */
static void jobs_reject(struct job *jobs, size_t n)
{
        for (size_t i = 0; i < n; i++) {
                struct job *job = &jobs[i];
                if (!job->refused)
                        continue;
                json_decref(job->answer);
                json_t *problem = sbx_problem_new(
                        job->refused,
                        job->slug ? job->slug : sbx_problem_default_slug(job->refused), job->why,
                        NULL, 0);
                job->answer =
                        json_pack("{s:s?,s:s,s:o}", "id", job->s ? job->s->id : NULL, "status",
                                  "rejected", "problem", problem != NULL ? problem : json_object());
        }
}

static void jobs_free(struct sbx_api *api, struct job *jobs, size_t n)
{
        for (size_t i = 0; jobs != NULL && i < n; i++) {
                json_decref(jobs[i].args);
                json_decref(jobs[i].answer);
                if (jobs[i].s != NULL)
                        sbx_sessions_release(api->sessions, jobs[i].s);
        }
        free(jobs);
}

/* The answer to one job that did not run: its problem as the response. */
static enum MHD_Result respond_refused(struct sbx_api *api, struct MHD_Connection *connection,
                                       const struct job *job)
{
        if (job->refused == 404 && job->s != NULL)
                return sbx_sessions_not_found(api, connection, job->s);
        char retry_after[32];
        snprintf(retry_after, sizeof(retry_after), "%llu",
                 (unsigned long long)(job->retry_after_s ? job->retry_after_s : 1));
        const struct sbx_http_header retry = {MHD_HTTP_HEADER_RETRY_AFTER, retry_after};
        bool later = job->refused == 429 || job->refused == 503;
        return sbx_http_respond_problem_of(
                api, connection, job->refused,
                job->slug ? job->slug : sbx_problem_default_slug(job->refused), job->why, NULL, 0,
                later ? &retry : NULL, later ? 1 : 0, NULL);
}

/* A seed Gymnasium takes (numpy's SeedSequence: not negative), with room for count - 1 more. */
static bool seed_valid(const json_t *seed)
{
        return json_is_integer(seed) && json_integer_value(seed) >= 0 &&
               json_integer_value(seed) <= ((json_int_t)1 << 62);
}

static enum MHD_Result handle_step(struct sbx_api *api, struct MHD_Connection *connection,
                                   const struct sbx_tenant *tenant, struct session *s,
                                   const json_t *body, bool step)
{
        const char *key;
        json_t *value;
        json_object_foreach((json_t *)body, key, value)
        {
                bool known = step ? strcmp(key, "action") == 0
                                  : strcmp(key, "seed") == 0 || strcmp(key, "options") == 0;
                if (!known)
                        return sbx_sessions_bad_request(api, connection, key, "unknown field");
        }
        const json_t *seed = json_object_get(body, "seed");
        if (!step && seed != NULL && !json_is_null(seed) && !seed_valid(seed))
                return sbx_sessions_bad_request(api, connection, "seed",
                                                "an integer from 0 to 2^62, or null");
        if (step && json_object_get(body, "action") == NULL)
                return sbx_sessions_bad_request(api, connection, "action",
                                                "a step needs an action (any JSON value)");
        struct job *jobs = calloc(1, sizeof(*jobs));
        if (jobs == NULL)
                return sbx_http_respond_problem(api, connection, 500, "out of memory", NULL, 0,
                                                NULL, 0);
        pthread_mutex_lock(&api->sessions->lock);
        s->users++; /* the job's, released with it */
        pthread_mutex_unlock(&api->sessions->lock);
        jobs[0] = (struct job){.s = s, .step = step};
        jobs[0].args = step ? json_pack("{s:O}", "action", json_object_get(body, "action"))
                            : reset_args(s->episode, seed, json_object_get(body, "options"));
        if (jobs[0].args == NULL)
                job_refuse(&jobs[0], 500, "out of memory");
        else
                job_begin(api, &jobs[0], jobs);
        jobs_run(api, tenant, jobs, 1);
        enum MHD_Result answer;
        if (jobs[0].refused)
                answer = respond_refused(api, connection, &jobs[0]);
        else
                answer = sbx_http_respond_json(api, connection, 200, JSON_CONTENT_TYPE,
                                               json_incref(jobs[0].answer), NULL, 0);
        jobs_free(api, jobs, 1);
        return answer;
}

static enum MHD_Result handle_batch(struct sbx_api *api, struct MHD_Connection *connection,
                                    const struct sbx_tenant *tenant, const json_t *body)
{
        const json_t *steps = json_object_get(body, "steps");
        if (json_object_size(body) != 1 || !json_is_array(steps) || json_array_size(steps) == 0 ||
            json_array_size(steps) > MAX_BATCH)
                return sbx_sessions_bad_request(api, connection, "steps",
                                                "an array of 1 to 256 {id, action}");
        size_t n = json_array_size(steps), i;
        const json_t *item;
        json_array_foreach(steps, i, item)
        {
                const char *id = json_string_value(json_object_get(item, "id"));
                if (!json_is_object(item) || json_object_size(item) != 2 || id == NULL ||
                    json_object_get(item, "action") == NULL) {
                        char field[32];
                        snprintf(field, sizeof(field), "steps[%zu]", i);
                        return sbx_sessions_bad_request(api, connection, field,
                                                        "an object {id, action}");
                }
        }
        struct job *jobs = calloc(n, sizeof(*jobs));
        if (jobs == NULL)
                return sbx_http_respond_problem(api, connection, 500, "out of memory", NULL, 0,
                                                NULL, 0);
        /* Each item's entry, or its own 404. */
        pthread_mutex_lock(&api->sessions->lock);
        json_array_foreach(steps, i, item)
        {
                const char *id = json_string_value(json_object_get(item, "id"));
                jobs[i].step = true;
                jobs[i].s = sbx_execution_id_valid(id)
                                    ? sbx_sessions_find(api->sessions, id, tenant->name, true)
                                    : NULL;
        }
        pthread_mutex_unlock(&api->sessions->lock);
        json_array_foreach(steps, i, item)
        {
                struct job *job = &jobs[i];
                if (job->s == NULL) {
                        job_refuse(job, 404, "no such episode");
                        continue;
                }
                job->args = json_pack("{s:O}", "action", json_object_get(item, "action"));
                if (job->args == NULL)
                        job_refuse(job, 500, "out of memory");
                else
                        job_begin(api, job, jobs); /* one owner: the request's */
        }
        jobs_run(api, tenant, jobs, n);
        jobs_reject(jobs, n);
        /* A batch none of whose items ran is refused as a whole, with its first item's reason:
         * a 200 says that the tenant's code ran. */
        bool any_ran = false;
        for (i = 0; i < n; i++)
                any_ran |= !jobs[i].refused;
        enum MHD_Result answer;
        if (!any_ran) {
                answer = respond_refused(api, connection, &jobs[0]);
        } else {
                json_t *results = json_array();
                json_array_foreach(steps, i, item)
                {
                        if (jobs[i].s == NULL)
                                json_object_set(jobs[i].answer, "id", json_object_get(item, "id"));
                        json_array_append(results, jobs[i].answer);
                }
                answer = sbx_http_respond_json(api, connection, 200, JSON_CONTENT_TYPE,
                                               json_pack("{s:o}", "results", results), NULL, 0);
        }
        jobs_free(api, jobs, n);
        return answer;
}

/* ---- Opening ---- */

/* What an open asks, checked. */
struct open_request {
        struct sbx_limits limits;
        json_t *clamped;
        json_t *files;          /* OPEN's entries */
        struct sbx_buffer data; /* their bytes */
        const char *entrypoint, *env_class;
        const json_t *seed, *options;
        uint64_t step_timeout_ms, max_steps, idle, lifetime, count;
        bool counted; /* count was given: the answer lists the episodes */
        bool shared;  /* "sandbox": "shared": one sandbox and interpreter for them all */
};

static void open_request_free(struct open_request *r)
{
        json_decref(r->clamped);
        json_decref(r->files);
        sbx_buffer_free(&r->data);
}

static bool identifier(const char *name)
{
        if (name == NULL || name[0] == '\0' || strlen(name) > 128 ||
            (name[0] >= '0' && name[0] <= '9'))
                return false;
        for (const char *c = name; *c != '\0'; c++)
                if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
                      (*c >= '0' && *c <= '9') || *c == '_'))
                        return false;
        return true;
}

/* NULL when body is a valid open, else the field at fault (and *why). */
static const char *open_request_parse(const json_t *body, const struct sbx_tenant *tenant,
                                      struct open_request *r, const char **why)
{
        static const char *const known[] = {
                "language",       "code",           "files",  "entrypoint",      "env_class",
                "seed",           "options",        "limits", "step_timeout_ms", "max_steps",
                "idle_timeout_s", "max_lifetime_s", "count",  "sandbox"};
        const char *key;
        json_t *value;
        json_object_foreach((json_t *)body, key, value)
        {
                bool ok = false;
                for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
                        ok |= strcmp(key, known[i]) == 0;
                if (!ok) {
                        *why = "unknown field";
                        return key;
                }
        }
        const json_t *language = json_object_get(body, "language");
        if (language != NULL &&
            !(json_is_string(language) && strcmp(json_string_value(language), "python") == 0)) {
                *why = "episodes run python environments";
                return "language";
        }
        const char *bad = NULL;
        if (sbx_sessions_limits(json_object_get(body, "limits"), tenant->tier, &r->limits,
                                r->clamped, &bad, why) < 0)
                return "limits";
        const json_t *code = json_object_get(body, "code");
        const json_t *listed = json_object_get(body, "files");
        if ((code == NULL) == (listed == NULL)) {
                *why = "send either code (the environment's module) or files and entrypoint";
                return "code";
        }
        if (code != NULL) {
                if (!json_is_string(code) || json_string_length(code) > SBX_MAX_CODE_BYTES) {
                        *why = "a string of at most 4 MiB";
                        return "code";
                }
                if (json_object_get(body, "entrypoint") != NULL) {
                        *why = "comes with files; code is the module " CODE_FILE;
                        return "entrypoint";
                }
                sbx_buffer_append(&r->data, json_string_value(code), json_string_length(code));
                json_array_append_new(r->files,
                                      json_pack("{s:s,s:I,s:b}", "path", CODE_FILE, "size",
                                                (json_int_t)json_string_length(code), "executable",
                                                false));
                r->entrypoint = CODE_FILE;
        } else {
                *why = sbx_sessions_files(listed, r->files, &r->data);
                if (*why != NULL)
                        return "files";
                r->entrypoint = json_string_value(json_object_get(body, "entrypoint"));
                size_t len = r->entrypoint != NULL ? strlen(r->entrypoint) : 0;
                if (len < 4 || !sbx_request_path_valid(r->entrypoint) ||
                    strcmp(r->entrypoint + len - 3, ".py") != 0) {
                        *why = "the relative path of the environment's .py module";
                        return "entrypoint";
                }
        }
        if (r->data.overflow) {
                *why = "the files are over 4 MiB together";
                return "files";
        }
        const json_t *env_class = json_object_get(body, "env_class");
        if (env_class != NULL && !json_is_null(env_class)) {
                r->env_class = json_string_value(env_class);
                if (!identifier(r->env_class)) {
                        *why = "the name of the environment's class in its module";
                        return "env_class";
                }
        }
        r->seed = json_object_get(body, "seed");
        if (r->seed != NULL && !json_is_null(r->seed) && !seed_valid(r->seed)) {
                *why = "an integer from 0 to 2^62, or null";
                return "seed";
        }
        r->options = json_object_get(body, "options");
        uint64_t ceiling = tenant->tier->max.wall_ms ? tenant->tier->max.wall_ms : SBX_LIMIT_DAY_MS;
        r->step_timeout_ms = r->limits.wall_ms;
        const json_t *timeout = json_object_get(body, "step_timeout_ms");
        if (timeout != NULL) {
                if (!json_is_integer(timeout) || json_integer_value(timeout) < 1) {
                        *why = "a positive integer of milliseconds";
                        return "step_timeout_ms";
                }
                r->step_timeout_ms = (uint64_t)json_integer_value(timeout);
                if (r->step_timeout_ms > ceiling) {
                        r->step_timeout_ms = ceiling;
                        json_array_append_new(r->clamped, json_string("step_timeout_ms"));
                }
        }
        const json_t *max_steps = json_object_get(body, "max_steps");
        if (max_steps != NULL && !json_is_null(max_steps)) {
                if (!json_is_integer(max_steps) || json_integer_value(max_steps) < 1) {
                        *why = "a positive integer";
                        return "max_steps";
                }
                r->max_steps = (uint64_t)json_integer_value(max_steps);
        }
        uint64_t lifetime_max = sbx_sessions_tier_max_lifetime_s(tenant->tier);
        r->idle = SBX_SESSIONS_DEFAULT_IDLE_TIMEOUT_S;
        r->lifetime = lifetime_max;
        if (!sbx_sessions_seconds_field(body, "idle_timeout_s", SBX_SESSIONS_MAX_IDLE_TIMEOUT_S,
                                        &r->idle)) {
                *why = "an integer of seconds from 1 to 86400";
                return "idle_timeout_s";
        }
        if (!sbx_sessions_seconds_field(body, "max_lifetime_s", lifetime_max, &r->lifetime)) {
                *why = "an integer of seconds from 1 to the tier's maximum";
                return "max_lifetime_s";
        }
        r->count = 1;
        r->counted = json_object_get(body, "count") != NULL;
        if (r->counted && !sbx_sessions_seconds_field(body, "count", MAX_COUNT, &r->count)) {
                *why = "an integer from 1 to 64";
                return "count";
        }
        const char *sandbox = json_string_value(json_object_get(body, "sandbox"));
        if (json_object_get(body, "sandbox") != NULL &&
            (sandbox == NULL || (strcmp(sandbox, "own") != 0 && strcmp(sandbox, "shared") != 0))) {
                *why = "\"own\" (a sandbox each, the default) or \"shared\" (one for all)";
                return "sandbox";
        }
        r->shared = sandbox != NULL && strcmp(sandbox, "shared") == 0;
        if (r->shared && r->env_class == NULL) {
                /* Module-level functions would be one environment, whatever the count. */
                *why = "a shared sandbox's environments are instances of a class: name it";
                return "env_class";
        }
        return NULL;
}

static struct session *open_entry(const struct sbx_tenant *tenant, const struct open_request *r,
                                  struct session_share *share, unsigned index)
{
        struct session *s = sbx_sessions_entry_new(tenant, "python", &r->limits, r->clamped,
                                                   r->idle, r->lifetime);
        struct episode *e = s != NULL ? calloc(1, sizeof(*e)) : NULL;
        if (e == NULL) {
                sbx_sessions_entry_free(s);
                return NULL;
        }
        s->episode = e;
        e->entrypoint = strdup(r->entrypoint);
        e->env_class = r->env_class != NULL ? strdup(r->env_class) : NULL;
        e->step_timeout_ms = r->step_timeout_ms;
        e->max_steps = r->max_steps;
        e->phase = PHASE_FAILED; /* until its first reset */
        e->index = index;
        if (e->entrypoint == NULL || (r->env_class != NULL && e->env_class == NULL)) {
                sbx_sessions_entry_free(s);
                return NULL;
        }
        if (share != NULL) { /* last: a failure above must not free the share */
                s->share = share;
                share->refs++;
                share->live++;
                share->operations++; /* busy until its first reset, as its entry */
        }
        return s;
}

/* The sandboxes of the entries, side by side; each one's outcome in outcomes (code 0: open). */
/* The sandboxes of the entries (one for all of a share), side by side; each entry's outcome in
 * outcomes (code 0: open). */
static void open_in_engine(struct sbx_api *api, struct session **entries, size_t n,
                           const struct open_request *r, struct outcome *outcomes)
{
        json_t *fields = json_pack("{s:s,s:o,s:[],s:O,s:I,s:I}", "language", "python", "limits",
                                   sbx_sessions_limits_fields(&r->limits), "env", "files", r->files,
                                   "idle_timeout_s", (json_int_t)r->idle, "max_lifetime_s",
                                   (json_int_t)r->lifetime);
        _cleanup_free_ char *text = fields != NULL ? json_dumps(fields, JSON_COMPACT) : NULL;
        json_decref(fields);
        size_t sandboxes = entries[0]->share != NULL ? 1 : n;
        struct sbx_message_session *messages = calloc(sandboxes, sizeof(*messages));
        struct sbx_engine_session_reply *replies = calloc(sandboxes, sizeof(*replies));
        struct sbx_error *errs = calloc(sandboxes, sizeof(*errs));
        if (text == NULL || messages == NULL || replies == NULL || errs == NULL) {
                for (size_t i = 0; i < n; i++)
                        outcomes[i] = (struct outcome){.code = ENOMEM, .detail = "out of memory"};
                goto out;
        }
        for (size_t i = 0; i < sandboxes; i++) {
                messages[i] = (struct sbx_message_session){
                        .op = SBX_SESSION_OPEN,
                        .fields = text,
                        .fields_len = strlen(text),
                        .data = (const uint8_t *)r->data.data,
                        .data_len = r->data.len,
                };
                memcpy(messages[i].session_id, sbx_sessions_engine_id(entries[i]),
                       sizeof(messages[i].session_id));
        }
        sbx_engine_client_sessions(api->engine, messages, sandboxes, SBX_SESSIONS_OPEN_TIMEOUT_MS,
                                   replies, errs, NULL);
        for (size_t i = 0; i < n; i++) {
                if (i >= sandboxes) { /* a share's: its sandbox's outcome */
                        outcomes[i] = outcomes[0];
                        outcomes[i].result = NULL;
                } else {
                        bool opened = errs[i].code == 0 && replies[i].reply.error == 0;
                        if (opened && entries[i]->share == NULL) {
                                /* Its own sandbox: its steps go through its channel. */
                                pthread_mutex_lock(&api->sessions->lock);
                                entries[i]->channel = replies[i].channel;
                                pthread_mutex_unlock(&api->sessions->lock);
                                replies[i].channel = -1;
                        }
                        outcome_take(api, entries[i], &outcomes[i], errs[i].code != 0 ? -1 : 0,
                                     &errs[i], &replies[i]);
                }
                if (outcomes[i].code != 0)
                        continue;
                bool pooled = json_is_true(
                        json_object_get(outcomes[i < sandboxes ? i : 0].result, "pooled"));
                pthread_mutex_lock(&api->sessions->lock);
                entries[i]->pooled = pooled;
                pthread_mutex_unlock(&api->sessions->lock);
        }
        for (size_t i = 0; i < sandboxes; i++) {
                json_decref(outcomes[i].result);
                outcomes[i].result = NULL;
        }
out:
        free(messages);
        free(replies);
        free(errs);
}

static enum MHD_Result handle_open(struct sbx_api *api, struct MHD_Connection *connection,
                                   const struct sbx_tenant *tenant, const json_t *body)
{
        if (!sbx_tier_allows_language(tenant->tier, "python"))
                return sbx_http_respond_problem(api, connection, 403,
                                                "the tier does not allow python", NULL, 0, NULL, 0);
        _cleanup_(open_request_free) struct open_request r = {.clamped = json_array(),
                                                              .files = json_array()};
        sbx_buffer_init(&r.data, SBX_MAX_CODE_BYTES);
        const char *why = NULL;
        const char *bad = open_request_parse(body, tenant, &r, &why);
        if (bad != NULL) {
                if (strcmp(bad, "files") == 0 && r.data.overflow)
                        return sbx_http_respond_problem(api, connection, 413, why, NULL, 0, NULL,
                                                        0);
                return sbx_sessions_bad_request(api, connection, bad, why);
        }
        size_t n = (size_t)r.count;
        struct session **entries = calloc(n, sizeof(*entries));
        struct outcome *outcomes = calloc(n, sizeof(*outcomes));
        struct job *jobs = calloc(n, sizeof(*jobs));
        size_t made = 0;
        enum MHD_Result answer;
        /* A shared sandbox: its engine session has an id of its own, and the request's jobs
         * own it until the first resets are done. */
        struct session_share *share = r.shared ? calloc(1, sizeof(*share)) : NULL;
        struct sbx_error id_err = {0};
        bool shared_ok =
                !r.shared || (share != NULL && sbx_execution_id_new(share->id, &id_err) == 0);
        if (share != NULL)
                share->owner = jobs;
        if (entries != NULL && outcomes != NULL && jobs != NULL && shared_ok)
                for (; made < n; made++)
                        if ((entries[made] = open_entry(tenant, &r, share, (unsigned)made)) == NULL)
                                break;
        if (made < n) {
                for (size_t i = 0; i < made; i++)
                        sbx_sessions_entry_free(entries[i]); /* the last one frees the share */
                if (made == 0)
                        free(share);
                answer = sbx_http_respond_problem(api, connection, 500, "out of memory", NULL, 0,
                                                  NULL, 0);
                goto out;
        }
        uint64_t tenant_max = tenant->tier->max_episodes ? tenant->tier->max_episodes : 32;
        if (!sbx_sessions_add(api, connection, tenant, entries, n, tenant_max, &answer)) {
                for (size_t i = 0; i < n; i++)
                        sbx_sessions_entry_free(entries[i]);
                goto out;
        }
        /* From here each entry is in the table, held and busy (nobody else's operation can
         * begin before its first reset is done): the jobs end the operations and release
         * them. */
        for (size_t i = 0; i < n; i++)
                jobs[i] = (struct job){.s = entries[i], .begun = true};
        open_in_engine(api, entries, n, &r, outcomes);
        const struct outcome *failed = NULL;
        for (size_t i = 0; i < n; i++)
                if (outcomes[i].code != 0 && failed == NULL)
                        failed = &outcomes[i];
        if (failed == NULL) {
                /* The first reset of each, seeds seed + i. */
                for (size_t i = 0; i < n; i++) {
                        json_t *seed =
                                r.seed != NULL && !json_is_null(r.seed)
                                        ? json_integer(json_integer_value(r.seed) + (json_int_t)i)
                                        : json_null();
                        jobs[i].args = reset_args(entries[i]->episode, seed, r.options);
                        json_decref(seed);
                        if (jobs[i].args == NULL) {
                                job_refuse(&jobs[i], 500, "out of memory");
                                sbx_sessions_end_operation(api, entries[i]);
                                jobs[i].begun = false;
                        }
                }
                jobs_run(api, tenant, jobs, n);
        } else {
                for (size_t i = 0; i < n; i++)
                        sbx_sessions_end_operation(api, entries[i]);
                for (size_t i = 0; i < n; i++)
                        jobs[i].begun = false;
        }
        /* All or none: one failure closes every one that opened. */
        const struct job *refused = NULL, *raised = NULL;
        for (size_t i = 0; failed == NULL && i < n; i++) {
                if (jobs[i].refused && refused == NULL)
                        refused = &jobs[i];
                const char *status = json_string_value(json_object_get(jobs[i].answer, "status"));
                if (!jobs[i].refused && raised == NULL &&
                    (status == NULL || strcmp(status, "ok") != 0))
                        raised = &jobs[i];
        }
        if (failed != NULL || refused != NULL || raised != NULL) {
                for (size_t i = 0; i < n; i++) {
                        pthread_mutex_lock(&api->sessions->lock);
                        sbx_sessions_mark_ended(api->sessions, entries[i], "never_opened");
                        pthread_mutex_unlock(&api->sessions->lock);
                        int code;
                        char detail[SBX_ERROR_MESSAGE_MAX + 64];
                        bool own_sandbox = entries[i]->share == NULL || i == 0;
                        if (outcomes[i].code == 0 && own_sandbox &&
                            episode_close_sandbox(api, entries[i], &code, detail, sizeof(detail)) <
                                    0)
                                sbx_warn("episode %s: close: %s", entries[i]->id, detail);
                }
                if (failed != NULL) {
                        sbx_warn("episode: open: %s", failed->detail);
                        answer = sbx_sessions_engine_failure(
                                api, connection, failed->code == EINVAL ? EIO : failed->code,
                                failed->detail, NULL);
                } else if (refused != NULL) {
                        answer = respond_refused(api, connection, refused);
                } else {
                        /* The environment could not be made or reset: the client's code. */
                        json_t *extra =
                                json_pack("{s:O,s:O}", "reset_status",
                                          json_object_get(raised->answer, "status"), "error",
                                          json_object_get(raised->answer, "error")
                                                  ? json_object_get(raised->answer, "error")
                                                  : json_null());
                        answer = sbx_http_respond_problem_of(
                                api, connection, 422, sbx_problem_default_slug(422),
                                "the environment's first reset did not succeed", NULL, 0, NULL, 0,
                                extra);
                }
                goto out_jobs;
        }
        sbx_metrics_count_opened(api->metrics, SBX_METRICS_EPISODES, n);
        json_t *requested = sbx_sessions_requested(body);
        json_t *list = json_array();
        for (size_t i = 0; i < n; i++) {
                struct session *s = entries[i];
                const struct sbx_audit_session row = {
                        .id = s->id,
                        .tenant = tenant->name,
                        .language = "python",
                        .created_at_ms = (int64_t)s->created_ms,
                        .requested = requested,
                        .effective = s->limits,
                        .clamped = s->clamped,
                        .kind = "episode",
                };
                struct sbx_error err = {0};
                if (sbx_audit_session_begin(api->audit, &row, &err) < 0)
                        sbx_warn("audit: episode %s: %s", s->id, err.message);
                sbx_sessions_place(api->sessions, s);
                pthread_mutex_lock(&api->sessions->lock);
                json_t *object = episode_json(s);
                pthread_mutex_unlock(&api->sessions->lock);
                static const char *const first[] = {"observation", "info", "timing"};
                for (size_t f = 0; object != NULL && f < 3; f++)
                        json_object_set(object, first[f],
                                        json_object_get(jobs[i].answer, first[f]));
                json_array_append_new(list, object);
        }
        json_decref(requested);
        sbx_info("episode: %zu open for tenant %s (%s)", n, tenant->name, r.entrypoint);
        if (r.counted)
                answer = sbx_http_respond_json(api, connection, 201, JSON_CONTENT_TYPE,
                                               json_pack("{s:o}", "episodes", list), NULL, 0);
        else {
                /* Where it lives (a fleet's HAProxy routes its steps by it, as a session's). */
                json_t *one = json_array_get(list, 0);
                const char *id = json_string_value(json_object_get(one, "id"));
                char location[sizeof(EPISODES_PATH) + SBX_EXECUTION_ID_CHARS + 2];
                snprintf(location, sizeof(location), "%s/%s", EPISODES_PATH, id ? id : "");
                const struct sbx_http_header header = {MHD_HTTP_HEADER_LOCATION, location};
                answer = sbx_http_respond_json(api, connection, 201, JSON_CONTENT_TYPE,
                                               json_incref(one), id ? &header : NULL, id ? 1 : 0);
                json_decref(list);
        }
out_jobs:
        jobs_free(api, jobs, n);
        jobs = NULL;
out:
        for (size_t i = 0; outcomes != NULL && i < n; i++)
                json_decref(outcomes[i].result);
        free(jobs);
        free(outcomes);
        free(entries);
        return answer;
}

/* ---- DELETE ---- */

static enum MHD_Result handle_close(struct sbx_api *api, struct MHD_Connection *connection,
                                    const struct sbx_tenant *tenant, struct session *s)
{
        /* Its step in progress is canceled (interrupted, then its interpreter restarted if it
         * does not stop: it answers canceled), once; an operation of a shared sandbox is waited
         * for (it carries other episodes' steps). Then the episode ends. */
        bool ended;
        uint64_t waited_from = sbx_now_ms(), canceled = 0;
        while (!sbx_sessions_begin_operation(api, s, &ended)) {
                if (ended)
                        return sbx_sessions_not_found(api, connection, s);
                pthread_mutex_lock(&api->sessions->lock);
                bool its_own = s->busy && s->share == NULL;
                pthread_mutex_unlock(&api->sessions->lock);
                uint64_t request_id = its_own ? atomic_load(request_slot(s)) : 0;
                if (request_id != 0 && request_id != canceled) {
                        sbx_engine_client_cancel_session(api->engine, sbx_sessions_engine_id(s),
                                                         request_id);
                        canceled = request_id;
                }
                if (sbx_now_ms() - waited_from > DELETE_WAIT_MS)
                        return sbx_sessions_busy(api, connection, s, false);
                usleep(5000);
        }
        pthread_mutex_lock(&api->sessions->lock);
        bool made = s->episode->resets > 0; /* an environment exists to close */
        pthread_mutex_unlock(&api->sessions->lock);
        int code = 0;
        char detail[SBX_ERROR_MESSAGE_MAX + 64];
        bool restarted = made && environment_close(api, tenant, s);
        if (s->share == NULL) {
                sbx_sessions_end_operation_ended(api, s, "deleted");
                if (episode_close_sandbox(api, s, &code, detail, sizeof(detail)) < 0)
                        return sbx_sessions_engine_failure(
                                api, connection, code == EINVAL ? EIO : code, detail, NULL);
                return sbx_http_respond(api, connection, 204, JSON_CONTENT_TYPE, "", 0, NULL, 0);
        }
        /* One of a shared sandbox's: the sandbox lives on while another one does (its record
         * ends now). A close() that had to be interrupted restarted the interpreter: the other
         * environments went with it. */
        if (restarted) {
                pthread_mutex_lock(&api->sessions->lock);
                share_each(api, s->share, true, NULL);
                pthread_mutex_unlock(&api->sessions->lock);
        }
        pthread_mutex_lock(&api->sessions->lock);
        sbx_sessions_mark_ended(api->sessions, s, "deleted");
        bool last = s->share->live == 0;
        json_t *summary = last ? NULL : sbx_episode_summary(s);
        pthread_mutex_unlock(&api->sessions->lock);
        sbx_sessions_end_operation(api, s);
        if (last) {
                if (episode_close_sandbox(api, s, &code, detail, sizeof(detail)) < 0)
                        return sbx_sessions_engine_failure(
                                api, connection, code == EINVAL ? EIO : code, detail, NULL);
        } else {
                const struct sbx_audit_session row = {
                        .id = s->id,
                        .ended_at_ms = (int64_t)sbx_wall_clock_ms(),
                        .end_reason = "deleted",
                        .summary = summary,
                };
                struct sbx_error err = {0};
                if (sbx_audit_session_end(api->audit, &row, &err) < 0)
                        sbx_warn("audit: episode %s: %s", s->id, err.message);
                if (api->sessions->fleet != NULL)
                        sbx_placement_forget(api->sessions->fleet, s->id);
                json_decref(summary);
        }
        return sbx_http_respond(api, connection, 204, JSON_CONTENT_TYPE, "", 0, NULL, 0);
}

/* ---- Routing ---- */

bool sbx_episodes_route_reads_body(const char *url, const char *method)
{
        size_t prefix = strlen(EPISODES_PATH);
        if (strncmp(url, EPISODES_PATH, prefix) != 0)
                return false;
        const char *rest = url + prefix;
        if (strcmp(method, MHD_HTTP_METHOD_PUT) == 0)
                return strstr(rest, "/files/") != NULL;
        if (strcmp(method, MHD_HTTP_METHOD_POST) != 0)
                return false;
        if (rest[0] == '\0' || strcmp(rest, "/") == 0 || strcmp(rest, "/step") == 0)
                return true;
        return strlen(rest) > 1 + SBX_EXECUTION_ID_CHARS &&
               (strcmp(rest + 1 + SBX_EXECUTION_ID_CHARS, "/step") == 0 ||
                strcmp(rest + 1 + SBX_EXECUTION_ID_CHARS, "/reset") == 0);
}

static enum MHD_Result route_episode(struct sbx_api *api, struct MHD_Connection *connection,
                                     const char *method, const struct sbx_tenant *tenant,
                                     struct session *s, const char *after, const void *body,
                                     size_t body_len, bool body_too_large)
{
        bool read = strcmp(method, MHD_HTTP_METHOD_GET) == 0 ||
                    strcmp(method, MHD_HTTP_METHOD_HEAD) == 0;
        enum MHD_Result answer = MHD_NO;
        if (after[0] == '\0') {
                if (read) {
                        pthread_mutex_lock(&api->sessions->lock);
                        json_t *object = s->ended ? NULL : episode_json(s);
                        pthread_mutex_unlock(&api->sessions->lock);
                        if (object == NULL)
                                return sbx_sessions_not_found(api, connection, s);
                        return sbx_http_respond_json(api, connection, 200, JSON_CONTENT_TYPE,
                                                     object, NULL, 0);
                }
                if (strcmp(method, MHD_HTTP_METHOD_DELETE) == 0)
                        return handle_close(api, connection, tenant, s);
                return sbx_http_respond_method_not_allowed(api, connection, method,
                                                           "GET, HEAD, DELETE");
        }
        if (strcmp(after, "/step") == 0 || strcmp(after, "/reset") == 0) {
                if (strcmp(method, MHD_HTTP_METHOD_POST) != 0)
                        return sbx_http_respond_method_not_allowed(api, connection, method, "POST");
                if (sbx_http_draining())
                        return sbx_http_respond_shutting_down(api, connection);
                /* A reset may come without a body. */
                json_t *parsed = body_len == 0 && !body_too_large && strcmp(after, "/reset") == 0
                                         ? json_object()
                                         : sbx_sessions_parse_body(api, connection, body, body_len,
                                                                   body_too_large, &answer);
                if (parsed == NULL)
                        return answer;
                answer = handle_step(api, connection, tenant, s, parsed,
                                     strcmp(after, "/step") == 0);
                json_decref(parsed);
                return answer;
        }
        return sbx_sessions_file_route(api, connection, s, method, after, body, body_len,
                                       body_too_large);
}

enum MHD_Result sbx_episodes_route(struct sbx_api *api, struct MHD_Connection *connection,
                                   const char *url, const char *method,
                                   const struct sbx_config *tenants, const void *body,
                                   size_t body_len, bool body_too_large, bool *handled)
{
        *handled = false;
        size_t prefix = strlen(EPISODES_PATH);
        if (strncmp(url, EPISODES_PATH, prefix) != 0 || (url[prefix] != '\0' && url[prefix] != '/'))
                return MHD_NO;
        *handled = true;
        const struct sbx_tenant *tenant = sbx_http_authenticate(connection, tenants);
        if (tenant == NULL)
                return sbx_http_respond_unauthorized(api, connection);
        bool read = strcmp(method, MHD_HTTP_METHOD_GET) == 0 ||
                    strcmp(method, MHD_HTTP_METHOD_HEAD) == 0;
        bool post = strcmp(method, MHD_HTTP_METHOD_POST) == 0;
        const char *rest = url + prefix;
        enum MHD_Result answer = MHD_NO;

        if (rest[0] == '\0' || strcmp(rest, "/") == 0 || strcmp(rest, "/step") == 0) {
                bool batch = strcmp(rest, "/step") == 0;
                if (post) {
                        if (sbx_http_draining())
                                return sbx_http_respond_shutting_down(api, connection);
                        json_t *parsed = sbx_sessions_parse_body(api, connection, body, body_len,
                                                                 body_too_large, &answer);
                        if (parsed == NULL)
                                return answer;
                        answer = batch ? handle_batch(api, connection, tenant, parsed)
                                       : handle_open(api, connection, tenant, parsed);
                        json_decref(parsed);
                        return answer;
                }
                if (batch || !read)
                        return sbx_http_respond_method_not_allowed(
                                api, connection, method, batch ? "POST" : "GET, HEAD, POST");
                json_t *list = json_array();
                pthread_mutex_lock(&api->sessions->lock);
                sbx_sessions_forget_old(api->sessions, sbx_wall_clock_ms());
                for (size_t i = 0; i < api->sessions->n; i++) {
                        const struct session *s = api->sessions->items[i];
                        if (!s->ended && s->episode != NULL && strcmp(s->tenant, tenant->name) == 0)
                                json_array_append_new(list, episode_json(s));
                }
                pthread_mutex_unlock(&api->sessions->lock);
                return sbx_http_respond_json(api, connection, 200, JSON_CONTENT_TYPE,
                                             json_pack("{s:o}", "episodes", list), NULL, 0);
        }

        const char *after;
        struct session *s = sbx_sessions_find_in_url(api->sessions, rest, tenant, true, &after);
        if (s == NULL) {
                const struct sbx_sessions_request request = {method, url, body, body_len,
                                                             body_too_large};
                return sbx_sessions_not_held(api, connection, rest, tenant, true, &request);
        }
        answer = route_episode(api, connection, method, tenant, s, after, body, body_len,
                               body_too_large);
        sbx_sessions_release(api->sessions, s);
        return answer;
}
