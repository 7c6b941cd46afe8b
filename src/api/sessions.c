/* Sessions over HTTP (sessions.h). */
#define _GNU_SOURCE
#include "api/sessions.h"
#include "api/session_registry.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "api/engine_client.h"
#include "api/live_config.h"
#include "api/forward.h"
#include "api/respond.h"
#include "api/sse.h"
#include "model/limits.h"
#include "model/request.h"
#include "model/result_json.h"
#include "service/audit.h"
#include "service/placement_pg.h"
#include "service/quota.h"
#include "util/cleanup.h"
#include "util/log.h"
#include "util/time.h"

#define SESSIONS_PATH "/v1/sessions"

/* What a session gets when its request and its tier say nothing. */
#define DEFAULT_MAX_SESSIONS   8
#define DEFAULT_MAX_LIFETIME_S 3600
/* Ended sessions remembered (for a 404 that says why) at most this long, and this many. */
#define ENDED_KEPT_MS    (3600u * 1000u)
#define ENDED_KEPT_COUNT 4096
/* Bounds of the engine's answers, past the run's own deadline. */
#define RUN_SLACK_MS SBX_ENGINE_RUN_SLACK_MS

struct sbx_sessions *sbx_sessions_new(struct sbx_metrics *metrics, struct sbx_audit *audit,
                                      struct sbx_quota *quota, struct sbx_quota_pg *fleet)
{
        struct sbx_sessions *sessions = calloc(1, sizeof(*sessions));
        if (sessions == NULL)
                return NULL;
        sessions->metrics = metrics;
        sessions->audit = audit;
        sessions->quota = quota;
        sessions->fleet = fleet;
        pthread_mutex_init(&sessions->lock, NULL);
        return sessions;
}

void sbx_sessions_entry_free(struct session *s)
{
        if (s == NULL)
                return;
        free(s->tenant);
        json_decref(s->limits);
        json_decref(s->clamped);
        sbx_episode_free(s->episode);
        if (s->channel >= 0)
                close(s->channel);
        if (s->share != NULL && --s->share->refs == 0)
                free(s->share);
        free(s);
}

void sbx_sessions_free(struct sbx_sessions *sessions)
{
        if (sessions == NULL)
                return;
        for (size_t i = 0; i < sessions->n; i++)
                sbx_sessions_entry_free(sessions->items[i]);
        free(sessions->items);
        pthread_mutex_destroy(&sessions->lock);
        free(sessions);
}

/* Drops ended sessions past what is kept. With the lock held. */
void sbx_sessions_forget_old(struct sbx_sessions *sessions, uint64_t now_ms)
{
        size_t ended = 0;
        for (size_t i = 0; i < sessions->n; i++)
                ended += sessions->items[i]->ended;
        for (size_t i = 0; i < sessions->n;) {
                struct session *s = sessions->items[i];
                if (s->ended && !s->busy && s->users == 0 &&
                    (now_ms - s->ended_ms > ENDED_KEPT_MS || ended > ENDED_KEPT_COUNT)) {
                        sbx_sessions_entry_free(s);
                        sessions->items[i] = sessions->items[--sessions->n];
                        ended--;
                        continue;
                }
                i++;
        }
}

/* The session id of tenant, held (users) until release; with the lock held. */
struct session *sbx_sessions_find(struct sbx_sessions *sessions, const char *id, const char *tenant,
                                  bool episode)
{
        for (size_t i = 0; i < sessions->n; i++)
                if (strcmp(sessions->items[i]->id, id) == 0 &&
                    strcmp(sessions->items[i]->tenant, tenant) == 0 &&
                    (sessions->items[i]->episode != NULL) == episode) {
                        sessions->items[i]->users++;
                        return sessions->items[i];
                }
        return NULL;
}

struct session *sbx_sessions_find_in_url(struct sbx_sessions *sessions, const char *rest,
                                         const struct sbx_tenant *tenant, bool episode,
                                         const char **after)
{
        char id[SBX_EXECUTION_ID_CHARS + 1];
        snprintf(id, sizeof(id), "%.*s", SBX_EXECUTION_ID_CHARS, rest + 1);
        *after = rest + 1 + strnlen(rest + 1, SBX_EXECUTION_ID_CHARS);
        if (!sbx_execution_id_valid(id) || ((*after)[0] != '\0' && (*after)[0] != '/'))
                return NULL;
        pthread_mutex_lock(&sessions->lock);
        struct session *s = sbx_sessions_find(sessions, id, tenant->name, episode);
        pthread_mutex_unlock(&sessions->lock);
        return s;
}

void sbx_sessions_release(struct sbx_sessions *sessions, struct session *s)
{
        pthread_mutex_lock(&sessions->lock);
        s->users--;
        pthread_mutex_unlock(&sessions->lock);
}

void sbx_sessions_mark_ended(struct sbx_sessions *sessions, struct session *s, const char *reason)
{
        if (s->ended)
                return;
        if (s->share != NULL && --s->share->live == 0)
                sessions->shares_open--;
        sbx_metrics_count_ended(sessions->metrics,
                                s->episode != NULL ? SBX_METRICS_EPISODES : SBX_METRICS_SESSIONS,
                                reason);
        s->ended = true;
        s->ended_ms = sbx_wall_clock_ms();
        snprintf(s->end_reason, sizeof(s->end_reason), "%s", reason);
}

void sbx_sessions_ended(struct sbx_sessions *sessions, const struct sbx_message_session *ended)
{
        json_error_t json_error;
        json_t *fields = json_loadb(ended->fields, ended->fields_len, 0, &json_error);
        const char *said = json_string_value(json_object_get(fields, "reason"));
        json_t *cpu_us = json_object_get(json_object_get(fields, "evidence"), "cpu_usage_us");
        uint64_t cpu_ms = (uint64_t)json_integer_value(cpu_us) / 1000;
        /* The first end stands: the API's (a step past its deadline, a DELETE) when it came
         * first, else the engine's. */
        char reason[sizeof(((struct session *)0)->end_reason)];
        snprintf(reason, sizeof(reason), "%s", said != NULL ? said : "agent_died");
        /* Every entry of the sandbox: its own, or a share's (each with a row of its own). */
        struct ended_row {
                char id[SBX_EXECUTION_ID_CHARS + 1];
                char reason[sizeof(((struct session *)0)->end_reason)];
                json_t *summary;
        } *rows = NULL;
        size_t n_rows = 0;
        pthread_mutex_lock(&sessions->lock);
        rows = calloc(sessions->n + 1, sizeof(*rows));
        for (size_t i = 0; i < sessions->n; i++) {
                struct session *s = sessions->items[i];
                if (strcmp(sbx_sessions_engine_id(s), ended->session_id) != 0)
                        continue;
                sbx_sessions_mark_ended(sessions, s, reason);
                /* What ran after its last run, background processes included. */
                uint64_t *charged = sbx_sessions_cpu_charged(s);
                if (cpu_ms > *charged) {
                        sbx_quota_charge(sessions->quota, s->tenant, cpu_ms - *charged,
                                         sbx_now_ms());
                        *charged = cpu_ms;
                }
                if (rows == NULL)
                        continue;
                struct ended_row *row = &rows[n_rows++];
                snprintf(row->id, sizeof(row->id), "%s", s->id);
                snprintf(row->reason, sizeof(row->reason), "%s", s->end_reason);
                row->summary = s->episode != NULL ? sbx_episode_summary(s) : NULL;
        }
        pthread_mutex_unlock(&sessions->lock);
        if (rows != NULL && n_rows == 0) { /* forgotten already: the engine's word */
                snprintf(rows[0].id, sizeof(rows[0].id), "%s", ended->session_id);
                snprintf(rows[0].reason, sizeof(rows[0].reason), "%s", reason);
                n_rows = 1;
        }
        for (size_t i = 0; i < n_rows; i++) {
                const struct sbx_audit_session row = {
                        .id = rows[i].id,
                        .ended_at_ms = (int64_t)sbx_wall_clock_ms(),
                        .end_reason = rows[i].reason,
                        .evidence = json_object_get(fields, "evidence"),
                        .summary = rows[i].summary,
                };
                struct sbx_error err = {0};
                int written = sbx_audit_session_end(sessions->audit, &row, &err);
                if (written < 0)
                        sbx_warn("audit: session %s: %s", rows[i].id, err.message);
                /* Once: a DELETE records the end from its CLOSE's answer, and the worker's
                 * SESSION_ENDED that follows finds it recorded. */
                if (written > 0)
                        sbx_info("%s %s: ended (%s)",
                                 rows[i].summary != NULL ? "episode" : "session", rows[i].id,
                                 rows[i].reason);
                if (sessions->fleet != NULL)
                        sbx_placement_forget(sessions->fleet, rows[i].id);
                json_decref(rows[i].summary);
        }
        free(rows);
        json_decref(fields);
}

size_t sbx_sessions_open_count(struct sbx_sessions *sessions, bool episodes)
{
        size_t open = 0;
        pthread_mutex_lock(&sessions->lock);
        for (size_t i = 0; i < sessions->n; i++)
                open += !sessions->items[i]->ended &&
                        (sessions->items[i]->episode != NULL) == episodes;
        pthread_mutex_unlock(&sessions->lock);
        return open;
}

