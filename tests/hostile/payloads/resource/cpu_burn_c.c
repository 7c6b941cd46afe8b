/* Spin argv[1] threads for argv[2] milliseconds of wall time. Under a CPU quota the cgroup must be
 * throttled and its usage stay within quota x wall. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double deadline;

static double now(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void *spin(void *arg)
{
        volatile unsigned long x = 0;
        while (now() < deadline)
                for (int i = 0; i < 10000; i++)
                        x++;
        return arg;
}

int main(int argc, char **argv)
{
        int threads = argc > 1 ? atoi(argv[1]) : 8;
        double ms = argc > 2 ? atof(argv[2]) : 1500;
        deadline = now() + ms / 1000;
        pthread_t t[256];
        for (int i = 1; i < threads && i < 256; i++)
                pthread_create(&t[i], NULL, spin, NULL);
        spin(NULL);
        for (int i = 1; i < threads && i < 256; i++)
                pthread_join(t[i], NULL);
        printf("{\"op\":\"burn\",\"ret\":0,\"errno\":null,\"threads\":%d}\n", threads);
        return 0;
}
