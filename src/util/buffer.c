#include "util/buffer.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void sbx_buffer_init(struct sbx_buffer *buf, size_t cap)
{
        *buf = (struct sbx_buffer){.cap = cap};
}

int sbx_buffer_append(struct sbx_buffer *buf, const void *data, size_t len)
{
        size_t room = buf->cap - buf->len;
        if (len > room) {
                buf->overflow = true;
                len = room;
        }
        if (len == 0)
                return 0;
        if (buf->len + len > buf->alloc) {
                size_t want = buf->alloc ? buf->alloc : 4096;
                while (want < buf->len + len)
                        want *= 2;
                if (want > buf->cap)
                        want = buf->cap;
                uint8_t *grown = realloc(buf->data, want + 1);
                if (grown == NULL) {
                        errno = ENOMEM;
                        return -1;
                }
                buf->data = grown;
                buf->alloc = want;
        }
        memcpy(buf->data + buf->len, data, len);
        buf->len += len;
        buf->data[buf->len] = '\0';
        return 0;
}

void sbx_buffer_free(struct sbx_buffer *buf)
{
        free(buf->data);
        *buf = (struct sbx_buffer){.cap = buf->cap};
}
