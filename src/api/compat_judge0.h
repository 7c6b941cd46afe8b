/* Judge0 CE on sandboxd (judge0/judge0 v1.13.1, its docs/api): GET /languages, /languages/all,
 * /languages/{id}, /statuses; POST /submissions (?wait, ?base64_encoded, ?fields), GET
 * /submissions/{token}, POST and GET /submissions/batch; so that Judge0's clients switch by
 * changing their base URL (and token: X-Auth-Token). A translator onto the settings pipeline and
 * the queue of asynchronous executions and batches (compat.h, async.h). */
#pragma once

#include <microhttpd.h>
#include <stdbool.h>

#include "api/compat.h"

/* Whether url is Judge0's (the route answers it). */
bool sbx_judge0_route_matches(const char *url);

/* Whether the route of url and method reads a body (POST /submissions, /submissions/batch). */
bool sbx_judge0_route_reads_body(const char *url, const char *method);

/* The delivery kind (audit_deliveries.h) of a submission's callback_url: a PUT of the
 * submission as Judge0 sends it (api/webhooks.c). */
#define SBX_JUDGE0_DELIVERY_KIND "judge0"

/* The body of the callback of tenant's submission with execution id: its default fields,
 * base64_encoded, as Judge0's callback carries it. 1 with *out (caller owns it), 0 when there is
 * none, -1 when the store failed. */
int sbx_judge0_callback_body(struct sbx_api *api, const char *tenant, const char *id, json_t **out);

/* Answers url when it is Judge0's (*handled true), else returns MHD_NO with *handled false. */
enum MHD_Result sbx_judge0_route(struct sbx_api *api, struct MHD_Connection *connection,
                                 const char *url, const char *method,
                                 const struct sbx_compat_request *request, bool *handled);
