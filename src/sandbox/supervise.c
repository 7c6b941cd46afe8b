#include "sandbox/supervise.h"

#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <stdlib.h>
#include <unistd.h>

#include "util/cleanup.h"
#include "util/log.h"
#include "util/time.h"

/* After the sandbox has been killed or its init has exited, every process holding a pipe is dead
 * or dying, so the pipes reach end of file within milliseconds. This bound only guards against a
 * kernel surprise: the supervisor must always return. */
#define DRAIN_BOUND_US (2 * 1000 * 1000)

/* Bytes read per read(): large enough that a flood costs few system calls. On the heap, not the
 * stack: a 64 KiB frame is probed page by page (-fstack-clash-protection), 16 page faults on the
 * first read of every run even when the program prints nothing; a heap chunk's pages are touched
 * only by data. */
#define READ_CHUNK 65536

/* Streamed output (on_output) goes out in batches: once STREAM_BATCH_BYTES wait, or once the
 * oldest waiting byte is STREAM_BATCH_US old. A program that writes a byte at a time thus costs
 * at most one event per 5 ms, not one per write; a line still arrives within 5 ms. */
#define STREAM_BATCH_BYTES 4096
#define STREAM_BATCH_US    5000

struct stream {
        int fd;
        struct sbx_buffer *buffer;
        int number; /* 1 stdout, 2 stderr */
        const struct sbx_supervise *params;
        size_t streamed;           /* bytes of buffer already handed to on_output */
        uint64_t waiting_since_us; /* when the oldest byte not yet handed out was read; 0 none */
};

/* Reads what is available on one stream. Returns true when the cap was passed by this read. */
static bool drain_stream(struct stream *stream, char *chunk)
{
        ssize_t n = read(stream->fd, chunk, READ_CHUNK);
        if (n < 0) {
                if (errno == EINTR || errno == EAGAIN)
                        return false;
                sbx_closep(&stream->fd); /* EIO and friends: treat as end of stream */
                return false;
        }
        if (n == 0) {
                sbx_closep(&stream->fd);
                return false;
        }
        bool was_over = stream->buffer->overflow;
        if (sbx_buffer_append(stream->buffer, chunk, (size_t)n) < 0) {
                /* Out of memory in the supervisor: keep what we have, stop collecting. */
                stream->buffer->overflow = true;
        }
        return !was_over && stream->buffer->overflow;
}

/* end_is_final: reads what the stream holds now, then closes it. Returns true when the cap was
 * passed. Bounded in time: a writer the sandbox's end has not stopped yet must not hold the
 * supervisor (its caller kills it next). */
static bool drain_held(struct stream *stream, char *chunk)
{
        uint64_t until = sbx_now_us() + DRAIN_BOUND_US;
        bool over = false;
        while (stream->fd >= 0 && !over && sbx_now_us() < until) {
                struct pollfd pfd = {.fd = stream->fd, .events = POLLIN};
                if (poll(&pfd, 1, 0) <= 0 || pfd.revents == 0)
                        break;
                over = drain_stream(stream, chunk);
        }
        sbx_closep(&stream->fd);
        return over;
}

/* Hands the kept bytes not yet handed out to on_output: all of them when forced, else once a
 * batch is due (see STREAM_BATCH_BYTES). */
static void stream_output(struct stream *stream, uint64_t now, bool force)
{
        size_t waiting = stream->buffer->len - stream->streamed;
        if (stream->params->on_output == NULL || waiting == 0)
                return;
        if (stream->waiting_since_us == 0)
                stream->waiting_since_us = now;
        if (!force && waiting < STREAM_BATCH_BYTES &&
            now - stream->waiting_since_us < STREAM_BATCH_US)
                return;
        stream->params->on_output(stream->params->output_ctx, stream->number,
                                  stream->buffer->data + stream->streamed, waiting);
        stream->streamed = stream->buffer->len;
        stream->waiting_since_us = 0;
}

