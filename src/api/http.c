/* Request handling. libmicrohttpd calls handle_request() several times per request: once with
 * the headers (a fresh struct request is attached), once per piece of the body, and once more with
 * no data, when the response is produced. Each connection has its own thread, so the POST
 * handler simply blocks while the engine runs the sandbox.
 *
 * What libmicrohttpd answers by itself, before any of this runs, is its own: a request line or
 * header section too large for a connection's memory (414, 431) and a malformed Content-Length
 * (400) get its short HTML pages, not problem bodies; and the 0.9.75 of Debian 12 writes the
 * status line and headers of that 400 twice (connection.c: parse_connection_headers() queues the
 * error, then its caller resets the state and the reply is built again; fixed upstream in 1.0).
 * The connection is closed after each. */
#define _GNU_SOURCE
#include "api/http.h"

#include <errno.h>
#include <sched.h>
#include <microhttpd.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "api/async.h"
#include "api/batches.h"
#include "api/compat_judge0.h"
#include "api/compat_piston.h"
#include "api/webhooks.h"
#include "api/http_guard.h"
#include "api/languages.h"
#include "api/mcp_http.h"
#include "api/openapi.h"
#include "api/respond.h"
#include "api/episodes.h"
#include "api/sessions.h"
#include "api/web.h"
#include "api/sse.h"
#include "model/result_json.h"
#include "service/auth.h"
#include "service/problem.h"
#include "service/settings.h"
#include "util/buffer.h"
#include "util/cleanup.h"
#include "util/log.h"
#include "util/parse.h"
#include "util/time.h"

/* Seconds a connection may sit idle (a body trickling in, or a client not reading its answer)
 * before it is closed; the request head has its own, shorter bound (http_guard.h). */
#define HTTP_IDLE_TIMEOUT_S 30
/* How long /health waits for the engine's PONG, and /metrics for its STATS. */
#define ENGINE_PROBE_TIMEOUT_MS 1000
/* After SIGTERM, how long past the grace period running requests are waited for: the engine
 * cancels what still runs when the grace period ends (and kills what does not end within
 * 5 s of that), and every cancelled execution still answers, with status canceled. */
#define DRAIN_SLACK_MS 15000
/* How long a streamed execution's thread is given to end once the engine client is shut. */
#define STREAM_EXIT_WAIT_MS 2000

/* The per-request state libmicrohttpd keeps for us between calls. */
struct request {
        struct sbx_buffer body;
        bool body_too_large;
        bool body_ignored; /* the route reads no body: what comes is dropped */
        /* The tenants and tiers current when the request came in, held until it ends. */
        const struct sbx_config *tenants;
        struct sbx_http_after after;
        /* An execution, counted in executions_in_flight until its answer has been sent. */
        bool in_flight;
};

/* Executions from their quota check until their answer has been sent (request_completed): the
 * drain waits for them, and stopping the daemon would cut an answer still being written (a
 * handler returns once its answer is queued; libmicrohttpd sends it after). Other requests (a
 * 503 while draining, a record read) are quick; stopping the daemon ends them. */
static atomic_int executions_in_flight;
/* ---- GET /health, /metrics, /v1/openapi.json ---- */

static enum MHD_Result handle_health(struct sbx_api *api, struct MHD_Connection *connection)
{
        if (sbx_http_draining())
                return sbx_http_respond_unavailable(
                        api, connection, SBX_PROBLEM_SHUTTING_DOWN,
                        "draining: running executions are finishing and no "
                        "new work is taken",
                        sbx_http_drain_retry_after_s(), NULL);
        struct sbx_error err = {0};
        if (sbx_engine_client_ping(api->engine, ENGINE_PROBE_TIMEOUT_MS, &err) < 0)
                return sbx_http_respond_unavailable(api, connection, "engine-unavailable",
                                                    "the engine does not answer", 1, NULL);
        return sbx_http_respond_json(api, connection, 200, JSON_CONTENT_TYPE,
                                     json_pack("{s:s, s:s}", "status", "ok", "engine", "up"), NULL,
                                     0);
}

/* Whether the request carries the metrics token (config server.metrics_token_sha256). */
static bool metrics_token_given(struct sbx_api *api, struct MHD_Connection *connection)
{
        const char *token = sbx_auth_bearer_token(
                MHD_lookup_connection_value(connection, MHD_HEADER_KIND, "Authorization"));
        uint8_t digest[SBX_SHA256_SIZE];
        struct sbx_error err = {0};
        return token != NULL && sbx_auth_sha256(token, strlen(token), digest, &err) == 0 &&
               sbx_auth_digest_equal(digest, api->config->server.metrics_token_sha256);
}

static enum MHD_Result handle_metrics(struct sbx_api *api, struct MHD_Connection *connection)
{
        /* The figures name every tenant: with a metrics token configured, only its holder (a
         * Prometheus scraper) may read them. */
        if (api->config->server.metrics_token_required && !metrics_token_given(api, connection))
                return sbx_http_respond_unauthorized(api, connection);
        struct sbx_message_stats stats;
        struct sbx_error err = {0};
        if (sbx_engine_client_stats(api->engine, ENGINE_PROBE_TIMEOUT_MS, &stats, &err) == 0)
                sbx_metrics_set_engine_stats(api->metrics, &stats);
        sbx_metrics_set_open(api->metrics, SBX_METRICS_SESSIONS,
                             sbx_sessions_open_count(api->sessions, false));
        sbx_metrics_set_open(api->metrics, SBX_METRICS_EPISODES,
                             sbx_sessions_open_count(api->sessions, true));
        /* Counted before rendering, so that this request is in its own figures. */
        sbx_metrics_count_http_request(api->metrics, 200);
        size_t length = 0;
        _cleanup_free_ char *text = sbx_metrics_render(api->metrics, &length);
        if (text == NULL)
                return sbx_http_respond_problem(api, connection, 500, "out of memory", NULL, 0,
                                                NULL, 0);
        struct MHD_Response *response =
                MHD_create_response_from_buffer(length, text, MHD_RESPMEM_MUST_COPY);
        if (response == NULL)
                return MHD_NO;
        MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, SBX_METRICS_CONTENT_TYPE);
        enum MHD_Result queued = MHD_queue_response(connection, 200, response);
        MHD_destroy_response(response);
        return queued;
}

static enum MHD_Result handle_openapi(struct sbx_api *api, struct MHD_Connection *connection)
{
        return sbx_http_respond(api, connection, 200, SBX_OPENAPI_CONTENT_TYPE, sbx_openapi_json(),
                                sbx_openapi_json_length(), NULL, 0);
}

