/* What the drop-in APIs share (compat_piston.c: Piston v2; compat_judge0.c: Judge0 CE): who a
 * request acts as, its body, and the runtimes' versions. Each API is a thin translator: its
 * request becomes a POST /v1/executions body that goes through the same settings pipeline
 * (clamped to the tenant's tier) and the same execution (sbx_http_execute: quota, audit record,
 * engine), and the v1 result is translated back. There is no second execution path. Their
 * refusals are problems (RFC 9457) that also carry the detail where the peer's clients look for
 * it (sbx_http_set_problem_echo). */
#pragma once

#include <jansson.h>
#include <microhttpd.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "api/http.h"
#include "model/language.h"
#include "service/config.h"

/* What a drop-in API's handler gets of its request. */
struct sbx_compat_request {
        const struct sbx_config *tenants; /* the snapshot the request holds */
        const uint8_t *body;
        size_t body_len;
        bool body_too_large;
        bool *in_flight; /* the request's flag (sbx_http_execute) */
};

/* The tenant a request on the drop-in API `which` acts as, or NULL: the one whose token it
 * carries (Authorization: Bearer, or the peer's own header peer_header, which may be NULL); a
 * request without any token acts as the tenant taking token-less requests there (a tenant's
 * anonymous_apis), if one does. A token that matches no tenant is never anonymous. */
const struct sbx_tenant *sbx_compat_tenant(struct MHD_Connection *connection,
                                           const struct sbx_config *tenants,
                                           enum sbx_compat_api which, const char *peer_header);

/* As sbx_compat_tenant, answering the request itself when it yields none (401) or when the
 * tenant's tier does not allow the API (403); *answered then holds what that returned. */
const struct sbx_tenant *sbx_compat_authenticate(struct sbx_api *api,
                                                 struct MHD_Connection *connection,
                                                 const struct sbx_config *tenants,
                                                 enum sbx_compat_api which, const char *peer_header,
                                                 enum MHD_Result *answered);

/* The request's body as a JSON object, whatever its Content-Type says (the peers' clients do
 * not all send application/json: piston-client sends text/plain); NULL after answering 413 or
 * 400. */
json_t *sbx_compat_body(struct sbx_api *api, struct MHD_Connection *connection,
                        const struct sbx_compat_request *request, enum MHD_Result *answered);

/* Base64 as Ruby's decode64 reads it (Judge0's inputs): characters outside the alphabet are
 * skipped, padding may be missing. The bytes (owned, NUL-terminated; *size without the NUL), or
 * NULL when memory runs out. */
char *sbx_compat_base64_decode(const char *text, size_t length, size_t *size);

/* bytes as base64 in one line, with padding (RFC 4648; owned), or NULL when memory runs out. */
char *sbx_compat_base64(const void *bytes, size_t size);

/* bytes as Ruby's encode64 writes them (Judge0's outputs): base64 in lines of 60 characters,
 * each ending in a newline; NULL when memory runs out. */
json_t *sbx_compat_base64_lines(const void *bytes, size_t size);

/* Hex (Piston's "hex" file encoding, length characters) as base64, which a v1 file takes
 * (owned); NULL when it is not hex or memory runs out. */
char *sbx_compat_hex_to_base64(const char *hex, size_t length);

/* The version of language's toolchain as MAJOR.MINOR.PATCH ("Python 3.11.2" -> "3.11.2", "go
 * version go1.19.8 linux/amd64" -> "1.19.8"), missing parts as 0; false when it has none. */
bool sbx_compat_version(const struct sbx_language *language, char version[32]);

/* The same of a line a toolchain printed; false when it holds no number. */
bool sbx_compat_version_of_line(const char *line, char version[32]);

/* Whether version (MAJOR.MINOR.PATCH) satisfies selector, the part of SemVer ranges clients
 * send: "*", "x", "latest", a full or partial version ("3", "3.11", "3.x", "3.11.2"), "^3.10",
 * "~3.11.1", ">=3.8". */
bool sbx_compat_version_matches(const char *version, const char *selector);
