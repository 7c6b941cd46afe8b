/* A request for what lives on another node of a fleet (a session, an RL episode), sent on to that
 * node: a node asked for one it does not hold finds its holder in the store
 * (service/placement_pg.h) and forwards the request to the URL the holder advertises ([store]
 * advertise), then answers with the holder's answer, so that a client, or a load balancer that
 * lost its routing (HAProxy restarted without its stick table), reaches it through any node. The
 * answer comes back whole: a streamed run (text/event-stream) arrives at its end. A forwarded
 * request carries SBX_FORWARDED_HEADER and is never forwarded again: a node that does not hold
 * it either answers 421. libcurl is the client. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include <microhttpd.h>

#include "api/http.h"
#include "util/error.h"

/* Names the node that forwarded a request. */
#define SBX_FORWARDED_HEADER "Sandboxd-Forwarded-By"

/* The answer body a forward carries back at most (a session file is at most 40 MiB). */
#define SBX_FORWARD_MAX_BODY (64u << 20)

/* Whether the request came forwarded by another node. */
bool sbx_forward_was_forwarded(struct MHD_Connection *connection);

/* Sends the request (method, url and its query, body, the headers that say who asks and what they
 * accept) to base_url as node `from`, and answers connection with the answer. 1 when answered; 0
 * with err when the holder could not be reached or its answer was too large (the caller
 * answers). */
int sbx_forward(struct sbx_api *api, struct MHD_Connection *connection, const char *base_url,
                const char *from, const char *method, const char *url, const void *body,
                size_t body_len, enum MHD_Result *answer, struct sbx_error *err);
