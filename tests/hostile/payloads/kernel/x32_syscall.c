/* Hostile payload (kernel): x32 system call numbers (bit 30 set, __X32_SYSCALL_BIT). x32 calls
 * share the x86_64 audit architecture, so a filter that looks only at the architecture would let
 * them past every per-number rule. The filter must kill the process with SIGSYS.
 *
 * Calls x32 getpid (harmless), then x32 unshare(CLONE_NEWUSER | 1): the second is denied for
 * x86_64 and has invalid flags, so it fails even where x32 is enabled and unfiltered.
 * Reports {"op": "x32_getpid", "ret": R, "errno": "OK"|NAME} for each call that returned. */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define X32_SYSCALL_BIT 0x40000000L

static void attempt(const char *op, long nr, long a0)
{
        errno = 0;
        long ret = syscall(X32_SYSCALL_BIT | nr, a0, 0L, 0L);
        const char *name = ret < 0 ? strerrorname_np(errno) : "OK";
        printf("{\"op\": \"%s\", \"ret\": %ld, \"errno\": \"%s\"}\n", op, ret,
               name != NULL ? name : "UNKNOWN");
        fflush(stdout);
}

int main(void)
{
        printf("{\"op\": \"start\", \"ret\": %d, \"errno\": \"OK\"}\n", (int)getpid());
        fflush(stdout);
        attempt("x32_getpid", SYS_getpid, 0);
        attempt("x32_unshare", SYS_unshare, CLONE_NEWUSER | 1);
        printf("{\"op\": \"survived\", \"ret\": 0, \"errno\": \"OK\"}\n");
        return 0;
}
