/* The API's answers (respond.h). */
#define _GNU_SOURCE
#include "api/respond.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "service/audit.h"
#include "service/auth.h"
#include "util/cleanup.h"
#include "util/log.h"
#include "util/time.h"

/* SIGTERM arrived: every new request is answered 503 shutting-down at once, while the running
 * ones finish; drain_ends_ms (monotonic) is when the engine's grace period ends. */
static atomic_bool draining;
static _Atomic uint64_t drain_ends_ms;

void sbx_http_begin_drain(uint64_t ends_ms)
{
        atomic_store(&drain_ends_ms, ends_ms);
        atomic_store(&draining, true);
}

bool sbx_http_draining(void)
{
        return atomic_load(&draining);
}

enum MHD_Result sbx_http_respond(struct sbx_api *api, struct MHD_Connection *connection,
                                 unsigned status, const char *content_type, const char *body,
                                 size_t length, const struct sbx_http_header *headers,
                                 size_t n_headers)
{
        struct MHD_Response *response =
                MHD_create_response_from_buffer(length, (void *)body, MHD_RESPMEM_MUST_COPY);
        if (response == NULL)
                return MHD_NO;
        MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
        /* Responses describe one tenant's executions: never cache them anywhere. */
        MHD_add_response_header(response, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
        for (size_t i = 0; i < n_headers; i++)
                MHD_add_response_header(response, headers[i].name, headers[i].value);
        enum MHD_Result queued = MHD_queue_response(connection, status, response);
        MHD_destroy_response(response);
        sbx_metrics_count_http_request(api->metrics, status);
        return queued;
}

static _Thread_local const char *problem_echo;

void sbx_http_set_problem_echo(const char *member)
{
        problem_echo = member;
}

enum MHD_Result sbx_http_respond_json(struct sbx_api *api, struct MHD_Connection *connection,
                                      unsigned status, const char *content_type, json_t *body,
                                      const struct sbx_http_header *headers, size_t n_headers)
{
        if (problem_echo != NULL && body != NULL &&
            strcmp(content_type, SBX_PROBLEM_CONTENT_TYPE) == 0 &&
            json_object_get(body, problem_echo) == NULL)
                json_object_set(body, problem_echo, json_object_get(body, "detail"));
        _cleanup_free_ char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
        json_decref(body);
        if (text == NULL) {
                static const char fallback[] =
                        "{\"type\":\"https://sandboxd.dev/problems/internal\",\"title\":"
                        "\"Internal error\",\"status\":500,\"detail\":\"out of memory\","
                        "\"errors\":[]}";
                return sbx_http_respond(api, connection, 500, SBX_PROBLEM_CONTENT_TYPE, fallback,
                                        sizeof(fallback) - 1, NULL, 0);
        }
        return sbx_http_respond(api, connection, status, content_type, text, strlen(text), headers,
                                n_headers);
}

/* A problem of the class slug; extra (stolen, may be NULL) adds members to the body. */
enum MHD_Result sbx_http_respond_problem_of(struct sbx_api *api, struct MHD_Connection *connection,
                                            unsigned status, const char *slug, const char *detail,
                                            const struct sbx_problem_field *fields, size_t n_fields,
                                            const struct sbx_http_header *headers, size_t n_headers,
                                            json_t *extra)
{
        json_t *body = sbx_problem_new(status, slug, detail, fields, n_fields);
        if (body != NULL && extra != NULL)
                json_object_update(body, extra);
        json_decref(extra);
        return sbx_http_respond_json(api, connection, status, SBX_PROBLEM_CONTENT_TYPE, body,
                                     headers, n_headers);
}

enum MHD_Result sbx_http_respond_problem(struct sbx_api *api, struct MHD_Connection *connection,
                                         unsigned status, const char *detail,
                                         const struct sbx_problem_field *fields, size_t n_fields,
                                         const struct sbx_http_header *headers, size_t n_headers)
{
        return sbx_http_respond_problem_of(api, connection, status,
                                           sbx_problem_default_slug(status), detail, fields,
                                           n_fields, headers, n_headers, NULL);
}

/* 503 of the class slug with Retry-After; execution_id (may be NULL) names the execution whose
 * audit record tells what became of it. */
enum MHD_Result sbx_http_respond_unavailable(struct sbx_api *api, struct MHD_Connection *connection,
                                             const char *slug, const char *detail,
                                             uint64_t retry_after_s, const char *execution_id)
{
        char retry_after[32];
        snprintf(retry_after, sizeof(retry_after), "%llu",
                 (unsigned long long)(retry_after_s > 0 ? retry_after_s : 1));
        const struct sbx_http_header header = {MHD_HTTP_HEADER_RETRY_AFTER, retry_after};
        json_t *extra =
                execution_id != NULL ? json_pack("{s:s}", "execution_id", execution_id) : NULL;
        return sbx_http_respond_problem_of(api, connection, 503, slug, detail, NULL, 0, &header, 1,
                                           extra);
}

/* Seconds until the drain ends (the engine's grace period), at least 1. */
uint64_t sbx_http_drain_retry_after_s(void)
{
        uint64_t now = sbx_now_ms(), ends = atomic_load(&drain_ends_ms);
        return ends > now ? (ends - now + 999) / 1000 : 1;
}

enum MHD_Result sbx_http_respond_shutting_down(struct sbx_api *api,
                                               struct MHD_Connection *connection)
{
        return sbx_http_respond_unavailable(api, connection, SBX_PROBLEM_SHUTTING_DOWN,
                                            SBX_HTTP_SHUTTING_DOWN_DETAIL,
                                            sbx_http_drain_retry_after_s(), NULL);
}

enum MHD_Result sbx_http_respond_method_not_allowed(struct sbx_api *api,
                                                    struct MHD_Connection *connection,
                                                    const char *method, const char *allow)
{
        char detail[128];
        snprintf(detail, sizeof(detail), "%.16s is not allowed here; use %s", method, allow);
        const struct sbx_http_header allow_header = {MHD_HTTP_HEADER_ALLOW, allow};
        return sbx_http_respond_problem(api, connection, 405, detail, NULL, 0, &allow_header, 1);
}

/* ---- authentication ---- */

const struct sbx_tenant *sbx_http_authenticate(struct MHD_Connection *connection,
                                               const struct sbx_config *tenants)
{
        const char *authorization =
                MHD_lookup_connection_value(connection, MHD_HEADER_KIND, "Authorization");
        return sbx_auth_find_tenant(tenants, sbx_auth_bearer_token(authorization));
}

enum MHD_Result sbx_http_respond_unauthorized(struct sbx_api *api,
                                              struct MHD_Connection *connection)
{
        const struct sbx_http_header challenge = {MHD_HTTP_HEADER_WWW_AUTHENTICATE,
                                                  "Bearer realm=\"sandboxd\""};
        return sbx_http_respond_problem(api, connection, 401,
                                        "a valid token is required: Authorization: Bearer <token>",
                                        NULL, 0, &challenge, 1);
}

enum MHD_Result sbx_http_respond_store_failed(struct sbx_api *api,
                                              struct MHD_Connection *connection, const char *detail)
{
        if (sbx_audit_shared(api->audit))
                return sbx_http_respond_unavailable(api, connection, SBX_PROBLEM_STORE_UNAVAILABLE,
                                                    detail, 1, NULL);
        return sbx_http_respond_problem(api, connection, 500, detail, NULL, 0, NULL, 0);
}

enum MHD_Result sbx_http_respond_queue_refusal(struct sbx_api *api,
                                               struct MHD_Connection *connection,
                                               const struct sbx_tenant *tenant,
                                               const struct sbx_error *err, uint64_t retry_after_s,
                                               const char *what)
{
        if (err->code != ENOSPC) {
                sbx_warn("%s: %s", what, err->message);
                return sbx_http_respond_store_failed(
                        api, connection, "the queue's store failed; nothing was accepted");
        }
        sbx_metrics_count_quota_rejection(api->metrics, tenant->name, "queued");
        char retry_after[32];
        snprintf(retry_after, sizeof(retry_after), "%llu", (unsigned long long)retry_after_s);
        const struct sbx_http_header header = {MHD_HTTP_HEADER_RETRY_AFTER, retry_after};
        return sbx_http_respond_problem(api, connection, 429, err->message, NULL, 0, &header, 1);
}
