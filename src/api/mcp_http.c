/* The MCP server's streamable HTTP transport at /mcp (mcp_http.h).
 *
 * POST /mcp carries one JSON-RPC message: a request is answered 200 with its JSON-RPC response
 * (application/json), a notification or a response 202 without a body. The server offers no
 * stream of its own (GET answers 405, as the transport allows) and keeps no MCP session (no
 * Mcp-Session-Id): every message stands alone, which is what lets any API process of a fleet
 * answer it. A notifications/cancelled stops the caller's own tools/call of that id, which
 * another connection is waiting on (a registry of the calls under way, by tenant and id). An
 * Origin header that is not this server's own is refused (403), against DNS rebinding, as the
 * transport asks. */
#define _GNU_SOURCE
#include "api/mcp_http.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "api/respond.h"
#include "mcp/calls.h"
#include "mcp/protocol.h"
#include "service/auth.h"
#include "util/cleanup.h"

#define MCP_PATH "/mcp"

bool sbx_mcp_http_route_reads_body(const char *url, const char *method)
{
        return strcmp(url, MCP_PATH) == 0 && strcmp(method, MHD_HTTP_METHOD_POST) == 0;
}

/* Where the tools reach this API: its own listen address, a wildcard one as loopback. */
static void loopback_url(const struct sbx_server_config *server, char *url, size_t size)
{
        char host[INET6_ADDRSTRLEN] = "127.0.0.1";
        unsigned port = 0;
        if (server->listen_address.ss_family == AF_INET6) {
                const struct sockaddr_in6 *in6 = (const void *)&server->listen_address;
                port = ntohs(in6->sin6_port);
                if (IN6_IS_ADDR_UNSPECIFIED(&in6->sin6_addr))
                        snprintf(host, sizeof(host), "::1");
                else
                        inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
                snprintf(url, size, "http://[%s]:%u", host, port);
                return;
        }
        const struct sockaddr_in *in = (const void *)&server->listen_address;
        port = ntohs(in->sin_port);
        if (in->sin_addr.s_addr != htonl(INADDR_ANY))
                inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
        snprintf(url, size, "http://%s:%u", host, port);
}

/* Whether an Origin header (NULL: none, as from every non-browser client) names this server:
 * its authority is the request's Host. */
static bool origin_allowed(struct MHD_Connection *connection)
{
        const char *origin = MHD_lookup_connection_value(connection, MHD_HEADER_KIND, "Origin");
        if (origin == NULL)
                return true;
        const char *host = MHD_lookup_connection_value(connection, MHD_HEADER_KIND, "Host");
        const char *authority = strstr(origin, "://");
        return host != NULL && authority != NULL && strcasecmp(authority + 3, host) == 0;
}

static enum MHD_Result respond_jsonrpc(struct sbx_api *api, struct MHD_Connection *connection,
                                       unsigned status, json_t *message)
{
        return sbx_http_respond_json(api, connection, status, JSON_CONTENT_TYPE, message, NULL, 0);
}

static enum MHD_Result handle_post(struct sbx_api *api, struct MHD_Connection *connection,
                                   const struct sbx_tenant *tenant,
                                   const struct sbx_compat_request *request)
{
        if (request->body_too_large)
                return sbx_http_respond_problem(api, connection, 413, "the message is too large",
                                                NULL, 0, NULL, 0);
        const char *version =
                MHD_lookup_connection_value(connection, MHD_HEADER_KIND, "MCP-Protocol-Version");
        if (version != NULL && strcmp(version, "2025-06-18") != 0 &&
            strcmp(version, "2025-03-26") != 0 && strcmp(version, "2024-11-05") != 0)
                return sbx_http_respond_problem(
                        api, connection, 400, "unsupported MCP-Protocol-Version", NULL, 0, NULL, 0);
        json_error_t error;
        _cleanup_(json_decrefp) json_t *message =
                json_loadb((const char *)request->body, request->body_len, 0, &error);
        if (message == NULL) {
                char text[256];
                snprintf(text, sizeof(text), "Parse error: %s", error.text);
                return respond_jsonrpc(api, connection, 400,
                                       sbx_jsonrpc_error(NULL, SBX_JSONRPC_PARSE_ERROR, text));
        }
        if (json_is_array(message))
                return respond_jsonrpc(api, connection, 400,
                                       sbx_jsonrpc_error(NULL, SBX_JSONRPC_INVALID_REQUEST,
                                                         "batches are not part of this protocol "
                                                         "revision"));
        const char *method = json_string_value(json_object_get(message, "method"));
        if (method != NULL && strcmp(method, "notifications/cancelled") == 0)
                sbx_mcp_call_cancel(
                        tenant->name,
                        json_object_get(json_object_get(message, "params"), "requestId"));
        struct sbx_mcp_target target;
        loopback_url(&api->config->server, target.url, sizeof(target.url));
        const char *token = sbx_auth_bearer_token(
                MHD_lookup_connection_value(connection, MHD_HEADER_KIND, "Authorization"));
        snprintf(target.token, sizeof(target.token), "%s", token != NULL ? token : "");
        struct sbx_mcp_call *call = NULL;
        if (sbx_mcp_is_request(message, "tools/call") &&
            (call = sbx_mcp_call_begin(tenant->name, json_object_get(message, "id"))) == NULL)
                return respond_jsonrpc(api, connection, 200,
                                       sbx_jsonrpc_error(json_object_get(message, "id"),
                                                         SBX_JSONRPC_INTERNAL_ERROR,
                                                         "too many tool calls at once"));
        /* The tool waits here, on this connection's thread, for the API's answer to it. */
        json_t *answer =
                sbx_mcp_handle(&target, message, call != NULL ? sbx_mcp_call_flag(call) : NULL);
        if (call != NULL)
                sbx_mcp_call_end(call);
        if (answer == NULL) /* a notification or a response: accepted */
                return sbx_http_respond(api, connection, 202, JSON_CONTENT_TYPE, "", 0, NULL, 0);
        /* A malformed message's error is a 400 (it names no id); a request's answer is 200. */
        bool malformed = json_is_null(json_object_get(answer, "id"));
        return respond_jsonrpc(api, connection, malformed ? 400 : 200, answer);
}

enum MHD_Result sbx_mcp_http_route(struct sbx_api *api, struct MHD_Connection *connection,
                                   const char *url, const char *method,
                                   const struct sbx_compat_request *request, bool *handled)
{
        *handled = strcmp(url, MCP_PATH) == 0;
        if (!*handled)
                return MHD_NO;
        if (!origin_allowed(connection))
                return sbx_http_respond_problem(api, connection, 403,
                                                "Origin is not this server: refused", NULL, 0, NULL,
                                                0);
        if (strcmp(method, MHD_HTTP_METHOD_POST) != 0)
                /* No server-initiated stream (GET) and no sessions to end (DELETE). */
                return sbx_http_respond_method_not_allowed(api, connection, method, "POST");
        const struct sbx_tenant *tenant = sbx_http_authenticate(connection, request->tenants);
        if (tenant == NULL)
                return sbx_http_respond_unauthorized(api, connection);
        return handle_post(api, connection, tenant, request);
}
