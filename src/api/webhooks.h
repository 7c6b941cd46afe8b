/* Webhooks (issue 17, DESIGN.md "Asynchronous work and webhooks"): an asynchronous execution or
 * a batch whose request named a callback_url has its result POSTed there once it has ended, by
 * sender threads of the API process (libcurl; never the engine), signed per the Standard
 * Webhooks convention with the tenant's webhook_secret (service/webhook_sign.h):
 *
 *   POST <callback_url>
 *   webhook-id: msg_<32 hex>        (the same on every attempt: receivers deduplicate by it)
 *   webhook-timestamp: <seconds>
 *   webhook-signature: v1,<base64 HMAC-SHA256 of "id.timestamp.body">
 *   {"type": "execution.completed" | "batch.completed", "timestamp": "...", "data": {...}}
 *
 * data is what GET /v1/executions/{id} or GET /v1/batches/{id} answers. A 2xx answer delivers
 * it; anything else (another status, a redirect, which is never followed, no answer within
 * webhook_timeout_ms) is retried after webhook_backoff_ms, doubled each time with +-20 % jitter,
 * up to webhook_max_attempts attempts; then the delivery is recorded failed, listed by GET
 * /v1/webhooks/deliveries?status=failed and sent again by POST
 * /v1/webhooks/deliveries/{id}/retry. At most SBX_WEBHOOK_SENDERS are in flight.
 *
 * Where (service/webhook_policy.h): the URL's host is resolved and every address checked, when
 * the request comes (400 if one is refused) and again before each attempt; the attempt then
 * connects to the checked address only, and libcurl is told to use no proxy. */
#pragma once

#include <microhttpd.h>
#include <stdbool.h>
#include <stddef.h>

#include "api/http.h"
#include "service/config.h"

#define SBX_WEBHOOK_SENDERS 4

struct sbx_webhooks;

/* Starts the senders of api. NULL with err when threads or libcurl fail. */
struct sbx_webhooks *sbx_webhooks_start(struct sbx_api *api, struct sbx_error *err);

/* Stops the senders (an attempt under way ends within webhook_timeout_ms) and frees them. What
 * was not delivered stays pending in the store for the next start. NULL is a no-op. */
void sbx_webhooks_stop(struct sbx_webhooks *webhooks);

/* Something that may have a delivery ended: the senders look now rather than at their next
 * round. NULL is a no-op. */
void sbx_webhooks_wake(struct sbx_webhooks *webhooks);

/* Whether tenant may have a webhook sent to url: a tenant webhook_secret, an http(s) URL with a
 * host, every address of which its tier's policy allows. false with why (a sentence for a 400). */
bool sbx_webhooks_check_url(const struct sbx_tenant *tenant, const char *url, char *why,
                            size_t why_size);

/* GET /v1/webhooks/deliveries[?status=pending|delivered|failed] and POST
 * /v1/webhooks/deliveries/{id}/retry: answered, with *handled true; false for another url. */
enum MHD_Result sbx_webhooks_route(struct sbx_api *api, struct MHD_Connection *connection,
                                   const char *url, const char *method,
                                   const struct sbx_config *tenants, bool *handled);