/* ---- GET /v1/languages ---- */

static enum MHD_Result handle_languages(struct sbx_api *api, struct MHD_Connection *connection,
                                        const struct request *request)
{
        const struct sbx_tenant *tenant = sbx_http_authenticate(connection, request->tenants);
        if (tenant == NULL)
                return sbx_http_respond_unauthorized(api, connection);
        json_t *languages = sbx_languages_json(api->config, tenant->tier);
        if (languages == NULL)
                return sbx_http_respond_problem(api, connection, 500, "out of memory", NULL, 0,
                                                NULL, 0);
        return sbx_http_respond_json(api, connection, 200, JSON_CONTENT_TYPE, languages, NULL, 0);
}

/* ---- POST /v1/executions ---- */

#define EXECUTIONS_PATH "/v1/executions"

static bool is_json_content_type(const char *value)
{
        if (value == NULL)
                return false;
        size_t n = strlen(JSON_CONTENT_TYPE);
        /* "application/json" with optional parameters ("; charset=utf-8"). */
        return strncasecmp(value, JSON_CONTENT_TYPE, n) == 0 &&
               (value[n] == '\0' || value[n] == ';' || value[n] == ' ');
}

static json_t *clamped_json(const struct sbx_settings *settings)
{
        json_t *array = json_array();
        for (size_t i = 0; array != NULL && i < settings->n_clamped; i++)
                json_array_append_new(array, json_string(settings->clamped[i]));
        return array;
}

/* {"bytes": N, "sha256": "..."} standing for a string of the request in the audit log. */
static json_t *digest_of(const json_t *string)
{
        char hex[SBX_AUDIT_SHA256_HEX_SIZE];
        struct sbx_error err = {0};
        const char *data = json_string_value(string);
        size_t size = json_string_length(string);
        if (data == NULL || sbx_audit_sha256_hex(data, size, hex, &err) < 0)
                return json_null();
        return json_pack("{s:I, s:s}", "bytes", (json_int_t)size, "sha256", hex);
}

/* The request as the audit log keeps it: every setting, but code, stdin and file contents as
 * their size and SHA-256. They can be megabytes each, and they are the tenant's data, not
 * settings; the hash still proves which program ran. */
static json_t *redacted_request(const json_t *requested)
{
        json_t *copy = json_deep_copy(requested);
        if (copy == NULL)
                return NULL;
        static const char *const byte_fields[] = {"code", "stdin"};
        for (size_t i = 0; i < SBX_ARRAY_SIZE(byte_fields); i++) {
                json_t *value = json_object_get(copy, byte_fields[i]);
                if (json_is_string(value))
                        json_object_set_new(copy, byte_fields[i], digest_of(value));
        }
        size_t index;
        json_t *file;
        json_array_foreach(json_object_get(copy, "files"), index, file)
        {
                json_t *content = json_object_get(file, "content");
                if (json_is_string(content))
                        json_object_set_new(file, "content", digest_of(content));
        }
        return copy;
}

void sbx_http_record_parts_free(struct sbx_http_record_parts *parts)
{
        json_decref(parts->clamped);
        json_decref(parts->requested);
        json_decref(parts->effective);
}

struct sbx_audit_record sbx_http_record_of(const struct sbx_settings *settings,
                                           uint64_t created_at_ms,
                                           struct sbx_http_record_parts *parts)
{
        *parts = (struct sbx_http_record_parts){
                .clamped = clamped_json(settings),
                .requested = redacted_request(settings->requested),
                .effective = sbx_limits_to_json(&settings->limits),
        };
        return (struct sbx_audit_record){
                .id = settings->id,
                .tenant = settings->tenant,
                .created_at_ms = (int64_t)created_at_ms,
                .language = settings->language,
                .requested = parts->requested,
                .effective = parts->effective,
                .clamped = parts->clamped,
        };
}

/* Writes the audit record of an execution about to start (status running): before the engine
 * gets it, so that whatever fails later, an execution that started has a record. */
static int begin_audit(struct sbx_api *api, const struct sbx_settings *settings,
                       uint64_t created_at_ms, struct sbx_error *err)
{
        _cleanup_(sbx_http_record_parts_free) struct sbx_http_record_parts parts;
        const struct sbx_audit_record record = sbx_http_record_of(settings, created_at_ms, &parts);
        return sbx_audit_begin(api->audit, &record, err);
}

void sbx_http_end_without_result(struct sbx_api *api, const char *id,
                                 const struct sbx_limits *limits, enum sbx_status status,
                                 const char *why)
{
        struct sbx_result result = {.status = status, .exit_code = -1};
        if (limits != NULL)
                result.limits = *limits;
        snprintf(result.id, sizeof(result.id), "%s", id);
        snprintf(result.error, sizeof(result.error), "%.*s", (int)sizeof(result.error) - 1, why);
        struct sbx_error err = {0};
        if (sbx_audit_finish_result(api->audit, &result, NULL, (int64_t)sbx_wall_clock_ms(), false,
                                    &err) < 0)
                sbx_warn("audit: execution %s: %s", id, err.message);
}

/* Removes the record of an execution the engine refused: nothing ran. */
static void forget_audit(struct sbx_api *api, const struct sbx_settings *settings)
{
        struct sbx_error err = {0};
        if (sbx_audit_forget(api->audit, settings->id, &err) < 0)
                sbx_warn("audit: execution %s: %s", settings->id, err.message);
}

static enum MHD_Result problem_from_settings(struct sbx_api *api, struct MHD_Connection *connection,
                                             const struct sbx_problem *problem)
{
        return sbx_http_respond_json(api, connection, problem->status, SBX_PROBLEM_CONTENT_TYPE,
                                     sbx_problem_to_json(problem), NULL, 0);
}

