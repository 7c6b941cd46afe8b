/* Clocks. All durations inside sandboxd are microseconds (uint64_t) on CLOCK_MONOTONIC. */
#pragma once

#include <stdint.h>

/* Microseconds on CLOCK_MONOTONIC. */
uint64_t sbx_now_us(void);
