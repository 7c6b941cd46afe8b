/* libFuzzer harness for the session agent's frames (engine/session_frame.h): whatever bytes a
 * sandbox writes on its agent channel. The input goes through a pipe into the reader, as the
 * engine reads it; every frame the reader yields is checked against the bounds, and a refusal
 * must say EPROTO. Frames the encoder makes must come back out whole. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/session_frame.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        /* Into a pipe (a few pipe buffers at most: the reader fills from a non-blocking fd). */
        if (size > 60000)
                return 0;
        int fds[2];
        if (pipe2(fds, O_NONBLOCK) < 0)
                abort();
        if (size > 0 && write(fds[1], data, size) != (ssize_t)size)
                abort();
        close(fds[1]);
        struct sbx_session_reader reader = {0};
        struct sbx_error err = {0};
        int filled = sbx_session_reader_fill(&reader, fds[0], &err);
        close(fds[0]);
        if (filled < 0)
                abort(); /* a pipe of a few KiB never fails to read */
        for (;;) {
                json_t *header = NULL;
                const uint8_t *payload = NULL;
                size_t payload_size = 0;
                int rc = sbx_session_reader_next(&reader, &header, &payload, &payload_size, &err);
                if (rc == 0)
                        break;
                if (rc < 0) {
                        if (err.code != EPROTO) {
                                fprintf(stderr, "refused with %d, not EPROTO\n", err.code);
                                abort();
                        }
                        break;
                }
                if (!json_is_object(header) || payload + payload_size > reader.data + reader.len)
                        abort();
                /* The encoder gives back the same frame. */
                void *again = NULL;
                size_t again_len = 0;
                if (sbx_session_frame_encode(header, payload, payload_size, &again, &again_len,
                                             &err) == 0) {
                        struct sbx_session_reader copy = {
                                .data = again, .len = again_len, .alloc = again_len};
                        json_t *back = NULL;
                        const uint8_t *back_payload;
                        size_t back_size;
                        if (sbx_session_reader_next(&copy, &back, &back_payload, &back_size,
                                                    &err) != 1 ||
                            !json_equal(back, header) || back_size != payload_size ||
                            (payload_size > 0 && memcmp(back_payload, payload, payload_size) != 0))
                                abort();
                        json_decref(back);
                        free(again);
                }
                json_decref(header);
                sbx_session_reader_consume(&reader);
        }
        sbx_session_reader_free(&reader);
        return 0;
}
