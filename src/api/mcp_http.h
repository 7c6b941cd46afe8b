/* The MCP server on the service itself: the streamable HTTP transport (MCP 2025-06-18) at /mcp,
 * with the same messages and tools as `sandboxd mcp` (src/mcp) and the tenant's token as bearer.
 * A tool calls the API as any client would, on loopback with the caller's own token, so that
 * quotas, clamping and the audit log are the tenant's. */
#pragma once

#include <microhttpd.h>
#include <stdbool.h>

#include "api/compat.h"

/* Whether the route of url and method reads a body (POST /mcp). */
bool sbx_mcp_http_route_reads_body(const char *url, const char *method);

/* Answers url when it is /mcp (*handled true), else returns MHD_NO with *handled false. */
enum MHD_Result sbx_mcp_http_route(struct sbx_api *api, struct MHD_Connection *connection,
                                   const char *url, const char *method,
                                   const struct sbx_compat_request *request, bool *handled);
