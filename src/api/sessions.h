/* Sessions over HTTP (DESIGN.md "Long-lived sandboxes"; engine/session.h is the mechanism): the
 * routes under /v1/sessions and the API process's registry of sessions.
 *
 *   POST   /v1/sessions                      open one: {language, limits, env, files,
 *                                            idle_timeout_s, max_lifetime_s} -> 201
 *   GET    /v1/sessions                      this tenant's sessions
 *   GET    /v1/sessions/{id}                 one of them
 *   DELETE /v1/sessions/{id}                 close it -> 204
 *   POST   /v1/sessions/{id}/run             {code, stdin, env, timeout_ms} -> the run's result
 *   PUT    /v1/sessions/{id}/files/{path}    raw body, ?mode=0755
 *   GET    /v1/sessions/{id}/files/{path}    raw bytes
 *   DELETE /v1/sessions/{id}/files/{path}
 *   GET    /v1/sessions/{id}/files?path=DIR  a listing
 *
 * The registry maps ids to tenants (another tenant's id is 404, like an unknown one), keeps each
 * session's state (open, or ended with the reason: closed, idle, lifetime, its agent gone,
 * shutdown) and whether a run or file operation is in progress (a second one is 409). Ended
 * sessions stay known for a while, so that their 404 says why. The engine holds the sandbox and
 * enforces the idle timeout and lifetime; it says when a session ends (SESSION_ENDED).
 *
 * Quotas: a tier's max_sessions open sessions per tenant (429 past it); each run counts against
 * max_concurrency while it runs and its CPU is charged to the tier's CPU budget, as for
 * executions. Every run is audited as an execution whose request names its session. */
#pragma once

#include <microhttpd.h>
#include <stdbool.h>
#include <stddef.h>

#include "api/http.h"
#include "api/metrics.h"
#include "service/audit.h"
#include "protocol/protocol.h"
#include "service/config.h"
#include "service/quota.h"

struct sbx_sessions;
struct sbx_quota_pg;

/* A registry whose opens, ends and runs count in metrics, and whose sessions' CPU outside their
 * runs is charged to quota at their end; in a fleet (fleet not NULL), whose entries' placements
 * are kept in its store (service/placement_pg.h). */
struct sbx_sessions *sbx_sessions_new(struct sbx_metrics *metrics, struct sbx_audit *audit,
                                      struct sbx_quota *quota, struct sbx_quota_pg *fleet);
void sbx_sessions_free(struct sbx_sessions *sessions);

/* The engine's SESSION_ENDED (from the engine client's thread). */
void sbx_sessions_ended(struct sbx_sessions *sessions, const struct sbx_message_session *ended);

/* Whether the request to url with method carries a body the route reads (the caller reads it
 * only for these, after authentication). */
bool sbx_sessions_route_reads_body(const char *url, const char *method);

/* A request under /v1/sessions: answered, with *handled true; *handled false for any other url.
 * tenants is the snapshot the request holds; body what it sent (body_too_large: more than
 * max_body_bytes); *after may be set to work for after the response. */
enum MHD_Result sbx_sessions_route(struct sbx_api *api, struct MHD_Connection *connection,
                                   const char *url, const char *method,
                                   const struct sbx_config *tenants, const void *body,
                                   size_t body_len, bool body_too_large,
                                   struct sbx_http_after *after, bool *handled);

/* Sessions (or RL episodes: api/episodes.h) open now, for the metrics. */
size_t sbx_sessions_open_count(struct sbx_sessions *sessions, bool episodes);
