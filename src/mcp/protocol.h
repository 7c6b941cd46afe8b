/* The Model Context Protocol's messages (JSON-RPC 2.0; protocol revision 2025-06-18, with
 * 2025-03-26 and 2024-11-05 negotiated down to), whatever carries them: initialize, ping,
 * tools/list, tools/call (tools.h), notifications. A transport (stdio.c) reads messages, hands
 * them here and writes what comes back; it alone deals with cancellation and concurrency. */
#pragma once

#include <jansson.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "mcp/api_client.h"

/* The revision this server speaks when a client asks for one it does not know. */
#define SBX_MCP_PROTOCOL_LATEST "2025-06-18"

/* JSON-RPC 2.0's error codes. */
enum sbx_jsonrpc_code {
        SBX_JSONRPC_PARSE_ERROR = -32700,
        SBX_JSONRPC_INVALID_REQUEST = -32600,
        SBX_JSONRPC_METHOD_NOT_FOUND = -32601,
        SBX_JSONRPC_INVALID_PARAMS = -32602,
        SBX_JSONRPC_INTERNAL_ERROR = -32603,
};

/* {"jsonrpc": "2.0", "id": id, "error": {code, message}} (id NULL: null); caller owns it. */
json_t *sbx_jsonrpc_error(const json_t *id, enum sbx_jsonrpc_code code, const char *message);

/* Handles one message (a parsed JSON value, not an array: the 2025-06-18 revision has no
 * batches) and returns the response to send (caller owns it), or NULL when none is due (a
 * notification, or a response of the client's). tools/call runs the tool against target and
 * blocks until it ends; cancel (may be NULL) stops it. */
json_t *sbx_mcp_handle(const struct sbx_mcp_target *target, const json_t *message,
                       const atomic_bool *cancel);

/* The error response a tools/call request gets without running anything (params not an object,
 * an unknown tool, arguments not an object), or NULL when it is one to run. */
json_t *sbx_mcp_tools_call_refusal(const json_t *message);

/* Whether message is a request for method (a string "method" and an "id"). */
bool sbx_mcp_is_request(const json_t *message, const char *method);
