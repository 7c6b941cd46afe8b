/* The engine protocol: the only language the API process and the engine share. A small, fixed,
 * versioned set of binary messages with bounded fields, so that the engine (root) never parses
 * JSON or HTTP and refuses anything it did not expect.
 *
 * One message = a 24-byte header followed by body_len bytes of body:
 *
 *   u32 magic 0x53425844 ("SBXD") | u16 version (1) | u16 type | u64 request_id |
 *   u32 body_len | u32 reserved (0)
 *
 * Scalars are in host byte order: both ends run on the same machine. Body fields, in order:
 *
 *   flag     u8, 0 or 1
 *   blob     u32 length, then length bytes, then one 0 byte (so a decoded blob is also a C
 *            string, like the output buffers of struct sbx_run)
 *   string   a blob with no 0 byte among its length bytes
 *   opt(X)   a flag, then X when the flag is 1 (tells NULL from empty)
 *   limits   every member of struct sbx_limits in order (SBX_LIMITS, model/limits.h), each as
 *            wide as the member: today wall_ms, cpu_ms, memory_bytes, pids, disk_bytes,
 *            output_bytes, open_files as u64, then cpu_millicores as u32
 *
 *   RUN          execution_id (32 lowercase hex bytes, no terminator), language string,
 *                backend opt(string), code opt(blob), entrypoint opt(string),
 *                u32 n_files then per file {path string, executable flag, data blob},
 *                u32 n_args then per arg a string, u32 n_env then per entry a string,
 *                stdin blob, limits, stream flag (the output goes out as SESSION_EVENTs too,
 *                under the RUN's request_id and with the execution id as session_id)
 *   RESULT       id string, status u32, exit_code i32, signal i32,
 *                run {exited flag, exit_code i32, signal i32, wall_timeout flag, output_limit
 *                flag, canceled flag, stdout {blob, overflow flag, cap u64}, stderr {likewise},
 *                disk_known flag, disk_used_bytes u64, disk_total_bytes u64, inodes_free u64,
 *                wall_us u64}, evidence (a u64 per SBX_EVIDENCE row, in order: 8), guest
 *                flag and, when set, a u64 per SBX_EVIDENCE row and thrash_kills u64, limits,
 *                timing (a u64 per SBX_TIMING row, in order: 5), backend opt(string), pooled
 *                flag, error string
 *   REFUSED      reason u32 (enum sbx_refusal), detail string
 *   CONFIG       text blob (at most SBX_MESSAGE_MAX_CONFIG_BYTES): the config file, as read
 *   STATS_REPLY  a u64 per SBX_MESSAGE_STATS row, in order (13)
 *   SESSION      session_id (32 lowercase hex bytes), op u32, fields string (a JSON object),
 *                data blob
 *   SESSION_REPLY, SESSION_ENDED, SESSION_EVENT
 *                session_id, error i32, fields string (a JSON object), data blob
 *   CANCEL, PING, PONG, STATS: empty body
 *
 * Requests carry a request_id chosen by the API; the reply (RESULT or REFUSED to RUN, PONG to
 * PING, STATS_REPLY to STATS) carries the same one. REFUSED means the RUN never reached a
 * sandbox: nothing ran, so the API answers with a problem (503) and keeps no audit record. A
 * RESULT means it did run, even when only as far as an internal_error. CANCEL names the RUN to
 * cancel by its request_id and has no reply: the RUN's RESULT says "canceled". CONFIG (request_id
 * 0, no reply) carries the config file the engine read again on SIGHUP, for the API process to
 * take its tiers and tenants from (the file may be readable by root alone). SESSION carries an
 * operation on a long-lived session (engine/session.h) and is answered by one SESSION_REPLY (or
 * REFUSED, for an OPEN the engine does not start); SESSION_ENDED (request_id 0, no reply) tells
 * the API that a session ended on its own (idle, lifetime, its agent gone, shutdown). A RUN of
 * a session with "stream" in its fields gets SESSION_EVENTs ({"event", "data"}: output,
 * results, its error) under its request_id before its SESSION_REPLY; CANCEL with that
 * request_id interrupts it (the reply then says canceled).
 *
 * The messages travel over a SOCK_SEQPACKET socket: protocol/transport.h. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/request.h"
#include "model/result.h"
#include "util/error.h"

#define SBX_PROTOCOL_MAGIC   0x53425844u /* "SBXD" read as a big-endian word */
#define SBX_PROTOCOL_VERSION 5

