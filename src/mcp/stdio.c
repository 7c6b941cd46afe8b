/* The MCP server on standard input and output (stdio.h).
 *
 * One reader (this thread) takes a message per line. tools/call runs on a thread of its own, so
 * that a long run does not hold up a ping, another call or the notifications/cancelled that
 * stops it: the cancelled call's HTTP request is aborted (the API cancels a streamed run whose
 * client hangs up) and, as the protocol asks, it gets no response. Everything else is answered
 * in order. Writes are whole lines under a lock. At the end of the input, the calls still running
 * are cancelled and waited for. Logs go to standard error: standard output is the protocol's. */
#define _GNU_SOURCE
#include "mcp/stdio.h"

#include <curl/curl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mcp/calls.h"
#include "mcp/protocol.h"
#include "service/config.h"
#include "util/cleanup.h"

/* The longest line read: a message with a file's content can be large. */
#define LINE_MAX_BYTES (64u << 20)
/* Where `sandboxd serve` keeps the local tenant's token (with its default data_dir). */
#define LOCAL_TOKEN_PATH SBX_DEFAULT_DATA_DIR "/" SBX_LOCAL_TOKEN_FILE

static pthread_mutex_t output_lock = PTHREAD_MUTEX_INITIALIZER;

static void write_message(json_t *message)
{
        if (message == NULL)
                return;
        char *text = json_dumps(message, JSON_COMPACT);
        json_decref(message);
        if (text == NULL)
                return;
        pthread_mutex_lock(&output_lock);
        fputs(text, stdout);
        fputc('\n', stdout);
        fflush(stdout);
        pthread_mutex_unlock(&output_lock);
        free(text);
}

/* A tools/call on its thread: the message and the registry's entry of its cancel flag. */
struct call_job {
        json_t *message;
        struct sbx_mcp_call *call;
        const struct sbx_mcp_target *target;
};

static void *run_call(void *arg)
{
        struct call_job *job = arg;
        json_t *answer = sbx_mcp_handle(job->target, job->message, sbx_mcp_call_flag(job->call));
        bool canceled = sbx_mcp_call_canceled(job->call);
        if (canceled)
                json_decref(answer); /* a cancelled request gets no response */
        else
                write_message(answer);
        json_decref(job->message);
        sbx_mcp_call_end(job->call);
        free(job);
        return NULL;
}

/* Starts message (a tools/call) on a thread; false when too many are running. */
static bool start_call(const struct sbx_mcp_target *target, json_t *message)
{
        struct call_job *job = malloc(sizeof(*job));
        struct sbx_mcp_call *call =
                job != NULL ? sbx_mcp_call_begin("", json_object_get(message, "id")) : NULL;
        if (call == NULL) {
                free(job);
                return false;
        }
        *job = (struct call_job){.message = json_incref(message), .call = call, .target = target};
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        pthread_t thread;
        int rc = pthread_create(&thread, &attr, run_call, job);
        pthread_attr_destroy(&attr);
        if (rc != 0) {
                json_decref(message);
                sbx_mcp_call_end(call);
                free(job);
                return false;
        }
        return true;
}

static void handle_line(const struct sbx_mcp_target *target, const char *line, size_t length)
{
        json_error_t error;
        _cleanup_(json_decrefp) json_t *message = json_loadb(line, length, 0, &error);
        if (message == NULL) {
                char text[256];
                snprintf(text, sizeof(text), "Parse error: %s", error.text);
                write_message(sbx_jsonrpc_error(NULL, SBX_JSONRPC_PARSE_ERROR, text));
                return;
        }
        if (json_is_array(message)) {
                write_message(sbx_jsonrpc_error(NULL, SBX_JSONRPC_INVALID_REQUEST,
                                                "batches are not part of this protocol revision"));
                return;
        }
        const char *method = json_string_value(json_object_get(message, "method"));
        if (method != NULL && strcmp(method, "notifications/cancelled") == 0) {
                sbx_mcp_call_cancel(
                        "", json_object_get(json_object_get(message, "params"), "requestId"));
                return;
        }
        if (sbx_mcp_is_request(message, "tools/call")) {
                /* Refused at once, in order: only a call that runs goes to a thread. */
                json_t *refusal = sbx_mcp_tools_call_refusal(message);
                if (refusal != NULL)
                        write_message(refusal);
                else if (!start_call(target, message))
                        write_message(sbx_jsonrpc_error(json_object_get(message, "id"),
                                                        SBX_JSONRPC_INTERNAL_ERROR,
                                                        "too many tool calls at once"));
                return;
        }
        write_message(sbx_mcp_handle(target, message, NULL));
}

/* The target from the environment; false (with a message on stderr) without a token. */
static bool target_from_environment(struct sbx_mcp_target *target)
{
        const char *url = getenv("SANDBOXD_URL");
        snprintf(target->url, sizeof(target->url), "%s",
                 url != NULL && url[0] != '\0' ? url : "http://127.0.0.1:8080");
        size_t length = strlen(target->url);
        while (length > 0 && target->url[length - 1] == '/')
                target->url[--length] = '\0';
        const char *token = getenv("SANDBOXD_TOKEN");
        if (token != NULL && token[0] != '\0') {
                snprintf(target->token, sizeof(target->token), "%s", token);
                return true;
        }
        FILE *file = fopen(LOCAL_TOKEN_PATH, "re");
        if (file != NULL) {
                bool read = fgets(target->token, sizeof(target->token), file) != NULL;
                fclose(file);
                target->token[strcspn(target->token, "\r\n")] = '\0';
                if (read && target->token[0] != '\0')
                        return true;
        }
        fprintf(stderr, "sandboxd mcp: set SANDBOXD_TOKEN to a tenant's token (and SANDBOXD_URL "
                        "to the service, default http://127.0.0.1:8080)\n");
        return false;
}

int sbx_mcp_stdio_main(int argc, char **argv)
{
        (void)argv;
        if (argc != 1) {
                fprintf(stderr, "usage: sandboxd mcp   (SANDBOXD_URL, SANDBOXD_TOKEN in the "
                                "environment)\n");
                return 64;
        }
        static struct sbx_mcp_target target;
        if (!target_from_environment(&target))
                return 78;
        signal(SIGPIPE, SIG_IGN);
        if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
                fprintf(stderr, "sandboxd mcp: libcurl failed to start\n");
                return 70;
        }
        char *line = NULL;
        size_t capacity = 0;
        ssize_t length;
        while ((length = getline(&line, &capacity, stdin)) >= 0) {
                while (length > 0 && (line[length - 1] == '\n' || line[length - 1] == '\r'))
                        line[--length] = '\0';
                if (length == 0)
                        continue;
                if ((size_t)length > LINE_MAX_BYTES) {
                        write_message(sbx_jsonrpc_error(NULL, SBX_JSONRPC_INVALID_REQUEST,
                                                        "message too large"));
                        continue;
                }
                handle_line(&target, line, (size_t)length);
        }
        free(line);
        /* The client is gone: what still runs is cancelled (a few seconds to wind down). */
        sbx_mcp_calls_cancel_all(10000);
        curl_global_cleanup();
        return 0;
}
