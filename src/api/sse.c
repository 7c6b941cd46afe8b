/* Server-Sent Events (sse.h). */
#define _GNU_SOURCE
#include "api/sse.h"

#include <errno.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "api/respond.h"

bool sbx_sse_wanted(struct MHD_Connection *connection)
{
        const char *accept =
                MHD_lookup_connection_value(connection, MHD_HEADER_KIND, MHD_HTTP_HEADER_ACCEPT);
        return accept != NULL && strstr(accept, "text/event-stream") != NULL;
}

struct sbx_sse {
        int write_fd;  /* the writer's end; -1 once finished or cut */
        int read_fd;   /* the reader's end */
        int client_fd; /* the connection's socket, watched for its hang-up */
        atomic_bool finished;
        _Atomic int holds; /* the writer's and the reader's */
        void (*on_end)(void *ctx, bool client_left);
        void *end_ctx;
};

struct sbx_sse *sbx_sse_new(void)
{
        int pair[2];
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) < 0)
                return NULL;
        struct sbx_sse *sse = calloc(1, sizeof(*sse));
        if (sse == NULL) {
                close(pair[0]);
                close(pair[1]);
                return NULL;
        }
        sse->read_fd = pair[0];
        sse->write_fd = pair[1];
        sse->client_fd = -1;
        atomic_store(&sse->holds, 2);
        return sse;
}

static void sse_unhold(struct sbx_sse *sse)
{
        if (atomic_fetch_sub(&sse->holds, 1) != 1)
                return;
        if (sse->write_fd >= 0)
                close(sse->write_fd);
        close(sse->read_fd);
        free(sse);
}

static void sse_write(struct sbx_sse *sse, const char *text, size_t len)
{
        while (sse->write_fd >= 0 && len > 0) {
                ssize_t n = send(sse->write_fd, text, len, MSG_NOSIGNAL | MSG_DONTWAIT);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
                        /* A slow client holds the run's thread, never anything else, and only
                         * for so long. */
                        struct pollfd pfd = {.fd = sse->write_fd, .events = POLLOUT};
                        if (poll(&pfd, 1, SBX_SSE_STALL_MS) > 0)
                                continue;
                        n = 0;
                }
                if (n <= 0) {
                        /* The client went away or stalled: the rest is not written. */
                        close(sse->write_fd);
                        sse->write_fd = -1;
                        return;
                }
                text += n;
                len -= (size_t)n;
        }
}

void sbx_sse_event(struct sbx_sse *sse, const char *event, const json_t *data)
{
        char *text = json_dumps(data, JSON_COMPACT | JSON_ENCODE_ANY);
        if (text == NULL)
                return;
        char *frame = NULL;
        int len = asprintf(&frame, "event: %s\ndata: %s\n\n", event, text);
        free(text);
        if (len > 0)
                sse_write(sse, frame, (size_t)len);
        free(frame);
}

void sbx_sse_finish(struct sbx_sse *sse)
{
        atomic_store(&sse->finished, true);
        /* End of file for the reader: the stream is over. */
        if (sse->write_fd >= 0) {
                close(sse->write_fd);
                sse->write_fd = -1;
        }
        sse_unhold(sse);
}

static ssize_t sse_read(void *cls, uint64_t pos, char *buf, size_t max)
{
        (void)pos;
        struct sbx_sse *sse = cls;
        for (;;) {
                /* The client's hang-up too: a silent run must end when its client goes, not
                 * when the next keep-alive fails to be written. */
                struct pollfd pfd[2] = {{.fd = sse->read_fd, .events = POLLIN},
                                        {.fd = sse->client_fd, .events = POLLRDHUP}};
                int ready = poll(pfd, 2, SBX_SSE_KEEPALIVE_MS);
                if (ready < 0 && errno == EINTR)
                        continue;
                if (ready > 0 && (pfd[1].revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0)
                        return MHD_CONTENT_READER_END_WITH_ERROR;
                if (ready == 0) {
                        static const char keepalive[] = ": keepalive\n\n";
                        size_t n = sizeof(keepalive) - 1 < max ? sizeof(keepalive) - 1 : max;
                        memcpy(buf, keepalive, n);
                        return (ssize_t)n;
                }
                ssize_t n = recv(sse->read_fd, buf, max, 0);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n > 0)
                        return n;
                return MHD_CONTENT_READER_END_OF_STREAM;
        }
}

/* The response is done: the stream ended, or the client went away before the writer finished. */
static void sse_done(void *cls)
{
        struct sbx_sse *sse = cls;
        if (sse->on_end != NULL)
                sse->on_end(sse->end_ctx, !atomic_load(&sse->finished));
        sse_unhold(sse);
}

enum MHD_Result sbx_sse_respond(struct sbx_api *api, struct MHD_Connection *connection,
                                struct sbx_sse *sse, void (*on_end)(void *ctx, bool client_left),
                                void *ctx)
{
        const union MHD_ConnectionInfo *info =
                MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
        sse->client_fd = info != NULL ? info->connect_fd : -1;
        sse->on_end = on_end;
        sse->end_ctx = ctx;
        struct MHD_Response *response =
                MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, sse_read, sse, sse_done);
        if (response == NULL) {
                sse_done(sse);
                return MHD_NO;
        }
        MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
        MHD_add_response_header(response, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
        enum MHD_Result queued = MHD_queue_response(connection, 200, response);
        MHD_destroy_response(response);
        sbx_metrics_count_http_request(api->metrics, 200);
        return queued;
}

void sbx_sse_abandon(struct sbx_sse *sse)
{
        sse_unhold(sse);
}
