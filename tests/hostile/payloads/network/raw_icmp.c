/* Hostile payload (network): raw and ICMP sockets, the tools for forging packets and for ping
 * tunnels: SOCK_RAW for ICMP, TCP, UDP and IPPROTO_RAW over IPv4 and IPv6 (also with
 * SOCK_NONBLOCK/SOCK_CLOEXEC folded into the type), SOCK_PACKET over AF_INET (which the kernel
 * turns into a packet socket), and unprivileged "ping" sockets (SOCK_DGRAM + IPPROTO_ICMP /
 * ICMPV6), which net.ipv4.ping_group_range of the sandbox's own network namespace governs.
 *
 * Raw and packet sockets must get the seccomp policy's EAFNOSUPPORT (the filter refuses them even
 * if capabilities were kept); ping sockets EACCES (the new namespace's default range "1 0" admits
 * no group). One JSON line per attempt: {"op": "raw_socket" | "ping_socket", "family": F,
 * "type": T, "protocol": P, "ret": R, "errno": NAME}; a socket that was made also tries one echo
 * request to 127.0.0.1 and reports it as "ping_send". */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/ip_icmp.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static const char *errno_name(int e)
{
        const char *name = strerrorname_np(e);
        return name != NULL ? name : "UNKNOWN";
}

static void attempt(const char *op, int family, int type, int protocol)
{
        int fd = socket(family, type, protocol);
        int err = errno;
        printf("{\"op\": \"%s\", \"family\": %d, \"type\": %d, \"protocol\": %d, \"ret\": %d, "
               "\"errno\": \"%s\"}\n",
               op, family, type, protocol, fd, fd < 0 ? errno_name(err) : "OK");
        fflush(stdout);
        if (fd < 0)
                return;
        if (family == AF_INET && (protocol == IPPROTO_ICMP)) {
                struct icmphdr echo = {.type = ICMP_ECHO};
                struct sockaddr_in to = {.sin_family = AF_INET};
                inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
                ssize_t n = sendto(fd, &echo, sizeof(echo), 0, (struct sockaddr *)&to, sizeof(to));
                printf("{\"op\": \"ping_send\", \"ret\": %zd, \"errno\": \"%s\"}\n", n,
                       n < 0 ? errno_name(errno) : "OK");
        }
        close(fd);
}

int main(void)
{
        static const int families[] = {AF_INET, AF_INET6};
        static const int protocols[] = {IPPROTO_ICMP, IPPROTO_ICMPV6, IPPROTO_TCP,
                                        IPPROTO_UDP,  IPPROTO_RAW,    0};
        static const int type_flags[] = {0, SOCK_NONBLOCK, SOCK_CLOEXEC,
                                         SOCK_NONBLOCK | SOCK_CLOEXEC};
        for (size_t f = 0; f < 2; f++)
                for (size_t p = 0; p < sizeof(protocols) / sizeof(protocols[0]); p++)
                        for (size_t t = 0; t < sizeof(type_flags) / sizeof(type_flags[0]); t++)
                                attempt("raw_socket", families[f], SOCK_RAW | type_flags[t],
                                        protocols[p]);
        for (size_t t = 0; t < sizeof(type_flags) / sizeof(type_flags[0]); t++) {
                attempt("raw_socket", AF_INET, SOCK_PACKET | type_flags[t], 0);
                attempt("raw_socket", AF_INET, SOCK_PACKET | type_flags[t], htons(0x0003));
        }
        attempt("ping_socket", AF_INET, SOCK_DGRAM, IPPROTO_ICMP);
        attempt("ping_socket", AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, IPPROTO_ICMP);
        attempt("ping_socket", AF_INET6, SOCK_DGRAM, IPPROTO_ICMPV6);
        return 0;
}
