/* Hostile payload (kernel): sockets of the families with the most kernel attack surface, each
 * with every socket type and a spread of protocols: AF_ALG (kernel crypto API), AF_VSOCK (the
 * hypervisor channel), AF_PACKET (raw frames), AF_KEY (IPsec key management), AF_NETLINK with
 * every protocol number (route, xfrm, audit, netfilter, uevent, generic, ...), plus socketpair
 * and family numbers with high bits set. The sandbox permits AF_UNIX, AF_INET and AF_INET6 only:
 * every call here must fail with EAFNOSUPPORT, however the arguments are dressed.
 *
 * One JSON line per call: {"op": "socket", "family": F, "type": T, "protocol": P, "ret": R,
 * "errno": "EAFNOSUPPORT"} ("OK" when a socket was made; it is closed at once). */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef AF_ALG
#define AF_ALG 38
#endif
#ifndef AF_VSOCK
#define AF_VSOCK 40
#endif

static const char *errno_name(int e)
{
        const char *name = strerrorname_np(e);
        return name != NULL ? name : "UNKNOWN";
}

static void attempt(const char *op, long family, long type, long protocol)
{
        errno = 0;
        long ret;
        int sv[2] = {-1, -1};
        if (strcmp(op, "socketpair") == 0)
                ret = syscall(SYS_socketpair, family, type, protocol, sv);
        else
                ret = syscall(SYS_socket, family, type, protocol);
        int saved = errno;
        if (ret >= 0) {
                if (strcmp(op, "socketpair") == 0) {
                        close(sv[0]);
                        close(sv[1]);
                } else {
                        close((int)ret);
                }
        }
        printf("{\"op\": \"%s\", \"family\": %ld, \"type\": %ld, \"protocol\": %ld, \"ret\": %ld, "
               "\"errno\": \"%s\"}\n",
               op, family, type, protocol, ret, ret < 0 ? errno_name(saved) : "OK");
}

int main(void)
{
        static const long types[] = {SOCK_STREAM, SOCK_DGRAM, SOCK_RAW, SOCK_SEQPACKET,
                                     SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC};
        static const long families[] = {AF_ALG, AF_VSOCK, AF_PACKET, AF_KEY, AF_NETLINK};
        for (size_t f = 0; f < sizeof(families) / sizeof(families[0]); f++)
                for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++) {
                        attempt("socket", families[f], types[t], 0);
                        /* PF_KEY_V2 for AF_KEY, ETH_P_ALL (network order) for AF_PACKET */
                        attempt("socket", families[f], types[t],
                                families[f] == AF_KEY      ? 2
                                : families[f] == AF_PACKET ? 0x0300
                                                           : 1);
                }
        /* Every netlink protocol number the kernel defines (0..22) and beyond. */
        for (long protocol = 0; protocol <= 23; protocol++) {
                attempt("socket", AF_NETLINK, SOCK_RAW, protocol);
                attempt("socket", AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, protocol);
        }
        for (size_t f = 0; f < sizeof(families) / sizeof(families[0]); f++) {
                attempt("socketpair", families[f], SOCK_DGRAM, 0);
                attempt("socketpair", families[f], SOCK_RAW, 0);
                /* The kernel reads `int family`: high bits are dropped, the filter must not be
                 * fooled into reading them as "some other family". */
                attempt("socket", (1L << 32) | families[f], SOCK_RAW, 0);
                attempt("socket", (long)0xffffffff00000000L | families[f], SOCK_DGRAM, 0);
        }
        /* Families beyond AF_INET6 and beyond AF_MAX: all one filter row. */
        for (long family = 11; family <= 50; family++)
                attempt("socket", family, SOCK_DGRAM, 0);
        attempt("socket", -1, SOCK_DGRAM, 0);
        return 0;
}