#define SBX_MESSAGE_HEADER_BYTES 24
/* The largest message either side accepts. A RUN at its bounds (4 MiB code, 4 MiB stdin, args and
 * env) is under 9 MiB; the rest is room for a RESULT's output. */
#define SBX_MESSAGE_MAX_BYTES (48u * 1024u * 1024u)

/* Bounds the decoder adds to the SBX_MAX_* of model/request.h and model/limits.h. */
#define SBX_MESSAGE_MAX_NAME_BYTES   64                      /* language and backend names */
#define SBX_MESSAGE_MAX_CONFIG_BYTES (1024u * 1024u)         /* a config file (CONFIG) */
#define SBX_MESSAGE_MAX_OUTPUT_BYTES (1024u * 1024u * 1024u) /* per stream: a result's cap */

enum sbx_message_type {
        SBX_MESSAGE_RUN = 1,            /* API -> engine: run a request */
        SBX_MESSAGE_RESULT = 2,         /* engine -> API: the RUN's outcome */
        SBX_MESSAGE_CANCEL = 3,         /* API -> engine: cancel the RUN with this request_id */
        SBX_MESSAGE_PING = 4,           /* API -> engine: are you there? */
        SBX_MESSAGE_PONG = 5,           /* engine -> API */
        SBX_MESSAGE_STATS = 6,          /* API -> engine: counters, please */
        SBX_MESSAGE_STATS_REPLY = 7,    /* engine -> API */
        SBX_MESSAGE_REFUSED = 8,        /* engine -> API: the RUN was not started; nothing ran */
        SBX_MESSAGE_CONFIG = 9,         /* engine -> API: the config file, read again (SIGHUP) */
        SBX_MESSAGE_SESSION = 10,       /* API -> engine: an operation on a session */
        SBX_MESSAGE_SESSION_REPLY = 11, /* engine -> API: its answer */
        SBX_MESSAGE_SESSION_ENDED = 12, /* engine -> API (request_id 0): a session ended */
        SBX_MESSAGE_SESSION_EVENT = 13, /* engine -> API: a streamed run's output so far */
};

/* Why the engine refused a RUN (REFUSED). */
enum sbx_refusal {
        SBX_REFUSAL_BUSY = 1,     /* max_sandboxes executions are running: retry later */
        SBX_REFUSAL_STOPPING = 2, /* the engine is shutting down */
        SBX_REFUSAL_INVALID = 3,  /* the RUN failed the engine's own checks (an API bug) */
        SBX_REFUSAL_FAILED = 4,   /* the engine could not start a worker (fork failed) */
};

struct sbx_message_header {
        uint32_t magic;
        uint16_t version;
        uint16_t type; /* enum sbx_message_type */
        uint64_t request_id;
        uint32_t body_len;
        uint32_t reserved; /* 0; a future version may use it */
};

/* A decoded RUN. request's pointers point into the message buffer and into the arrays below, so
 * the struct must stay where it was decoded (never copy it) and the buffer must outlive it.
 * request.test is always zeroed (test hooks are for `sandboxd run` only: no message can turn a
 * layer off) and request.cancel_fd is -1. */
struct sbx_message_run {
        char execution_id[SBX_EXECUTION_ID_CHARS + 1];
        struct sbx_request request;
        struct sbx_file files[SBX_MAX_FILES];
        const char *args[SBX_MAX_ARGS];
        const char *env[SBX_MAX_ENV];
};

/* A decoded REFUSED; detail points into the message buffer. */
struct sbx_message_refused {
        enum sbx_refusal reason;
        const char *detail;
};

/* A decoded CONFIG; text points into the message buffer (NUL-terminated after size bytes). */
struct sbx_message_config {
        const char *text;
        size_t size;
};

