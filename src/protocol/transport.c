/* The engine protocol's SOCK_SEQPACKET transport (the system calls); the codec is protocol.c.
 * The rules (inline records, sealed memfds) are described in transport.h. */
#define _GNU_SOURCE
#include "protocol/transport.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/cleanup.h"
#include "util/file.h"

/* A record that breaks the transport's rules: EBADMSG, and no strerror text (the message says it
 * all), as the decoder reports a malformed message. */
#define malformed(err, ...) sbx_error_plain((err), EBADMSG, __VA_ARGS__)

/* A body in a memfd must be a stable snapshot: its size and bytes can no longer change. */
#define REQUIRED_SEALS (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE)

/* Room for a few fds: a sender may attach more than the one the protocol allows, and every fd
 * that arrives must be closed, not leaked. */
#define MAX_RECEIVED_FDS 8

static int send_message(int fd, const void *buf, size_t len, int flags, struct sbx_error *err)
{
        if (len < SBX_MESSAGE_HEADER_BYTES)
                return sbx_error_set(err, EINVAL, "send message: %zu bytes is no message", len);
        if (len > SBX_MESSAGE_MAX_BYTES)
                return sbx_error_set(err, EMSGSIZE, "send message of %zu bytes", len);
        if (len <= SBX_MESSAGE_INLINE_MAX)
                return sbx_send_record(fd, buf, len, -1, flags, err);

        _cleanup_close_ int memfd =
                memfd_create("sandboxd-message", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        if (memfd < 0)
                return sbx_error_set(err, errno, "send message: memfd_create");
        if (sbx_write_all(memfd, buf, len) < 0)
                return sbx_error_set(err, errno, "send message: write memfd");
        if (fcntl(memfd, F_ADD_SEALS, REQUIRED_SEALS | F_SEAL_SEAL) < 0)
                return sbx_error_set(err, errno, "send message: seal memfd");
        return sbx_send_record(fd, buf, SBX_MESSAGE_HEADER_BYTES, memfd, flags, err);
}

int sbx_message_send(int fd, const void *buf, size_t len, struct sbx_error *err)
{
        return send_message(fd, buf, len, 0, err);
}

int sbx_message_send_nowait(int fd, const void *buf, size_t len, struct sbx_error *err)
{
        return send_message(fd, buf, len, MSG_DONTWAIT, err);
}

int sbx_message_send_passing(int fd, const void *buf, size_t len, int passed, struct sbx_error *err)
{
        /* A bare header with an fd is a message in a memfd: a passed fd comes with a body. */
        if (len <= SBX_MESSAGE_HEADER_BYTES || len > SBX_MESSAGE_INLINE_MAX || passed < 0)
                return sbx_error_set(err, EINVAL, "send message of %zu bytes passing fd %d", len,
                                     passed);
        return sbx_send_record(fd, buf, len, passed, 0, err);
}

/* Dequeues the record at the head without reading it; fds attached to it are released by the
 * kernel because no control buffer is offered. */
static void drop_record(int fd)
{
        ssize_t n;
        do
                n = recv(fd, NULL, 0, MSG_DONTWAIT);
        while (n < 0 && errno == EINTR);
}

static void close_all(const int *fds, size_t n)
{
        for (size_t i = 0; i < n; i++)
                close(fds[i]);
}

/* Reads the message body that came as a memfd with a header-only record. */
static int read_attached(int memfd, const uint8_t *record, void **out, size_t *out_len,
                         struct sbx_error *err)
{
        uint32_t body_len;
        memcpy(&body_len, record + offsetof(struct sbx_message_header, body_len), sizeof(body_len));
        size_t total = (size_t)body_len + SBX_MESSAGE_HEADER_BYTES;
        if (body_len > SBX_MESSAGE_MAX_BYTES - SBX_MESSAGE_HEADER_BYTES)
                return sbx_error_set(err, EMSGSIZE, "receive: attached message of %zu bytes",
                                     total);
        /* Only shmem files take seals: this also proves the fd is no FIFO, socket or device that
         * could block the reader or change under it. */
        int seals = fcntl(memfd, F_GET_SEALS);
        if (seals < 0 || (seals & REQUIRED_SEALS) != REQUIRED_SEALS)
                return malformed(err, "receive: attached fd is not a sealed memfd");
        struct stat st;
        if (fstat(memfd, &st) < 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size != total)
                return malformed(err,
                                 "receive: attached memfd does not hold the %zu bytes the "
                                 "header announces",
                                 total);
        _cleanup_free_ uint8_t *data = malloc(total);
        if (data == NULL)
                return sbx_error_set(err, ENOMEM, "receive: allocate %zu bytes", total);
        size_t done = 0;
        while (done < total) {
                ssize_t n = pread(memfd, data + done, total - done, (off_t)done);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        return malformed(err, "receive: attached memfd: short read");
                done += (size_t)n;
        }
        if (memcmp(data, record, SBX_MESSAGE_HEADER_BYTES) != 0)
                return malformed(err, "receive: attached message does not match its record");
        *out = steal_pointer(&data);
        *out_len = total;
        return 0;
}

int sbx_message_receive(int fd, void **out, size_t *out_len, struct sbx_error *err)
{
        return sbx_message_receive_passed(fd, out, out_len, NULL, err);
}

int sbx_message_receive_passed(int fd, void **out, size_t *out_len, int *passed,
                               struct sbx_error *err)
{
        if (passed != NULL)
                *passed = -1;
        /* ECONNRESET is the kernel's note that the peer socket went away with records of ours
         * unread (AF_UNIX sets it on the last close of the peer): reading it clears it, and the
         * records the peer sent before are still queued, to be read before the end of file. A
         * worker that answered just before the engine died is one of them. */
        ssize_t size;
        do
                size = recv(fd, NULL, 0, MSG_PEEK | MSG_TRUNC);
        while (size < 0 && (errno == EINTR || errno == ECONNRESET));
        if (size < 0)
                return sbx_error_set(err, errno, "receive: peek");
        if (size == 0) {
                /* SOCK_SEQPACKET reports an empty record and the peer's hang-up alike. */
                drop_record(fd);
                struct pollfd pfd = {.fd = fd, .events = POLLIN | POLLRDHUP};
                if (poll(&pfd, 1, 0) > 0 && (pfd.revents & (POLLHUP | POLLRDHUP)))
                        return 0;
                return malformed(err, "receive: empty record");
        }
        if ((size_t)size > SBX_MESSAGE_INLINE_MAX) {
                drop_record(fd);
                return sbx_error_set(err, EMSGSIZE, "receive: dropped a record of %zd bytes", size);
        }

        _cleanup_free_ uint8_t *record = malloc((size_t)size);
        if (record == NULL) {
                drop_record(fd);
                return sbx_error_set(err, ENOMEM, "receive: allocate");
        }
        union {
                struct cmsghdr header;
                char space[CMSG_SPACE(sizeof(int) * MAX_RECEIVED_FDS)];
        } control;
        struct iovec iov = {.iov_base = record, .iov_len = (size_t)size};
        struct msghdr msg = {
                .msg_iov = &iov,
                .msg_iovlen = 1,
                .msg_control = control.space,
                .msg_controllen = sizeof(control.space),
        };
        ssize_t n;
        do
                n = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
        while (n < 0 && (errno == EINTR || errno == ECONNRESET));
        if (n < 0)
                return sbx_error_set(err, errno, "receive");

        int fds[MAX_RECEIVED_FDS];
        size_t n_fds = 0;
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c != NULL; c = CMSG_NXTHDR(&msg, c)) {
                if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
                        continue;
                size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
                for (size_t i = 0; i < count && n_fds < MAX_RECEIVED_FDS; i++)
                        memcpy(&fds[n_fds++], CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        }
        if ((msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) || n != size || n_fds > 1) {
                close_all(fds, n_fds);
                return malformed(err, "receive: dropped a record that broke the transport rules");
        }
        if (n_fds == 0 || (passed != NULL && n > SBX_MESSAGE_HEADER_BYTES)) {
                if (n_fds == 1)
                        *passed = fds[0];
                *out = steal_pointer(&record);
                *out_len = (size_t)n;
                return 1;
        }
        if (n != SBX_MESSAGE_HEADER_BYTES) {
                close_all(fds, n_fds);
                return malformed(err, "receive: a record with an fd must be a bare header");
        }
        int rc = read_attached(fds[0], record, out, out_len, err);
        close(fds[0]);
        return rc < 0 ? -1 : 1;
}

bool sbx_message_dropped(const struct sbx_error *err)
{
        return err->code == EMSGSIZE || err->code == EBADMSG || err->code == ENOMEM;
}
