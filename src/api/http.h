/* The HTTP API (DESIGN.md "HTTP API (v1)"): libmicrohttpd with a thread per connection, routing,
 * authentication, the settings pipeline, quotas, the engine round trip, the audit record and the
 * metrics. Runs in the unprivileged API process; it never touches a sandbox itself. */
#pragma once

#include <microhttpd.h>
#include <stdbool.h>

#include "api/engine_client.h"
#include "api/live_config.h"
#include "api/metrics.h"
#include "service/audit.h"
#include "service/config.h"
#include "service/quota.h"

#include "util/error.h"

struct sbx_sessions;
struct sbx_async;
struct sbx_webhooks;
struct sbx_settings;
struct sbx_tenant;
struct sbx_engine_result;

struct sbx_api {
        const struct sbx_config *config; /* as started: its [server] keys are in force */
        struct sbx_live_config *live;    /* the tenants and tiers, replaced on reload */
        struct sbx_audit *audit;
        struct sbx_metrics *metrics;
        struct sbx_quota *quota;
        struct sbx_engine_client *engine;
        struct sbx_sessions *sessions; /* api/sessions.h */
        struct sbx_async *async;       /* api/async.h: the queue of asynchronous executions */
        struct sbx_webhooks *webhooks; /* api/webhooks.h: their senders */
        int listen_fd;                 /* bound and listening; owned by the server once started */
};

/* Work a handler leaves for after its response has been sent, so that the client does not wait
 * for it (a session run's audit record). It runs once, on the connection's thread, before the
 * connection takes its next request; also when the client went away. */
struct sbx_http_after {
        void (*fn)(void *ctx);
        void *ctx;
};

/* The end of an execution the engine answered (a waiting client's, or a queued one's): its
 * record, metrics and the response body (the result, its id and what was clamped; the caller
 * owns it). Frees outcome. */
json_t *sbx_http_finish_execution(struct sbx_api *api, const struct sbx_tenant *tenant,
                                  const struct sbx_settings *settings,
                                  struct sbx_engine_result *outcome);

/* Runs settings for a client that waits, as POST /v1/executions does without a stream: its
 * quota, audit record, the engine round trip, its end (sbx_http_finish_execution). Returns the v1
 * response body (owned by the caller), or NULL after answering the connection with the refusal
 * (quota, audit store, engine), *answered then holding what that returned. *in_flight is the
 * request's flag: the execution counts as in flight (the drain waits for it) until the request
 * completes. The drop-in APIs (api/compat_*.c) translate what it returns. */
/* Counts the request whose flag in_flight is as in flight until it completes (the drain waits for
 * its answer); once. */
void sbx_http_hold_in_flight(bool *in_flight);

json_t *sbx_http_execute(struct sbx_api *api, struct MHD_Connection *connection,
                         const struct sbx_tenant *tenant, const struct sbx_settings *settings,
                         bool *in_flight, enum MHD_Result *answered);

/* Completes the record of execution id whose result never arrived (it may have run: the record
 * stays, status internal_error) or that ended before it ran (a queued one's cancel): status, why,
 * and its effective limits when known (NULL). Logs a failure of the store. */
void sbx_http_end_without_result(struct sbx_api *api, const char *id,
                                 const struct sbx_limits *limits, enum sbx_status status,
                                 const char *why);

/* The JSON parts of an execution's audit record (owned; free with
 * sbx_http_record_parts_free). */
struct sbx_http_record_parts {
        json_t *clamped, *requested, *effective;
};
void sbx_http_record_parts_free(struct sbx_http_record_parts *parts);

/* The audit record of settings as it begins, created at created_at_ms (pointing into settings
 * and into parts, which it fills): the request with code, stdin and file contents as digests. */
struct sbx_audit_record sbx_http_record_of(const struct sbx_settings *settings,
                                           uint64_t created_at_ms,
                                           struct sbx_http_record_parts *parts);

/* Serves api->listen_fd until SIGTERM or SIGINT arrives or the engine is lost (the caller blocks
 * those signals in every thread first and passes the set it waits on; engine loss is signalled
 * with SIGUSR1 by the engine client's on_lost callback). Then stops accepting, lets running
 * requests finish for up to config->server.shutdown_grace_s seconds, and returns 0, or -1 when the
 * server could not start. */
int sbx_api_serve(struct sbx_api *api, const sigset_t *wait_signals, struct sbx_error *err);