int sbx_supervise(const struct sbx_supervise *params, struct sbx_run *run, struct sbx_error *err)
{
        sbx_buffer_init(&run->out, params->output_cap + params->stdout_extra);
        sbx_buffer_init(&run->err, params->output_cap);
        _cleanup_free_ char *chunk = malloc(READ_CHUNK);
        if (chunk == NULL)
                return sbx_error_set(err, ENOMEM, "supervise: allocate the read buffer");
        struct stream streams[2] = {
                {.fd = params->stdout_fd, .buffer = &run->out, .number = 1, .params = params},
                {.fd = params->stderr_fd, .buffer = &run->err, .number = 2, .params = params},
        };
        int stdin_fd = params->stdin_fd;
        const char *stdin_next = params->stdin_data;
        size_t stdin_left = params->stdin_size;
        if (stdin_left == 0)
                sbx_closep(&stdin_fd); /* the program sees end of file at once */

        int end_fd = params->end_fd;
        bool end_is_final = params->end_is_final;
        bool exited = false;
        bool killed = false;
        uint64_t drain_deadline_us = 0;
        int rc = 0;

        while (!exited || streams[0].fd >= 0 || streams[1].fd >= 0) {
                uint64_t now = sbx_now_us();
                /* Not once the program is gone: pipes still draining are not a timeout. */
                if (!killed && !exited && now >= params->deadline_us) {
                        run->wall_timeout = true;
                        killed = true;
                        if (params->kill(params->kill_ctx, err) < 0)
                                rc = -1;
                }
                if ((killed || exited) && drain_deadline_us == 0)
                        drain_deadline_us = now + DRAIN_BOUND_US;
                if (drain_deadline_us != 0 && now >= drain_deadline_us) {
                        sbx_warn("supervise: output pipes still open %u ms after the end; closing",
                                 DRAIN_BOUND_US / 1000);
                        break;
                }

                struct pollfd fds[5];
                nfds_t n = 0;
                int stream_slot[2] = {-1, -1};
                for (int i = 0; i < 2; i++) {
                        if (streams[i].fd >= 0) {
                                stream_slot[i] = (int)n;
                                fds[n++] = (struct pollfd){.fd = streams[i].fd, .events = POLLIN};
                        }
                }
                int stdin_slot = -1;
                if (stdin_fd >= 0 && stdin_left > 0) {
                        stdin_slot = (int)n;
                        fds[n++] = (struct pollfd){.fd = stdin_fd, .events = POLLOUT};
                }
                int cancel_slot = -1;
                if (params->cancel_fd > 0 && !killed && !exited) {
                        cancel_slot = (int)n;
                        fds[n++] = (struct pollfd){.fd = params->cancel_fd, .events = POLLIN};
                }
                int end_slot = -1;
                if (!exited) {
                        end_slot = (int)n;
                        fds[n++] = (struct pollfd){.fd = end_fd, .events = POLLIN};
                }

                uint64_t wake = drain_deadline_us != 0
                                        ? drain_deadline_us
                                        : (killed ? now + DRAIN_BOUND_US : params->deadline_us);
                for (int i = 0; i < 2; i++)
                        if (streams[i].waiting_since_us != 0 &&
                            streams[i].waiting_since_us + STREAM_BATCH_US < wake)
                                wake = streams[i].waiting_since_us + STREAM_BATCH_US;
                int timeout_ms = wake > now ? (int)((wake - now + 999) / 1000) : 0;
                int ready = poll(fds, n, timeout_ms);
                if (ready < 0) {
                        if (errno == EINTR)
                                continue;
                        rc = sbx_error_set(err, errno, "supervise: poll");
                        break;
                }

                for (int i = 0; i < 2; i++) {
                        int slot = stream_slot[i];
                        if (slot < 0 || fds[slot].revents == 0)
                                continue;
                        if (drain_stream(&streams[i], chunk) && !killed) {
                                /* Past the cap: the run is over; keep reading to drain. */
                                run->output_limit = true;
                                killed = true;
                                if (params->kill(params->kill_ctx, err) < 0)
                                        rc = -1;
                        }
                }
                if (stdin_slot >= 0 && fds[stdin_slot].revents != 0) {
                        if (fds[stdin_slot].revents & (POLLERR | POLLHUP)) {
                                sbx_closep(&stdin_fd); /* the program closed its stdin */
                        } else {
                                ssize_t w = write(stdin_fd, stdin_next, stdin_left);
                                if (w > 0) {
                                        stdin_next += w;
                                        stdin_left -= (size_t)w;
                                        if (stdin_left == 0 && !params->stdin_held)
                                                sbx_closep(&stdin_fd);
                                } else if (w < 0 && errno != EAGAIN && errno != EINTR) {
                                        sbx_closep(&stdin_fd); /* EPIPE: nobody reads any more */
                                }
                        }
                }
                if (end_slot >= 0 && fds[end_slot].revents != 0) {
                        int next = end_is_final && params->end_next != NULL
                                           ? params->end_next(params->end_ctx, &end_is_final)
                                           : -1;
                        if (next >= 0) {
                                end_fd = next;
                        } else {
                                exited = true;
                                for (int i = 0; end_is_final && i < 2; i++)
                                        if (drain_held(&streams[i], chunk) && !killed)
                                                run->output_limit = true;
                        }
                }
                if (cancel_slot >= 0 && fds[cancel_slot].revents != 0 && !killed && !exited) {
                        /* Not read here: the fd stays readable, and it is not polled again. */
                        run->canceled = true;
                        killed = true;
                        if (params->kill(params->kill_ctx, err) < 0)
                                rc = -1;
                }
                uint64_t after = sbx_now_us();
                for (int i = 0; i < 2; i++)
                        stream_output(&streams[i], after, false);
        }

        for (int i = 0; i < 2; i++)
                stream_output(&streams[i], sbx_now_us(), true);
        sbx_closep(&stdin_fd);
        sbx_closep(&streams[0].fd);
        sbx_closep(&streams[1].fd);
        return rc;
}
