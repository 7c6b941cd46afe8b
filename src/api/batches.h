/* Batches (issue 17): many executions accepted in one request, run from the queue of
 * asynchronous executions (api/async.h), each in a fresh sandbox of its own.
 *
 *   POST /v1/batches   {program: {language, code | files + entrypoint, compile_limits, env,
 *                       backend}, cases: [{stdin, args, limits, expected_stdout}],
 *                       compare: "exact" | "trim" | "tokens"}
 *                      test cases of one program: each case is the program run with its stdin,
 *                      args and limits, judged against expected_stdout (service/verdict.h);
 *                      a compiled program compiles once (the compile cache, async.h's gate).
 *                      All cases are valid or the batch is refused (400 naming cases[i].field).
 *   POST /v1/batches   {executions: [{...a POST /v1/executions body...}]}
 *                      independent executions: each validated on its own; a bad one gets its
 *                      own problem in "rejected", the good ones run (none good: 400).
 *   GET  /v1/batches/{id}[?fields=a,b]   the summary (counts by verdict, "pending" while
 *                      queued or running), done, and every case's result (trimmed to fields).
 *
 * 202 with Location; all of a batch is committed to the store in one transaction before. */
#pragma once

#include <microhttpd.h>
#include <stdbool.h>
#include <stddef.h>

#include "api/http.h"
#include "service/config.h"

/* Cases (or executions) one batch may have. */
#define SBX_BATCH_MAX_CASES 10000

/* Whether the request to url with method carries a body the route reads. */
bool sbx_batches_route_reads_body(const char *url, const char *method);

/* A request under /v1/batches: answered, with *handled true; *handled false for another url. */
enum MHD_Result sbx_batches_route(struct sbx_api *api, struct MHD_Connection *connection,
                                  const char *url, const char *method,
                                  const struct sbx_config *tenants, const void *body,
                                  size_t body_len, bool body_too_large, bool *handled);
