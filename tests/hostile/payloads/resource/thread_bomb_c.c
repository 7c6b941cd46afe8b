/* Thread bomb: create threads (small stacks, all blocked) until pthread_create fails or the
 * bound argv[1] is reached. Reports one line: the failure's errno (expected EAGAIN: a thread
 * counts against pids.max) or success. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void *idle(void *arg)
{
        for (;;)
                pause();
        return arg;
}

int main(int argc, char **argv)
{
        int cap = argc > 1 ? atoi(argv[1]) : 500;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setstacksize(&attr, 64 * 1024);
        int created = 0, err = 0;
        while (created < cap) {
                pthread_t t;
                err = pthread_create(&t, &attr, idle, NULL);
                if (err != 0)
                        break;
                created++;
        }
        if (err != 0)
                printf("{\"op\":\"thread\",\"ret\":-1,\"errno\":\"%s\",\"created\":%d}\n",
                       strerrorname_np(err), created);
        else
                printf("{\"op\":\"thread\",\"ret\":0,\"errno\":null,\"created\":%d}\n", created);
        fflush(stdout);
        _exit(0);
}
