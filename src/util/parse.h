/* Pure parsers for the units users type: sizes ("256M", "1G", "4096") and durations ("10s",
 * "500ms", "2m"). No system calls; unit-tested in tests/unit/test_parse.c. */
#pragma once

#include <stdint.h>

#include "util/error.h"

/* Parses a byte size: a decimal number with an optional suffix K, M, G (powers of 1024, case
 * insensitive, optional trailing "B" or "iB"). Rejects empty input, signs, overflow and junk. */
int sbx_parse_size(const char *text, uint64_t *bytes, struct sbx_error *err);

/* Parses a duration into milliseconds: a decimal number (fractions allowed, "1.5s") with a
 * suffix ms, s, m or h; a bare number means seconds. Rejects negative, overflow and junk. */
int sbx_parse_duration_ms(const char *text, uint64_t *ms, struct sbx_error *err);

/* Parses a non-negative decimal integer no larger than max. */
int sbx_parse_u64(const char *text, uint64_t max, uint64_t *value, struct sbx_error *err);