json_t *sbx_sessions_json(const struct session *s)
{
        json_t *object =
                json_pack("{s:s,s:s,s:s,s:I,s:I,s:I,s:I,s:O,s:O}", "id", s->id, "language",
                          s->language, "state",
                          s->ended  ? "ended"
                          : s->busy ? "running"
                                    : "idle",
                          "created_at", (json_int_t)s->created_ms, "last_activity_at",
                          (json_int_t)s->last_activity_ms, "expires_at", (json_int_t)s->expires_ms,
                          "idle_timeout_s", (json_int_t)s->idle_timeout_s, "limits", s->limits,
                          "clamped", s->clamped);
        if (object != NULL)
                json_object_set_new(object, "pooled", json_boolean(s->pooled));
        if (object != NULL && s->ended)
                json_object_set_new(object, "end_reason", json_string(s->end_reason));
        return object;
}

/* ---- Answers ---- */

enum MHD_Result sbx_sessions_bad_request(struct sbx_api *api, struct MHD_Connection *connection,
                                         const char *field, const char *message)
{
        const struct sbx_problem_field problem_field = {field, message};
        char detail[256];
        snprintf(detail, sizeof(detail), "%s: %s", field, message);
        return sbx_http_respond_problem(api, connection, 400, detail, &problem_field, 1, NULL, 0);
}

void sbx_sessions_place(struct sbx_sessions *sessions, const struct session *s)
{
        if (sessions->fleet == NULL)
                return;
        const char *kind = s->episode != NULL ? "episode" : "session";
        struct sbx_error err = {0};
        if (sbx_placement_record(sessions->fleet, kind, s->id, s->tenant, (int64_t)s->expires_ms,
                                 &err) < 0)
                sbx_warn("store: placement of %s %s: %s", kind, s->id, err.message);
}

enum MHD_Result sbx_sessions_not_held(struct sbx_api *api, struct MHD_Connection *connection,
                                      const char *rest, const struct sbx_tenant *tenant,
                                      bool episode, const struct sbx_sessions_request *request)
{
        const char *kind = episode ? "episode" : "session";
        char id[SBX_EXECUTION_ID_CHARS + 1];
        snprintf(id, sizeof(id), "%.*s", SBX_EXECUTION_ID_CHARS, rest + 1);
        struct sbx_placement where;
        struct sbx_error err = {0};
        int found = 0;
        if (api->sessions->fleet != NULL && sbx_execution_id_valid(id)) {
                found = sbx_placement_find(api->sessions->fleet, kind, id, tenant->name, &where,
                                           &err);
                if (found < 0)
                        sbx_debug("store: placement of %s %s: %s", kind, id, err.message);
        }
        char detail[1024];
        if (found == 1 && !where.alive) {
                snprintf(detail, sizeof(detail),
                         "the %s lived on node '%s', which stopped answering: its sandbox and "
                         "everything in it are lost; open a new one",
                         kind, where.node);
                return sbx_http_respond_problem_of(
                        api, connection, 404, "node-gone", detail, NULL, 0, NULL, 0,
                        json_pack("{s:s,s:I}", "node", where.node, "node_alive_until",
                                  (json_int_t)where.alive_until_ms));
        }
        const char *self = found == 1 ? sbx_quota_pg_node(api->sessions->fleet) : NULL;
        if (found == 1 && strcmp(where.node, self) != 0) {
                const char *why = "it came forwarded already";
                enum MHD_Result answer;
                if (!sbx_forward_was_forwarded(connection) && !request->body_too_large &&
                    where.url[0] != '\0') {
                        if (sbx_forward(api, connection, where.url, self, request->method,
                                        request->url, request->body, request->body_len, &answer,
                                        &err) == 1)
                                return answer;
                        why = err.message;
                        sbx_warn("forward to node '%s' at %s: %s", where.node, where.url,
                                 err.message);
                } else if (where.url[0] == '\0') {
                        why = "its node advertises no address";
                }
                snprintf(detail, sizeof(detail),
                         "the %s lives on node '%s', not on this one ('%s'), and the request "
                         "could not be forwarded there (%.200s): send it through the fleet's "
                         "load balancer, which routes it by its id",
                         kind, where.node, self, why);
                return sbx_http_respond_problem_of(api, connection, 421, "misdirected", detail,
                                                   NULL, 0, NULL, 0,
                                                   json_pack("{s:s}", "node", where.node));
        }
        snprintf(detail, sizeof(detail), "no such %s", kind);
        return sbx_http_respond_problem(api, connection, 404, detail, NULL, 0, NULL, 0);
}

/* What the 404 of an ended session says: its detail, and the problem's extra members
 * ({"end_reason"}). s has ended (its reason no longer changes). */
static json_t *ended_problem_parts(const struct session *s, char *detail, size_t size)
{
        snprintf(detail, size, "the %s has ended: %s", s->episode != NULL ? "episode" : "session",
                 s->end_reason);
        return json_pack("{s:s}", "end_reason", s->end_reason);
}

enum MHD_Result sbx_sessions_not_found(struct sbx_api *api, struct MHD_Connection *connection,
                                       const struct session *s)
{
        if (s == NULL)
                return sbx_http_respond_problem(api, connection, 404, "no such session", NULL, 0,
                                                NULL, 0);
        char detail[128];
        json_t *extra = ended_problem_parts(s, detail, sizeof(detail));
        return sbx_http_respond_problem_of(api, connection, 404, sbx_problem_default_slug(404),
                                           detail, NULL, 0, NULL, 0, extra);
}

/* The answer to an engine failure (no SESSION_REPLY, or its error). */
enum MHD_Result sbx_sessions_engine_failure(struct sbx_api *api, struct MHD_Connection *connection,
                                            int code, const char *detail, const char *path)
{
        switch (code) {
        case EBUSY:
                return sbx_http_respond_unavailable(
                        api, connection, SBX_PROBLEM_AT_CAPACITY, detail,
                        sbx_quota_capacity_retry_after(api->quota, sbx_now_ms()), NULL);
        case ESHUTDOWN:
                return sbx_http_respond_shutting_down(api, connection);
        case EINVAL:
                return sbx_sessions_bad_request(api, connection, path != NULL ? "path" : "body",
                                                detail);
        case ENOENT:
                return sbx_http_respond_problem(api, connection, 404, detail, NULL, 0, NULL, 0);
        case ENOSPC:
        case EFBIG:
                return sbx_http_respond_problem(api, connection, 413, detail, NULL, 0, NULL, 0);
        case EEXIST:
                return sbx_http_respond_problem(api, connection, 409, detail, NULL, 0, NULL, 0);
        case EPIPE:
        case EAGAIN:
        case ETIMEDOUT:
                return sbx_http_respond_unavailable(api, connection, "engine-unavailable", detail,
                                                    1, NULL);
        default:
                return sbx_http_respond_problem(api, connection, 500, detail, NULL, 0, NULL, 0);
        }
}

/* An operation's engine failure: ESRCH (the engine no longer has the session: it ended
 * meanwhile, idle or its agent gone, and is marked so) is the 404 that says why, as for a
 * request that finds it ended. */
static enum MHD_Result operation_failure(struct sbx_api *api, struct MHD_Connection *connection,
                                         const struct session *s, int code, const char *detail,
                                         const char *path)
{
        pthread_mutex_lock(&api->sessions->lock);
        bool ended = s->ended;
        pthread_mutex_unlock(&api->sessions->lock);
        if (code == ESRCH && ended)
                return sbx_sessions_not_found(api, connection, s);
        return sbx_sessions_engine_failure(api, connection, code, detail, path);
}

/* ---- Calls to the engine ---- */

/* One operation; 0 with *reply (its error 0), or -1 with *code and detail for the answer. The
 * session is marked ended when the engine says it is gone. */
int sbx_sessions_call_engine(struct sbx_api *api, struct session *s, enum sbx_session_op op,
                             json_t *fields, const void *data, size_t data_len, uint64_t timeout_ms,
                             struct sbx_engine_session_reply *reply, int *code, char *detail,
                             size_t detail_size)
{
        _cleanup_free_ char *text = json_dumps(fields, JSON_COMPACT);
        json_decref(fields);
        if (text == NULL) {
                *code = ENOMEM;
                snprintf(detail, detail_size, "out of memory");
                return -1;
        }
        struct sbx_message_session message = {
                .op = op,
                .fields = text,
                .fields_len = strlen(text),
                .data = data,
                .data_len = data_len,
        };
        memcpy(message.session_id, sbx_sessions_engine_id(s), sizeof(message.session_id));
        /* A session's operations go through its channel; its opening and closing through the
         * engine, as does everything of a sandbox that entries share (their operations may
         * overlap). */
        const struct sbx_engine_session_call with = {
                .direct = op != SBX_SESSION_OPEN && op != SBX_SESSION_CLOSE && s->share == NULL &&
                          s->channel >= 0,
                .channel = s->channel,
        };
        struct sbx_error err = {0};
        if (sbx_engine_client_session(api->engine, &message, timeout_ms, &with, reply, &err) < 0) {
                *code = err.code;
                snprintf(detail, detail_size, "%s", err.message);
                return -1;
        }
        if (reply->reply.error == 0)
                return 0;
        sbx_sessions_reply_failure(api, s, reply, code, detail, detail_size);
        return -1;
}

