/* Hostile payload (kernel): a 32-bit system call through `int $0x80` (the i386 ABI), which on
 * x86_64 reaches a second system call table that no seccomp rule names. The filter's
 * "wrong architecture" action must kill the whole process with SIGSYS before the call runs.
 *
 * The call is i386 getpid (20), harmless when it runs: an unfiltered kernel returns the pid (or,
 * without IA32 emulation, the process gets SIGSEGV). argv[1] "thread" makes a second thread do
 * it while the main thread waits: KILL_PROCESS must take the main thread down too.
 * Reports: {"op": "int80_getpid", "ret": R, "errno": "OK"} when the call returned (not contained),
 * and a final {"op": "survived", ...} line when the process outlived it. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static long int80_getpid(void)
{
        long ret = 20; /* __NR_getpid in the i386 table */
        __asm__ volatile("int $0x80" : "+a"(ret) : : "memory");
        return ret;
}

static void *caller(void *arg)
{
        (void)arg;
        long ret = int80_getpid();
        printf("{\"op\": \"int80_getpid\", \"ret\": %ld, \"errno\": \"%s\"}\n", ret,
               ret < 0 ? "ERROR" : "OK");
        fflush(stdout);
        return NULL;
}

int main(int argc, char **argv)
{
        printf("{\"op\": \"start\", \"ret\": %d, \"errno\": \"OK\"}\n", (int)getpid());
        fflush(stdout);
        if (argc > 1 && strcmp(argv[1], "thread") == 0) {
                pthread_t t;
                if (pthread_create(&t, NULL, caller, NULL) != 0)
                        return 2;
                pthread_join(t, NULL);
                sleep(1); /* a killed-thread-only outcome would leave main running here */
        } else {
                caller(NULL);
        }
        printf("{\"op\": \"survived\", \"ret\": 0, \"errno\": \"OK\"}\n");
        return 0;
}
