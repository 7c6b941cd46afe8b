/* Forwarding a request to the node that holds what it names (forward.h). */
#include "api/forward.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <curl/curl.h>

#include "api/outbound.h"
#include "api/respond.h"
#include "util/cleanup.h"

/* How long the holder may take to accept the connection, and at most to answer (a session's run
 * is bounded by its tier's wall clock, far below). */
#define FORWARD_CONNECT_MS 2000L
#define FORWARD_TIMEOUT_MS (30L * 60 * 1000)

/* The request headers sent on (the rest are the connection's own or libcurl's to set). */
static const char *const request_headers[] = {"Authorization", "Content-Type", "Accept", "Prefer",
                                              "Last-Event-ID"};

/* The answer headers not sent back: the connection's own (libmicrohttpd sets them), and those
 * sbx_http_respond sets. */
static const char *const hop_headers[] = {
        "Connection", "Keep-Alive", "Transfer-Encoding", "Content-Length", "Date",
        "Server",     "Upgrade",    "Trailer",           "Cache-Control",  "Content-Type"};

#define MAX_ANSWER_HEADERS 16

struct answer {
        char *body;
        size_t length, capacity;
        bool too_large;
        char *content_type;
        struct sbx_http_header headers[MAX_ANSWER_HEADERS];
        char *header_lines[MAX_ANSWER_HEADERS];
        size_t n_headers;
};

static void answer_free(struct answer *a)
{
        free(a->body);
        free(a->content_type);
        for (size_t i = 0; i < a->n_headers; i++)
                free(a->header_lines[i]);
}

static size_t take_body(char *data, size_t size, size_t n, void *ctx)
{
        struct answer *a = ctx;
        size_t bytes = size * n;
        if (a->length + bytes > SBX_FORWARD_MAX_BODY) {
                a->too_large = true;
                return 0; /* ends the transfer */
        }
        if (a->length + bytes > a->capacity) {
                size_t capacity = a->capacity ? a->capacity : 4096;
                while (capacity < a->length + bytes)
                        capacity *= 2;
                char *grown = realloc(a->body, capacity);
                if (grown == NULL)
                        return 0;
                a->body = grown;
                a->capacity = capacity;
        }
        memcpy(a->body + a->length, data, bytes);
        a->length += bytes;
        return bytes;
}

static bool listed(const char *const *names, size_t n, const char *name, size_t length)
{
        for (size_t i = 0; i < n; i++)
                if (strlen(names[i]) == length && strncasecmp(names[i], name, length) == 0)
                        return true;
        return false;
}

/* One answer header line ("Name: value\r\n"): Content-Type kept apart, the hop-by-hop ones
 * dropped, the rest sent back. A status line (a redirect's, or a 100 Continue's) starts over. */
static size_t take_header(char *line, size_t size, size_t n, void *ctx)
{
        struct answer *a = ctx;
        size_t bytes = size * n;
        if (bytes >= 5 && strncmp(line, "HTTP/", 5) == 0) {
                for (size_t i = 0; i < a->n_headers; i++)
                        free(a->header_lines[i]);
                a->n_headers = 0;
                free(a->content_type);
                a->content_type = NULL;
                return bytes;
        }
        const char *colon = memchr(line, ':', bytes);
        if (colon == NULL)
                return bytes;
        size_t name_length = (size_t)(colon - line);
        const char *value = colon + 1;
        size_t value_length = bytes - name_length - 1;
        while (value_length > 0 && (*value == ' ' || *value == '\t')) {
                value++;
                value_length--;
        }
        while (value_length > 0 &&
               (value[value_length - 1] == '\r' || value[value_length - 1] == '\n'))
                value_length--;
        if (name_length == 12 && strncasecmp(line, "Content-Type", 12) == 0) {
                free(a->content_type);
                a->content_type = strndup(value, value_length);
                return bytes;
        }
        if (listed(hop_headers, SBX_ARRAY_SIZE(hop_headers), line, name_length) ||
            a->n_headers == MAX_ANSWER_HEADERS)
                return bytes;
        /* One allocation holds "name\0value\0". */
        char *copy = malloc(name_length + value_length + 2);
        if (copy == NULL)
                return 0;
        memcpy(copy, line, name_length);
        copy[name_length] = '\0';
        memcpy(copy + name_length + 1, value, value_length);
        copy[name_length + 1 + value_length] = '\0';
        a->header_lines[a->n_headers] = copy;
        a->headers[a->n_headers] = (struct sbx_http_header){copy, copy + name_length + 1};
        a->n_headers++;
        return bytes;
}

/* The request's query, made again from its arguments (libmicrohttpd keeps them decoded). */
struct query {
        CURL *curl;
        char text[4096];
        size_t length;
        bool failed; /* out of memory, or too long */
};