void sbx_sessions_reply_failure(struct sbx_api *api, struct session *s,
                                struct sbx_engine_session_reply *reply, int *code, char *detail,
                                size_t detail_size)
{
        *code = reply->reply.error;
        json_error_t json_error;
        json_t *answer = json_loadb(reply->reply.fields, reply->reply.fields_len, 0, &json_error);
        const char *said = json_string_value(json_object_get(answer, "detail"));
        snprintf(detail, detail_size, "%s", said != NULL ? said : strerror(*code));
        json_decref(answer);
        sbx_engine_session_reply_free(reply);
        if (*code == ESRCH || *code == EPIPE) {
                /* The sandbox is gone: every entry of it. */
                const char *reason = *code == ESRCH ? "gone" : "agent_died";
                pthread_mutex_lock(&api->sessions->lock);
                sbx_sessions_mark_ended(api->sessions, s, reason);
                for (size_t i = 0; s->share != NULL && i < api->sessions->n; i++)
                        if (api->sessions->items[i]->share == s->share)
                                sbx_sessions_mark_ended(api->sessions, api->sessions->items[i],
                                                        reason);
                pthread_mutex_unlock(&api->sessions->lock);
        }
}

/* {"bytes": N, "sha256": "..."} standing for data in a record: the tenant's data is not kept,
 * its hash proves what it was. */
json_t *sbx_sessions_digest_of(const char *data, size_t size)
{
        char hex[SBX_AUDIT_SHA256_HEX_SIZE];
        struct sbx_error err = {0};
        if (sbx_audit_sha256_hex(data, size, hex, &err) < 0)
                return json_null();
        return json_pack("{s:I,s:s}", "bytes", (json_int_t)size, "sha256", hex);
}

/* ---- POST /v1/sessions ---- */

static bool tier_allows(const struct sbx_tier *tier, const char *language)
{
        return sbx_tier_allows_language(tier, language);
}

/* The effective limits: the request's (API units) over the tier's defaults over the built-in
 * ones, each lowered to the tier's ceiling. cpu_ms is not a session limit. */
int sbx_sessions_limits(const json_t *requested, const struct sbx_tier *tier,
                        struct sbx_limits *out, json_t *clamped, const char **bad_field,
                        const char **why)
{
        sbx_limits_default(out);
        for (size_t i = 0; i < SBX_LIMIT_COUNT; i++) {
                const struct sbx_limit_field *field = &sbx_limit_fields[i];
                uint64_t tier_default = sbx_limit_get(&tier->defaults, field);
                if (tier_default != 0)
                        sbx_limit_set(out, field, tier_default);
        }
        if (requested != NULL && !json_is_object(requested)) {
                *bad_field = "limits";
                *why = "not an object";
                return -1;
        }
        const char *key;
        json_t *value;
        json_object_foreach((json_t *)requested, key, value)
        {
                const struct sbx_limit_field *field = sbx_limit_field_find(key);
                if (field == NULL || field->kind != SBX_LIMIT_SETTABLE ||
                    strcmp(field->name, "cpu_ms") == 0) {
                        *bad_field = key;
                        *why = "not a session limit";
                        return -1;
                }
                if (!json_is_integer(value) || json_integer_value(value) < 0 ||
                    (uint64_t)json_integer_value(value) < sbx_limit_api_min(field) ||
                    (uint64_t)json_integer_value(value) > field->max / field->unit) {
                        *bad_field = key;
                        *why = "not an integer in the limit's range";
                        return -1;
                }
                sbx_limit_set(out, field, (uint64_t)json_integer_value(value) * field->unit);
        }
        for (size_t i = 0; i < SBX_LIMIT_COUNT; i++) {
                const struct sbx_limit_field *field = &sbx_limit_fields[i];
                uint64_t ceiling = sbx_limit_get(&tier->max, field);
                if (field->kind == SBX_LIMIT_SETTABLE && ceiling != 0 &&
                    sbx_limit_get(out, field) > ceiling) {
                        sbx_limit_set(out, field, ceiling);
                        if (json_object_get(requested, field->name) != NULL)
                                json_array_append_new(clamped, json_string(field->name));
                }
        }
        return 0;
}

json_t *sbx_sessions_limits_fields(const struct sbx_limits *limits)
{
        json_t *object = json_object();
        for (size_t i = 0; object != NULL && i < SBX_LIMIT_COUNT; i++)
                json_object_set_new(
                        object, sbx_limit_fields[i].member,
                        json_integer((json_int_t)sbx_limit_get(limits, &sbx_limit_fields[i])));
        return object;
}

static uint64_t tier_max_sessions(const struct sbx_tier *tier)
{
        return tier->max_sessions != 0 ? tier->max_sessions : DEFAULT_MAX_SESSIONS;
}

uint64_t sbx_sessions_tier_max_lifetime_s(const struct sbx_tier *tier)
{
        return tier->max_session_lifetime_s != 0 ? tier->max_session_lifetime_s
                                                 : DEFAULT_MAX_LIFETIME_S;
}

bool sbx_sessions_seconds_field(const json_t *body, const char *name, uint64_t max, uint64_t *out)
{
        const json_t *value = json_object_get(body, name);
        if (value == NULL)
                return true;
        if (!json_is_integer(value) || json_integer_value(value) < 1 ||
            (uint64_t)json_integer_value(value) > max)
                return false;
        *out = (uint64_t)json_integer_value(value);
        return true;
}

/* env: {NAME: value}, into entries ("NAME=value" strings). NULL when it is valid, else what is
 * wrong with it. */
static const char *env_entries(const json_t *object, json_t *entries)
{
        if (object != NULL && (!json_is_object(object) || json_object_size(object) > SBX_MAX_ENV))
                return "an object of at most 64 variables";
        const char *key;
        json_t *value;
        json_object_foreach((json_t *)object, key, value)
        {
                char *entry = NULL;
                if (!json_is_string(value) ||
                    asprintf(&entry, "%s=%s", key, json_string_value(value)) < 0)
                        return "values must be strings";
                bool valid = sbx_request_env_valid(entry);
                json_array_append_new(entries, json_string(entry));
                free(entry);
                if (!valid)
                        return "a name sandboxd sets itself or cannot pass";
        }
        return NULL;
}

const char *sbx_sessions_files(const json_t *listed, json_t *entries, struct sbx_buffer *data)
{
        if (listed != NULL && (!json_is_array(listed) || json_array_size(listed) > SBX_MAX_FILES))
                return "an array of at most 64 files";
        size_t index;
        json_t *file;
        json_array_foreach(listed, index, file)
        {
                const char *path = json_string_value(json_object_get(file, "path"));
                const json_t *content = json_object_get(file, "content");
                if (path == NULL || !sbx_request_path_valid(path) || !json_is_string(content))
                        return "each needs a relative path and a string content";
                sbx_buffer_append(data, json_string_value(content), json_string_length(content));
                json_array_append_new(
                        entries, json_pack("{s:s,s:I,s:b}", "path", path, "size",
                                           (json_int_t)json_string_length(content), "executable",
                                           json_is_true(json_object_get(file, "executable"))));
        }
        return NULL;
}

struct session *sbx_sessions_entry_new(const struct sbx_tenant *tenant, const char *language,
                                       const struct sbx_limits *limits, const json_t *clamped,
                                       uint64_t idle_timeout_s, uint64_t lifetime_s)
{
        struct session *s = calloc(1, sizeof(*s));
        struct sbx_error err = {0};
        if (s != NULL)
                s->channel = -1;
        if (s == NULL || (s->tenant = strdup(tenant->name)) == NULL ||
            sbx_execution_id_new(s->id, &err) < 0) {
                sbx_sessions_entry_free(s);
                return NULL;
        }
        snprintf(s->language, sizeof(s->language), "%s", language);
        s->created_ms = s->last_activity_ms = sbx_wall_clock_ms();
        s->expires_ms = s->created_ms + lifetime_s * 1000;
        s->idle_timeout_s = idle_timeout_s;
        s->wall_ms = limits->wall_ms;
        s->limits = sbx_limits_to_json(limits);
        s->clamped = json_deep_copy(clamped);
        s->busy = true;
        if (s->limits == NULL || s->clamped == NULL) {
                sbx_sessions_entry_free(s);
                return NULL;
        }
        return s;
}

