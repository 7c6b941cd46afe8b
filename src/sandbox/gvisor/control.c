/* runsc's control server (control.h): the Wait call and its answer. */
#define _GNU_SOURCE
#include "sandbox/gvisor/control.h"

#include <errno.h>
#include <jansson.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "util/cleanup.h"
#include "util/file.h"
#include "util/time.h"

/* runsc/boot/controller.go's ControlSocketAddr, without its leading NUL. */
#define CONTROL_SOCKET_PREFIX "runsc-sandbox."

/* An answer is {"success":...,"err":"...","result":N}: err is empty on success, and an error's
 * text past this size is not worth waiting for (the call failed either way). */
#define ANSWER_MAX 1024

/* Connects fd to address (length bytes of it) if its listener is one is_server accepts. */
static int connect_to_server(int fd, const struct sockaddr_un *address, socklen_t length,
                             bool (*is_server)(pid_t pid, void *ctx), void *ctx)
{
        if (connect(fd, (const struct sockaddr *)address, length) < 0)
                return -1;
        struct ucred peer;
        socklen_t size = sizeof(peer);
        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &size) < 0)
                return -1;
        if (!is_server(peer.pid, ctx)) {
                errno = EPERM;
                return -1;
        }
        return 0;
}

int gvisor_control_send_wait(const char *id, pid_t pid, bool (*is_server)(pid_t pid, void *ctx),
                             void *ctx)
{
        struct sockaddr_un address = {.sun_family = AF_UNIX};
        /* Abstract: the name follows a NUL in sun_path, and the address's length says where it
         * ends. */
        int name_len = snprintf(address.sun_path + 1, sizeof(address.sun_path) - 1, "%s%s",
                                CONTROL_SOCKET_PREFIX, id);
        if (name_len < 0 || (size_t)name_len >= sizeof(address.sun_path) - 1) {
                errno = ENAMETOOLONG;
                return -1;
        }
        /* Debian's runsc (Go's syscall package of its day) binds the name with its terminating
         * NUL counted (ss shows @runsc-sandbox.ID@); Go's later releases do not: both are
         * tried, in that order, each on a socket of its own. */
        socklen_t length =
                (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)name_len);
        _cleanup_close_ int fd = -1;
        bool refused = false; /* a listener is_server did not accept: said over other errors */
        for (int with_nul = 1;; with_nul--) {
                sbx_closep(&fd);
                fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
                if (fd < 0)
                        return -1;
                if (connect_to_server(fd, &address, length + (socklen_t)with_nul, is_server, ctx) ==
                    0)
                        break;
                refused = refused || errno == EPERM;
                if (with_nul == 0) {
                        if (refused)
                                errno = EPERM;
                        return -1;
                }
        }
        /* WaitPIDArgs has no JSON tags: its fields go by their Go names. */
        json_t *call =
                pid > 0 ? json_pack("{s:s,s:{s:I,s:s}}", "method", "containerManager.WaitPID",
                                    "arg", "PID", (json_int_t)pid, "CID", id)
                        : json_pack("{s:s,s:s}", "method", "containerManager.Wait", "arg", id);
        _cleanup_free_ char *text = call != NULL ? json_dumps(call, JSON_COMPACT) : NULL;
        json_decref(call);
        if (text == NULL) {
                errno = ENOMEM;
                return -1;
        }
        if (sbx_write_all(fd, text, strlen(text)) < 0)
                return -1;
        return take_fd(&fd);
}

int gvisor_control_read_wait(int fd, int timeout_ms, int *status)
{
        char answer[ANSWER_MAX];
        size_t len = 0;
        uint64_t until = sbx_now_us() + (uint64_t)timeout_ms * 1000;
        for (;;) {
                uint64_t now = sbx_now_us();
                if (now >= until || len == sizeof(answer))
                        return -1;
                struct pollfd pfd = {.fd = fd, .events = POLLIN};
                int ready = poll(&pfd, 1, (int)((until - now + 999) / 1000));
                if (ready < 0 && errno == EINTR)
                        continue;
                if (ready <= 0)
                        return -1;
                ssize_t n = read(fd, answer + len, sizeof(answer) - len);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        return -1;
                len += (size_t)n;
                /* The answer is one JSON object with nothing after it; until it is whole, it
                 * does not parse. */
                json_error_t error;
                json_t *object = json_loadb(answer, len, 0, &error);
                if (object == NULL)
                        continue;
                json_int_t result = -1;
                int success = 0;
                int unpacked =
                        json_unpack(object, "{s:b,s:I}", "success", &success, "result", &result);
                json_decref(object);
                if (unpacked < 0 || !success || result < 0 || result > 0xffff)
                        return -1;
                *status = (int)result;
                return 0;
        }
}
