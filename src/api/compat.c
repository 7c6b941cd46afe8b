/* What the drop-in APIs share (compat.h). */
#define _GNU_SOURCE
#include "api/compat.h"

#include <ctype.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/languages.h"
#include "api/respond.h"
#include "service/auth.h"
#include "util/cleanup.h"
#include "util/hex.h"

const struct sbx_tenant *sbx_compat_tenant(struct MHD_Connection *connection,
                                           const struct sbx_config *tenants,
                                           enum sbx_compat_api which, const char *peer_header)
{
        const char *authorization =
                MHD_lookup_connection_value(connection, MHD_HEADER_KIND, "Authorization");
        const char *token = sbx_auth_bearer_token(authorization);
        if (token == NULL && peer_header != NULL)
                token = MHD_lookup_connection_value(connection, MHD_HEADER_KIND, peer_header);
        if (token != NULL)
                return sbx_auth_find_tenant(tenants, token);
        if (authorization != NULL)
                return NULL; /* a credential of another scheme is not "none" */
        return sbx_config_anonymous_tenant(tenants, which);
}

const struct sbx_tenant *sbx_compat_authenticate(struct sbx_api *api,
                                                 struct MHD_Connection *connection,
                                                 const struct sbx_config *tenants,
                                                 enum sbx_compat_api which, const char *peer_header,
                                                 enum MHD_Result *answered)
{
        const struct sbx_tenant *tenant =
                sbx_compat_tenant(connection, tenants, which, peer_header);
        if (tenant == NULL) {
                char detail[160];
                snprintf(detail, sizeof(detail),
                         "a valid token is required: Authorization: Bearer <token>%s%s",
                         peer_header != NULL ? ", or " : "",
                         peer_header != NULL ? peer_header : "");
                const struct sbx_http_header challenge = {MHD_HTTP_HEADER_WWW_AUTHENTICATE,
                                                          "Bearer realm=\"sandboxd\""};
                *answered = sbx_http_respond_problem(api, connection, 401, detail, NULL, 0,
                                                     &challenge, 1);
                return NULL;
        }
        if (!(tenant->tier->compat_apis & which)) {
                char detail[160];
                snprintf(detail, sizeof(detail), "tier %s does not allow the %s API (compat_apis)",
                         tenant->tier->name, which == SBX_COMPAT_PISTON ? "Piston" : "Judge0");
                *answered =
                        sbx_http_respond_problem(api, connection, 403, detail, NULL, 0, NULL, 0);
                return NULL;
        }
        return tenant;
}

json_t *sbx_compat_body(struct sbx_api *api, struct MHD_Connection *connection,
                        const struct sbx_compat_request *request, enum MHD_Result *answered)
{
        if (request->body_too_large) {
                char detail[96];
                snprintf(detail, sizeof(detail), "the body is larger than %llu bytes",
                         (unsigned long long)api->config->server.max_body_bytes);
                *answered =
                        sbx_http_respond_problem(api, connection, 413, detail, NULL, 0, NULL, 0);
                return NULL;
        }
        json_error_t parse_error;
        json_t *body = request->body_len > 0
                               ? json_loadb((const char *)request->body, request->body_len,
                                            JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &parse_error)
                               : NULL;
        if (json_is_object(body))
                return body;
        char detail[256];
        if (request->body_len == 0)
                snprintf(detail, sizeof(detail), "the body is empty: send a JSON object");
        else if (body == NULL)
                snprintf(detail, sizeof(detail), "malformed JSON at line %d, column %d: %s",
                         parse_error.line, parse_error.column, parse_error.text);
        else
                snprintf(detail, sizeof(detail), "the body must be a JSON object");
        json_decref(body);
        const struct sbx_problem_field field = {"body", "not a JSON object"};
        *answered = sbx_http_respond_problem(api, connection, 400, detail, &field, 1, NULL, 0);
        return NULL;
}

/* ---- encodings ---- */

/* Base64 as Ruby's decode64 reads it, which Judge0 uses: characters outside the alphabet are
 * skipped and a missing padding is fine. The bytes (owned, NUL-terminated) and their size. */
char *sbx_compat_base64_decode(const char *text, size_t length, size_t *size)
{
        _cleanup_free_ char *clean = malloc(length + 4);
        char *bytes = malloc(length / 4 * 3 + 4);
        if (clean == NULL || bytes == NULL) {
                free(bytes);
                return NULL;
        }
        size_t n = 0;
        for (size_t i = 0; i < length; i++)
                if (isalnum((unsigned char)text[i]) || text[i] == '+' || text[i] == '/')
                        clean[n++] = text[i];
        size_t whole = n - n % 4, tail = n % 4;
        int out = whole > 0 ? EVP_DecodeBlock((unsigned char *)bytes, (unsigned char *)clean,
                                              (int)whole)
                            : 0;
        if (out < 0) {
                free(bytes);
                return NULL;
        }
        if (tail >= 2) { /* the unpadded last group: 2 or 3 characters carry 1 or 2 bytes */
                char group[4] = {clean[whole], clean[whole + 1], tail == 3 ? clean[whole + 2] : 'A',
                                 'A'};
                unsigned char decoded[3];
                if (EVP_DecodeBlock(decoded, (unsigned char *)group, 4) < 0) {
                        free(bytes);
                        return NULL;
                }
                memcpy(bytes + out, decoded, tail - 1);
                out += (int)tail - 1;
        }
        bytes[out] = '\0';
        *size = (size_t)out;
        return bytes;
}