bool sbx_sessions_add(struct sbx_api *api, struct MHD_Connection *connection,
                      const struct sbx_tenant *tenant, struct session *const *entries, size_t n,
                      uint64_t tenant_max, enum MHD_Result *answer)
{
        bool episodes = n > 0 && entries[0]->episode != NULL;
        /* The tenant's quota of open entries of this kind, and the server's (each holds a
         * sandbox for its life: executions need the rest), counted with these in the table. */
        uint64_t server_max = api->config->server.max_sessions != 0
                                      ? api->config->server.max_sessions
                                      : (api->config->server.max_sandboxes + 1) / 2;
        pthread_mutex_lock(&api->sessions->lock);
        sbx_sessions_forget_old(api->sessions, sbx_wall_clock_ms());
        size_t open = 0, open_all = api->sessions->shares_open;
        for (size_t i = 0; i < api->sessions->n; i++) {
                const struct session *other = api->sessions->items[i];
                open_all += !other->ended && other->share == NULL;
                open += !other->ended && strcmp(other->tenant, tenant->name) == 0 &&
                        (other->episode != NULL) == episodes;
        }
        size_t sandboxes = n > 0 && entries[0]->share != NULL ? 1 : n;
        bool server_full = open_all + sandboxes > server_max;
        bool allowed = !server_full && open + n <= tenant_max;
        bool room = true;
        if (allowed && api->sessions->n + n > api->sessions->alloc) {
                size_t alloc = api->sessions->alloc ? api->sessions->alloc : 16;
                while (alloc < api->sessions->n + n)
                        alloc *= 2;
                struct session **items = realloc(api->sessions->items, alloc * sizeof(*items));
                room = items != NULL;
                if (items != NULL) {
                        api->sessions->items = items;
                        api->sessions->alloc = alloc;
                }
        }
        if (allowed && room) {
                for (size_t i = 0; i < n; i++) {
                        api->sessions->items[api->sessions->n++] = entries[i];
                        entries[i]->users = 1; /* the caller's, until it releases it */
                }
                if (n > 0 && entries[0]->share != NULL)
                        api->sessions->shares_open++;
        }
        pthread_mutex_unlock(&api->sessions->lock);
        if (allowed && room)
                return true;
        const char *kind = episodes ? "episodes" : "sessions";
        if (!room) {
                *answer = sbx_http_respond_problem(api, connection, 500, "out of memory", NULL, 0,
                                                   NULL, 0);
        } else if (server_full) {
                sbx_metrics_count_quota_rejection(api->metrics, tenant->name, "capacity");
                char detail[128];
                snprintf(detail, sizeof(detail),
                         "the server holds its maximum of open sessions and episodes (%llu)",
                         (unsigned long long)server_max);
                *answer = sbx_http_respond_unavailable(api, connection, SBX_PROBLEM_AT_CAPACITY,
                                                       detail, 60, NULL);
        } else {
                sbx_metrics_count_quota_rejection(api->metrics, tenant->name, kind);
                char detail[160];
                snprintf(detail, sizeof(detail),
                         "tenant %s has %zu %s open and its tier allows %llu", tenant->name, open,
                         kind, (unsigned long long)tenant_max);
                const struct sbx_http_header retry = {MHD_HTTP_HEADER_RETRY_AFTER, "60"};
                *answer =
                        sbx_http_respond_problem(api, connection, 429, detail, NULL, 0, &retry, 1);
        }
        return false;
}

json_t *sbx_sessions_requested(const json_t *body)
{
        json_t *requested = json_deep_copy(body);
        const json_t *code = json_object_get(requested, "code");
        if (json_is_string(code))
                json_object_set_new(
                        requested, "code",
                        sbx_sessions_digest_of(json_string_value(code), json_string_length(code)));
        size_t index;
        json_t *file;
        json_array_foreach(json_object_get(requested, "files"), index, file)
        {
                json_t *content = json_object_get(file, "content");
                if (json_is_string(content))
                        json_object_set_new(file, "content",
                                            sbx_sessions_digest_of(json_string_value(content),
                                                                   json_string_length(content)));
        }
        return requested;
}

static enum MHD_Result handle_open(struct sbx_api *api, struct MHD_Connection *connection,
                                   const struct sbx_tenant *tenant, const json_t *body)
{
        static const char *const known[] = {"language", "limits",         "env",
                                            "files",    "idle_timeout_s", "max_lifetime_s"};
        const char *key;
        json_t *value;
        json_object_foreach((json_t *)body, key, value)
        {
                bool ok = false;
                for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
                        ok |= strcmp(key, known[i]) == 0;
                if (!ok)
                        return sbx_sessions_bad_request(api, connection, key, "unknown field");
        }
        const char *language = json_string_value(json_object_get(body, "language"));
        if (language == NULL || (strcmp(language, "python") != 0 && strcmp(language, "bash") != 0))
                return sbx_sessions_bad_request(api, connection, "language",
                                                "sessions run python or bash");
        if (!tier_allows(tenant->tier, language))
                return sbx_http_respond_problem(api, connection, 403,
                                                "the tier does not allow this language", NULL, 0,
                                                NULL, 0);
        struct sbx_limits limits;
        _cleanup_(json_decrefp) json_t *clamped = json_array();
        const char *bad = NULL, *why = NULL;
        if (sbx_sessions_limits(json_object_get(body, "limits"), tenant->tier, &limits, clamped,
                                &bad, &why) < 0) {
                char field[96];
                snprintf(field, sizeof(field), "limits.%s", bad);
                return sbx_sessions_bad_request(api, connection, field, why);
        }
        uint64_t lifetime_max = sbx_sessions_tier_max_lifetime_s(tenant->tier);
        uint64_t idle = SBX_SESSIONS_DEFAULT_IDLE_TIMEOUT_S, lifetime = lifetime_max;
        if (!sbx_sessions_seconds_field(body, "idle_timeout_s", SBX_SESSIONS_MAX_IDLE_TIMEOUT_S,
                                        &idle))
                return sbx_sessions_bad_request(api, connection, "idle_timeout_s",
                                                "an integer of seconds from 1 to 86400");
        if (!sbx_sessions_seconds_field(body, "max_lifetime_s", lifetime_max, &lifetime))
                return sbx_sessions_bad_request(
                        api, connection, "max_lifetime_s",
                        "an integer of seconds from 1 to the tier's maximum");

        /* env: {NAME: value}; files: [{path, content, executable}]. */
        _cleanup_(json_decrefp) json_t *env = json_array();
        const char *bad_env = env_entries(json_object_get(body, "env"), env);
        if (bad_env != NULL)
                return sbx_sessions_bad_request(api, connection, "env", bad_env);
        _cleanup_(json_decrefp) json_t *files = json_array();
        _cleanup_(sbx_buffer_free) struct sbx_buffer data;
        sbx_buffer_init(&data, SBX_MAX_CODE_BYTES);
        const char *bad_files = sbx_sessions_files(json_object_get(body, "files"), files, &data);
        if (bad_files != NULL)
                return sbx_sessions_bad_request(api, connection, "files", bad_files);
        if (data.overflow)
                return sbx_http_respond_problem(api, connection, 413,
                                                "the files are over 4 MiB together", NULL, 0, NULL,
                                                0);

        struct session *s =
                sbx_sessions_entry_new(tenant, language, &limits, clamped, idle, lifetime);
        if (s == NULL)
                return sbx_http_respond_problem(api, connection, 500, "out of memory", NULL, 0,
                                                NULL, 0);
        enum MHD_Result refused;
        if (!sbx_sessions_add(api, connection, tenant, &s, 1, tier_max_sessions(tenant->tier),
                              &refused)) {
                sbx_sessions_entry_free(s);
                return refused;
        }

        json_t *fields = json_pack("{s:s,s:o,s:O,s:O,s:I,s:I}", "language", language, "limits",
                                   sbx_sessions_limits_fields(&limits), "env", env, "files", files,
                                   "idle_timeout_s", (json_int_t)idle, "max_lifetime_s",
                                   (json_int_t)lifetime);
        struct sbx_engine_session_reply reply;
        int code = 0;
        char detail[SBX_ERROR_MESSAGE_MAX + 64];
        int rc = sbx_sessions_call_engine(api, s, SBX_SESSION_OPEN, fields, data.data, data.len,
                                          SBX_SESSIONS_OPEN_TIMEOUT_MS, &reply, &code, detail,
                                          sizeof(detail));
        json_t *opened =
                rc == 0 ? json_loadb(reply.reply.fields, reply.reply.fields_len, 0, NULL) : NULL;
        pthread_mutex_lock(&api->sessions->lock);
        s->busy = false;
        s->pooled = json_is_true(json_object_get(opened, "pooled"));
        if (rc == 0) {
                s->channel = reply.channel;
                reply.channel = -1;
        }
        if (rc < 0)
                sbx_sessions_mark_ended(api->sessions, s, "never_opened");
        json_t *answer = rc == 0 ? sbx_sessions_json(s) : NULL;
        json_decref(opened);
        pthread_mutex_unlock(&api->sessions->lock);
        if (rc < 0) {
                sbx_warn("session %s: open: %s", s->id, detail);
                sbx_sessions_release(api->sessions, s);
                return sbx_sessions_engine_failure(api, connection, code == EINVAL ? EIO : code,
                                                   detail, NULL);
        }
        sbx_engine_session_reply_free(&reply);
        sbx_metrics_count_opened(api->metrics, SBX_METRICS_SESSIONS, 1);
        /* Its row: the request as sent, its files by size and SHA-256 (the tenant's data). */
        json_t *requested = sbx_sessions_requested(body);
        const struct sbx_audit_session row = {
                .id = s->id,
                .tenant = tenant->name,
                .language = language,
                .created_at_ms = (int64_t)s->created_ms,
                .requested = requested,
                .effective = s->limits,
                .clamped = s->clamped,
        };
        struct sbx_error err = {0};
        if (sbx_audit_session_begin(api->audit, &row, &err) < 0)
                sbx_warn("audit: session %s: %s", s->id, err.message);
        sbx_sessions_place(api->sessions, s);
        json_decref(requested);
        sbx_info("session %s: open for tenant %s (%s)", s->id, tenant->name, language);
        /* Where the session lives: a fleet's HAProxy learns from it which node to send the
         * session's requests to (deploy/haproxy.cfg's stick table). */
        char location[sizeof(SESSIONS_PATH) + SBX_EXECUTION_ID_CHARS + 2];
        snprintf(location, sizeof(location), "%s/%s", SESSIONS_PATH, s->id);
        sbx_sessions_release(api->sessions, s);
        const struct sbx_http_header header = {MHD_HTTP_HEADER_LOCATION, location};
        return sbx_http_respond_json(api, connection, 201, JSON_CONTENT_TYPE, answer, &header, 1);
}

/* ---- One session's operations ---- */

