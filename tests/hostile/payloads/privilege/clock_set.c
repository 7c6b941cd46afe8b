/* Hostile payload (privilege): set the host's clock. The wall clock is shared with the host (no
 * namespace covers CLOCK_REALTIME), so clock_settime, settimeofday, adjtimex and clock_adjtime
 * must be refused; then the same again after unsharing a user + time namespace (the route to
 * CAP_SYS_TIME over something). Every value written is the clock's current value, or a step of
 * zero, so that even an accepted call would not move the host clock: the harness's clock probe
 * is the evidence. One JSON line per attempt on stdout. */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/timex.h>
#include <time.h>
#include <unistd.h>

#ifndef CLONE_NEWTIME
#define CLONE_NEWTIME 0x00000080
#endif

static void report(const char *op, long ret, int err)
{
        if (ret < 0)
                printf("{\"op\": \"%s\", \"ret\": %ld, \"errno\": \"%s\"}\n", op, ret,
                       strerrorname_np(err) ? strerrorname_np(err) : "UNKNOWN");
        else
                printf("{\"op\": \"%s\", \"ret\": %ld, \"errno\": null}\n", op, ret);
        fflush(stdout);
}

static void attempt_all(const char *prefix)
{
        char op[64];
#define OP(name) (snprintf(op, sizeof(op), "%s%s", prefix, name), op)
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        errno = 0;
        long r = clock_settime(CLOCK_REALTIME, &now);
        report(OP("clock_settime"), r, errno);

        struct timeval tv;
        gettimeofday(&tv, NULL);
        errno = 0;
        r = settimeofday(&tv, NULL);
        report(OP("settimeofday"), r, errno);

        /* A step of zero: ADJ_SETOFFSET adds `time` to the clock. */
        struct timex step = {.modes = ADJ_SETOFFSET | ADJ_NANO};
        errno = 0;
        r = syscall(SYS_clock_adjtime, CLOCK_REALTIME, &step);
        report(OP("clock_adjtime"), r, errno);

        /* A zero phase offset for the kernel's PLL: the smallest "set" adjtimex knows. */
        struct timex offset = {.modes = ADJ_OFFSET_SINGLESHOT, .offset = 0};
        errno = 0;
        r = adjtimex(&offset);
        report(OP("adjtimex"), r, errno);
#undef OP
}

int main(void)
{
        attempt_all("");
        errno = 0;
        long r = unshare(CLONE_NEWUSER | CLONE_NEWTIME);
        report("unshare", r, errno);
        if (r == 0)
                attempt_all("nested_");
        return 0;
}
