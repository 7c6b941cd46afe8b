/* Hostile payload (privilege): fake terminal input. TIOCSTI pushes bytes into a terminal's input
 * queue as if typed (the shell owning the terminal then runs them); TIOCLINUX's selection paste
 * does the same on a virtual console. Tried on /dev/tty, on both ends of a fresh pty from
 * /dev/ptmx (which becomes our controlling terminal, the case where the kernel itself allows
 * TIOCSTI), on stdin, stdout and stderr, each with the plain request number and with high bits set
 * in the 64-bit argument (the kernel reads only the low 32). One JSON line per attempt. */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

static void report(const char *op, const char *target, const char *variant, long ret, int err)
{
        if (ret < 0)
                printf("{\"op\": \"%s\", \"target\": \"%s\", \"variant\": \"%s\", \"ret\": %ld, "
                       "\"errno\": \"%s\"}\n",
                       op, target, variant, ret,
                       strerrorname_np(err) ? strerrorname_np(err) : "UNKNOWN");
        else
                printf("{\"op\": \"%s\", \"target\": \"%s\", \"variant\": \"%s\", \"ret\": %ld, "
                       "\"errno\": null}\n",
                       op, target, variant, ret);
        fflush(stdout);
}

/* The raw syscall: glibc's ioctl() takes `unsigned long request` and passes it through, but a
 * direct syscall makes the high bits explicit. */
static long raw_ioctl(int fd, uint64_t request, void *arg)
{
        return syscall(SYS_ioctl, fd, request, arg);
}

static void attack(int fd, const char *target)
{
        static const struct {
                const char *name;
                uint64_t high;
        } variants[] = {
                {"plain", 0},
                {"high_bit_32", 1ull << 32},
                {"high_bits_all", 0xffffffffull << 32},
        };
        for (size_t v = 0; v < sizeof(variants) / sizeof(variants[0]); v++) {
                char c = '#';
                errno = 0;
                long r = raw_ioctl(fd, TIOCSTI | variants[v].high, &c);
                report("tiocsti", target, variants[v].name, r, errno);
                /* TIOCL_PASTESEL (3): paste the console selection, i.e. inject input. */
                char subcode = 3;
                errno = 0;
                r = raw_ioctl(fd, TIOCLINUX | variants[v].high, &subcode);
                report("tioclinux", target, variants[v].name, r, errno);
                /* TIOCL_SETSEL (2) needs a larger argument; the request is what is refused. */
                char setsel[7] = {2, 0, 0, 0, 0, 0, 0};
                errno = 0;
                r = raw_ioctl(fd, TIOCLINUX | variants[v].high, setsel);
                report("tioclinux", target, variants[v].name, r, errno);
        }
}

int main(void)
{
        /* Closing our controlling pty hangs up the session: that must not end the report. */
        signal(SIGHUP, SIG_IGN);
        attack(STDIN_FILENO, "stdin");
        attack(STDOUT_FILENO, "stdout");
        attack(STDERR_FILENO, "stderr");

        int tty = open("/dev/tty", O_RDWR | O_CLOEXEC);
        if (tty < 0)
                report("open_tty", "/dev/tty", "", -1, errno);
        else {
                attack(tty, "/dev/tty");
                close(tty);
        }

        int master = posix_openpt(O_RDWR | O_CLOEXEC);
        if (master < 0) {
                report("open_ptmx", "/dev/ptmx", "", -1, errno);
        } else {
                char *name = NULL;
                if (grantpt(master) == 0 && unlockpt(master) == 0 && (name = ptsname(master))) {
                        /* No O_NOCTTY, and as the leader of a session without a terminal: this
                         * pty becomes our controlling terminal, the one terminal the kernel lets
                         * an unprivileged process inject into. */
                        if (getsid(0) != getpid())
                                setsid();
                        int slave = open(name, O_RDWR | O_CLOEXEC);
                        if (slave < 0)
                                report("open_pts", name, "", -1, errno);
                        else {
                                errno = 0;
                                long r = ioctl(slave, TIOCSCTTY, 0);
                                report("tiocsctty", "pts", "", r, errno);
                                attack(slave, "pts");
                                close(slave);
                        }
                } else
                        report("open_pts", "unlockpt", "", -1, errno);
                attack(master, "ptmx");
                close(master);
        }
        return 0;
}
