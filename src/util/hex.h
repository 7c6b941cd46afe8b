/* Hexadecimal text of bytes, both ways: execution ids, token hashes (config, audit). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Writes n bytes as 2n lowercase hex digits and a NUL into out (2n + 1 bytes). */
void sbx_hex_encode(const uint8_t *bytes, size_t n, char *out);

/* Parses exactly 2n hex digits (either case, then the string's end) into bytes. Returns false,
 * bytes untouched, for any other input (NULL included). */
bool sbx_hex_decode(const char *hex, uint8_t *bytes, size_t n);