/* Marks s busy for one operation, or answers why not (ended: 404, busy: 409). */
bool sbx_sessions_begin_operation(struct sbx_api *api, struct session *s, bool *answered_404)
{
        return sbx_sessions_begin_operation_of(api, s, s, answered_404);
}

bool sbx_sessions_begin_operation_of(struct sbx_api *api, struct session *s, const void *owner,
                                     bool *answered_404)
{
        bool ok = false;
        pthread_mutex_lock(&api->sessions->lock);
        *answered_404 = s->ended;
        struct session_share *share = s->share;
        if (!s->ended && !s->busy &&
            (share == NULL || share->owner == NULL || share->owner == owner)) {
                s->busy = true;
                if (share != NULL) {
                        share->owner = owner;
                        share->operations++;
                }
                ok = true;
        }
        pthread_mutex_unlock(&api->sessions->lock);
        return ok;
}

/* With the lock held. */
static void operation_over(struct session *s)
{
        s->busy = false;
        s->last_activity_ms = sbx_wall_clock_ms();
        if (s->share != NULL && --s->share->operations == 0)
                s->share->owner = NULL;
}

void sbx_sessions_end_operation_ended(struct sbx_api *api, struct session *s, const char *reason)
{
        pthread_mutex_lock(&api->sessions->lock);
        sbx_sessions_mark_ended(api->sessions, s, reason);
        operation_over(s);
        pthread_mutex_unlock(&api->sessions->lock);
}

void sbx_sessions_end_operation(struct sbx_api *api, struct session *s)
{
        pthread_mutex_lock(&api->sessions->lock);
        operation_over(s);
        pthread_mutex_unlock(&api->sessions->lock);
}

enum MHD_Result sbx_sessions_busy(struct sbx_api *api, struct MHD_Connection *connection,
                                  const struct session *s, bool ended)
{
        if (ended)
                return sbx_sessions_not_found(api, connection, s);
        return sbx_http_respond_problem(api, connection, 409,
                                        s->episode != NULL
                                                ? "another operation of this episode is in "
                                                  "progress"
                                                : "another run or file operation of this session "
                                                  "is in progress",
                                        NULL, 0, NULL, 0);
}

/* ---- A run: the engine round trip, its accounting, and its answer (whole or streamed) ---- */

/* One run, from its quota reservation and audit record to its answer. A streamed run's job is
 * shared by the thread that drives it and the HTTP response that reads its events: refs. */
struct run_job {
        struct sbx_api *api;
        const struct sbx_tenant *tenant; /* in a snapshot the job holds while streaming */
        const struct sbx_config *snapshot;
        struct session *session;
        uint64_t reservation;
        char run_id[SBX_EXECUTION_ID_CHARS + 1];
        uint64_t created_ms; /* wall clock */
        uint64_t timeout_ms;
        char *fields; /* the RUN's fields, JSON */
        char *stdin_data;
        size_t stdin_size;
        json_t *requested; /* what the audit record keeps of the request */
        bool recorded;     /* its audit record was begun (and is to be finished) */
        bool unrecorded;   /* its audit record could not be begun: the run was cancelled */
        /* The outcome. */
        int rc;
        int failure; /* rc < 0: an errno for engine_failure */
        char detail[SBX_ERROR_MESSAGE_MAX + 64];
        json_t *result;
        /* Streaming: the thread writes the events into sse (api/sse.h); request_id names the
         * run for a cancel. */
        struct sbx_sse *sse;
        _Atomic uint64_t request_id;
        _Atomic int refs;
        bool holds_session; /* a streamed job keeps the session from being freed */
};

static void run_job_unref(struct run_job *job)
{
        if (atomic_fetch_sub(&job->refs, 1) != 1)
                return;
        if (job->snapshot != NULL)
                sbx_live_config_release(job->api->live, job->snapshot);
        if (job->holds_session)
                sbx_sessions_release(job->api->sessions, job->session);
        free(job->fields);
        free(job->stdin_data);
        json_decref(job->requested);
        json_decref(job->result);
        free(job);
}

static void on_engine_event(void *ctx, const struct sbx_message_session *event)
{
        struct run_job *job = ctx;
        json_error_t json_error;
        json_t *fields = json_loadb(event->fields, event->fields_len, JSON_ALLOW_NUL, &json_error);
        const char *name = json_string_value(json_object_get(fields, "event"));
        const json_t *data = json_object_get(fields, "data");
        if (name != NULL && data != NULL &&
            (strcmp(name, "stdout") == 0 || strcmp(name, "stderr") == 0 ||
             strcmp(name, "result") == 0 || strcmp(name, "error") == 0))
                sbx_sse_event(job->sse, name, data);
        json_decref(fields);
}

/* The run's audit record is begun while the engine starts it (engine_client.h, on_sent), so the
 * write costs the caller no wait. One that cannot be begun cancels the run at once: the answer
 * is 500, and the run may have done what it could in those microseconds (a one-shot execution,
 * whose record is written first, runs nothing then). */
static int run_job_begin_record(void *ctx)
{
        struct run_job *job = ctx;
        const struct sbx_audit_record begun = {
                .id = job->run_id,
                .tenant = job->tenant->name,
                .created_at_ms = (int64_t)job->created_ms,
                .language = job->session->language,
                .requested = job->requested,
                .effective = job->session->limits,
                .clamped = job->session->clamped,
        };
        struct sbx_error err = {0};
        if (sbx_audit_begin(job->api->audit, &begun, &err) == 0) {
                job->recorded = true;
                return 0;
        }
        sbx_warn("session %s: run %s: %s", job->session->id, job->run_id, err.message);
        job->unrecorded = true;
        return -1;
}

/* The engine round trip; sets rc, failure, detail and result. */
static void run_job_execute(struct run_job *job)
{
        struct sbx_message_session message = {
                .op = SBX_SESSION_RUN,
                .fields = job->fields,
                .fields_len = strlen(job->fields),
                .data = (const uint8_t *)job->stdin_data,
                .data_len = job->stdin_size,
        };
        memcpy(message.session_id, job->session->id, sizeof(message.session_id));
        uint64_t timeout = job->timeout_ms + SBX_SESSIONS_RESTART_MS + RUN_SLACK_MS;
        const struct sbx_engine_session_call with = {
                .on_event = job->sse != NULL ? on_engine_event : NULL,
                .on_sent = run_job_begin_record,
                .ctx = job,
                .request_id = &job->request_id,
                .direct = job->session->share == NULL && job->session->channel >= 0,
                .channel = job->session->channel,
        };
        struct sbx_engine_session_reply reply;
        struct sbx_error err = {0};
        int rc =
                sbx_engine_client_session(job->api->engine, &message, timeout, &with, &reply, &err);
        if (job->unrecorded) {
                if (rc == 0)
                        sbx_engine_session_reply_free(&reply);
                job->rc = -1;
                job->failure = EIO;
                snprintf(job->detail, sizeof(job->detail),
                         "the audit store failed, so the run was cancelled at once (it may have "
                         "run in part)");
                return;
        }
        if (rc < 0) {
                job->rc = -1;
                job->failure = err.code;
                snprintf(job->detail, sizeof(job->detail), "%s", err.message);
                return;
        }
        if (reply.reply.error != 0) {
                job->rc = -1;
                job->failure = reply.reply.error;
                json_error_t json_error;
                json_t *answer =
                        json_loadb(reply.reply.fields, reply.reply.fields_len, 0, &json_error);
                const char *said = json_string_value(json_object_get(answer, "detail"));
                snprintf(job->detail, sizeof(job->detail), "%s",
                         said != NULL ? said : strerror(job->failure));
                json_decref(answer);
                if (job->failure == ESRCH || job->failure == EPIPE) {
                        pthread_mutex_lock(&job->api->sessions->lock);
                        sbx_sessions_mark_ended(job->api->sessions, job->session,
                                                job->failure == ESRCH ? "gone" : "agent_died");
                        pthread_mutex_unlock(&job->api->sessions->lock);
                }
        } else {
                json_error_t json_error;
                /* Program output may hold NUL bytes (\u0000 in the JSON). */
                job->result = json_loadb(reply.reply.fields, reply.reply.fields_len, JSON_ALLOW_NUL,
                                         &json_error);
                if (job->result == NULL) {
                        job->rc = -1;
                        job->failure = EIO;
                        snprintf(job->detail, sizeof(job->detail),
                                 "the engine's answer is not JSON");
                }
        }
        sbx_engine_session_reply_free(&reply);
}

/* The run is over: its quota, its session's state, its metrics. */
static void run_job_account(struct run_job *job)
{
        struct sbx_api *api = job->api;
        json_t *result = job->result;
        json_t *usage = json_object_get(result, "usage");
        uint64_t cpu_ms = (uint64_t)json_integer_value(json_object_get(usage, "cpu_ms"));
        uint64_t session_cpu_ms =
                (uint64_t)json_integer_value(json_object_get(usage, "session_cpu_ms"));
        /* The run's CPU, and what the session used since the run before (its background). */
        pthread_mutex_lock(&api->sessions->lock);
        struct session *s = job->session;
        if (session_cpu_ms > s->cpu_charged_ms + cpu_ms)
                cpu_ms = session_cpu_ms - s->cpu_charged_ms;
        s->cpu_charged_ms += cpu_ms;
        pthread_mutex_unlock(&api->sessions->lock);
        sbx_quota_release(api->quota, job->tenant, job->reservation, job->rc == 0, cpu_ms,
                          sbx_now_ms());
        sbx_sessions_end_operation(api, job->session);
        if (job->rc == 0) {
                const char *status = json_string_value(json_object_get(result, "status"));
                sbx_metrics_count_operation(api->metrics, SBX_METRICS_SESSIONS, status,
                                            (sbx_wall_clock_ms() - job->created_ms) * 1000);
                json_object_set_new(result, "session_id", json_string(job->session->id));
        }
}