static enum MHD_Result add_argument(void *ctx, enum MHD_ValueKind kind, const char *key,
                                    const char *value)
{
        (void)kind;
        struct query *q = ctx;
        char *k = curl_easy_escape(q->curl, key, 0);
        char *v = value != NULL ? curl_easy_escape(q->curl, value, 0) : NULL;
        int n = -1;
        if (k != NULL && (value == NULL || v != NULL))
                n = snprintf(q->text + q->length, sizeof(q->text) - q->length, "%s%s%s%s",
                             q->length > 0 ? "&" : "?", k, v != NULL ? "=" : "",
                             v != NULL ? v : "");
        if (n < 0 || (size_t)n >= sizeof(q->text) - q->length)
                q->failed = true;
        else
                q->length += (size_t)n;
        curl_free(k);
        curl_free(v);
        return q->failed ? MHD_NO : MHD_YES;
}

bool sbx_forward_was_forwarded(struct MHD_Connection *connection)
{
        return MHD_lookup_connection_value(connection, MHD_HEADER_KIND, SBX_FORWARDED_HEADER) !=
               NULL;
}

int sbx_forward(struct sbx_api *api, struct MHD_Connection *connection, const char *base_url,
                const char *from, const char *method, const char *url, const void *body,
                size_t body_len, enum MHD_Result *answer, struct sbx_error *err)
{
        CURL *curl = curl_easy_init();
        if (curl == NULL) {
                sbx_error_set(err, ENOMEM, "libcurl");
                return 0;
        }
        struct query q = {.curl = curl};
        MHD_get_connection_values(connection, MHD_GET_ARGUMENT_KIND, add_argument, &q);
        char target[8192];
        int n = snprintf(target, sizeof(target), "%s%s%s", base_url, url, q.text);
        struct curl_slist *headers = NULL;
        bool failed = q.failed || n < 0 || (size_t)n >= sizeof(target);
        for (size_t i = 0; !failed && i < SBX_ARRAY_SIZE(request_headers); i++) {
                const char *value = MHD_lookup_connection_value(connection, MHD_HEADER_KIND,
                                                                request_headers[i]);
                if (value == NULL)
                        continue;
                char line[8192];
                snprintf(line, sizeof(line), "%s: %s", request_headers[i], value);
                struct curl_slist *more = curl_slist_append(headers, line);
                failed = more == NULL;
                headers = more != NULL ? more : headers;
        }
        char forwarded[300];
        snprintf(forwarded, sizeof(forwarded), "%s: %s", SBX_FORWARDED_HEADER, from);
        struct curl_slist *more = failed ? NULL : curl_slist_append(headers, forwarded);
        headers = more != NULL ? more : headers;
        /* No "Expect: 100-continue" round trip before a body. */
        more = more == NULL ? NULL : curl_slist_append(headers, "Expect:");
        headers = more != NULL ? more : headers;
        if (failed || more == NULL) {
                curl_slist_free_all(headers);
                curl_easy_cleanup(curl);
                sbx_error_set(err, ENOMEM, "out of memory, or a query over 4 KiB");
                return 0;
        }
        struct answer a = {0};
        sbx_outbound_setup(curl, target, FORWARD_CONNECT_MS, FORWARD_TIMEOUT_MS);
        curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
        curl_easy_setopt(curl, CURLOPT_USERAGENT, "sandboxd-forward/1");
        curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, take_body);
        curl_easy_setopt(curl, CURLOPT_WRITEDATA, &a);
        curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, take_header);
        curl_easy_setopt(curl, CURLOPT_HEADERDATA, &a);
        if (strcmp(method, "HEAD") == 0) {
                curl_easy_setopt(curl, CURLOPT_NOBODY, 1L);
        } else if (strcmp(method, "GET") != 0) {
                curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, method);
                curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body != NULL ? body : "");
                curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body_len);
        }
        CURLcode rc = curl_easy_perform(curl);
        long status = 0;
        curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
        curl_slist_free_all(headers);
        curl_easy_cleanup(curl);
        int answered = 0;
        if (a.too_large)
                sbx_error_set(err, EFBIG, "its answer is over %u bytes", SBX_FORWARD_MAX_BODY);
        else if (rc != CURLE_OK || status < 100)
                sbx_error_set(err, EHOSTUNREACH, "%s", curl_easy_strerror(rc));
        else {
                *answer = sbx_http_respond(api, connection, (unsigned)status, a.content_type,
                                           a.body != NULL ? a.body : "", a.length, a.headers,
                                           a.n_headers);
                answered = 1;
        }
        answer_free(&a);
        return answered;
}
