/* The MCP server's way to sandboxd: an HTTP client of the service's API (libcurl) with a tenant
 * token, so that quotas, clamping and the audit log apply to what an agent runs as to any other
 * client; it never talks to the engine. One per thread (a libcurl easy handle is not shared). */
#pragma once

#include <jansson.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#include "util/error.h"

/* Where the service is and who the agent is (SANDBOXD_URL, SANDBOXD_TOKEN). */
struct sbx_mcp_target {
        char url[512]; /* "http://127.0.0.1:8080", without a trailing slash */
        char token[256];
};

/* A request to the API. */
struct sbx_mcp_call {
        const char *method;       /* "GET", "POST", "PUT", "DELETE" */
        const char *path;         /* "/v1/executions", already percent-encoded where needed */
        const char *content_type; /* NULL: no body */
        const void *body;
        size_t body_size;
        bool event_stream;         /* Accept: text/event-stream (a run that a hang-up cancels) */
        const atomic_bool *cancel; /* NULL, or set when the call is to stop (its run canceled) */
};

/* The answer: status, Content-Type and the body (owned; NUL-terminated for convenience). */
struct sbx_mcp_answer {
        long status;
        char content_type[128];
        char *body;
        size_t size;
};

void sbx_mcp_answer_free(struct sbx_mcp_answer *answer);

/* Sends call to target and fills answer. -1 with err when no answer came (the service is not
 * reachable, the call was canceled: ECANCELED, or it timed out). */
int sbx_mcp_request(const struct sbx_mcp_target *target, const struct sbx_mcp_call *call,
                    struct sbx_mcp_answer *answer, struct sbx_error *err);

/* The data of the last event called name in an event stream's body (owned), or NULL. */
char *sbx_mcp_event_data(const char *stream, size_t size, const char *name);
