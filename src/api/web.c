/* The web playground's files (web.h).
 *
 * The page is a client of the API like any other: it keeps the token the user pastes in the
 * browser (never in a URL), and sends it as a bearer token. Its policy allows only this origin's
 * script and style files (nothing inline), images from data: URLs (a plot is a PNG in base64),
 * connections to this origin, and frames of its own (an HTML result, the program's output, is
 * shown in a sandboxed srcdoc frame, never in the page's DOM); it may not be framed itself. */
#define _GNU_SOURCE
#include "api/web.h"

#include <string.h>

#include "api/respond.h"

/* web/build.sh's output, compiled in (scripts/embed_text.py). */
extern const char sbx_web_index_html[];
extern const char sbx_web_app_js[];
extern const char sbx_web_app_css[];

#define CONTENT_SECURITY_POLICY                                                                    \
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "          \
        "connect-src 'self'; frame-src 'self'; base-uri 'none'; form-action 'none'; "              \
        "frame-ancestors 'none'"

static const struct {
        const char *url;
        const char *content;
        const char *content_type;
} files[] = {
        {"/", sbx_web_index_html, "text/html; charset=utf-8"},
        {"/assets/app.js", sbx_web_app_js, "text/javascript; charset=utf-8"},
        {"/assets/app.css", sbx_web_app_css, "text/css; charset=utf-8"},
};

enum MHD_Result sbx_web_route(struct sbx_api *api, struct MHD_Connection *connection,
                              const char *url, const char *method, bool *handled)
{
        for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
                if (strcmp(url, files[i].url) != 0)
                        continue;
                *handled = true;
                if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 &&
                    strcmp(method, MHD_HTTP_METHOD_HEAD) != 0)
                        return sbx_http_respond_method_not_allowed(api, connection, method,
                                                                   "GET, HEAD");
                const struct sbx_http_header headers[] = {
                        {"Content-Security-Policy", CONTENT_SECURITY_POLICY},
                        {"X-Content-Type-Options", "nosniff"},
                        {"Referrer-Policy", "no-referrer"},
                };
                return sbx_http_respond(api, connection, 200, files[i].content_type,
                                        files[i].content, strlen(files[i].content), headers,
                                        sizeof(headers) / sizeof(headers[0]));
        }
        *handled = false;
        return MHD_NO;
}