/* Its audit record's end. Uses nothing of the session (which may be gone by then). */
static void run_job_record(struct run_job *job)
{
        if (!job->recorded)
                return;
        const json_t *result = job->result;
        const char *status = json_string_value(json_object_get(result, "status"));
        const json_t *out = json_object_get(result, "stdout");
        const json_t *errout = json_object_get(result, "stderr");
        const struct sbx_audit_record finished = {
                .id = job->run_id,
                .finished_at_ms = (int64_t)sbx_wall_clock_ms(),
                .status = status != NULL ? status : "internal_error",
                .exit_code = json_is_integer(json_object_get(result, "exit_code"))
                                     ? (int)json_integer_value(json_object_get(result, "exit_code"))
                                     : -1,
                .error = job->rc < 0 ? job->detail
                                     : json_string_value(json_object_get(result, "internal_error")),
                .usage = json_object_get(result, "usage"),
                .evidence = json_object_get(result, "evidence"),
                .timing = json_object_get(result, "timing"),
                .stdout_data = json_string_value(out),
                .stdout_size = json_string_length(out),
                .stderr_data = json_string_value(errout),
                .stderr_size = json_string_length(errout),
                .store_output = job->api->config->server.store_output,
        };
        struct sbx_error err = {0};
        if (sbx_audit_finish(job->api->audit, &finished, &err) < 0)
                sbx_warn("audit: run %s: %s", job->run_id, err.message);
}

static void run_job_finish(struct run_job *job)
{
        run_job_account(job);
        run_job_record(job);
}

/* After the answer was sent (struct sbx_http_after): the record, then the job's end. */
static void run_job_record_after(void *ctx)
{
        struct run_job *job = ctx;
        run_job_record(job);
        run_job_unref(job);
}

static enum MHD_Result run_job_answer(struct run_job *job, struct MHD_Connection *connection)
{
        if (job->rc < 0)
                return operation_failure(job->api, connection, job->session, job->failure,
                                         job->detail, NULL);
        return sbx_http_respond_json(job->api, connection, 200, JSON_CONTENT_TYPE,
                                     json_incref(job->result), NULL, 0);
}

/* The streaming thread: the run, its accounting, its last event. */
static void *run_job_thread(void *arg)
{
        struct run_job *job = arg;
        run_job_execute(job);
        atomic_store(&job->request_id, 0); /* over: a client leaving now cancels nothing */
        run_job_finish(job);
        if (job->rc == 0) {
                sbx_sse_event(job->sse, "end", job->result);
        } else {
                /* As the answer would have said (operation_failure): a session that ended
                 * meanwhile is its 404 (sbx_sessions_not_found's). */
                pthread_mutex_lock(&job->api->sessions->lock);
                bool gone = job->failure == ESRCH && job->session->ended;
                pthread_mutex_unlock(&job->api->sessions->lock);
                char detail[128];
                json_t *extra =
                        gone ? ended_problem_parts(job->session, detail, sizeof(detail)) : NULL;
                unsigned status = gone ? 404 : 500;
                json_t *problem = sbx_problem_new(status, sbx_problem_default_slug(status),
                                                  gone ? detail : job->detail, NULL, 0);
                if (problem != NULL && extra != NULL)
                        json_object_update(problem, extra);
                json_decref(extra);
                sbx_sse_event(job->sse, "problem", problem);
                json_decref(problem);
        }
        sbx_sse_finish(job->sse);
        job->sse = NULL;
        run_job_unref(job);
        return NULL;
}

/* The response ended; a client that left before the end interrupts the run (the engine
 * cancels it; its accounting and record still happen). */
static void run_job_stream_ended(void *ctx, bool client_left)
{
        struct run_job *job = ctx;
        uint64_t request_id = atomic_load(&job->request_id);
        if (client_left && request_id != 0)
                sbx_engine_client_cancel_session(job->api->engine,
                                                 sbx_sessions_engine_id(job->session), request_id);
        run_job_unref(job);
}

static enum MHD_Result run_job_stream(struct run_job *job, struct MHD_Connection *connection,
                                      const struct sbx_config *tenants)
{
        struct sbx_api *api = job->api;
        job->sse = sbx_sse_new();
        if (job->sse == NULL) {
                job->rc = -1;
                job->failure = ENOMEM;
                snprintf(job->detail, sizeof(job->detail), "cannot start a stream");
                run_job_finish(job);
                enum MHD_Result answer = run_job_answer(job, connection);
                run_job_unref(job);
                return answer;
        }
        /* The thread may outlive this request (a client that goes away): it holds the tenant's
         * snapshot and the session itself. */
        pthread_mutex_lock(&api->sessions->lock);
        job->session->users++;
        pthread_mutex_unlock(&api->sessions->lock);
        job->holds_session = true;
        sbx_live_config_hold(api->live, tenants);
        job->snapshot = tenants;
        struct sbx_sse *sse = job->sse;
        atomic_store(&job->refs, 2); /* the thread's and the response's */
        pthread_t thread;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        int rc = pthread_create(&thread, &attr, run_job_thread, job);
        pthread_attr_destroy(&attr);
        if (rc != 0) {
                atomic_store(&job->refs, 1);
                sbx_sse_abandon(sse); /* the reader's hold */
                sbx_sse_finish(sse);  /* the writer's */
                job->sse = NULL;
                job->rc = -1;
                job->failure = rc;
                snprintf(job->detail, sizeof(job->detail), "cannot start a stream's thread");
                run_job_finish(job);
                enum MHD_Result answer = run_job_answer(job, connection);
                run_job_unref(job);
                return answer;
        }
        return sbx_sse_respond(api, connection, sse, run_job_stream_ended, job);
}

static enum MHD_Result handle_run(struct sbx_api *api, struct MHD_Connection *connection,
                                  const struct sbx_tenant *tenant, struct session *s,
                                  const json_t *body, const struct sbx_config *tenants,
                                  struct sbx_http_after *after)
{
        const char *key;
        json_t *value;
        json_object_foreach((json_t *)body, key,
                            value) if (strcmp(key, "code") != 0 && strcmp(key, "stdin") != 0 &&
                                       strcmp(key, "env") != 0 &&
                                       strcmp(key, "timeout_ms") !=
                                               0) return sbx_sessions_bad_request(api, connection,
                                                                                  key,
                                                                                  "unknown "
                                                                                  "field");
        const json_t *code = json_object_get(body, "code");
        const json_t *stdin_value = json_object_get(body, "stdin");
        if (!json_is_string(code) || json_string_length(code) > SBX_MAX_CODE_BYTES)
                return sbx_sessions_bad_request(api, connection, "code",
                                                "a string of at most 4 MiB");
        if (stdin_value != NULL &&
            (!json_is_string(stdin_value) || json_string_length(stdin_value) > SBX_MAX_STDIN_BYTES))
                return sbx_sessions_bad_request(api, connection, "stdin",
                                                "a string of at most 4 MiB");
        uint64_t timeout_ms = s->wall_ms;
        const json_t *timeout = json_object_get(body, "timeout_ms");
        uint64_t ceiling = tenant->tier->max.wall_ms ? tenant->tier->max.wall_ms : SBX_LIMIT_DAY_MS;
        if (timeout != NULL) {
                if (!json_is_integer(timeout) || json_integer_value(timeout) < 1)
                        return sbx_sessions_bad_request(api, connection, "timeout_ms",
                                                        "a positive integer of milliseconds");
                timeout_ms = (uint64_t)json_integer_value(timeout);
                if (timeout_ms > ceiling)
                        timeout_ms = ceiling;
        }
        _cleanup_(json_decrefp) json_t *env = json_array();
        const char *bad_env = env_entries(json_object_get(body, "env"), env);
        if (bad_env != NULL)
                return sbx_sessions_bad_request(api, connection, "env", bad_env);

        bool ended;
        if (!sbx_sessions_begin_operation(api, s, &ended))
                return sbx_sessions_busy(api, connection, s, ended);
        struct sbx_quota_decision decision;
        struct sbx_error err = {0};
        if (sbx_quota_reserve(api->quota, tenant, timeout_ms, sbx_now_ms(), &decision, &err) < 0) {
                sbx_sessions_end_operation(api, s);
                return sbx_http_respond_problem(api, connection, 500, err.message, NULL, 0, NULL,
                                                0);
        }
        if (decision.verdict != SBX_QUOTA_ALLOWED) {
                sbx_sessions_end_operation(api, s);
                sbx_metrics_count_quota_rejection(api->metrics, tenant->name,
                                                  sbx_quota_verdict_name(decision.verdict));
                char retry_after[32];
                snprintf(retry_after, sizeof(retry_after), "%" PRIu64, decision.retry_after_s);
                const struct sbx_http_header header = {MHD_HTTP_HEADER_RETRY_AFTER, retry_after};
                unsigned status = sbx_quota_verdict_is_server(decision.verdict) ? 503 : 429;
                const char *slug = sbx_quota_verdict_slug(decision.verdict);
                return sbx_http_respond_problem_of(
                        api, connection, status, slug ? slug : sbx_problem_default_slug(status),
                        sbx_quota_verdict_text(decision.verdict), NULL, 0, &header, 1, NULL);
        }