/* The answer to a quota refusal: 429 for the tenant's own limits, 503 for the server's. */
static enum MHD_Result respond_quota_refusal(struct sbx_api *api, struct MHD_Connection *connection,
                                             const struct sbx_tenant *tenant,
                                             const struct sbx_quota_decision *decision)
{
        sbx_metrics_count_quota_rejection(api->metrics, tenant->name,
                                          sbx_quota_verdict_name(decision->verdict));
        char detail[160];
        switch (decision->verdict) {
        case SBX_QUOTA_OVER_CAPACITY:
                snprintf(detail, sizeof(detail), "the server runs %llu executions, its maximum",
                         (unsigned long long)api->config->server.max_sandboxes);
                return sbx_http_respond_unavailable(api, connection, SBX_PROBLEM_AT_CAPACITY,
                                                    detail, decision->retry_after_s, NULL);
        case SBX_QUOTA_STORE_UNAVAILABLE:
                return sbx_http_respond_unavailable(api, connection, SBX_PROBLEM_STORE_UNAVAILABLE,
                                                    sbx_quota_verdict_text(decision->verdict),
                                                    decision->retry_after_s, NULL);
        case SBX_QUOTA_OVER_CONCURRENCY:
                snprintf(detail, sizeof(detail),
                         "tenant %s has %llu executions running, its tier's maximum", tenant->name,
                         (unsigned long long)tenant->tier->max_concurrency);
                break;
        case SBX_QUOTA_OVER_CPU_BUDGET:
        case SBX_QUOTA_ALLOWED:
                snprintf(detail, sizeof(detail),
                         "tenant %s used its CPU budget of %llu ms for the window", tenant->name,
                         (unsigned long long)tenant->tier->cpu_budget_ms);
                break;
        }
        char retry_after[32];
        snprintf(retry_after, sizeof(retry_after), "%llu",
                 (unsigned long long)decision->retry_after_s);
        const struct sbx_http_header header = {MHD_HTTP_HEADER_RETRY_AFTER, retry_after};
        return sbx_http_respond_problem(api, connection, 429, detail, NULL, 0, &header, 1);
}

/* What becomes of an execution the engine gave no RESULT for (engine_client.h lists the codes):
 * its audit record's end, and the problem that answers it, as a plain response or as a stream's
 * last event. */
struct engine_failure {
        unsigned status;
        const char *slug;
        char detail[SBX_ERROR_MESSAGE_MAX + 96];
        uint64_t retry_after_s; /* 0: no Retry-After */
        bool record_kept;       /* the audit record stays: the problem names the execution */
};

static void engine_failure(struct sbx_api *api, const struct sbx_tenant *tenant,
                           const struct sbx_settings *settings, const struct sbx_error *err,
                           struct engine_failure *out)
{
        sbx_warn("execution %s: engine: %s", settings->id, err->message);
        *out = (struct engine_failure){.status = 503, .retry_after_s = 1};
        switch (err->code) {
        case EBUSY: /* the capacity check should have kept this from happening */
                forget_audit(api, settings);
                sbx_metrics_count_quota_rejection(api->metrics, tenant->name,
                                                  sbx_quota_verdict_name(SBX_QUOTA_OVER_CAPACITY));
                out->slug = SBX_PROBLEM_AT_CAPACITY;
                out->retry_after_s = sbx_quota_capacity_retry_after(api->quota, sbx_now_ms());
                snprintf(out->detail, sizeof(out->detail), "%s", err->message);
                break;
        case ESHUTDOWN:
                forget_audit(api, settings);
                out->slug = SBX_PROBLEM_SHUTTING_DOWN;
                out->retry_after_s = sbx_http_drain_retry_after_s();
                snprintf(out->detail, sizeof(out->detail), "%s", SBX_HTTP_SHUTTING_DOWN_DETAIL);
                break;
        case EAGAIN:
        case EPIPE:
                /* Refused, or never answered because the engine is gone: it ran nothing (a
                 * worker of a dead engine still answers, with status canceled). */
                forget_audit(api, settings);
                out->slug = "engine-unavailable";
                snprintf(out->detail, sizeof(out->detail),
                         "the engine is unavailable (%s); nothing was run", err->message);
                break;
        case ETIMEDOUT:
        case EBADMSG:
                /* It may have run: the record stays, saying so. */
                out->slug = "engine-unavailable";
                out->record_kept = true;
                snprintf(out->detail, sizeof(out->detail),
                         "%s; the execution may have run: its record says what is known",
                         err->message);
                sbx_http_end_without_result(api, settings->id, &settings->limits,
                                            SBX_STATUS_INTERNAL_ERROR, out->detail);
                break;
        default: /* EPROTO, EINVAL, ENOMEM: nothing reached a sandbox */
                forget_audit(api, settings);
                out->status = 500;
                out->slug = sbx_problem_default_slug(500);
                out->retry_after_s = 0;
                snprintf(out->detail, sizeof(out->detail), "the request could not be run: %s",
                         err->message);
                break;
        }
}

static enum MHD_Result respond_engine_failure(struct sbx_api *api,
                                              struct MHD_Connection *connection,
                                              const struct sbx_tenant *tenant,
                                              const struct sbx_settings *settings,
                                              const struct sbx_error *err)
{
        struct engine_failure failure;
        engine_failure(api, tenant, settings, err, &failure);
        if (failure.retry_after_s == 0)
                return sbx_http_respond_problem_of(api, connection, failure.status, failure.slug,
                                                   failure.detail, NULL, 0, NULL, 0, NULL);
        return sbx_http_respond_unavailable(api, connection, failure.slug, failure.detail,
                                            failure.retry_after_s,
                                            failure.record_kept ? settings->id : NULL);
}

json_t *sbx_http_finish_execution(struct sbx_api *api, const struct sbx_tenant *tenant,
                                  const struct sbx_settings *settings,
                                  struct sbx_engine_result *outcome)
{
        struct sbx_result *result = &outcome->result;
        json_t *response = sbx_result_to_json(result);
        if (response != NULL) {
                json_object_set_new(response, "id", json_string(settings->id));
                json_object_set_new(response, "clamped", clamped_json(settings));
        }
        struct sbx_error err = {0};
        /* A queued execution's client reads its output from the record: it is kept whatever
         * store_output says. */
        if (sbx_audit_finish_result(api->audit, result, response, (int64_t)sbx_wall_clock_ms(),
                                    api->config->server.store_output || settings->queued, &err) < 0)
                sbx_warn("audit: execution %s: %s", settings->id, err.message);
        sbx_metrics_count_execution(api->metrics, tenant->name, result->backend,
                                    sbx_status_name(result->status), result->timing.total_us);
        sbx_metrics_observe_timing(api->metrics, &result->timing);
        if (result->compile != NULL)
                sbx_metrics_count_compile(api->metrics, result->compile->cached);
        sbx_engine_result_free(outcome);
        return response;
}

/* ---- A streamed execution (Accept: text/event-stream) ---- */

struct streamed_execution {
        struct sbx_api *api;
        const struct sbx_tenant *tenant; /* in snapshot, which this holds */
        const struct sbx_config *snapshot;
        struct sbx_settings *settings; /* owned */
        uint64_t reservation;
        struct sbx_sse *sse;
        _Atomic uint64_t request_id;
        _Atomic int refs; /* the thread's and the response's */
};

static void streamed_unref(struct streamed_execution *job)
{
        if (atomic_fetch_sub(&job->refs, 1) != 1)
                return;
        sbx_live_config_release(job->api->live, job->snapshot);
        sbx_settings_free(job->settings);
        free(job);
}

