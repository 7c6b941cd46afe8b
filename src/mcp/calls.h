/* The tools/call requests under way, so that a notifications/cancelled finds the one it names:
 * a bounded registry of cancel flags by owner (the tenant over HTTP; "" on stdio) and JSON-RPC
 * id. Thread-safe. */
#pragma once

#include <jansson.h>
#include <stdatomic.h>
#include <stdbool.h>

struct sbx_mcp_call;

/* Registers a call of owner with id: its cancel flag, clear, or NULL when the registry is full
 * (or memory ran out). End it with sbx_mcp_call_end. */
struct sbx_mcp_call *sbx_mcp_call_begin(const char *owner, const json_t *id);

/* The flag the call's tool watches (tools.h: cancel). */
const atomic_bool *sbx_mcp_call_flag(const struct sbx_mcp_call *call);

/* Whether the call was cancelled (it then gets no response, as the protocol asks). */
bool sbx_mcp_call_canceled(const struct sbx_mcp_call *call);

/* Frees the call's place. */
void sbx_mcp_call_end(struct sbx_mcp_call *call);

/* Sets the flag of owner's call with id, if it is under way (it may have ended meanwhile). */
void sbx_mcp_call_cancel(const char *owner, const json_t *id);

/* Cancels every call under way and waits up to timeout_ms for them to end. */
void sbx_mcp_calls_cancel_all(unsigned timeout_ms);