        /* What its audit record keeps (begun once the run is on its way: run_job_begin_record). */
        char run_id[SBX_EXECUTION_ID_CHARS + 1];
        uint64_t created_ms = sbx_wall_clock_ms();
        _cleanup_(json_decrefp) json_t *requested = json_pack(
                "{s:s,s:o,s:o,s:I}", "session_id", s->id, "code",
                sbx_sessions_digest_of(json_string_value(code), json_string_length(code)), "stdin",
                stdin_value ? sbx_sessions_digest_of(json_string_value(stdin_value),
                                                     json_string_length(stdin_value))
                            : json_null(),
                "timeout_ms", (json_int_t)timeout_ms);
        if (sbx_execution_id_new(run_id, &err) < 0) {
                sbx_quota_release(api->quota, tenant, decision.reservation, false, 0, sbx_now_ms());
                sbx_sessions_end_operation(api, s);
                return sbx_http_respond_problem(api, connection, 500, err.message, NULL, 0, NULL,
                                                0);
        }
        struct run_job *job = calloc(1, sizeof(*job));
        if (job == NULL) {
                sbx_quota_release(api->quota, tenant, decision.reservation, false, 0, sbx_now_ms());
                sbx_sessions_end_operation(api, s);
                return sbx_http_respond_problem(api, connection, 500, "out of memory", NULL, 0,
                                                NULL, 0);
        }
        *job = (struct run_job){
                .api = api,
                .tenant = tenant,
                .session = s,
                .reservation = decision.reservation,
                .created_ms = created_ms,
                .timeout_ms = timeout_ms,
                .requested = steal_pointer(&requested),
                .refs = 1,
        };
        memcpy(job->run_id, run_id, sizeof(job->run_id));
        json_t *fields = json_pack("{s:s,s:O,s:O,s:I}", "id", run_id, "code", code, "env", env,
                                   "timeout_ms", (json_int_t)timeout_ms);
        job->fields = fields != NULL ? json_dumps(fields, JSON_COMPACT) : NULL;
        json_decref(fields);
        if (stdin_value != NULL) {
                job->stdin_size = json_string_length(stdin_value);
                job->stdin_data = malloc(job->stdin_size + 1);
                if (job->stdin_data != NULL)
                        memcpy(job->stdin_data, json_string_value(stdin_value), job->stdin_size);
        }
        if (job->fields == NULL || (stdin_value != NULL && job->stdin_data == NULL)) {
                job->failure = ENOMEM;
                snprintf(job->detail, sizeof(job->detail), "out of memory");
                job->rc = -1;
                run_job_finish(job);
                enum MHD_Result answer = run_job_answer(job, connection);
                run_job_unref(job);
                return answer;
        }
        if (sbx_sse_wanted(connection)) {
                /* The worker sends the run's events only when asked. */
                char *streamed = NULL;
                size_t len = strlen(job->fields);
                if (asprintf(&streamed, "%.*s,\"stream\":true}", (int)(len - 1), job->fields) > 0) {
                        free(job->fields);
                        job->fields = streamed;
                }
                return run_job_stream(job, connection, tenants);
        }
        run_job_execute(job);
        run_job_account(job);
        /* The client has its answer before the record is written; a read of the record waits
         * for it (audit.h). When that cannot be arranged, the record is written first. */
        if (job->recorded && sbx_audit_outcome_coming(job->api->audit, job->run_id, &err) < 0) {
                run_job_record(job);
                job->recorded = false;
        }
        enum MHD_Result answer = run_job_answer(job, connection);
        *after = (struct sbx_http_after){run_job_record_after, job};
        return answer;
}

/* A file's content type, from its name: what a browser or a client needs most. */
static const char *content_type_of(const char *path)
{
        static const struct {
                const char *suffix, *type;
        } types[] = {
                {".png", "image/png"},         {".jpg", "image/jpeg"},
                {".jpeg", "image/jpeg"},       {".gif", "image/gif"},
                {".svg", "image/svg+xml"},     {".json", "application/json"},
                {".csv", "text/csv"},          {".txt", "text/plain; charset=utf-8"},
                {".html", "text/html"},        {".py", "text/x-python"},
                {".sh", "text/x-shellscript"}, {".pdf", "application/pdf"},
        };
        size_t len = strlen(path);
        for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
                size_t n = strlen(types[i].suffix);
                if (len > n && strcasecmp(path + len - n, types[i].suffix) == 0)
                        return types[i].type;
        }
        return "application/octet-stream";
}

static enum MHD_Result handle_file(struct sbx_api *api, struct MHD_Connection *connection,
                                   struct session *s, const char *method, const char *path,
                                   const void *body, size_t body_len, bool listing)
{
        bool read = strcmp(method, MHD_HTTP_METHOD_GET) == 0 ||
                    strcmp(method, MHD_HTTP_METHOD_HEAD) == 0;
        bool put = strcmp(method, MHD_HTTP_METHOD_PUT) == 0;
        bool del = strcmp(method, MHD_HTTP_METHOD_DELETE) == 0;
        if (listing ? !read : !(read || put || del))
                return sbx_http_respond_method_not_allowed(
                        api, connection, method, listing ? "GET, HEAD" : "GET, HEAD, PUT, DELETE");
        if (path == NULL || path[0] == '\0' || strlen(path) > 4096)
                return sbx_sessions_bad_request(api, connection, "path",
                                                "a path under /workspace is needed");
        unsigned mode = 0644;
        if (put) {
                const char *given =
                        MHD_lookup_connection_value(connection, MHD_GET_ARGUMENT_KIND, "mode");
                char *end = NULL;
                if (given != NULL) {
                        unsigned long parsed = strtoul(given, &end, 8);
                        if (*given == '\0' || *end != '\0' || parsed > 07777)
                                return sbx_sessions_bad_request(api, connection, "mode",
                                                                "an octal file mode such as 0755");
                        mode = (unsigned)parsed;
                }
                /* A file travels to the engine in one message. */
                if (body_len > SBX_MESSAGE_MAX_SESSION_DATA) {
                        char detail[96];
                        snprintf(detail, sizeof(detail),
                                 "a session's file is at most %u bytes; this one is %zu",
                                 SBX_MESSAGE_MAX_SESSION_DATA, body_len);
                        return sbx_http_respond_problem(api, connection, 413, detail, NULL, 0, NULL,
                                                        0);
                }
        }
        bool ended;
        if (!sbx_sessions_begin_operation(api, s, &ended))
                return sbx_sessions_busy(api, connection, s, ended);
        enum sbx_session_op op = listing ? SBX_SESSION_LIST
                                 : put   ? SBX_SESSION_PUT
                                 : del   ? SBX_SESSION_DELETE
                                         : SBX_SESSION_GET;
        json_t *fields = put ? json_pack("{s:s,s:i}", "path", path, "mode", (int)mode)
                             : json_pack("{s:s}", "path", path);
        struct sbx_engine_session_reply reply;
        int failure = 0;
        char detail[SBX_ERROR_MESSAGE_MAX + 64];
        int rc = sbx_sessions_call_engine(api, s, op, fields, put ? body : NULL, put ? body_len : 0,
                                          SBX_SESSIONS_FILE_OP_TIMEOUT_MS, &reply, &failure, detail,
                                          sizeof(detail));
        sbx_sessions_end_operation(api, s);
        if (rc < 0) {
                char said[SBX_ERROR_MESSAGE_MAX + 4200];
                snprintf(said, sizeof(said), "%s: %s", path, detail);
                return operation_failure(api, connection, s, failure, said, path);
        }
        enum MHD_Result answer;
        if (op == SBX_SESSION_GET) {
                /* A tenant's file is served as a download, never rendered as a page of this
                 * origin (an HTML or SVG file could carry script). */
                const struct sbx_http_header headers[] = {
                        {"Content-Disposition", "attachment"},
                        {"X-Content-Type-Options", "nosniff"},
                };
                answer = sbx_http_respond(api, connection, 200, content_type_of(path),
                                          (const char *)reply.reply.data, reply.reply.data_len,
                                          headers, 2);
        } else if (op == SBX_SESSION_LIST) {
                json_error_t json_error;
                json_t *entries =
                        json_loadb(reply.reply.fields, reply.reply.fields_len, 0, &json_error);
                json_object_set_new(entries, "path", json_string(path));
                answer = sbx_http_respond_json(api, connection, 200, JSON_CONTENT_TYPE, entries,
                                               NULL, 0);
        } else if (op == SBX_SESSION_PUT) {
                answer = sbx_http_respond_json(
                        api, connection, 201, JSON_CONTENT_TYPE,
                        json_pack("{s:s,s:I}", "path", path, "size", (json_int_t)body_len), NULL,
                        0);
        } else {
                answer = sbx_http_respond(api, connection, 204, JSON_CONTENT_TYPE, "", 0, NULL, 0);
        }
        sbx_engine_session_reply_free(&reply);
        return answer;
}