static void streamed_event(void *ctx, const struct sbx_message_session *event)
{
        struct streamed_execution *job = ctx;
        json_error_t json_error;
        json_t *fields = json_loadb(event->fields, event->fields_len, JSON_ALLOW_NUL, &json_error);
        const char *name = json_string_value(json_object_get(fields, "event"));
        const json_t *data = json_object_get(fields, "data");
        if (name != NULL && data != NULL &&
            (strcmp(name, "stdout") == 0 || strcmp(name, "stderr") == 0))
                sbx_sse_event(job->sse, name, data);
        json_decref(fields);
}

/* The stream's thread: the execution, its accounting and record, its last event. */
static void *streamed_thread(void *arg)
{
        struct streamed_execution *job = arg;
        struct sbx_api *api = job->api;
        struct sbx_request request;
        sbx_settings_to_request(job->settings, &request);
        request.stream = true;
        struct sbx_engine_result outcome = {0};
        struct sbx_error err = {0};
        int rc =
                sbx_engine_client_run_stream(api->engine, job->settings->id, &request,
                                             streamed_event, job, &job->request_id, &outcome, &err);
        uint64_t cpu_ms = rc == 0 ? sbx_result_cpu_ms(&outcome.result) : 0;
        sbx_quota_release(api->quota, job->tenant, job->reservation, rc == 0, cpu_ms, sbx_now_ms());
        if (rc < 0) {
                struct engine_failure failure;
                engine_failure(api, job->tenant, job->settings, &err, &failure);
                json_t *problem =
                        sbx_problem_new(failure.status, failure.slug, failure.detail, NULL, 0);
                if (problem != NULL && failure.record_kept)
                        json_object_set_new(problem, "execution_id",
                                            json_string(job->settings->id));
                sbx_sse_event(job->sse, "problem", problem);
                json_decref(problem);
        } else {
                json_t *response =
                        sbx_http_finish_execution(api, job->tenant, job->settings, &outcome);
                sbx_sse_event(job->sse, "end", response);
                json_decref(response);
        }
        sbx_sse_finish(job->sse);
        atomic_fetch_sub(&executions_in_flight, 1);
        streamed_unref(job);
        return NULL;
}

/* The response ended: a client that left before the end cancels the execution (it ends
 * canceled, and is recorded so). */
static void streamed_ended(void *ctx, bool client_left)
{
        struct streamed_execution *job = ctx;
        uint64_t request_id = atomic_load(&job->request_id);
        if (client_left && request_id != 0)
                sbx_engine_client_cancel(job->api->engine, request_id);
        streamed_unref(job);
}

/* Runs settings (taken: *settings becomes NULL) as a stream, with its quota reserved and its
 * audit record begun. */
static enum MHD_Result stream_execution(struct sbx_api *api, struct MHD_Connection *connection,
                                        const struct sbx_tenant *tenant,
                                        const struct sbx_config *tenants,
                                        struct sbx_settings **settings, uint64_t reservation)
{
        struct streamed_execution *job = calloc(1, sizeof(*job));
        struct sbx_sse *sse = job != NULL ? sbx_sse_new() : NULL;
        if (sse == NULL) {
                free(job);
                sbx_quota_release(api->quota, tenant, reservation, false, 0, sbx_now_ms());
                forget_audit(api, *settings);
                return sbx_http_respond_problem(api, connection, 500, "cannot start a stream", NULL,
                                                0, NULL, 0);
        }
        sbx_live_config_hold(api->live, tenants);
        *job = (struct streamed_execution){.api = api,
                                           .tenant = tenant,
                                           .snapshot = tenants,
                                           .settings = *settings,
                                           .reservation = reservation,
                                           .sse = sse};
        *settings = NULL;
        atomic_store(&job->refs, 2);
        atomic_fetch_add(&executions_in_flight, 1);
        pthread_t thread;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        int rc = pthread_create(&thread, &attr, streamed_thread, job);
        pthread_attr_destroy(&attr);
        if (rc != 0) {
                atomic_fetch_sub(&executions_in_flight, 1);
                sbx_quota_release(api->quota, tenant, reservation, false, 0, sbx_now_ms());
                forget_audit(api, job->settings);
                sbx_sse_abandon(sse);
                sbx_sse_finish(sse);
                atomic_store(&job->refs, 1);
                streamed_unref(job);
                return sbx_http_respond_problem(api, connection, 500,
                                                "cannot start a stream's thread", NULL, 0, NULL, 0);
        }
        return sbx_sse_respond(api, connection, sse, streamed_ended, job);
}

/* Admits settings for a run: its quota reserved (*reservation) and its audit record begun.
 * Returns true when admitted; otherwise it has answered the connection with the refusal, what
 * that returned in *answered. */
static bool admit_execution(struct sbx_api *api, struct MHD_Connection *connection,
                            const struct sbx_tenant *tenant, const struct sbx_settings *settings,
                            uint64_t *reservation, enum MHD_Result *answered)
{
        uint64_t created_at_ms = sbx_wall_clock_ms();
        struct sbx_quota_decision decision;
        struct sbx_error err = {0};
        if (sbx_quota_reserve(api->quota, tenant, settings->limits.wall_ms, sbx_now_ms(), &decision,
                              &err) < 0) {
                *answered = sbx_http_respond_problem(api, connection, 500, err.message, NULL, 0,
                                                     NULL, 0);
                return false;
        }
        if (decision.verdict != SBX_QUOTA_ALLOWED) {
                *answered = respond_quota_refusal(api, connection, tenant, &decision);
                return false;
        }
        if (begin_audit(api, settings, created_at_ms, &err) < 0) {
                sbx_quota_release(api->quota, tenant, decision.reservation, false, 0, sbx_now_ms());
                sbx_warn("execution %s: %s", settings->id, err.message);
                *answered = sbx_http_respond_store_failed(
                        api, connection, "the audit store failed; nothing was run");
                return false;
        }
        *reservation = decision.reservation;
        return true;
}

/* Runs admitted settings in the engine and ends them: the response body, or NULL after
 * answering the connection with the engine's failure. */
static json_t *run_admitted(struct sbx_api *api, struct MHD_Connection *connection,
                            const struct sbx_tenant *tenant, const struct sbx_settings *settings,
                            uint64_t reservation, enum MHD_Result *answered)
{
        struct sbx_request request;
        sbx_settings_to_request(settings, &request);
        struct sbx_engine_result outcome = {0};
        struct sbx_error err = {0};
        int rc = sbx_engine_client_run(api->engine, settings->id, &request, &outcome, &err);
        uint64_t cpu_ms = rc == 0 ? sbx_result_cpu_ms(&outcome.result) : 0;
        sbx_quota_release(api->quota, tenant, reservation, rc == 0, cpu_ms, sbx_now_ms());
        if (rc < 0) {
                *answered = respond_engine_failure(api, connection, tenant, settings, &err);
                return NULL;
        }
        return sbx_http_finish_execution(api, tenant, settings, &outcome);
}

