/* Piston v2 on sandboxd (engineer-man/piston, docs/api-v2.md): GET /api/v2/runtimes, GET
 * /api/v2/packages and POST /api/v2/execute, so that Piston's clients switch by changing their
 * base URL. A translator onto the settings pipeline and sbx_http_execute (compat.h). */
#pragma once

#include <microhttpd.h>
#include <stdbool.h>

#include "api/compat.h"

/* Whether the route of url and method reads a body (POST /api/v2/execute). */
bool sbx_piston_route_reads_body(const char *url, const char *method);

/* Answers url when it is Piston's (*handled true), else returns MHD_NO with *handled false. */
enum MHD_Result sbx_piston_route(struct sbx_api *api, struct MHD_Connection *connection,
                                 const char *url, const char *method,
                                 const struct sbx_compat_request *request, bool *handled);
