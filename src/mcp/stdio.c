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
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mcp/protocol.h"
#include "util/cleanup.h"

/* tools/call running at once: more wait for their answer as a JSON-RPC error. */
#define CALLS_MAX 16
/* The longest line read: a message with a file's content can be large. */
#define LINE_MAX_BYTES (64u << 20)
/* Where `sandboxd serve` keeps the local tenant's token (its default data_dir). */
#define LOCAL_TOKEN_PATH "/var/lib/sandboxd/local-token"

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

/* A tools/call under way. */
struct call {
        bool used;
        json_t *id;
        atomic_bool cancel;
        json_t *message;
        const struct sbx_mcp_target *target;
};

static struct call calls[CALLS_MAX];
static pthread_mutex_t calls_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t calls_changed = PTHREAD_COND_INITIALIZER;

static void *run_call(void *arg)
{
        struct call *call = arg;
        json_t *answer = sbx_mcp_handle(call->target, call->message, &call->cancel);
        pthread_mutex_lock(&calls_lock);
        bool canceled = atomic_load(&call->cancel);
        json_decref(call->message);
        json_decref(call->id);
        call->used = false;
        pthread_cond_broadcast(&calls_changed);
        pthread_mutex_unlock(&calls_lock);
        if (canceled)
                json_decref(answer); /* a cancelled request gets no response */
        else
                write_message(answer);
        return NULL;
}

/* Starts message (a tools/call) on a thread; false when CALLS_MAX are running. */
static bool start_call(const struct sbx_mcp_target *target, json_t *message)
{
        pthread_mutex_lock(&calls_lock);
        struct call *call = NULL;
        for (size_t i = 0; call == NULL && i < CALLS_MAX; i++)
                if (!calls[i].used)
                        call = &calls[i];
        if (call != NULL) {
                call->used = true;
                call->id = json_incref(json_object_get(message, "id"));
                call->message = json_incref(message);
                call->target = target;
                atomic_store(&call->cancel, false);
        }
        pthread_mutex_unlock(&calls_lock);
        if (call == NULL)
                return false;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        pthread_t thread;
        int rc = pthread_create(&thread, &attr, run_call, call);
        pthread_attr_destroy(&attr);
        if (rc != 0) {
                pthread_mutex_lock(&calls_lock);
                json_decref(call->message);
                json_decref(call->id);
                call->used = false;
                pthread_mutex_unlock(&calls_lock);
                return false;
        }
        return true;
}

/* notifications/cancelled: the call whose id is requestId stops (a call already answered, or an
 * unknown id, is nothing to do: the notification may cross its response). */
static void cancel_call(const json_t *request_id)
{
        pthread_mutex_lock(&calls_lock);
        for (size_t i = 0; i < CALLS_MAX; i++)
                if (calls[i].used && json_equal(calls[i].id, request_id))
                        atomic_store(&calls[i].cancel, true);
        pthread_mutex_unlock(&calls_lock);
}

/* At the end of the input: every call is cancelled, and waited for (a few seconds at most). */
static void finish_calls(void)
{
        struct timespec deadline;
        clock_gettime(CLOCK_REALTIME, &deadline);
        deadline.tv_sec += 10;
        pthread_mutex_lock(&calls_lock);
        for (;;) {
                bool running = false;
                for (size_t i = 0; i < CALLS_MAX; i++) {
                        if (calls[i].used)
                                atomic_store(&calls[i].cancel, true);
                        running |= calls[i].used;
                }
                if (!running ||
                    pthread_cond_timedwait(&calls_changed, &calls_lock, &deadline) == ETIMEDOUT)
                        break;
        }
        pthread_mutex_unlock(&calls_lock);
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
                cancel_call(json_object_get(json_object_get(message, "params"), "requestId"));
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
        finish_calls();
        curl_global_cleanup();
        return 0;
}