void sbx_http_hold_in_flight(bool *in_flight)
{
        if (!*in_flight) {
                atomic_fetch_add(&executions_in_flight, 1);
                *in_flight = true; /* until request_completed */
        }
}

json_t *sbx_http_execute(struct sbx_api *api, struct MHD_Connection *connection,
                         const struct sbx_tenant *tenant, const struct sbx_settings *settings,
                         bool *in_flight, enum MHD_Result *answered)
{
        sbx_http_hold_in_flight(in_flight);
        uint64_t reservation = 0;
        if (!admit_execution(api, connection, tenant, settings, &reservation, answered))
                return NULL;
        return run_admitted(api, connection, tenant, settings, reservation, answered);
}

static enum MHD_Result execute_and_answer(struct sbx_api *api, struct MHD_Connection *connection,
                                          const struct sbx_tenant *tenant, struct request *request,
                                          struct sbx_settings **owned)
{
        sbx_http_hold_in_flight(&request->in_flight);
        uint64_t reservation = 0;
        enum MHD_Result answered = MHD_NO;
        if (!admit_execution(api, connection, tenant, *owned, &reservation, &answered))
                return answered;
        if (sbx_sse_wanted(connection))
                return stream_execution(api, connection, tenant, request->tenants, owned,
                                        reservation);
        json_t *response = run_admitted(api, connection, tenant, *owned, reservation, &answered);
        if (response == NULL)
                return answered;
        return sbx_http_respond_json(api, connection, 200, JSON_CONTENT_TYPE, response, NULL, 0);
}

/* Whether the client asked for an answer before the run (RFC 7240's respond-async). */
static bool respond_async_preferred(struct MHD_Connection *connection)
{
        const char *prefer = MHD_lookup_connection_value(connection, MHD_HEADER_KIND, "Prefer");
        return prefer != NULL && strcasestr(prefer, "respond-async") != NULL;
}

/* An asynchronous execution: committed to the queue, answered 202 with where to look. */
static enum MHD_Result queue_execution(struct sbx_api *api, struct MHD_Connection *connection,
                                       const struct sbx_tenant *tenant,
                                       const struct sbx_settings *settings)
{
        char why[512];
        if (settings->callback_url != NULL &&
            !sbx_webhooks_check_url(tenant, settings->callback_url, why, sizeof(why))) {
                const struct sbx_problem_field field = {"callback_url", why};
                return sbx_http_respond_problem(api, connection, 400, why, &field, 1, NULL, 0);
        }
        _cleanup_(sbx_http_record_parts_free) struct sbx_http_record_parts parts;
        const struct sbx_audit_record record =
                sbx_http_record_of(settings, sbx_wall_clock_ms(), &parts);
        uint64_t position = 0, retry_after_s = 1;
        struct sbx_error err = {0};
        const struct sbx_async_item item = {.settings = settings, .record = &record};
        if (sbx_async_submit(api->async, tenant, NULL, &item, 1, &position, &retry_after_s, &err) <
            0) {
                return sbx_http_respond_queue_refusal(api, connection, tenant, &err, retry_after_s,
                                                      settings->id);
        }
        char location[sizeof(EXECUTIONS_PATH) + SBX_EXECUTION_ID_CHARS + 2];
        snprintf(location, sizeof(location), "%s/%s", EXECUTIONS_PATH, settings->id);
        const struct sbx_http_header header = {MHD_HTTP_HEADER_LOCATION, location};
        json_t *body = json_pack("{s:s, s:s, s:I, s:O}", "id", settings->id, "status",
                                 SBX_AUDIT_STATUS_QUEUED, "queue_position", (json_int_t)position,
                                 "clamped", parts.clamped);
        return sbx_http_respond_json(api, connection, 202, JSON_CONTENT_TYPE, body, &header, 1);
}

static enum MHD_Result handle_create_execution(struct sbx_api *api,
                                               struct MHD_Connection *connection,
                                               struct request *request)
{
        const struct sbx_tenant *tenant = sbx_http_authenticate(connection, request->tenants);
        if (tenant == NULL)
                return sbx_http_respond_unauthorized(api, connection);
        if (request->body_too_large) {
                char detail[96];
                snprintf(detail, sizeof(detail), "the body is larger than %llu bytes",
                         (unsigned long long)api->config->server.max_body_bytes);
                return sbx_http_respond_problem(api, connection, 413, detail, NULL, 0, NULL, 0);
        }
        const char *content_type = MHD_lookup_connection_value(connection, MHD_HEADER_KIND,
                                                               MHD_HTTP_HEADER_CONTENT_TYPE);
        if (!is_json_content_type(content_type))
                return sbx_http_respond_problem(api, connection, 415,
                                                "the body must be application/json", NULL, 0, NULL,
                                                0);
        if (request->body.len == 0) {
                const struct sbx_problem_field field = {"body", "empty"};
                return sbx_http_respond_problem(api, connection, 400,
                                                "the body is empty: send a JSON object (see "
                                                "/v1/openapi.json)",
                                                &field, 1, NULL, 0);
        }

        json_error_t parse_error;
        /* Duplicate keys are ambiguous (which limit applies?): refuse them. NUL is allowed in
         * strings: code and stdin are bytes. */
        _cleanup_(json_decrefp) json_t *body =
                json_loadb((const char *)request->body.data, request->body.len,
                           JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &parse_error);
        if (body == NULL) {
                char detail[256];
                snprintf(detail, sizeof(detail), "malformed JSON at line %d, column %d: %s",
                         parse_error.line, parse_error.column, parse_error.text);
                const struct sbx_problem_field field = {"body", "not valid JSON"};
                return sbx_http_respond_problem(api, connection, 400, detail, &field, 1, NULL, 0);
        }

        /* Prefer: respond-async is "wait": false, for the checks of retry and callback_url too. */
        if (respond_async_preferred(connection) && json_object_get(body, "wait") == NULL)
                json_object_set_new(body, "wait", json_false());
        struct sbx_settings *settings = NULL;
        struct sbx_problem problem;
        if (sbx_settings_build(body, tenant, &settings, &problem) < 0)
                return problem_from_settings(api, connection, &problem);
        if (settings->queued) {
                enum MHD_Result queued = queue_execution(api, connection, tenant, settings);
                sbx_settings_free(settings);
                return queued;
        }
        enum MHD_Result result = execute_and_answer(api, connection, tenant, request, &settings);
        sbx_settings_free(settings); /* NULL when a stream took it */
        return result;
}