/* The operations on a session (engine/session.h), in SESSION. */
enum sbx_session_op {
        SBX_SESSION_OPEN = 1,    /* fields: language, limits, env, files, idle_timeout_s,
                                    max_lifetime_s; data: the files' bytes, in order */
        SBX_SESSION_RUN = 2,     /* fields: code, env, timeout_ms; data: stdin */
        SBX_SESSION_PUT = 3,     /* fields: path, mode; data: the file */
        SBX_SESSION_GET = 4,     /* fields: path, max_size */
        SBX_SESSION_LIST = 5,    /* fields: path */
        SBX_SESSION_DELETE = 6,  /* fields: path */
        SBX_SESSION_CLOSE = 7,   /* no fields */
        SBX_SESSION_EPISODE = 8, /* fields: operation (reset, step, close), args, timeout_ms:
                                    an RL episode's operation (engine/session.h) */
        SBX_SESSION_CANCEL = 9,  /* no fields: the engine interrupts the session's run whose
                                    request is this message's request id; no answer */
};

/* The bounds of a session message's fields (a JSON object, which the engine checks field by
 * field: a run's result with both output streams) and its data (a file); the whole message stays
 * within SBX_MESSAGE_MAX_BYTES. */
#define SBX_MESSAGE_MAX_SESSION_FIELDS (40u * 1024u * 1024u)
#define SBX_MESSAGE_MAX_SESSION_DATA   (40u * 1024u * 1024u)

/* SESSION, SESSION_REPLY and SESSION_ENDED: the session, then (SESSION) the operation, or (the
 * other two) an errno (0: done); a JSON text; bytes. A SESSION_REPLY's JSON is the operation's
 * answer (a run's result, a listing; for an error, {"detail"}), a SESSION_ENDED's is {reason,
 * usage}. */
struct sbx_message_session {
        char session_id[SBX_EXECUTION_ID_CHARS + 1];
        uint32_t op;   /* SESSION: enum sbx_session_op */
        int32_t error; /* SESSION_REPLY, SESSION_ENDED: 0 or an errno */
        const char *fields;
        size_t fields_len;
        const uint8_t *data;
        size_t data_len;
};

/* The engine's counters (STATS_REPLY): one row per counter, X(member); the struct and the
 * message's body (u64 each, in order) are made from the rows. */
// clang-format off
#define SBX_MESSAGE_STATS(X)                                                                       \
        X(sandboxes_alive)     /* workers that may still own a sandbox (one each at most) */       \
        X(workers_alive)       /* forked and not yet reaped */                                     \
        X(executions_started)  /* workers forked since start */                                    \
        X(executions_finished) /* workers reaped since start */                                    \
        X(executions_rejected) /* RUNs answered at once: busy, shutting down, malformed */         \
        /* Warm pools, all languages together. */                                                  \
        X(pool_idle)           /* entries ready and waiting */                                     \
        X(pool_starting)       /* entries being made */                                            \
        X(pool_in_use)         /* entries running an execution */                                  \
        X(pool_created)        /* entries that became ready, since start */                        \
        X(pool_destroyed)      /* entries that ended without running anything */                   \
        X(pool_hits)           /* RUNs served by a ready entry */                                  \
        X(pool_misses)         /* RUNs of a pooled language that found none ready */               \
        X(pool_refill_us)      /* the time created entries took to become ready, summed */         \
        /* The compile cache (engine/compile_cache.h); 0 when it is off. */                        \
        X(compile_cache_bytes)     /* its entries' content together */                             \
        X(compile_cache_entries)   /* entries */                                                   \
        X(compile_cache_evictions) /* entries evicted since the directory was made */
// clang-format on

struct sbx_message_stats {
#define SBX_MESSAGE_STATS_MEMBER(member) uint64_t member;
        SBX_MESSAGE_STATS(SBX_MESSAGE_STATS_MEMBER)
#undef SBX_MESSAGE_STATS_MEMBER
};

#define SBX_MESSAGE_STATS_ONE(member) +1
#define SBX_MESSAGE_STATS_COUNT       (0 SBX_MESSAGE_STATS(SBX_MESSAGE_STATS_ONE))

/* Any decoded message. Which body member is valid follows header.type: run for RUN, result for
 * RESULT, refused for REFUSED, config for CONFIG, stats for STATS_REPLY, none for the empty ones.
 */
