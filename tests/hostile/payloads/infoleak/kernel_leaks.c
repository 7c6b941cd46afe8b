/* Hostile payload (infoleak): kernel addresses and the kernel log. /proc/kallsyms (absent,
 * refused, or every address zero), the kernel log through syslog(2) (READ_ALL, SIZE_BUFFER,
 * SIZE_UNREAD) and /dev/kmsg and /proc/kmsg, then the other host-kernel files a container usually
 * sees: /proc/cmdline (the host's boot command line), modules, iomem, ioports, timer_list,
 * vmallocinfo, slabinfo, sched_debug, keys, config.gz, /sys/kernel/notes, /boot/System.map,
 * /proc/self/stack. Whatever is readable is summarised. One JSON line per attempt on stdout. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/klog.h>
#include <sys/utsname.h>
#include <unistd.h>

static void report(const char *op, const char *target, long ret, const char *err,
                   const char *detail)
{
        printf("{\"op\": \"%s\", \"target\": \"%s\", \"ret\": %ld, \"errno\": %s%s%s, "
               "\"detail\": \"",
               op, target, ret, err ? "\"" : "", err ? err : "null", err ? "\"" : "");
        /* detail is file content: JSON-escape it. */
        for (const unsigned char *p = (const unsigned char *)(detail ? detail : ""); *p; p++) {
                if (*p == '"' || *p == '\\')
                        printf("\\%c", *p);
                else if (*p < 0x20 || *p >= 0x7f)
                        printf("\\u%04x", *p);
                else
                        putchar(*p);
        }
        printf("\"}\n");
        fflush(stdout);
}

static const char *errname(int err)
{
        return strerrorname_np(err) ? strerrorname_np(err) : "UNKNOWN";
}

static void kallsyms(void)
{
        FILE *f = fopen("/proc/kallsyms", "re");
        if (f == NULL) {
                report("kallsyms", "/proc/kallsyms", -1, errname(errno), "");
                return;
        }
        char line[512], first_nonzero[512] = "";
        long lines = 0, nonzero = 0;
        while (fgets(line, sizeof(line), f) != NULL) {
                lines++;
                if (strtoull(line, NULL, 16) != 0) {
                        if (nonzero++ == 0)
                                snprintf(first_nonzero, sizeof(first_nonzero), "%s", line);
                }
        }
        fclose(f);
        /* Readable but all zero is what an unprivileged reader gets on a hardened host. */
        report("kallsyms", "/proc/kallsyms", lines, nonzero ? "ADDRESSES" : "ZEROED",
               first_nonzero);
}

static void klog(int type, const char *name)
{
        char *buf = malloc(1 << 16);
        errno = 0;
        long r = klogctl(type, buf, 1 << 16);
        if (r < 0)
                report("syslog", name, r, errname(errno), "");
        else
                report("syslog", name, r, NULL, type == 3 ? buf : "");
        free(buf);
}

static void read_file(const char *op, const char *path)
{
        int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
        if (fd < 0) {
                report(op, path, -1, errname(errno), "");
                return;
        }
        char buf[401];
        ssize_t n = read(fd, buf, sizeof(buf) - 1);
        int err = errno;
        close(fd);
        if (n < 0) {
                /* Opened but unreadable (kmsg without privilege, EAGAIN on an empty log). */
                report(op, path, -1, errname(err), "opened");
                return;
        }
        buf[n] = '\0';
        report(op, path, n, NULL, buf);
}

int main(void)
{
        kallsyms();
        klog(3, "SYSLOG_ACTION_READ_ALL");
        klog(10, "SYSLOG_ACTION_SIZE_BUFFER");
        klog(9, "SYSLOG_ACTION_SIZE_UNREAD");
        read_file("kmsg", "/dev/kmsg");
        read_file("kmsg", "/proc/kmsg");

        struct utsname u;
        uname(&u);
        char system_map[400];
        snprintf(system_map, sizeof(system_map), "/boot/System.map-%s", u.release);
        const char *files[] = {
                "/proc/cmdline",
                "/proc/modules",
                "/proc/iomem",
                "/proc/ioports",
                "/proc/timer_list",
                "/proc/vmallocinfo",
                "/proc/slabinfo",
                "/proc/sched_debug",
                "/proc/keys",
                "/proc/config.gz",
                "/proc/kcore",
                "/sys/kernel/notes",
                "/proc/self/stack",
                system_map,
                "/sys/kernel/debug/tracing/trace",
                "/proc/sys/kernel/random/boot_id",
        };
        for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++)
                read_file("kernel_info", files[i]);
        return 0;
}
