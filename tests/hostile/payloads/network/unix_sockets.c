/* Hostile payload (network): UNIX sockets to daemons on the host. Arguments: socket addresses to
 * reach, "@NAME" for an abstract socket (the harness listens on "\0sandboxd-hostile-<random>")
 * and "/PATH" for a filesystem socket (the harness's, in a host temp dir), each with data sent.
 * Then the sockets of well-known host daemons (systemd, D-Bus, Docker, containerd, sandboxd's
 * own), with connect(2) only: nothing is ever said to a real daemon. Abstract sockets
 * belong to a network namespace and Landlock scopes them to the sandbox; host paths do not exist
 * in the sandbox's root. Every connect and send must fail; the harness's listeners must accept
 * nothing (it counts).
 *
 * One JSON line per attempt: {"op": "unix_abstract" | "unix_path" | "unix_host_daemon",
 * "target": T, "type": "stream"|"seqpacket"|"dgram", "ret": R, "errno": NAME}. */
#define _GNU_SOURCE
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

static const char *errno_name(int e)
{
        const char *name = strerrorname_np(e);
        return name != NULL ? name : "UNKNOWN";
}

static void attempt(const char *op, const char *target, int with_data)
{
        struct sockaddr_un addr = {.sun_family = AF_UNIX};
        socklen_t len;
        size_t n = strlen(target);
        if (target[0] == '@') {
                /* Abstract: a leading NUL, and the length counts exactly the name's bytes. */
                if (n > sizeof(addr.sun_path))
                        n = sizeof(addr.sun_path);
                memcpy(addr.sun_path + 1, target + 1, n - 1);
                len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n);
        } else {
                if (n >= sizeof(addr.sun_path))
                        n = sizeof(addr.sun_path) - 1;
                memcpy(addr.sun_path, target, n);
                len = sizeof(addr);
        }
        static const struct {
                int type;
                const char *name;
        } types[] = {{SOCK_STREAM, "stream"}, {SOCK_SEQPACKET, "seqpacket"}, {SOCK_DGRAM, "dgram"}};
        for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
                int fd = socket(AF_UNIX, types[i].type | SOCK_CLOEXEC, 0);
                if (fd < 0) {
                        printf("{\"op\": \"unix_socket\", \"ret\": -1, \"errno\": \"%s\"}\n",
                               errno_name(errno));
                        continue;
                }
                const char *msg = "exfiltrated-by-hostile-payload";
                int rc;
                if (!with_data) /* real host daemons: connect only, never talk to them */
                        rc = connect(fd, (struct sockaddr *)&addr, len);
                else if (types[i].type == SOCK_DGRAM)
                        rc = sendto(fd, msg, strlen(msg), 0, (struct sockaddr *)&addr, len) < 0 ? -1
                                                                                                : 0;
                else
                        rc = connect(fd, (struct sockaddr *)&addr, len);
                int err = errno;
                if (rc == 0 && with_data && types[i].type != SOCK_DGRAM)
                        (void)!write(fd, msg, strlen(msg));
                printf("{\"op\": \"%s\", \"target\": \"%s\", \"type\": \"%s\", \"ret\": %d, "
                       "\"errno\": \"%s\"}\n",
                       op, target, types[i].name, rc, rc < 0 ? errno_name(err) : "OK");
                fflush(stdout);
                close(fd);
        }
}

int main(int argc, char **argv)
{
        for (int i = 1; i < argc; i++)
                attempt(argv[i][0] == '@' ? "unix_abstract" : "unix_path", argv[i], 1);
        static const char *const daemons[] = {
                "/run/systemd/private",
                "/run/systemd/journal/socket",
                "/run/systemd/notify",
                "/run/dbus/system_bus_socket",
                "/var/run/docker.sock",
                "/run/containerd/containerd.sock",
                "/run/sandboxd/sandboxd.sock",
                "/dev/log",
                "@/org/freedesktop/systemd1/notify",
                "@/tmp/.X11-unix/X0",
        };
        for (size_t i = 0; i < sizeof(daemons) / sizeof(daemons[0]); i++)
                attempt("unix_host_daemon", daemons[i], 0);
        return 0;
}
