/* The Model Context Protocol's messages (protocol.h). */
#define _GNU_SOURCE
#include "mcp/protocol.h"

#include <stdio.h>
#include <string.h>

#include "mcp/tools.h"

/* The revisions this server speaks, newest first: an initialize naming one of them gets it back,
 * any other gets the newest (the client then decides whether it can go on). */
static const char *const protocol_versions[] = {"2025-06-18", "2025-03-26", "2024-11-05"};

static const char instructions[] =
        "sandboxd runs code in isolated sandboxes. Use run_code for a one-off program (any "
        "language list_languages names), or create_session for a persistent Python "
        "interpreter or bash shell that keeps state between run_in_session calls; move files "
        "with write_file, read_file and list_files, and close_session when done. Each run is "
        "capped (time, memory, processes, disk, output) and has no network.";

json_t *sbx_jsonrpc_error(const json_t *id, enum sbx_jsonrpc_code code, const char *message)
{
        return json_pack("{s:s, s:O, s:{s:i, s:s}}", "jsonrpc", "2.0", "id",
                         id != NULL ? id : json_null(), "error", "code", (int)code, "message",
                         message);
}

static json_t *response(const json_t *id, json_t *result)
{
        return result != NULL
                       ? json_pack("{s:s, s:O, s:o}", "jsonrpc", "2.0", "id", id, "result", result)
                       : sbx_jsonrpc_error(id, SBX_JSONRPC_INTERNAL_ERROR, "out of memory");
}

bool sbx_mcp_is_request(const json_t *message, const char *method)
{
        const char *name = json_string_value(json_object_get(message, "method"));
        return name != NULL && strcmp(name, method) == 0 && json_object_get(message, "id") != NULL;
}

static json_t *initialize(const json_t *params)
{
        const char *asked = json_string_value(json_object_get(params, "protocolVersion"));
        const char *version = SBX_MCP_PROTOCOL_LATEST;
        for (size_t i = 0;
             asked != NULL && i < sizeof(protocol_versions) / sizeof(*protocol_versions); i++)
                if (strcmp(asked, protocol_versions[i]) == 0)
                        version = protocol_versions[i];
        return json_pack("{s:s, s:{s:{s:b}}, s:{s:s, s:s, s:s}, s:s}", "protocolVersion", version,
                         "capabilities", "tools", "listChanged", false, "serverInfo", "name",
                         "sandboxd", "title", "sandboxd", "version", SANDBOXD_VERSION,
                         "instructions", instructions);
}

json_t *sbx_mcp_tools_call_refusal(const json_t *message)
{
        const json_t *id = json_object_get(message, "id");
        const json_t *params = json_object_get(message, "params");
        const char *name = json_string_value(json_object_get(params, "name"));
        const json_t *arguments = json_object_get(params, "arguments");
        if (params != NULL && !json_is_object(params))
                return sbx_jsonrpc_error(id, SBX_JSONRPC_INVALID_PARAMS, "params is an object");
        if (name == NULL || !sbx_mcp_tool_exists(name)) {
                char text[160];
                snprintf(text, sizeof(text), "Unknown tool: %.100s",
                         name != NULL ? name : "(no name)");
                return sbx_jsonrpc_error(id, SBX_JSONRPC_INVALID_PARAMS, text);
        }
        if (arguments != NULL && !json_is_object(arguments))
                return sbx_jsonrpc_error(id, SBX_JSONRPC_INVALID_PARAMS, "arguments is an object");
        return NULL;
}

json_t *sbx_mcp_handle(const struct sbx_mcp_target *target, const json_t *message,
                       const atomic_bool *cancel)
{
        if (!json_is_object(message))
                return sbx_jsonrpc_error(NULL, SBX_JSONRPC_INVALID_REQUEST,
                                         "a message is a JSON object");
        const json_t *id = json_object_get(message, "id");
        const json_t *method_value = json_object_get(message, "method");
        const char *jsonrpc = json_string_value(json_object_get(message, "jsonrpc"));
        bool id_valid = id != NULL && (json_is_string(id) || json_is_integer(id));
        if (method_value == NULL && id_valid &&
            (json_object_get(message, "result") != NULL || json_object_get(message, "error")))
                return NULL; /* a response: this server sends no requests, so none is awaited */
        if (jsonrpc == NULL || strcmp(jsonrpc, "2.0") != 0 || !json_is_string(method_value) ||
            (id != NULL && !id_valid))
                return sbx_jsonrpc_error(id_valid ? id : NULL, SBX_JSONRPC_INVALID_REQUEST,
                                         "not a JSON-RPC 2.0 request: jsonrpc \"2.0\", a string "
                                         "method, and a string or integer id");
        const char *method = json_string_value(method_value);
        if (id == NULL)
                return NULL; /* a notification: initialized, cancelled (the transport's), ... */
        const json_t *params = json_object_get(message, "params");
        if (params != NULL && !json_is_object(params))
                return sbx_jsonrpc_error(id, SBX_JSONRPC_INVALID_PARAMS, "params is an object");
        if (strcmp(method, "initialize") == 0)
                return response(id, initialize(params));
        if (strcmp(method, "ping") == 0)
                return response(id, json_object());
        if (strcmp(method, "tools/list") == 0) {
                const json_t *tools = sbx_mcp_tools();
                return response(id, tools != NULL ? json_pack("{s:O}", "tools", tools) : NULL);
        }
        if (strcmp(method, "tools/call") == 0) {
                json_t *refusal = sbx_mcp_tools_call_refusal(message);
                if (refusal != NULL)
                        return refusal;
                const json_t *arguments = json_object_get(params, "arguments");
                json_t *empty = arguments == NULL ? json_object() : NULL;
                json_t *result = sbx_mcp_call_tool(
                        target, json_string_value(json_object_get(params, "name")),
                        arguments != NULL ? arguments : empty, cancel);
                json_decref(empty);
                return response(id, result);
        }
        char message_text[160];
        snprintf(message_text, sizeof(message_text), "Method not found: %.100s", method);
        return sbx_jsonrpc_error(id, SBX_JSONRPC_METHOD_NOT_FOUND, message_text);
}