static enum MHD_Result handle_close(struct sbx_api *api, struct MHD_Connection *connection,
                                    struct session *s)
{
        bool ended;
        if (!sbx_sessions_begin_operation(api, s, &ended))
                return sbx_sessions_busy(api, connection, s, ended);
        struct sbx_engine_session_reply reply;
        int failure = 0;
        char detail[SBX_ERROR_MESSAGE_MAX + 64];
        int rc = sbx_sessions_call_engine(api, s, SBX_SESSION_CLOSE, json_object(), NULL, 0,
                                          SBX_SESSIONS_FILE_OP_TIMEOUT_MS, &reply, &failure, detail,
                                          sizeof(detail));
        pthread_mutex_lock(&api->sessions->lock);
        s->busy = false;
        sbx_sessions_mark_ended(api->sessions, s, "deleted");
        pthread_mutex_unlock(&api->sessions->lock);
        if (rc < 0 && failure != ESRCH && failure != EPIPE)
                return sbx_sessions_engine_failure(api, connection, failure, detail, NULL);
        if (rc == 0) {
                /* The CLOSE's answer is the session's end (reason and evidence, as its
                 * SESSION_ENDED says after it): recorded before the 204, so that a client (or a
                 * shutdown) right after it finds the record ended. */
                sbx_sessions_ended(api->sessions, &reply.reply);
                sbx_engine_session_reply_free(&reply);
        }
        return sbx_http_respond(api, connection, 204, JSON_CONTENT_TYPE, "", 0, NULL, 0);
}

/* ---- Routing ---- */

bool sbx_sessions_route_reads_body(const char *url, const char *method)
{
        if (strncmp(url, SESSIONS_PATH, strlen(SESSIONS_PATH)) != 0)
                return false;
        const char *rest = url + strlen(SESSIONS_PATH);
        if (rest[0] == '\0')
                return strcmp(method, MHD_HTTP_METHOD_POST) == 0;
        if (strcmp(method, MHD_HTTP_METHOD_POST) == 0)
                return strlen(rest) == 1 + SBX_EXECUTION_ID_CHARS + 4 &&
                       strcmp(rest + 1 + SBX_EXECUTION_ID_CHARS, "/run") == 0;
        return strcmp(method, MHD_HTTP_METHOD_PUT) == 0 && strstr(rest, "/files/") != NULL;
}

json_t *sbx_sessions_parse_body(struct sbx_api *api, struct MHD_Connection *connection,
                                const void *body, size_t body_len, bool body_too_large,
                                enum MHD_Result *answer)
{
        if (body_too_large) {
                char detail[96];
                snprintf(detail, sizeof(detail), "the body is larger than %llu bytes",
                         (unsigned long long)api->config->server.max_body_bytes);
                *answer = sbx_http_respond_problem(api, connection, 413, detail, NULL, 0, NULL, 0);
                return NULL;
        }
        json_error_t parse_error;
        json_t *parsed =
                body_len == 0 ? NULL
                              : json_loadb(body, body_len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL,
                                           &parse_error);
        if (!json_is_object(parsed)) {
                json_decref(parsed);
                *answer = sbx_sessions_bad_request(api, connection, "body",
                                                   body_len == 0 ? "empty: send a JSON object"
                                                                 : "not a JSON object");
                return NULL;
        }
        return parsed;
}

static enum MHD_Result route_session(struct sbx_api *api, struct MHD_Connection *connection,
                                     const char *method, const struct sbx_tenant *tenant,
                                     const struct sbx_config *tenants, struct session *s,
                                     const char *after, const void *body, size_t body_len,
                                     bool body_too_large, struct sbx_http_after *after_response);

enum MHD_Result sbx_sessions_route(struct sbx_api *api, struct MHD_Connection *connection,
                                   const char *url, const char *method,
                                   const struct sbx_config *tenants, const void *body,
                                   size_t body_len, bool body_too_large,
                                   struct sbx_http_after *after_response, bool *handled)
{
        *handled = false;
        size_t prefix = strlen(SESSIONS_PATH);
        if (strncmp(url, SESSIONS_PATH, prefix) != 0 || (url[prefix] != '\0' && url[prefix] != '/'))
                return MHD_NO;
        *handled = true;
        const struct sbx_tenant *tenant = sbx_http_authenticate(connection, tenants);
        if (tenant == NULL)
                return sbx_http_respond_unauthorized(api, connection);
        bool read = strcmp(method, MHD_HTTP_METHOD_GET) == 0 ||
                    strcmp(method, MHD_HTTP_METHOD_HEAD) == 0;
        const char *rest = url + prefix;
        enum MHD_Result answer = MHD_NO;

        if (rest[0] == '\0' || strcmp(rest, "/") == 0) {
                if (strcmp(method, MHD_HTTP_METHOD_POST) == 0) {
                        if (sbx_http_draining())
                                return sbx_http_respond_shutting_down(api, connection);
                        json_t *parsed = sbx_sessions_parse_body(api, connection, body, body_len,
                                                                 body_too_large, &answer);
                        if (parsed == NULL)
                                return answer;
                        answer = handle_open(api, connection, tenant, parsed);
                        json_decref(parsed);
                        return answer;
                }
                if (!read)
                        return sbx_http_respond_method_not_allowed(api, connection, method,
                                                                   "GET, HEAD, POST");
                json_t *list = json_array();
                pthread_mutex_lock(&api->sessions->lock);
                sbx_sessions_forget_old(api->sessions, sbx_wall_clock_ms());
                for (size_t i = 0; i < api->sessions->n; i++)
                        if (!api->sessions->items[i]->ended &&
                            api->sessions->items[i]->episode == NULL &&
                            strcmp(api->sessions->items[i]->tenant, tenant->name) == 0)
                                json_array_append_new(list,
                                                      sbx_sessions_json(api->sessions->items[i]));
                pthread_mutex_unlock(&api->sessions->lock);
                return sbx_http_respond_json(api, connection, 200, JSON_CONTENT_TYPE,
                                             json_pack("{s:o}", "sessions", list), NULL, 0);
        }

        const char *after;
        struct session *s = sbx_sessions_find_in_url(api->sessions, rest, tenant, false, &after);
        if (s == NULL) {
                const struct sbx_sessions_request request = {method, url, body, body_len,
                                                             body_too_large};
                return sbx_sessions_not_held(api, connection, rest, tenant, false, &request);
        }
        answer = route_session(api, connection, method, tenant, tenants, s, after, body, body_len,
                               body_too_large, after_response);
        sbx_sessions_release(api->sessions, s);
        return answer;
}

/* The routes under /v1/sessions/{id}; s is held (users) by the caller. */
static enum MHD_Result route_session(struct sbx_api *api, struct MHD_Connection *connection,
                                     const char *method, const struct sbx_tenant *tenant,
                                     const struct sbx_config *tenants, struct session *s,
                                     const char *after, const void *body, size_t body_len,
                                     bool body_too_large, struct sbx_http_after *after_response)
{
        bool read = strcmp(method, MHD_HTTP_METHOD_GET) == 0 ||
                    strcmp(method, MHD_HTTP_METHOD_HEAD) == 0;
        enum MHD_Result answer = MHD_NO;
        if (after[0] == '\0') {
                if (read) {
                        pthread_mutex_lock(&api->sessions->lock);
                        json_t *object = s->ended ? NULL : sbx_sessions_json(s);
                        pthread_mutex_unlock(&api->sessions->lock);
                        if (object == NULL)
                                return sbx_sessions_not_found(api, connection, s);
                        return sbx_http_respond_json(api, connection, 200, JSON_CONTENT_TYPE,
                                                     object, NULL, 0);
                }
                if (strcmp(method, MHD_HTTP_METHOD_DELETE) == 0)
                        return handle_close(api, connection, s);
                return sbx_http_respond_method_not_allowed(api, connection, method,
                                                           "GET, HEAD, DELETE");
        }
        if (strcmp(after, "/run") == 0) {
                if (strcmp(method, MHD_HTTP_METHOD_POST) != 0)
                        return sbx_http_respond_method_not_allowed(api, connection, method, "POST");
                if (sbx_http_draining())
                        return sbx_http_respond_shutting_down(api, connection);
                json_t *parsed = sbx_sessions_parse_body(api, connection, body, body_len,
                                                         body_too_large, &answer);
                if (parsed == NULL)
                        return answer;
                answer = handle_run(api, connection, tenant, s, parsed, tenants, after_response);
                json_decref(parsed);
                return answer;
        }
        return sbx_sessions_file_route(api, connection, s, method, after, body, body_len,
                                       body_too_large);
}

enum MHD_Result sbx_sessions_file_route(struct sbx_api *api, struct MHD_Connection *connection,
                                        struct session *s, const char *method, const char *after,
                                        const void *body, size_t body_len, bool body_too_large)
{
        if (strcmp(after, "/files") == 0 || strcmp(after, "/files/") == 0) {
                const char *path =
                        MHD_lookup_connection_value(connection, MHD_GET_ARGUMENT_KIND, "path");
                return handle_file(api, connection, s, method, path ? path : ".", NULL, 0, true);
        }
        if (strncmp(after, "/files/", 7) == 0) {
                if (body_too_large) {
                        char detail[96];
                        snprintf(detail, sizeof(detail), "the file is larger than %llu bytes",
                                 (unsigned long long)api->config->server.max_body_bytes);
                        return sbx_http_respond_problem(api, connection, 413, detail, NULL, 0, NULL,
                                                        0);
                }
                return handle_file(api, connection, s, method, after + 7, body, body_len, false);
        }
        return sbx_http_respond_problem(api, connection, 404, "no such resource", NULL, 0, NULL, 0);
}