/* ---- GET and DELETE /v1/executions/{id} ---- */

/* The longest a GET may wait for an asynchronous execution's end (?wait=SECONDS). */
#define LONG_POLL_MAX_S 60

/* A record as GET answers it: a queued one with its place in the queue and an estimate. */
static void add_queue_place(struct sbx_api *api, const char *id, json_t *record)
{
        const char *status = json_string_value(json_object_get(record, "status"));
        uint64_t position, estimate_ms;
        if (status != NULL && strcmp(status, SBX_AUDIT_STATUS_QUEUED) == 0 &&
            sbx_async_position(api->async, id, &position, &estimate_ms)) {
                json_object_set_new(record, "queue_position", json_integer((json_int_t)position));
                json_object_set_new(record, "estimated_start_ms",
                                    json_integer((json_int_t)estimate_ms));
        }
}

/* The answer to a record's fetch that failed (found -1) or found nothing (0). */
static enum MHD_Result respond_no_record(struct sbx_api *api, struct MHD_Connection *connection,
                                         int found)
{
        if (found < 0)
                return sbx_http_respond_store_failed(api, connection, "the audit store failed");
        /* Another tenant's execution is "not found" too: no way to probe for ids. */
        return sbx_http_respond_problem(api, connection, 404, "no such execution", NULL, 0, NULL,
                                        0);
}

static bool record_pending(const json_t *record)
{
        const char *status = json_string_value(json_object_get(record, "status"));
        return status != NULL && (strcmp(status, SBX_AUDIT_STATUS_QUEUED) == 0 ||
                                  strcmp(status, SBX_AUDIT_STATUS_RUNNING) == 0);
}

static enum MHD_Result handle_get_execution(struct sbx_api *api, struct MHD_Connection *connection,
                                            const struct request *request, const char *id)
{
        const struct sbx_tenant *tenant = sbx_http_authenticate(connection, request->tenants);
        if (tenant == NULL)
                return sbx_http_respond_unauthorized(api, connection);
        uint64_t wait_s = 0;
        const char *wait = MHD_lookup_connection_value(connection, MHD_GET_ARGUMENT_KIND, "wait");
        struct sbx_error err = {0};
        if (wait != NULL && sbx_parse_u64(wait, LONG_POLL_MAX_S, &wait_s, &err) < 0) {
                const struct sbx_problem_field field = {"wait", "whole seconds, at most 60"};
                return sbx_http_respond_problem(api, connection, 400, err.message, &field, 1, NULL,
                                                0);
        }
        json_t *record = NULL;
        int found = sbx_execution_id_valid(id)
                            ? sbx_audit_fetch(api->audit, tenant->name, id, &record, &err)
                            : 0;
        if (found > 0 && wait_s > 0 && record_pending(record)) {
                json_decref(record);
                record = NULL;
                sbx_async_wait(api->async, id, wait_s * 1000);
                found = sbx_audit_fetch(api->audit, tenant->name, id, &record, &err);
        }
        if (found <= 0)
                return respond_no_record(api, connection, found);
        add_queue_place(api, id, record);
        return sbx_http_respond_json(api, connection, 200, JSON_CONTENT_TYPE, record, NULL, 0);
}

/* GET /v1/executions: the tenant's most recent records; ?limit= (default 20), ?before= (ms
 * since the epoch: older than it, for the next page). */
#define RECENT_DEFAULT 20
#define RECENT_MAX     100

static enum MHD_Result handle_list_executions(struct sbx_api *api,
                                              struct MHD_Connection *connection,
                                              const struct request *request)
{
        const struct sbx_tenant *tenant = sbx_http_authenticate(connection, request->tenants);
        if (tenant == NULL)
                return sbx_http_respond_unauthorized(api, connection);
        uint64_t limit = RECENT_DEFAULT, before = INT64_MAX;
        const char *limit_text =
                MHD_lookup_connection_value(connection, MHD_GET_ARGUMENT_KIND, "limit");
        const char *before_text =
                MHD_lookup_connection_value(connection, MHD_GET_ARGUMENT_KIND, "before");
        struct sbx_error err = {0};
        if ((limit_text != NULL &&
             (sbx_parse_u64(limit_text, RECENT_MAX, &limit, &err) < 0 || limit == 0))) {
                const struct sbx_problem_field field = {"limit", "1 to 100"};
                return sbx_http_respond_problem(api, connection, 400, "limit is 1 to 100", &field,
                                                1, NULL, 0);
        }
        if (before_text != NULL && sbx_parse_u64(before_text, INT64_MAX, &before, &err) < 0) {
                const struct sbx_problem_field field = {"before", "milliseconds since the epoch"};
                return sbx_http_respond_problem(api, connection, 400, err.message, &field, 1, NULL,
                                                0);
        }
        json_t *list = NULL;
        if (sbx_audit_recent(api->audit, tenant->name, (int64_t)before, (unsigned)limit, &list,
                             &err) < 0) {
                sbx_warn("audit: %s", err.message);
                return sbx_http_respond_store_failed(api, connection, "the audit store failed");
        }
        return sbx_http_respond_json(api, connection, 200, JSON_CONTENT_TYPE,
                                     json_pack("{s:o}", "executions", list), NULL, 0);
}

/* How long a DELETE of a running execution waits for its end, to answer with it. */
#define CANCEL_WAIT_MS 10000

static enum MHD_Result handle_cancel_execution(struct sbx_api *api,
                                               struct MHD_Connection *connection,
                                               const struct request *request, const char *id)
{
        const struct sbx_tenant *tenant = sbx_http_authenticate(connection, request->tenants);
        if (tenant == NULL)
                return sbx_http_respond_unauthorized(api, connection);
        if (!sbx_execution_id_valid(id))
                return respond_no_record(api, connection, 0);
        struct sbx_error err = {0};
        int canceled = sbx_async_cancel(api->async, tenant->name, id, &err);
        if (canceled == 2)
                sbx_async_wait(api->async, id, CANCEL_WAIT_MS);
        json_t *record = NULL;
        int found =
                canceled < 0 ? -1 : sbx_audit_fetch(api->audit, tenant->name, id, &record, &err);
        if (found <= 0)
                return respond_no_record(api, connection, found);
        if (canceled == 0) {
                char detail[160];
                const char *status = json_string_value(json_object_get(record, "status"));
                if (record_pending(record))
                        snprintf(detail, sizeof(detail),
                                 "execution %s runs for a waiting client: it ends when that "
                                 "client closes its connection",
                                 id);
                else
                        snprintf(detail, sizeof(detail), "execution %s has ended already (%s)", id,
                                 status ? status : "?");
                json_decref(record);
                return sbx_http_respond_problem(api, connection, 409, detail, NULL, 0, NULL, 0);
        }
        return sbx_http_respond_json(api, connection, 200, JSON_CONTENT_TYPE, record, NULL, 0);
}

