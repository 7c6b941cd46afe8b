/* Hostile payload (filesystem): raw devices. mknod(2) of /dev/mem, /dev/kmem, /dev/port, the
 * host's disk (/dev/vda, 254:0), /dev/kmsg, a tty and a block loop device, in every writable
 * place; then open the devices by their usual names read-only (/dev/mem, /dev/kmem, /dev/port,
 * /dev/kmsg, /dev/vda, /dev/sda, /dev/nvme0n1, /dev/loop-control, /dev/console, /dev/tty0,
 * /dev/fuse, /dev/net/tun, /dev/kvm, /dev/dri/card0). Nothing is read from or written to a device
 * that opens. One JSON line per attempt on stdout. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

static void report(const char *op, const char *target, long ret, int err)
{
        if (ret < 0)
                printf("{\"op\": \"%s\", \"target\": \"%s\", \"ret\": %ld, \"errno\": \"%s\"}\n",
                       op, target, ret, strerrorname_np(err) ? strerrorname_np(err) : "UNKNOWN");
        else
                printf("{\"op\": \"%s\", \"target\": \"%s\", \"ret\": %ld, \"errno\": null}\n", op,
                       target, ret);
        fflush(stdout);
}

static const struct {
        const char *name;
        mode_t type;
        unsigned major, minor;
} nodes[] = {
        {"mem", S_IFCHR, 1, 1},   {"kmem", S_IFCHR, 1, 2},  {"port", S_IFCHR, 1, 4},
        {"kmsg", S_IFCHR, 1, 11}, {"tty0", S_IFCHR, 4, 0},  {"vda", S_IFBLK, 254, 0},
        {"sda", S_IFBLK, 8, 0},   {"loop0", S_IFBLK, 7, 0},
};

/* Opens each device read-only (nothing read or written) and reports it as op. */
static void open_each(const char *op, const char *const *devices, size_t n)
{
        for (size_t i = 0; i < n; i++) {
                errno = 0;
                int fd = open(devices[i], O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
                report(op, devices[i], fd, errno);
                if (fd >= 0)
                        close(fd);
        }
}

int main(void)
{
        /* The writable places first (where a node could be created at all), then /dev itself. */
        char cwd[4096] = ".";
        if (getcwd(cwd, sizeof(cwd)) == NULL)
                strcpy(cwd, ".");
        const char *dirs[] = {cwd, "/tmp", "/dev/shm", "/dev"};
        for (size_t d = 0; d < sizeof(dirs) / sizeof(dirs[0]); d++) {
                /* Unsandboxed (the outside control) only the cwd: no nodes in a host's /tmp. */
                if (d > 0 && strcmp(cwd, "/workspace") != 0)
                        break;
                for (size_t i = 0; i < sizeof(nodes) / sizeof(nodes[0]); i++) {
                        char path[4200];
                        snprintf(path, sizeof(path), "%s/hostile-%s", dirs[d], nodes[i].name);
                        errno = 0;
                        long r = mknod(path, nodes[i].type | 0600,
                                       makedev(nodes[i].major, nodes[i].minor));
                        report("mknod", path, r, errno);
                        if (r == 0) {
                                /* Created (a refusal must then come from nodev): try it. */
                                errno = 0;
                                int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
                                report("open_created_node", path, fd, errno);
                                if (fd >= 0)
                                        close(fd);
                                unlink(path);
                        }
                }
        }

        static const char *const devices[] = {
                "/dev/mem", "/dev/kmem",      "/dev/port",         "/dev/kmsg",    "/dev/vda",
                "/dev/sda", "/dev/nvme0n1",   "/dev/loop-control", "/dev/console", "/dev/tty0",
                "/dev/kvm", "/dev/dri/card0", "/dev/vsock",
        };
        open_each("open_device", devices, sizeof(devices) / sizeof(devices[0]));
        /* Devices a kernel may serve without any hardware (gVisor's sentry implements both
         * itself): reported apart, so that a backend's expectation can tell them from the
         * host's. */
        static const char *const virtual_devices[] = {"/dev/fuse", "/dev/net/tun"};
        open_each("open_virtual_device", virtual_devices,
                  sizeof(virtual_devices) / sizeof(virtual_devices[0]));
        return 0;
}
