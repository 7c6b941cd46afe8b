/* The MCP server's HTTP client of the API (api_client.h). */
#define _GNU_SOURCE
#include "mcp/api_client.h"

#include <curl/curl.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "util/cleanup.h"

/* The largest answer read: a run's output is capped far below (16 MiB per stream at most, and
 * a file read is the session disk's size at most). */
#define ANSWER_MAX (64u << 20)
/* A call's bound: the longest run a tier allows is a day, but an agent's tool call is not; the
 * run itself is bounded by its own wall limit, which the API enforces. */
#define CALL_TIMEOUT_MS (30L * 60 * 1000)

void sbx_mcp_answer_free(struct sbx_mcp_answer *answer)
{
        free(answer->body);
        *answer = (struct sbx_mcp_answer){0};
}

static size_t collect(char *data, size_t size, size_t n, void *ctx)
{
        struct sbx_mcp_answer *answer = ctx;
        size_t length = size * n;
        if (answer->size + length > ANSWER_MAX)
                return 0;
        char *grown = realloc(answer->body, answer->size + length + 1);
        if (grown == NULL)
                return 0;
        memcpy(grown + answer->size, data, length);
        answer->body = grown;
        answer->size += length;
        answer->body[answer->size] = '\0';
        return length;
}

static size_t header(char *line, size_t size, size_t n, void *ctx)
{
        struct sbx_mcp_answer *answer = ctx;
        size_t length = size * n;
        static const char name[] = "content-type:";
        if (length > sizeof(name) - 1 && strncasecmp(line, name, sizeof(name) - 1) == 0) {
                const char *value = line + sizeof(name) - 1;
                value += strspn(value, " \t");
                size_t value_length = strcspn(value, "\r\n;");
                snprintf(answer->content_type, sizeof(answer->content_type), "%.*s",
                         (int)value_length, value);
        }
        return length;
}

/* libcurl asks this often during a transfer: a non-zero answer aborts it. */
static int progress(void *ctx, curl_off_t down_total, curl_off_t down_now, curl_off_t up_total,
                    curl_off_t up_now)
{
        (void)down_total, (void)down_now, (void)up_total, (void)up_now;
        const atomic_bool *cancel = ctx;
        return cancel != NULL && atomic_load(cancel);
}

int sbx_mcp_request(const struct sbx_mcp_target *target, const struct sbx_mcp_call *call,
                    struct sbx_mcp_answer *answer, struct sbx_error *err)
{
        *answer = (struct sbx_mcp_answer){0};
        char url[2048], authorization[300], content_type[160];
        if ((size_t)snprintf(url, sizeof(url), "%s%s", target->url, call->path) >= sizeof(url))
                return sbx_error_set(err, ENAMETOOLONG, "the URL of %s is too long", call->path);
        snprintf(authorization, sizeof(authorization), "Authorization: Bearer %s", target->token);
        struct curl_slist *headers = curl_slist_append(NULL, authorization);
        if (call->content_type != NULL) {
                snprintf(content_type, sizeof(content_type), "Content-Type: %s",
                         call->content_type);
                headers = curl_slist_append(headers, content_type);
        }
        headers = curl_slist_append(headers, call->event_stream ? "Accept: text/event-stream"
                                                                : "Accept: application/json");
        headers = curl_slist_append(headers, "Expect:");
        CURL *curl = curl_easy_init();
        if (curl == NULL || headers == NULL) {
                curl_slist_free_all(headers);
                if (curl != NULL)
                        curl_easy_cleanup(curl);
                return sbx_error_set(err, ENOMEM, "out of memory");
        }
        curl_easy_setopt(curl, CURLOPT_URL, url);
        curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, call->method);
        curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
        curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
        curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, CALL_TIMEOUT_MS);
        curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, 10000L);
        curl_easy_setopt(curl, CURLOPT_USERAGENT, "sandboxd-mcp/1");
        if (call->content_type != NULL) {
                curl_easy_setopt(curl, CURLOPT_POSTFIELDS, call->body != NULL ? call->body : "");
                curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)call->body_size);
        } else if (strcmp(call->method, "GET") == 0) {
                curl_easy_setopt(curl, CURLOPT_HTTPGET, 1L);
        }
        curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, collect);
        curl_easy_setopt(curl, CURLOPT_WRITEDATA, answer);
        curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, header);
        curl_easy_setopt(curl, CURLOPT_HEADERDATA, answer);
        curl_easy_setopt(curl, CURLOPT_XFERINFOFUNCTION, progress);
        curl_easy_setopt(curl, CURLOPT_XFERINFODATA, (void *)call->cancel);
        curl_easy_setopt(curl, CURLOPT_NOPROGRESS, 0L);
        CURLcode code = curl_easy_perform(curl);
        curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &answer->status);
        curl_easy_cleanup(curl);
        curl_slist_free_all(headers);
        if (code == CURLE_OK)
                return 0;
        sbx_mcp_answer_free(answer);
        if (code == CURLE_ABORTED_BY_CALLBACK)
                return sbx_error_set(err, ECANCELED, "canceled");
        return sbx_error_set(err, code == CURLE_OPERATION_TIMEDOUT ? ETIMEDOUT : EIO,
                             "sandboxd at %s: %s", target->url, curl_easy_strerror(code));
}

char *sbx_mcp_event_data(const char *stream, size_t size, const char *name)
{
        /* Events are blocks of "field: value" lines ended by a blank line; data lines join with
         * newlines (the SSE format). The API writes one data line per event. */
        char *found = NULL;
        const char *end = stream + size;
        const char *line = stream;
        bool named = false;
        while (line < end) {
                const char *newline = memchr(line, '\n', (size_t)(end - line));
                size_t length = newline != NULL ? (size_t)(newline - line) : (size_t)(end - line);
                if (length > 0 && line[length - 1] == '\r')
                        length--;
                if (length == 0) {
                        named = false;
                } else if (length > 6 && strncmp(line, "event:", 6) == 0) {
                        const char *value = line + 6 + (line[6] == ' ');
                        size_t value_length = length - (size_t)(value - line);
                        named = value_length == strlen(name) &&
                                strncmp(value, name, value_length) == 0;
                } else if (named && length >= 5 && strncmp(line, "data:", 5) == 0) {
                        const char *value = line + 5 + (length > 5 && line[5] == ' ');
                        free(found);
                        found = strndup(value, length - (size_t)(value - line));
                }
                line = newline != NULL ? newline + 1 : end;
        }
        return found;
}
