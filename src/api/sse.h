/* Server-Sent Events for a run that streams (a session's run, an execution): a thread of the
 * run's own writes events as they come; the HTTP response reads them, as the client takes them.
 * The two meet in a socket pair, so that neither waits on the other's lock:
 *
 *   writer: sbx_sse_event() ... sbx_sse_finish()    (the run's thread)
 *   reader: sbx_sse_respond()                       (the connection's thread)
 *
 * A client that hangs up ends the response at once (its connection's hang-up is watched while
 * the run is silent) and on_end says so, for the run to be cancelled; its events are then
 * dropped. A client that leaves events unread for SBX_SSE_STALL_MS is treated the same way. A
 * silent run gets a ": keepalive" comment every SBX_SSE_KEEPALIVE_MS. */
#pragma once

#include <jansson.h>
#include <microhttpd.h>
#include <stdbool.h>

#include "api/http.h"

#define SBX_SSE_KEEPALIVE_MS 15000
#define SBX_SSE_STALL_MS     30000

struct sbx_sse;

/* Whether the request asked for Server-Sent Events (its Accept names text/event-stream). */
bool sbx_sse_wanted(struct MHD_Connection *connection);

/* A new stream (both ends held: the writer's and the reader's), or NULL. */
struct sbx_sse *sbx_sse_new(void);

/* One event: its name and data (compact JSON on one data line). From the writer only. */
void sbx_sse_event(struct sbx_sse *sse, const char *event, const json_t *data);

/* The writer is done: the response ends once the client has read the rest. Drops the writer's
 * hold. */
void sbx_sse_finish(struct sbx_sse *sse);

/* Answers connection with the stream (200, text/event-stream). on_end(ctx, client_left) is
 * called once, when the response ends: client_left when the client went away before the writer
 * finished. Takes the reader's hold: also on failure (MHD_NO), when on_end is called at once. */
enum MHD_Result sbx_sse_respond(struct sbx_api *api, struct MHD_Connection *connection,
                                struct sbx_sse *sse, void (*on_end)(void *ctx, bool client_left),
                                void *ctx);

/* Drops the reader's hold without answering (the response could not be started). */
void sbx_sse_abandon(struct sbx_sse *sse);
