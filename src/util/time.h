/* Clocks. All durations inside sandboxd are microseconds (uint64_t) on CLOCK_MONOTONIC. */
#pragma once

#include <stdint.h>

/* Microseconds on CLOCK_MONOTONIC. */
uint64_t sbx_now_us(void);

/* Milliseconds on CLOCK_MONOTONIC (sbx_now_us() / 1000), where an interface counts in
 * milliseconds: the API's quotas, Retry-After and drain deadline. */
uint64_t sbx_now_ms(void);

/* Milliseconds since the Unix epoch (CLOCK_REALTIME): for timestamps people read, never for
 * measuring time. */
uint64_t sbx_wall_clock_ms(void);

/* Sleeps ms milliseconds (through signal interruptions). */
void sbx_sleep_ms(uint64_t ms);
