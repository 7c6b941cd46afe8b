/* Clocks. All durations inside sandboxd are microseconds (uint64_t) on CLOCK_MONOTONIC. */
#pragma once

#include <pthread.h>
#include <stdint.h>
#include <time.h>

/* Microseconds on CLOCK_MONOTONIC. */
uint64_t sbx_now_us(void);

/* Milliseconds on CLOCK_MONOTONIC (sbx_now_us() / 1000), where an interface counts in
 * milliseconds: the API's quotas, Retry-After and drain deadline. */
uint64_t sbx_now_ms(void);

/* Milliseconds since the Unix epoch (CLOCK_REALTIME): for timestamps people read, never for
 * measuring time. */
uint64_t sbx_wall_clock_ms(void);

/* The CLOCK_MONOTONIC time ms milliseconds from now: a deadline for pthread_cond_timedwait on a
 * condition made with that clock. */
struct timespec sbx_monotonic_after(uint64_t ms);

/* Initialises cond to time its waits on CLOCK_MONOTONIC (sbx_monotonic_after's deadlines), which
 * a change of the wall clock does not move. Returns pthread_cond_init's result. */
int sbx_cond_init_monotonic(pthread_cond_t *cond);

/* Sleeps ms milliseconds (through signal interruptions). */
void sbx_sleep_ms(uint64_t ms);
