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

/* The bytes buffered and not yet consumed. */
static size_t unread(const struct sbx_session_reader *reader)
{
        return reader->len - reader->start;
}

int sbx_session_reader_fill(struct sbx_session_reader *reader, int fd, struct sbx_error *err)
{
        /* Consumed bytes go only when they are half the buffer: each byte is moved at most once
         * or twice, however small the frames (a flood of tiny frames costs the engine linear
         * time, not quadratic). */
        if (reader->start > 0 && reader->start >= reader->len / 2) {
                memmove(reader->data, reader->data + reader->start, unread(reader));
                reader->len -= reader->start;
                reader->start = 0;
        }
        /* Room for what the frame at the front still lacks (its length announced), at least one
         * read's worth: the buffer never holds much beyond one whole frame. */
        size_t want = SBX_SESSION_READ_BYTES;
        if (unread(reader) >= 4) {
                size_t frame = 4 + (size_t)get_u32(reader->data + reader->start);
                if (frame <= SBX_SESSION_MAX_FRAME_BYTES + 4 && frame > unread(reader) &&
                    frame - unread(reader) > want)
                        want = frame - unread(reader);
        }
        if (reader->alloc - reader->len < want) {
                size_t alloc = reader->len + want;
                uint8_t *data = realloc(reader->data, alloc);
                if (data == NULL)
                        return sbx_error_set(err, ENOMEM, "session: frame buffer");
                reader->data = data;
                reader->alloc = alloc;
        }
        /* One read: the caller's loop handles the frames in between, and gets back to its
         * deadlines, however fast the agent writes. */
        for (;;) {
                ssize_t n = read(fd, reader->data + reader->len, reader->alloc - reader->len);
                if (n > 0) {
                        reader->len += (size_t)n;
                        return 1;
                }
                if (n == 0)
                        return 0;
                if (errno == EINTR)
                        continue;
                if (errno == EAGAIN || errno == EWOULDBLOCK)
                        return 1;
                return sbx_error_set(err, errno, "session: read the agent channel");
        }
}

/* Whether the header text has more JSON objects and arrays than any frame of the agent's has
 * (a MIME bundle has a few): counted before parsing, since a parsed structure costs far more
 * memory than its text. */
static bool too_structured(const uint8_t *text, size_t len)
{
        size_t opened = 0;
        for (size_t i = 0; i < len; i++)
                if (text[i] == '{' || text[i] == '[')
                        if (++opened > SBX_SESSION_MAX_STRUCTURES)
                                return true;
        return false;
}

int sbx_session_reader_next(struct sbx_session_reader *reader, json_t **header,
                            const uint8_t **payload, size_t *payload_size, struct sbx_error *err)
{
        if (unread(reader) < 8)
                return 0;
        const uint8_t *front = reader->data + reader->start;
        uint32_t length = get_u32(front);
        uint32_t header_len = get_u32(front + 4);
        if (length < 4 || length > SBX_SESSION_MAX_FRAME_BYTES ||
            header_len > SBX_SESSION_MAX_HEADER || header_len > length - 4)
                return sbx_error_set(err, EPROTO, "session: a frame breaks the bounds");
        if (unread(reader) < 4 + (size_t)length)
                return 0;
        if (too_structured(front + 8, header_len))
                return sbx_error_set(err, EPROTO, "session: a frame header of over %d objects",
                                     SBX_SESSION_MAX_STRUCTURES);
        json_error_t json_error;
        /* NUL is allowed in strings: an exception's text may hold one. */
        json_t *decoded = json_loadb((const char *)front + 8, header_len,
                                     JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &json_error);
        if (decoded == NULL || !json_is_object(decoded)) {
                json_decref(decoded);
                return sbx_error_set(err, EPROTO, "session: a frame header is not a JSON object");
        }
        *header = decoded;
        *payload = front + 8 + header_len;
        *payload_size = length - 4 - header_len;
        return 1;
}

void sbx_session_reader_consume(struct sbx_session_reader *reader)
{
        if (unread(reader) < 4)
                return;
        size_t used = 4 + (size_t)get_u32(reader->data + reader->start);
        if (used > unread(reader))
                return;
        reader->start += used;
        if (reader->start == reader->len)
                reader->start = reader->len = 0;
}

void sbx_session_reader_free(struct sbx_session_reader *reader)
{
        free(reader->data);
        *reader = (struct sbx_session_reader){0};
}
