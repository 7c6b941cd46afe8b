/* Block forever in FUTEX_WAIT, in the main thread and in a second thread. */
#define _GNU_SOURCE
#include <linux/futex.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>

static int word;

static void *wait_forever(void *arg)
{
        for (;;)
                syscall(SYS_futex, &word, FUTEX_WAIT_PRIVATE, 0, NULL, NULL, 0);
        return arg;
}

int main(void)
{
        pthread_t t;
        pthread_create(&t, NULL, wait_forever, NULL);
        printf("{\"op\":\"futex_wait\",\"ret\":0,\"errno\":null}\n");
        fflush(stdout);
        wait_forever(NULL);
        return 0;
}
