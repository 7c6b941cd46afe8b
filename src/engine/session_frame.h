/* The frames between the engine and a session agent (guest/session_agent.py documents the ops):
 *
 *   u32 little-endian length of the rest, u32 little-endian length of the header, the header (a
 *   JSON object), the payload (raw bytes).
 *
 * Everything that arrives from a sandbox is untrusted: the reader bounds the frame and the header,
 * and decodes only a JSON object; what the ops mean is checked by engine/session.c. */
#pragma once

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "util/error.h"

/* The largest frame either side sends: a file's contents (SBX_SESSION_MAX_FILE_BYTES) and its
 * header. */
#define SBX_SESSION_MAX_FILE_BYTES  (64u * 1024u * 1024u)
#define SBX_SESSION_MAX_HEADER      (8u * 1024u * 1024u)
#define SBX_SESSION_MAX_FRAME_BYTES (SBX_SESSION_MAX_FILE_BYTES + SBX_SESSION_MAX_HEADER)

/* Encodes header (borrowed) and payload into one frame in *out (malloc'ed; free it). */
int sbx_session_frame_encode(const json_t *header, const void *payload, size_t payload_size,
                             void **out, size_t *out_len, struct sbx_error *err);

/* The most JSON objects and arrays one header may open (a MIME bundle has a few; a traceback
 * one array; an RL observation as nested lists, a 64 x 64 x 3 image say, some thousands: the
 * agent answers an error instead of a header past it), and how much one read takes. */
#define SBX_SESSION_MAX_STRUCTURES 65536
#define SBX_SESSION_READ_BYTES     65536

/* Accumulates bytes from a non-blocking fd and yields whole frames. */
struct sbx_session_reader {
        uint8_t *data;
        size_t start; /* where the unconsumed bytes begin */
        size_t len;   /* where they end */
        size_t alloc;
};

/* Reads once from fd: at most what the frame at the front still lacks, or
 * SBX_SESSION_READ_BYTES. Returns 1 when bytes came (or none were ready), 0 at end of file, -1
 * with err. */
int sbx_session_reader_fill(struct sbx_session_reader *reader, int fd, struct sbx_error *err);

/* The whole frame at the front, if one is buffered: 1 with *header (a new reference: json_decref
 * it) and the payload (valid until consume or fill), 0 when more bytes are needed, -1 with err
 * (EPROTO) for a frame that breaks the bounds or whose header is not a JSON object. It stays at
 * the front until consume. */
int sbx_session_reader_next(struct sbx_session_reader *reader, json_t **header,
                            const uint8_t **payload, size_t *payload_size, struct sbx_error *err);

/* Drops the frame at the front (the one next returned). */
void sbx_session_reader_consume(struct sbx_session_reader *reader);

void sbx_session_reader_free(struct sbx_session_reader *reader);
