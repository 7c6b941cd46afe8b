/* The command-line programs: thin clients of the engine. */
#pragma once

/* `sandboxd run ...`: argv[0] is "run". Returns the process exit code (README: exit codes). */
int cli_run(int argc, char **argv);

/* `sandboxd serve [--config FILE]`: the HTTP service; returns when it has shut down. */
int cli_serve(int argc, char **argv);

/* `sandboxd session < JSON-LINES`: one session driven by JSON lines (cli_session.c). */
int cli_session(int argc, char **argv);

/* `sandboxd token [TENANT]`: prints a new token and the config lines for it. */
int cli_token(int argc, char **argv);

/* `sandboxd store migrate ...`: a node's own audit store copied into a fleet's PostgreSQL
 * (api/store_migrate.h). */
int cli_store(int argc, char **argv);

/* `sandboxd mcp`: the MCP server on stdin and stdout, a client of the HTTP API (src/mcp). */
int cli_mcp(int argc, char **argv);

#define CLI_EXIT_USAGE    64 /* EX_USAGE: bad flags or values */
#define CLI_EXIT_NOINPUT  66 /* EX_NOINPUT: a named file cannot be read */
#define CLI_EXIT_SOFTWARE 70 /* EX_SOFTWARE: sandboxd itself failed */
#define CLI_EXIT_NOPERM   77 /* EX_NOPERM: needs root */
#define CLI_EXIT_CONFIG   78 /* EX_CONFIG: the configuration is wrong */