/* bytes as Ruby's encode64 writes them, as Judge0 answers: base64 in lines of 60 characters,
 * each ending in a newline. */
char *sbx_compat_base64(const void *bytes, size_t size)
{
        char *text = malloc(4 * ((size + 2) / 3) + 1);
        if (text != NULL)
                EVP_EncodeBlock((unsigned char *)text, bytes, (int)size);
        return text;
}

json_t *sbx_compat_base64_lines(const void *bytes, size_t size)
{
        size_t encoded = 4 * ((size + 2) / 3);
        _cleanup_free_ char *flat = sbx_compat_base64(bytes, size);
        _cleanup_free_ char *lines = malloc(encoded + encoded / 60 + 2);
        if (flat == NULL || lines == NULL)
                return NULL;
        size_t out = 0;
        for (size_t i = 0; i < encoded; i += 60) {
                size_t chunk = encoded - i < 60 ? encoded - i : 60;
                memcpy(lines + out, flat + i, chunk);
                out += chunk;
                lines[out++] = '\n';
        }
        return json_stringn(lines, out);
}

/* hex (Piston's "hex" encoding) as base64, which a v1 file takes (owned); NULL when it is not
 * hex or memory runs out. */
char *sbx_compat_hex_to_base64(const char *hex, size_t length)
{
        if (length % 2 != 0)
                return NULL;
        _cleanup_free_ uint8_t *bytes = malloc(length / 2 + 1);
        /* Exactly length digits: a NUL inside the (JSON) string is no digit. */
        if (bytes == NULL || !sbx_hex_decode(hex, bytes, length / 2))
                return NULL;
        return sbx_compat_base64(bytes, length / 2);
}

/* ---- versions ---- */

#define VERSION_PART_MAX 999999999ul

/* Up to three numbers of a version ("3.11" -> 3, 11, and *parts 2); a part "x", "X" or "*"
 * ends it (what follows is a wildcard too). false when text is not such a version. */
static bool parse_version(const char *text, unsigned long numbers[3], size_t *parts)
{
        *parts = 0;
        for (const char *p = text;;) {
                if (*p == 'x' || *p == 'X' || *p == '*')
                        return p[1] == '\0' || p[1] == '.';
                if (*parts == 3 || !isdigit((unsigned char)*p))
                        return false;
                char *end;
                numbers[(*parts)++] = strtoul(p, &end, 10);
                if (*end == '\0')
                        return true;
                if (*end != '.')
                        return false;
                p = end + 1;
        }
}

bool sbx_compat_version(const struct sbx_language *language, char version[32])
{
        const char *line = sbx_language_version_line(language);
        return line != NULL && sbx_compat_version_of_line(line, version);
}

bool sbx_compat_version_of_line(const char *line, char version[32])
{
        /* The first number of the line, with the dotted numbers that follow it. */
        for (const char *p = line; *p != '\0'; p++) {
                if (!isdigit((unsigned char)*p) ||
                    (p > line && (isdigit((unsigned char)p[-1]) || p[-1] == '.')))
                        continue;
                unsigned long numbers[3] = {0, 0, 0};
                for (size_t i = 0; i < 3; i++) {
                        char *end;
                        numbers[i] = strtoul(p, &end, 10);
                        /* No toolchain's version is larger; it keeps the text within 32. */
                        if (numbers[i] > VERSION_PART_MAX)
                                numbers[i] = VERSION_PART_MAX;
                        if (*end != '.' || !isdigit((unsigned char)end[1]))
                                break;
                        p = end + 1;
                }
                snprintf(version, 32, "%lu.%lu.%lu", numbers[0], numbers[1], numbers[2]);
                return true;
        }
        return false;
}

/* -1, 0 or 1 as the first n numbers of a are below, equal to or above b's. */
static int compare_versions(const unsigned long a[3], const unsigned long b[3], size_t n)
{
        for (size_t i = 0; i < n; i++)
                if (a[i] != b[i])
                        return a[i] < b[i] ? -1 : 1;
        return 0;
}

bool sbx_compat_version_matches(const char *version, const char *selector)
{
        unsigned long have[3], want[3] = {0, 0, 0};
        size_t have_parts, want_parts;
        if (!parse_version(version, have, &have_parts) || have_parts != 3)
                return false;
        while (*selector == ' ' || *selector == 'v' || *selector == '=')
                selector++;
        if (strcmp(selector, "") == 0 || strcmp(selector, "latest") == 0)
                return true;
        char operator= '\0';
        if (strncmp(selector, ">=", 2) == 0) {
                operator= '>';
                selector += 2;
        } else if (*selector == '^' || *selector == '~') {
                operator= * selector++;
        }
        if (!parse_version(selector, want, &want_parts))
                return false;
        switch (operator) {
        case '>':
                return compare_versions(have, want, 3) >= 0;
        case '^': /* the same major version, at least the one named */
                return have[0] == want[0] && compare_versions(have, want, 3) >= 0;
        case '~': /* the same major and minor version, at least the one named */
                return compare_versions(have, want, want_parts > 1 ? 2 : 1) == 0 &&
                       compare_versions(have, want, 3) >= 0;
        default: /* "3", "3.11", "3.11.2": the parts named are equal */
                return compare_versions(have, want, want_parts) == 0;
        }
}
