/* The API's answers, for every handler of the API process (http.c, sessions.c): a body with
 * the headers every answer carries (no caching), JSON, problems (RFC 9457, service/problem.h)
 * with their classes' extras (Retry-After, Allow, WWW-Authenticate), the drain state, and
 * authentication. Each answer counts in the metrics by status. */
#pragma once

#include <jansson.h>
#include <microhttpd.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "api/http.h"
#include "service/config.h"
#include "service/problem.h"

#define JSON_CONTENT_TYPE "application/json"

struct sbx_http_header {
        const char *name;
        const char *value;
};

/* length bytes of body (copied) with content_type and the headers. */
enum MHD_Result sbx_http_respond(struct sbx_api *api, struct MHD_Connection *connection,
                                 unsigned status, const char *content_type, const char *body,
                                 size_t length, const struct sbx_http_header *headers,
                                 size_t n_headers);

/* body (stolen) as JSON; out of memory: a 500 problem. */
enum MHD_Result sbx_http_respond_json(struct sbx_api *api, struct MHD_Connection *connection,
                                      unsigned status, const char *content_type, json_t *body,
                                      const struct sbx_http_header *headers, size_t n_headers);

/* The member in which every problem this thread answers from now on also carries its detail
 * (NULL: none): a drop-in API's own error key ("message" for Piston, "error" for Judge0), so that
 * its clients find the reason where they look for it while the body stays a problem. Set by the
 * drop-in APIs' routes for the duration of one request (libmicrohttpd runs each connection on
 * its own thread). */
void sbx_http_set_problem_echo(const char *member);

/* A problem of the class slug; extra (stolen, may be NULL) adds members to the body. */
enum MHD_Result sbx_http_respond_problem_of(struct sbx_api *api, struct MHD_Connection *connection,
                                            unsigned status, const char *slug, const char *detail,
                                            const struct sbx_problem_field *fields, size_t n_fields,
                                            const struct sbx_http_header *headers, size_t n_headers,
                                            json_t *extra);

/* A problem of the status's default class. */
enum MHD_Result sbx_http_respond_problem(struct sbx_api *api, struct MHD_Connection *connection,
                                         unsigned status, const char *detail,
                                         const struct sbx_problem_field *fields, size_t n_fields,
                                         const struct sbx_http_header *headers, size_t n_headers);

/* 503 of the class slug with Retry-After; execution_id (may be NULL) names the execution whose
 * audit record tells what became of it. */
enum MHD_Result sbx_http_respond_unavailable(struct sbx_api *api, struct MHD_Connection *connection,
                                             const char *slug, const char *detail,
                                             uint64_t retry_after_s, const char *execution_id);

/* The answer when the audit store failed, detail saying what of it: a fleet's store is
 * PostgreSQL, whose failures are its being out of reach (503 store-unavailable with Retry-After,
 * as a quota it cannot check); a node's own is its SQLite file (500). */
enum MHD_Result sbx_http_respond_store_failed(struct sbx_api *api,
                                              struct MHD_Connection *connection,
                                              const char *detail);

/* The answer to an asynchronous execution or batch that could not be queued (async.h's
 * sbx_async_submit failed with err): 429 with Retry-After retry_after_s when the tenant's queue is
 * full (ENOSPC; counted as a quota rejection "queued"), else 500 (logged under what). */
enum MHD_Result sbx_http_respond_queue_refusal(struct sbx_api *api,
                                               struct MHD_Connection *connection,
                                               const struct sbx_tenant *tenant,
                                               const struct sbx_error *err, uint64_t retry_after_s,
                                               const char *what);

/* SIGTERM came: from now on every new request is a 503 shutting-down; ends_ms (monotonic) is
 * when the engine's grace period ends. */
void sbx_http_begin_drain(uint64_t ends_ms);
bool sbx_http_draining(void);
/* Seconds until the drain ends, at least 1. */
uint64_t sbx_http_drain_retry_after_s(void);
#define SBX_HTTP_SHUTTING_DOWN_DETAIL "the server is shutting down: no new work is taken"
enum MHD_Result sbx_http_respond_shutting_down(struct sbx_api *api,
                                               struct MHD_Connection *connection);

enum MHD_Result sbx_http_respond_method_not_allowed(struct sbx_api *api,
                                                    struct MHD_Connection *connection,
                                                    const char *method, const char *allow);

/* The tenant whose token the request carries (tenants: the snapshot the request holds), or
 * NULL. */
const struct sbx_tenant *sbx_http_authenticate(struct MHD_Connection *connection,
                                               const struct sbx_config *tenants);
enum MHD_Result sbx_http_respond_unauthorized(struct sbx_api *api,
                                              struct MHD_Connection *connection);
