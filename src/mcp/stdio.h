/* `sandboxd mcp` (which execs `sandboxd-api mcp`): the MCP server on standard input and output,
 * newline-delimited JSON-RPC messages, for an agent that starts it as a subprocess. It finds the
 * service in SANDBOXD_URL (default http://127.0.0.1:8080) and the tenant's token in
 * SANDBOXD_TOKEN (default: the local tenant's token file that `sandboxd serve` writes, when it
 * can be read). */
#pragma once

/* argv[0] is "mcp". Returns the process exit code: 0 at the end of its input. */
int sbx_mcp_stdio_main(int argc, char **argv);
