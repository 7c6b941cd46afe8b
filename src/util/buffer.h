/* A growable byte buffer with a hard cap: appending past the cap keeps exactly `cap` bytes and
 * reports the overflow, so a flood can never grow the supervisor's memory beyond the cap. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct sbx_buffer {
        uint8_t *data; /* NUL-terminated for convenience; may hold NULs itself */
        size_t len;    /* bytes kept, <= cap */
        size_t cap;    /* the most bytes this buffer will ever keep */
        size_t alloc;  /* bytes allocated for data (excluding the terminator) */
        bool overflow; /* more than cap bytes were offered */
};

/* Prepares an empty buffer that will keep at most cap bytes. */
void sbx_buffer_init(struct sbx_buffer *buf, size_t cap);

/* Appends up to the cap; sets overflow when bytes had to be dropped. Returns -1 only when memory
 * runs out (errno ENOMEM). */
int sbx_buffer_append(struct sbx_buffer *buf, const void *data, size_t len);

/* Frees the data and resets to empty. */
void sbx_buffer_free(struct sbx_buffer *buf);
