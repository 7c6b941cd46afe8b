/* The MCP server's tools (issue 20): what an agent can do with sandboxd, each a call of the HTTP
 * API (api_client.h). run_code runs a program in a fresh sandbox; create_session,
 * run_in_session, write_file, read_file, list_files and close_session work with a session (a
 * persistent Python interpreter or bash shell); list_languages says what runs. */
#pragma once

#include <jansson.h>
#include <stdatomic.h>

#include "mcp/api_client.h"

/* The tools as tools/list lists them: [{name, title, description, inputSchema}] (a borrowed
 * reference, made at the first call; NULL when memory runs out). */
const json_t *sbx_mcp_tools(void);

/* Whether a tool is called name. */
bool sbx_mcp_tool_exists(const char *name);

/* Calls tool name with arguments (an object) against target: the tools/call result ({content,
 * structuredContent, isError}; caller owns it). A failure of the tool (the API refused, the
 * service is unreachable, the arguments are wrong) is a result with isError true, as MCP wants;
 * NULL only when memory runs out. cancel (may be NULL) stops a call under way (its run is
 * canceled: the API cancels a streamed run whose client hangs up). */
json_t *sbx_mcp_call_tool(const struct sbx_mcp_target *target, const char *name,
                          const json_t *arguments, const atomic_bool *cancel);