/* ---- routing ---- */

/* What a resource that can be read allows: GET, and HEAD (libmicrohttpd sends the headers of
 * the GET answer without its body). */
#define READ_METHODS "GET, HEAD"

static enum MHD_Result route(struct sbx_api *api, struct MHD_Connection *connection,
                             const char *url, const char *method, struct request *request)
{
        bool read = strcmp(method, MHD_HTTP_METHOD_GET) == 0 ||
                    strcmp(method, MHD_HTTP_METHOD_HEAD) == 0;
        bool post = strcmp(method, MHD_HTTP_METHOD_POST) == 0;
        if (strcmp(url, "/health") == 0)
                return read ? handle_health(api, connection)
                            : sbx_http_respond_method_not_allowed(api, connection, method,
                                                                  READ_METHODS);
        if (strcmp(url, "/metrics") == 0)
                return read ? handle_metrics(api, connection)
                            : sbx_http_respond_method_not_allowed(api, connection, method,
                                                                  READ_METHODS);
        if (strcmp(url, "/v1/openapi.json") == 0)
                return read ? handle_openapi(api, connection)
                            : sbx_http_respond_method_not_allowed(api, connection, method,
                                                                  READ_METHODS);
        if (strcmp(url, "/v1/languages") == 0)
                return read ? handle_languages(api, connection, request)
                            : sbx_http_respond_method_not_allowed(api, connection, method,
                                                                  READ_METHODS);
        bool handled = false;
        const struct sbx_compat_request compat = {.tenants = request->tenants,
                                                  .body = request->body.data,
                                                  .body_len = request->body.len,
                                                  .body_too_large = request->body_too_large,
                                                  .in_flight = &request->in_flight};
        enum MHD_Result answered =
                sbx_piston_route(api, connection, url, method, &compat, &handled);
        if (handled)
                return answered;
        answered = sbx_judge0_route(api, connection, url, method, &compat, &handled);
        if (handled)
                return answered;
        answered = sbx_mcp_http_route(api, connection, url, method, &compat, &handled);
        if (handled)
                return answered;
        answered = sbx_web_route(api, connection, url, method, &handled);
        if (handled)
                return answered;
        answered = sbx_sessions_route(api, connection, url, method, request->tenants,
                                      request->body.data, request->body.len,
                                      request->body_too_large, &request->after, &handled);
        if (handled)
                return answered;
        answered = sbx_episodes_route(api, connection, url, method, request->tenants,
                                      request->body.data, request->body.len,
                                      request->body_too_large, &handled);
        if (handled)
                return answered;
        answered = sbx_batches_route(api, connection, url, method, request->tenants,
                                     request->body.data, request->body.len, request->body_too_large,
                                     &handled);
        if (handled)
                return answered;
        answered = sbx_webhooks_route(api, connection, url, method, request->tenants, &handled);
        if (handled)
                return answered;
        if (strcmp(url, EXECUTIONS_PATH) == 0) {
                if (post)
                        return handle_create_execution(api, connection, request);
                if (read)
                        return handle_list_executions(api, connection, request);
                return sbx_http_respond_method_not_allowed(api, connection, method,
                                                           READ_METHODS ", POST");
        }
        if (strncmp(url, EXECUTIONS_PATH "/", strlen(EXECUTIONS_PATH) + 1) == 0) {
                const char *id = url + strlen(EXECUTIONS_PATH) + 1;
                if (strchr(id, '/') == NULL && id[0] != '\0') {
                        if (read)
                                return handle_get_execution(api, connection, request, id);
                        if (strcmp(method, MHD_HTTP_METHOD_DELETE) == 0)
                                return handle_cancel_execution(api, connection, request, id);
                        return sbx_http_respond_method_not_allowed(api, connection, method,
                                                                   READ_METHODS ", DELETE");
                }
        }
        return sbx_http_respond_problem(api, connection, 404, "no such resource", NULL, 0, NULL, 0);
}

/* Whether the request says a body follows (a Content-Length above 0, or a chunked one). */
static bool announces_body(struct MHD_Connection *connection)
{
        const char *length = MHD_lookup_connection_value(connection, MHD_HEADER_KIND,
                                                         MHD_HTTP_HEADER_CONTENT_LENGTH);
        return (length != NULL && strtoull(length, NULL, 10) > 0) ||
               MHD_lookup_connection_value(connection, MHD_HEADER_KIND,
                                           MHD_HTTP_HEADER_TRANSFER_ENCODING) != NULL;
}

/* The header in which a drop-in API's clients send their token besides Authorization. */
static const char *compat_peer_header(enum sbx_compat_api compat)
{
        return compat == SBX_COMPAT_JUDGE0 ? "X-Auth-Token" : NULL;
}

