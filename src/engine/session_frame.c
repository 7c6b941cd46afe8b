/* The session agent's frames (session_frame.h). */
#include "engine/session_frame.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void put_u32(uint8_t *at, uint32_t value)
{
        for (int i = 0; i < 4; i++)
                at[i] = (uint8_t)(value >> (8 * i));
}

static uint32_t get_u32(const uint8_t *at)
{
        return (uint32_t)at[0] | (uint32_t)at[1] << 8 | (uint32_t)at[2] << 16 |
               (uint32_t)at[3] << 24;
}

int sbx_session_frame_encode(const json_t *header, const void *payload, size_t payload_size,
                             void **out, size_t *out_len, struct sbx_error *err)
{
        char *text = json_dumps(header, JSON_COMPACT);
        if (text == NULL)
                return sbx_error_set(err, ENOMEM, "session: encode a frame header");
        size_t header_len = strlen(text);
        if (header_len > SBX_SESSION_MAX_HEADER ||
            payload_size > SBX_SESSION_MAX_FRAME_BYTES - header_len) {
                free(text);
                return sbx_error_set(err, EMSGSIZE, "session: frame too large");
        }
        size_t len = 8 + header_len + payload_size;
        uint8_t *frame = malloc(len);
        if (frame == NULL) {
                free(text);
                return sbx_error_set(err, ENOMEM, "session: allocate a frame");
        }
        put_u32(frame, (uint32_t)(len - 4));
        put_u32(frame + 4, (uint32_t)header_len);
        memcpy(frame + 8, text, header_len);
        if (payload_size > 0)
                memcpy(frame + 8 + header_len, payload, payload_size);
        free(text);
        *out = frame;
        *out_len = len;
        return 0;
}

int sbx_session_reader_fill(struct sbx_session_reader *reader, int fd, struct sbx_error *err)
{
        bool got = false;
        for (;;) {
                if (reader->alloc - reader->len < 65536) {
                        /* Never more than one whole frame and a read's worth beyond it. */
                        if (reader->alloc >= SBX_SESSION_MAX_FRAME_BYTES + 8 + 131072)
                                return got ? 1
                                           : sbx_error_set(err, EPROTO,
                                                           "session: the agent's frame is too "
                                                           "large");
                        size_t alloc = reader->alloc == 0 ? 131072 : reader->alloc * 2;
                        uint8_t *data = realloc(reader->data, alloc);
                        if (data == NULL)
                                return sbx_error_set(err, ENOMEM, "session: frame buffer");
                        reader->data = data;
                        reader->alloc = alloc;
                }
                ssize_t n = read(fd, reader->data + reader->len, reader->alloc - reader->len);
                if (n > 0) {
                        reader->len += (size_t)n;
                        got = true;
                        continue;
                }
                if (n == 0)
                        return got ? 1 : 0;
                if (errno == EINTR)
                        continue;
                if (errno == EAGAIN || errno == EWOULDBLOCK)
                        return 1;
                return sbx_error_set(err, errno, "session: read the agent channel");
        }
}

int sbx_session_reader_next(struct sbx_session_reader *reader, json_t **header,
                            const uint8_t **payload, size_t *payload_size, struct sbx_error *err)
{
        if (reader->len < 8)
                return 0;
        uint32_t length = get_u32(reader->data);
        uint32_t header_len = get_u32(reader->data + 4);
        if (length < 4 || length > SBX_SESSION_MAX_FRAME_BYTES ||
            header_len > SBX_SESSION_MAX_HEADER || header_len > length - 4)
                return sbx_error_set(err, EPROTO, "session: a frame breaks the bounds");
        if (reader->len < 4 + (size_t)length)
                return 0;
        json_error_t json_error;
        json_t *decoded = json_loadb((const char *)reader->data + 8, header_len,
                                     JSON_REJECT_DUPLICATES, &json_error);
        if (decoded == NULL || !json_is_object(decoded)) {
                json_decref(decoded);
                return sbx_error_set(err, EPROTO, "session: a frame header is not a JSON object");
        }
        *header = decoded;
        *payload = reader->data + 8 + header_len;
        *payload_size = length - 4 - header_len;
        return 1;
}

void sbx_session_reader_consume(struct sbx_session_reader *reader)
{
        if (reader->len < 4)
                return;
        size_t used = 4 + (size_t)get_u32(reader->data);
        if (used > reader->len)
                return;
        memmove(reader->data, reader->data + used, reader->len - used);
        reader->len -= used;
}

void sbx_session_reader_free(struct sbx_session_reader *reader)
{
        free(reader->data);
        *reader = (struct sbx_session_reader){0};
}