struct sbx_message {
        struct sbx_message_header header;
        union {
                struct sbx_message_run run;
                struct sbx_result result;
                struct sbx_message_refused refused;
                struct sbx_message_config config;
                struct sbx_message_stats stats;
                struct sbx_message_session session; /* SESSION, SESSION_REPLY, SESSION_ENDED */
        } body;
        /* A RESULT's compile stage, where body.result.compile points when it has one: a copy
         * of the result must point its compile at a copy of this. */
        struct sbx_result compile;
};

/* The name of a refusal reason ("busy"), or "unknown". */
const char *sbx_refusal_name(enum sbx_refusal reason);

/* The name of a message type ("RUN"), or "unknown". */
const char *sbx_message_type_name(uint16_t type);

/* Encoders. Each builds one complete message (header included) in a new malloc'd buffer returned
 * through *out / *out_len (free() it). An encoder never emits a message its decoder would refuse:
 * every output is decoded once before it is returned. Failing: -1 with err->code EINVAL for input
 * the protocol cannot carry (over a bound, NUL in a string, bad path), EMSGSIZE when the message
 * would exceed SBX_MESSAGE_MAX_BYTES, ENOMEM. */

/* RUN: request (its test hooks and cancel_fd are not sent) under execution_id. */
int sbx_message_encode_run(uint64_t request_id, const char *execution_id,
                           const struct sbx_request *request, void **out, size_t *out_len,
                           struct sbx_error *err);

/* RESULT: result, including its stdout and stderr bytes and error text. */
int sbx_message_encode_result(uint64_t request_id, const struct sbx_result *result, void **out,
                              size_t *out_len, struct sbx_error *err);

/* REFUSED: reason, and detail (at most SBX_ERROR_MESSAGE_MAX - 1 bytes are sent). */
int sbx_message_encode_refused(uint64_t request_id, enum sbx_refusal reason, const char *detail,
                               void **out, size_t *out_len, struct sbx_error *err);

/* CONFIG: size bytes of config text (request_id 0). */
int sbx_message_encode_config(const char *text, size_t size, void **out, size_t *out_len,
                              struct sbx_error *err);

/* STATS_REPLY. */
int sbx_message_encode_stats_reply(uint64_t request_id, const struct sbx_message_stats *stats,
                                   void **out, size_t *out_len, struct sbx_error *err);

/* SESSION, SESSION_REPLY or SESSION_ENDED (type) from session: for SESSION its op, for the
 * others its error. fields must be a JSON text (it is not parsed here, only bounded). */
int sbx_message_encode_session(enum sbx_message_type type, uint64_t request_id,
                               const struct sbx_message_session *session, void **out,
                               size_t *out_len, struct sbx_error *err);

/* A message with an empty body: CANCEL, PING, PONG or STATS (EINVAL for any other type). */
int sbx_message_encode_empty(enum sbx_message_type type, uint64_t request_id, void **out,
                             size_t *out_len, struct sbx_error *err);

/* Checks the header of the message in buf[0..len): magic, version, a known type, reserved 0,
 * body_len exactly len - SBX_MESSAGE_HEADER_BYTES, len at most SBX_MESSAGE_MAX_BYTES. Fills
 * *header (also on most failures, as far as it could be read, so that a reply can still name
 * the request_id). -1 with err->code EBADMSG otherwise. Pure. */
int sbx_message_decode_header(const void *buf, size_t len, struct sbx_message_header *header,
                              struct sbx_error *err);

/* Decodes the complete message in buf[0..len) into *message without copying: the pointers in
 * message point into buf (and, for RUN, into message itself), so buf must outlive message and
 * message must not be moved. Never call sbx_result_free() on a decoded result: its buffers belong
 * to buf. Checks everything: the header as above, every length against the end of the body and
 * against its bound, counts against SBX_MAX_*, strings free of NUL, flags 0 or 1, enums in range,
 * a RUN's request as a whole with sbx_request_check (paths, env entries, code xor files with an
 * entrypoint among the files, limits in range), and no byte left over. Returns -1 with err->code
 * EBADMSG and a message naming the field for any malformed input; never reads outside buf. Pure. */
int sbx_message_decode(const void *buf, size_t len, struct sbx_message *message,
                       struct sbx_error *err);