static enum MHD_Result handle_request(void *cls, struct MHD_Connection *connection, const char *url,
                                      const char *method, const char *version,
                                      const char *upload_data, size_t *upload_data_size,
                                      void **state)
{
        struct sbx_api *api = cls;
        struct request *request = *state;
        if (request == NULL) {
                /* First call: headers only. Refuse an announced oversize body before reading it. */
                request = calloc(1, sizeof(*request));
                if (request == NULL)
                        return MHD_NO;
                sbx_buffer_init(&request->body, api->config->server.max_body_bytes);
                request->tenants = sbx_live_config_acquire(api->live);
                *state = request;
                sbx_http_guard_request_started(connection);
                /* Only an authenticated request that sends work (POST /v1/executions, a session's
                 * open, run or file upload, a drop-in API's run) gets its body read: every other
                 * request is answered from its headers (its body, if any, dropped), so that
                 * nobody can make this process buffer max_body_bytes per connection without a
                 * token. */
                bool reads_body = (strcmp(url, EXECUTIONS_PATH) == 0 &&
                                   strcmp(method, MHD_HTTP_METHOD_POST) == 0) ||
                                  sbx_sessions_route_reads_body(url, method) ||
                                  sbx_episodes_route_reads_body(url, method) ||
                                  sbx_batches_route_reads_body(url, method) ||
                                  sbx_mcp_http_route_reads_body(url, method);
                enum sbx_compat_api compat =
                        sbx_piston_route_reads_body(url, method)   ? SBX_COMPAT_PISTON
                        : sbx_judge0_route_reads_body(url, method) ? SBX_COMPAT_JUDGE0
                                                                   : 0;
                /* A request that carries no body is answered at the next call: libmicrohttpd
                 * 0.9.75 closes the connection after a response queued with the headers alone,
                 * which would cost every GET (a poll) a new connection. One that announces a
                 * body it has no use for is answered now, before any of it is read. */
                if (!reads_body && compat == 0) {
                        if (announces_body(connection))
                                return route(api, connection, url, method, request);
                        request->body_ignored = true;
                        return MHD_YES;
                }
                /* A drop-in API's route answers its own refusal, in its dialect. */
                if (compat != 0 && sbx_compat_tenant(connection, request->tenants, compat,
                                                     compat_peer_header(compat)) == NULL)
                        return route(api, connection, url, method, request);
                if (compat == 0 && sbx_http_authenticate(connection, request->tenants) == NULL)
                        return sbx_http_respond_unauthorized(api, connection);
                /* Draining: no new work, answered at once (the body is not even read). */
                if (sbx_http_draining())
                        return sbx_http_respond_shutting_down(api, connection);
                const char *length = MHD_lookup_connection_value(connection, MHD_HEADER_KIND,
                                                                 MHD_HTTP_HEADER_CONTENT_LENGTH);
                if (length != NULL &&
                    strtoull(length, NULL, 10) > api->config->server.max_body_bytes) {
                        /* Announced too large: answer now, without reading the body. */
                        request->body_too_large = true;
                        return route(api, connection, url, method, request);
                }
                return MHD_YES;
        }
        if (*upload_data_size != 0 && request->body_ignored) {
                /* A body it did not announce, which nobody reads: dropped as it comes. */
                *upload_data_size = 0;
                return MHD_YES;
        }
        if (*upload_data_size != 0) {
                /* The buffer keeps at most max_body_bytes and flags the rest, which is read and
                 * dropped so that the client gets its 413 instead of a reset connection. */
                if (sbx_buffer_append(&request->body, upload_data, *upload_data_size) < 0)
                        return MHD_NO;
                if (request->body.overflow)
                        request->body_too_large = true;
                *upload_data_size = 0;
                return MHD_YES;
        }
        return route(api, connection, url, method, request);
}

static void request_completed(void *cls, struct MHD_Connection *connection, void **state,
                              enum MHD_RequestTerminationCode code)
{
        struct sbx_api *api = cls;
        struct request *request = *state;
        if (request == NULL)
                return;
        if (request->after.fn != NULL) {
                /* The answer is out: whoever it woke (the client, often on this CPU) runs
                 * before the bookkeeping that follows it (a run's record). */
                sched_yield();
                request->after.fn(request->after.ctx);
        }
        if (request->in_flight)
                atomic_fetch_sub(&executions_in_flight, 1);
        sbx_live_config_release(api->live, request->tenants);
        sbx_buffer_free(&request->body);
        free(request);
        *state = NULL;
        sbx_http_guard_request_finished(connection);
}

/* libmicrohttpd's printf format: the attribute tells clang's -Wformat-nonliteral so. */
static void log_mhd_error(void *cls, const char *format, va_list ap)
        __attribute__((format(printf, 2, 0)));

static void log_mhd_error(void *cls, const char *format, va_list ap)
{
        char message[512];
        vsnprintf(message, sizeof(message), format, ap);
        sbx_debug("http: %s", message);
}

static void wait_for_executions(uint64_t deadline_ms)
{
        while (atomic_load(&executions_in_flight) > 0 && sbx_now_ms() < deadline_ms) {
                struct timespec pause = {0, 20 * 1000 * 1000};
                nanosleep(&pause, NULL);
        }
}

int sbx_api_serve(struct sbx_api *api, const sigset_t *wait_signals, struct sbx_error *err)
{
        struct sbx_http_guard *guard = sbx_http_guard_start(err);
        if (guard == NULL)
                return -1;
        const struct sbx_server_config *server = &api->config->server;
        struct MHD_Daemon *daemon = MHD_start_daemon(
                MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ITC |
                        MHD_USE_POLL | MHD_USE_ERROR_LOG,
                0, NULL, NULL, handle_request, api, MHD_OPTION_LISTEN_SOCKET, api->listen_fd,
                MHD_OPTION_CONNECTION_LIMIT, (unsigned)server->max_connections,
                MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)server->max_connections_per_ip,
                MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)HTTP_IDLE_TIMEOUT_S,
                MHD_OPTION_NOTIFY_CONNECTION, sbx_http_guard_notify, guard,
                MHD_OPTION_NOTIFY_COMPLETED, request_completed, api, MHD_OPTION_EXTERNAL_LOGGER,
                log_mhd_error, api, MHD_OPTION_END);
        if (daemon == NULL) {
                sbx_http_guard_stop(guard);
                return sbx_error_set(err, EIO, "http: cannot start the server");
        }
        sbx_info("http: serving on %s", server->listen);

        int signal_number = 0;
        while (sigwait(wait_signals, &signal_number) != 0)
                ;
        bool engine_lost = signal_number == SIGUSR1;
        sbx_info("http: %s: draining: new executions get 503, running ones may finish",
                 engine_lost ? "engine lost" : "signal");

        /* Keep accepting, so that new requests get their 503 at once instead of waiting in the
         * listen queue; let the running ones finish. The engine cancels what still runs when
         * its grace period ends, and every cancelled execution answers (status canceled), so
         * the wait ends on its own well before its bound. */
        uint64_t now = sbx_now_ms();
        sbx_http_begin_drain(now + server->shutdown_grace_s * 1000);
        wait_for_executions(now + server->shutdown_grace_s * 1000 + DRAIN_SLACK_MS);
        sbx_async_drain(api->async, now + server->shutdown_grace_s * 1000 + DRAIN_SLACK_MS);
        if (atomic_load(&executions_in_flight) > 0)
                sbx_warn("http: %d execution(s) still running after the drain; stopping anyway",
                         atomic_load(&executions_in_flight));
        /* Waiting calls return at once from here on (EPIPE), so no thread blocks the stop. */
        sbx_engine_client_shutdown(api->engine);
        /* A streamed execution's thread ends on its own then: wait for it (briefly), as it
         * writes to the audit store. */
        wait_for_executions(sbx_now_ms() + STREAM_EXIT_WAIT_MS);
        MHD_stop_daemon(daemon);
        sbx_http_guard_stop(guard);
        return 0;
}
