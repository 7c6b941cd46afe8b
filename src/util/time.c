#include "util/time.h"

#include <time.h>

uint64_t sbx_now_us(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

uint64_t sbx_now_ms(void)
{
        return sbx_now_us() / 1000;
}

uint64_t sbx_wall_clock_ms(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

void sbx_sleep_ms(uint64_t ms)
{
        struct timespec left = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
        while (nanosleep(&left, &left) != 0)
                ;
}

struct timespec sbx_monotonic_after(uint64_t ms)
{
        struct timespec at;
        clock_gettime(CLOCK_MONOTONIC, &at);
        at.tv_sec += (time_t)(ms / 1000);
        at.tv_nsec += (long)(ms % 1000) * 1000000L;
        if (at.tv_nsec >= 1000000000L) {
                at.tv_sec++;
                at.tv_nsec -= 1000000000L;
        }
        return at;
}

int sbx_cond_init_monotonic(pthread_cond_t *cond)
{
        pthread_condattr_t attributes;
        pthread_condattr_init(&attributes);
        pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC);
        int rc = pthread_cond_init(cond, &attributes);
        pthread_condattr_destroy(&attributes);
        return rc;
}
