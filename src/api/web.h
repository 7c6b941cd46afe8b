/* The web playground (issue 20): a page the API process serves at /, built from web/ at build
 * time (web/build.sh: CodeMirror bundled with esbuild, from npm with a lock file) and compiled
 * in, so that nothing is fetched or read from disk at run time. */
#pragma once

#include <microhttpd.h>
#include <stdbool.h>

#include "api/http.h"

/* Answers url when it is one of the page's files (*handled true): GET / (index.html),
 * /assets/app.js and /assets/app.css. Else returns MHD_NO with *handled false. */
enum MHD_Result sbx_web_route(struct sbx_api *api, struct MHD_Connection *connection,
                              const char *url, const char *method, bool *handled);
