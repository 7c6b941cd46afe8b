/* The engine protocol's codec: pure, no system calls. The layout of every message is documented
 * in protocol.h; the transport that carries the encoded messages is transport.c. */
#include "protocol/protocol.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/cleanup.h"

/* Highest signal number a result may name: SIGRTMAX on Linux. */
#define MAX_SIGNAL 64

static const char *const type_names[] = {
        [SBX_MESSAGE_RUN] = "RUN",
        [SBX_MESSAGE_RESULT] = "RESULT",
        [SBX_MESSAGE_CANCEL] = "CANCEL",
        [SBX_MESSAGE_PING] = "PING",
        [SBX_MESSAGE_PONG] = "PONG",
        [SBX_MESSAGE_STATS] = "STATS",
        [SBX_MESSAGE_STATS_REPLY] = "STATS_REPLY",
        [SBX_MESSAGE_REFUSED] = "REFUSED",
        [SBX_MESSAGE_CONFIG] = "CONFIG",
        [SBX_MESSAGE_SESSION] = "SESSION",
        [SBX_MESSAGE_SESSION_REPLY] = "SESSION_REPLY",
        [SBX_MESSAGE_SESSION_ENDED] = "SESSION_ENDED",
        [SBX_MESSAGE_SESSION_EVENT] = "SESSION_EVENT",
};

static const char *const refusal_names[] = {
        [SBX_REFUSAL_BUSY] = "busy",
        [SBX_REFUSAL_STOPPING] = "stopping",
        [SBX_REFUSAL_INVALID] = "invalid",
        [SBX_REFUSAL_FAILED] = "failed",
};

const char *sbx_refusal_name(enum sbx_refusal reason)
{
        if ((size_t)reason >= SBX_ARRAY_SIZE(refusal_names) || refusal_names[reason] == NULL)
                return "unknown";
        return refusal_names[reason];
}

const char *sbx_message_type_name(uint16_t type)
{
        if (type >= SBX_ARRAY_SIZE(type_names) || type_names[type] == NULL)
                return "unknown";
        return type_names[type];
}

static bool type_known(uint16_t type)
{
        return type < SBX_ARRAY_SIZE(type_names) && type_names[type] != NULL;
}

/* The records the messages carry are made from their rows (model/limits.h, model/result.h,
 * SBX_MESSAGE_STATS), so a row added changes the wire: bump SBX_PROTOCOL_VERSION with it, and
 * these counts (those of version 4). */
_Static_assert(SBX_LIMIT_COUNT == 8 && sizeof(struct sbx_evidence) == 8 * sizeof(uint64_t) &&
                       sizeof(struct sbx_timing) == 5 * sizeof(uint64_t) &&
                       SBX_MESSAGE_STATS_COUNT == 16,
               "a record's rows changed: bump SBX_PROTOCOL_VERSION and the counts here");

/* ---- Encoding ------------------------------------------------------------------------------ */

struct writer {
        uint8_t *data;
        size_t len;
        size_t alloc;
        int error; /* errno of the first failure; 0 while all is well */
        char what[128];
};

static void writer_fail(struct writer *w, int error, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));

static void writer_fail(struct writer *w, int error, const char *fmt, ...)
{
        if (w->error != 0)
                return;
        w->error = error;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(w->what, sizeof(w->what), fmt, ap);
        va_end(ap);
}

static void put(struct writer *w, const void *bytes, size_t n)
{
        if (w->error != 0 || n == 0)
                return;
        if (n > SBX_MESSAGE_MAX_BYTES - w->len) {
                writer_fail(w, EMSGSIZE, "message larger than %u bytes", SBX_MESSAGE_MAX_BYTES);
                return;
        }
        if (w->len + n > w->alloc) {
                size_t alloc = w->alloc == 0 ? 4096 : w->alloc;
                while (alloc < w->len + n)
                        alloc *= 2;
                if (alloc > SBX_MESSAGE_MAX_BYTES)
                        alloc = SBX_MESSAGE_MAX_BYTES;
                uint8_t *grown = realloc(w->data, alloc);
                if (grown == NULL) {
                        writer_fail(w, ENOMEM, "allocate %zu bytes", alloc);
                        return;
                }
                w->data = grown;
                w->alloc = alloc;
        }
        memcpy(w->data + w->len, bytes, n);
        w->len += n;
}

static void put_u8(struct writer *w, uint8_t v)
{
        put(w, &v, sizeof(v));
}

static void put_flag(struct writer *w, bool v)
{
        put_u8(w, v ? 1 : 0);
}

static void put_u32(struct writer *w, uint32_t v)
{
        put(w, &v, sizeof(v));
}

static void put_i32(struct writer *w, int32_t v)
{
        put(w, &v, sizeof(v));
}

static void put_u64(struct writer *w, uint64_t v)
{
        put(w, &v, sizeof(v));
}

static void put_blob(struct writer *w, const char *field, const void *bytes, size_t size)
{
        if (bytes == NULL && size > 0) {
                writer_fail(w, EINVAL, "%s: NULL data of %zu bytes", field, size);
                return;
        }
        if (size > SBX_MESSAGE_MAX_BYTES) {
                writer_fail(w, EMSGSIZE, "%s: %zu bytes do not fit in a message", field, size);
                return;
        }
        put_u32(w, (uint32_t)size);
        put(w, bytes, size);
        put_u8(w, 0);
}

static void put_string(struct writer *w, const char *field, const char *s)
{
        if (s == NULL) {
                writer_fail(w, EINVAL, "%s: missing", field);
                return;
        }
        put_blob(w, field, s, strlen(s));
}

static void put_opt_string(struct writer *w, const char *field, const char *s)
{
        put_flag(w, s != NULL);
        if (s != NULL)
                put_string(w, field, s);
}

/* Every limit in SBX_LIMITS order, each as wide as its member. */
static void put_limits(struct writer *w, const struct sbx_limits *limits)
{
        for (size_t i = 0; i < SBX_LIMIT_COUNT; i++) {
                const struct sbx_limit_field *field = &sbx_limit_fields[i];
                uint64_t value = sbx_limit_get(limits, field);
                if (field->size == sizeof(uint32_t))
                        put_u32(w, (uint32_t)value);
                else
                        put_u64(w, value);
        }
}

static void put_buffer(struct writer *w, const char *field, const struct sbx_buffer *buffer)
{
        put_blob(w, field, buffer->data, buffer->len);
        put_flag(w, buffer->overflow);
        put_u64(w, buffer->cap);
}

static void writer_begin(struct writer *w, enum sbx_message_type type, uint64_t request_id)
{
        *w = (struct writer){0};
        struct sbx_message_header header = {
                .magic = SBX_PROTOCOL_MAGIC,
                .version = SBX_PROTOCOL_VERSION,
                .type = (uint16_t)type,
                .request_id = request_id,
        };
        put_u32(w, header.magic);
        put(w, &header.version, sizeof(header.version));
        put(w, &header.type, sizeof(header.type));
        put_u64(w, header.request_id);
        put_u32(w, 0); /* body_len, patched by writer_finish */
        put_u32(w, header.reserved);
}

/* Patches body_len, then decodes the message once: the encoder must never emit what the decoder
 * refuses, and running the one decoder keeps the two from drifting apart. */
static int writer_finish(struct writer *w, void **out, size_t *out_len, struct sbx_error *err)
{
        _cleanup_free_ uint8_t *data = steal_pointer(&w->data);
        if (w->error != 0)
                return sbx_error_set(err, w->error, "encode: %s", w->what);
        uint32_t body_len = (uint32_t)(w->len - SBX_MESSAGE_HEADER_BYTES);
        memcpy(data + offsetof(struct sbx_message_header, body_len), &body_len, sizeof(body_len));

        _cleanup_free_ struct sbx_message *check = malloc(sizeof(*check));
        if (check == NULL)
                return sbx_error_set(err, ENOMEM, "encode: allocate");
        if (sbx_message_decode(data, w->len, check, err) < 0) {
                err->code = EINVAL;
                return sbx_error_prefix(err, "encode: the protocol cannot carry this");
        }
        *out = steal_pointer(&data);
        *out_len = w->len;
        return 0;
}

int sbx_message_encode_run(uint64_t request_id, const char *execution_id,
                           const struct sbx_request *request, void **out, size_t *out_len,
                           struct sbx_error *err)
{
        if (execution_id == NULL || !sbx_execution_id_valid(execution_id))
                return sbx_error_set(err, EINVAL, "encode: execution id is not %d lowercase hex",
                                     SBX_EXECUTION_ID_CHARS);
        /* Counts first: the loops below read that many elements of the caller's arrays. */
        if (request->n_files > SBX_MAX_FILES || request->n_args > SBX_MAX_ARGS ||
            request->n_env > SBX_MAX_ENV)
                return sbx_error_set(err, EINVAL, "encode: too many files, args or env entries");

        struct writer w;
        writer_begin(&w, SBX_MESSAGE_RUN, request_id);
        put(&w, execution_id, SBX_EXECUTION_ID_CHARS);
        put_string(&w, "language", request->language);
        put_opt_string(&w, "backend", request->backend);
        put_opt_string(&w, "tenant", request->tenant);
        put_flag(&w, request->code != NULL);
        if (request->code != NULL)
                put_blob(&w, "code", request->code, request->code_size);
        put_opt_string(&w, "entrypoint", request->entrypoint);
        put_u32(&w, (uint32_t)request->n_files);
        for (size_t i = 0; i < request->n_files; i++) {
                const struct sbx_file *file = &request->files[i];
                put_string(&w, "files[].path", file->path);
                put_flag(&w, file->executable);
                put_blob(&w, "files[].data", file->data, file->size);
        }
        put_u32(&w, (uint32_t)request->n_args);
        for (size_t i = 0; i < request->n_args; i++)
                put_string(&w, "args[]", request->args[i]);
        put_u32(&w, (uint32_t)request->n_env);
        for (size_t i = 0; i < request->n_env; i++)
                put_string(&w, "env[]", request->env[i]);
        put_blob(&w, "stdin", request->stdin_data, request->stdin_size);
        put_limits(&w, &request->limits);
        bool compile_limits = request->compile_limits.wall_ms != 0;
        put_flag(&w, compile_limits);
        if (compile_limits)
                put_limits(&w, &request->compile_limits);
        put_flag(&w, request->stream);
        return writer_finish(&w, out, out_len, err);
}

/* A result's fields; then, for a run's result (not a compile stage's: there is one level), its
 * compile stage's the same way. */
static void put_result(struct writer *w, const struct sbx_result *result, bool stage)
{
        put_blob(w, "id", result->id, strnlen(result->id, sizeof(result->id)));
        put_u32(w, (uint32_t)result->status);
        put_i32(w, result->exit_code);
        put_i32(w, result->signal);

        const struct sbx_run *run = &result->run;
        put_flag(w, run->exited);
        put_i32(w, run->exit_code);
        put_i32(w, run->signal);
        put_flag(w, run->wall_timeout);
        put_flag(w, run->output_limit);
        put_flag(w, run->canceled);
        put_buffer(w, "stdout", &run->out);
        put_buffer(w, "stderr", &run->err);
        put_flag(w, run->disk_known);
        put_u64(w, run->disk_used_bytes);
        put_u64(w, run->disk_total_bytes);
        put_u64(w, run->inodes_free);
        put_u64(w, run->wall_us);

#define PUT_EVIDENCE(member, json) put_u64(w, result->evidence.member);
        SBX_EVIDENCE(PUT_EVIDENCE)
#undef PUT_EVIDENCE
        put_flag(w, result->guest.known);
        if (result->guest.known) {
#define PUT_GUEST(member, json) put_u64(w, result->guest.counters.member);
                SBX_EVIDENCE(PUT_GUEST)
#undef PUT_GUEST
                put_u64(w, result->guest.thrash_kills);
        }
        put_limits(w, &result->limits);
#define PUT_TIMING(member) put_u64(w, result->timing.member);
        SBX_TIMING(PUT_TIMING)
#undef PUT_TIMING

        put_opt_string(w, "backend", result->backend);
        put_flag(w, result->pooled);
        put_blob(w, "error", result->error, strnlen(result->error, sizeof(result->error)));
        put_flag(w, result->cached);
        if (stage)
                return;
        put_flag(w, result->compile != NULL);
        if (result->compile != NULL)
                put_result(w, result->compile, true);
}

int sbx_message_encode_result(uint64_t request_id, const struct sbx_result *result, void **out,
                              size_t *out_len, struct sbx_error *err)
{
        struct writer w;
        writer_begin(&w, SBX_MESSAGE_RESULT, request_id);
        put_result(&w, result, false);
        return writer_finish(&w, out, out_len, err);
}

int sbx_message_encode_refused(uint64_t request_id, enum sbx_refusal reason, const char *detail,
                               void **out, size_t *out_len, struct sbx_error *err)
{
        struct writer w;
        writer_begin(&w, SBX_MESSAGE_REFUSED, request_id);
        put_u32(&w, (uint32_t)reason);
        put_blob(&w, "detail", detail, detail ? strnlen(detail, SBX_ERROR_MESSAGE_MAX - 1) : 0);
        return writer_finish(&w, out, out_len, err);
}

int sbx_message_encode_config(const char *text, size_t size, void **out, size_t *out_len,
                              struct sbx_error *err)
{
        struct writer w;
        writer_begin(&w, SBX_MESSAGE_CONFIG, 0);
        put_blob(&w, "text", text, size);
        return writer_finish(&w, out, out_len, err);
}

int sbx_message_encode_stats_reply(uint64_t request_id, const struct sbx_message_stats *stats,
                                   void **out, size_t *out_len, struct sbx_error *err)
{
        struct writer w;
        writer_begin(&w, SBX_MESSAGE_STATS_REPLY, request_id);
#define PUT_STAT(member) put_u64(&w, stats->member);
        SBX_MESSAGE_STATS(PUT_STAT)
#undef PUT_STAT
        return writer_finish(&w, out, out_len, err);
}

int sbx_message_encode_session(enum sbx_message_type type, uint64_t request_id,
                               const struct sbx_message_session *session, void **out,
                               size_t *out_len, struct sbx_error *err)
{
        if (type != SBX_MESSAGE_SESSION && type != SBX_MESSAGE_SESSION_REPLY &&
            type != SBX_MESSAGE_SESSION_ENDED && type != SBX_MESSAGE_SESSION_EVENT)
                return sbx_error_set(err, EINVAL, "encode: %s is not a session message",
                                     sbx_message_type_name((uint16_t)type));
        if (strlen(session->session_id) != SBX_EXECUTION_ID_CHARS)
                return sbx_error_set(err, EINVAL, "encode: session id of %zu characters",
                                     strlen(session->session_id));
        if (session->fields_len > SBX_MESSAGE_MAX_SESSION_FIELDS ||
            session->data_len > SBX_MESSAGE_MAX_SESSION_DATA)
                return sbx_error_set(err, EINVAL, "encode: %s over its bounds",
                                     sbx_message_type_name((uint16_t)type));
        struct writer w;
        writer_begin(&w, type, request_id);
        put(&w, session->session_id, SBX_EXECUTION_ID_CHARS);
        if (type == SBX_MESSAGE_SESSION)
                put_u32(&w, session->op);
        else
                put_i32(&w, session->error);
        put_blob(&w, "fields", session->fields, session->fields_len);
        put_blob(&w, "data", session->data, session->data_len);
        return writer_finish(&w, out, out_len, err);
}

int sbx_message_encode_empty(enum sbx_message_type type, uint64_t request_id, void **out,
                             size_t *out_len, struct sbx_error *err)
{
        if (type != SBX_MESSAGE_CANCEL && type != SBX_MESSAGE_PING && type != SBX_MESSAGE_PONG &&
            type != SBX_MESSAGE_STATS)
                return sbx_error_set(err, EINVAL, "encode: %s has a body",
                                     sbx_message_type_name((uint16_t)type));
        struct writer w;
        writer_begin(&w, type, request_id);
        return writer_finish(&w, out, out_len, err);
}

/* ---- Decoding ------------------------------------------------------------------------------ */

/* Every refusal goes through here: EBADMSG, and no strerror text (the message says it all). */
#define malformed(err, ...) sbx_error_plain((err), EBADMSG, __VA_ARGS__)

struct reader {
        const uint8_t *pos;
        const uint8_t *end;
        const char *type; /* "RUN", for the error messages */
        struct sbx_error *err;
};

static size_t remaining(const struct reader *r)
{
        return (size_t)(r->end - r->pos);
}

static int take(struct reader *r, const char *field, size_t n, const uint8_t **out)
{
        if (remaining(r) < n) {
                malformed(r->err, "%s: %s: truncated (%zu bytes needed, %zu left)", r->type, field,
                          n, remaining(r));
                return -1; /* spelled out: the compiler must see *out is set whenever 0 is */
        }
        *out = r->pos;
        r->pos += n;
        return 0;
}

static int get_u32(struct reader *r, const char *field, uint32_t *v)
{
        const uint8_t *p;
        if (take(r, field, sizeof(*v), &p) < 0)
                return -1;
        memcpy(v, p, sizeof(*v));
        return 0;
}

static int get_i32(struct reader *r, const char *field, int32_t *v)
{
        const uint8_t *p;
        if (take(r, field, sizeof(*v), &p) < 0)
                return -1;
        memcpy(v, p, sizeof(*v));
        return 0;
}

static int get_u64(struct reader *r, const char *field, uint64_t *v)
{
        const uint8_t *p;
        if (take(r, field, sizeof(*v), &p) < 0)
                return -1;
        memcpy(v, p, sizeof(*v));
        return 0;
}

static int get_flag(struct reader *r, const char *field, bool *v)
{
        const uint8_t *p;
        if (take(r, field, 1, &p) < 0)
                return -1;
        if (*p > 1)
                return malformed(r->err, "%s: %s: flag is %u, not 0 or 1", r->type, field, *p);
        *v = *p == 1;
        return 0;
}

static int get_int_in(struct reader *r, const char *field, int32_t min, int32_t max, int *v)
{
        int32_t raw;
        if (get_i32(r, field, &raw) < 0)
                return -1;
        if (raw < min || raw > max)
                return malformed(r->err, "%s: %s: %d is outside %d..%d", r->type, field, raw, min,
                                 max);
        *v = raw;
        return 0;
}

/* A blob of at most max bytes; *data points at its first byte, which is followed by a 0. */
static int get_blob(struct reader *r, const char *field, size_t max, const uint8_t **data,
                    size_t *size)
{
        uint32_t len;
        if (get_u32(r, field, &len) < 0)
                return -1;
        if (len > max)
                return malformed(r->err, "%s: %s: %u bytes, more than the %zu allowed", r->type,
                                 field, len, max);
        const uint8_t *p;
        if (take(r, field, (size_t)len + 1, &p) < 0)
                return -1;
        if (p[len] != 0)
                return malformed(r->err, "%s: %s: not terminated", r->type, field);
        *data = p;
        *size = len;
        return 0;
}

static int get_string(struct reader *r, const char *field, size_t max, const char **s)
{
        const uint8_t *data;
        size_t size;
        if (get_blob(r, field, max, &data, &size) < 0)
                return -1;
        if (memchr(data, 0, size) != NULL)
                return malformed(r->err, "%s: %s: contains a NUL byte", r->type, field);
        *s = (const char *)data;
        return 0;
}

static int get_count(struct reader *r, const char *field, size_t max, size_t *count)
{
        uint32_t n;
        if (get_u32(r, field, &n) < 0)
                return -1;
        if (n > max)
                return malformed(r->err, "%s: %s: %u, more than the %zu allowed", r->type, field, n,
                                 max);
        *count = n;
        return 0;
}

static int get_limits(struct reader *r, struct sbx_limits *limits)
{
        for (size_t i = 0; i < SBX_LIMIT_COUNT; i++) {
                const struct sbx_limit_field *field = &sbx_limit_fields[i];
                char name[48];
                snprintf(name, sizeof(name), "limits.%s", field->member);
                uint64_t value;
                if (field->size == sizeof(uint32_t)) {
                        uint32_t narrow;
                        if (get_u32(r, name, &narrow) < 0)
                                return -1;
                        value = narrow;
                } else if (get_u64(r, name, &value) < 0) {
                        return -1;
                }
                sbx_limit_set(limits, field, value);
        }
        /* The output cap bounds the worker's memory (two buffers of that size). */
        if (limits->output_bytes > SBX_MESSAGE_MAX_OUTPUT_BYTES)
                return malformed(r->err, "%s: limits.output_bytes: more than %u", r->type,
                                 SBX_MESSAGE_MAX_OUTPUT_BYTES);
        return 0;
}

static int decode_name(struct reader *r, const char *field, const char **name)
{
        if (get_string(r, field, SBX_MESSAGE_MAX_NAME_BYTES, name) < 0)
                return -1;
        if ((*name)[0] == '\0')
                return malformed(r->err, "%s: %s: empty", r->type, field);
        return 0;
}

/* A path is checked with the whole request (sbx_request_check); here only its length. */
static int decode_path(struct reader *r, const char *field, const char **path)
{
        return get_string(r, field, SBX_MAX_FILE_PATH, path);
}

static int decode_files(struct reader *r, struct sbx_message_run *run)
{
        struct sbx_request *request = &run->request;
        if (get_count(r, "n_files", SBX_MAX_FILES, &request->n_files) < 0)
                return -1;
        size_t total = 0;
        for (size_t i = 0; i < request->n_files; i++) {
                struct sbx_file *file = &run->files[i];
                char field[48];
                snprintf(field, sizeof(field), "files[%zu].path", i);
                if (decode_path(r, field, &file->path) < 0)
                        return -1;
                snprintf(field, sizeof(field), "files[%zu].executable", i);
                if (get_flag(r, field, &file->executable) < 0)
                        return -1;
                snprintf(field, sizeof(field), "files[%zu].data", i);
                const uint8_t *data;
                if (get_blob(r, field, SBX_MAX_CODE_BYTES - total, &data, &file->size) < 0)
                        return -1;
                file->data = data;
                total += file->size;
        }
        request->files = run->files;
        return 0;
}

static int decode_strings(struct reader *r, const char *name, size_t max_count, size_t max_bytes,
                          const char **strings, size_t *count)
{
        if (get_count(r, name, max_count, count) < 0)
                return -1;
        for (size_t i = 0; i < *count; i++) {
                char field[48];
                snprintf(field, sizeof(field), "%s[%zu]", name, i);
                if (get_string(r, field, max_bytes, &strings[i]) < 0)
                        return -1;
        }
        return 0;
}

static int decode_run(struct reader *r, struct sbx_message_run *run)
{
        struct sbx_request *request = &run->request;
        *request = (struct sbx_request){.cancel_fd = -1};

        const uint8_t *id;
        if (take(r, "execution_id", SBX_EXECUTION_ID_CHARS, &id) < 0)
                return -1;
        memcpy(run->execution_id, id, SBX_EXECUTION_ID_CHARS);
        run->execution_id[SBX_EXECUTION_ID_CHARS] = '\0';
        if (!sbx_execution_id_valid(run->execution_id))
                return malformed(r->err, "%s: execution_id: not %d lowercase hex digits", r->type,
                                 SBX_EXECUTION_ID_CHARS);

        if (decode_name(r, "language", &request->language) < 0)
                return -1;
        bool present;
        if (get_flag(r, "backend", &present) < 0)
                return -1;
        if (present && decode_name(r, "backend", &request->backend) < 0)
                return -1;
        if (get_flag(r, "tenant", &present) < 0)
                return -1;
        if (present && decode_name(r, "tenant", &request->tenant) < 0)
                return -1;

        if (get_flag(r, "code", &present) < 0)
                return -1;
        if (present) {
                const uint8_t *code;
                if (get_blob(r, "code", SBX_MAX_CODE_BYTES, &code, &request->code_size) < 0)
                        return -1;
                request->code = (const char *)code;
        }
        if (get_flag(r, "entrypoint", &present) < 0)
                return -1;
        if (present && decode_path(r, "entrypoint", &request->entrypoint) < 0)
                return -1;

        if (decode_files(r, run) < 0)
                return -1;
        if (decode_strings(r, "args", SBX_MAX_ARGS, SBX_MAX_ARG_BYTES, run->args,
                           &request->n_args) < 0)
                return -1;
        request->args = run->args;
        if (decode_strings(r, "env", SBX_MAX_ENV, SBX_MAX_ENV_BYTES, run->env, &request->n_env) < 0)
                return -1;
        request->env = run->env;

        const uint8_t *stdin_data;
        if (get_blob(r, "stdin", SBX_MAX_STDIN_BYTES, &stdin_data, &request->stdin_size) < 0)
                return -1;
        request->stdin_data = stdin_data;
        if (get_limits(r, &request->limits) < 0)
                return -1;
        if (get_flag(r, "compile_limits", &present) < 0)
                return -1;
        if (present && get_limits(r, &request->compile_limits) < 0)
                return -1;
        if (get_flag(r, "stream", &request->stream) < 0)
                return -1;
        /* The one check of a request (model/request.h): the API process is not trusted to have
         * made it. */
        struct sbx_error refused = {0};
        if (sbx_request_check(request, &refused) < 0)
                return malformed(r->err, "%s: %s", r->type, refused.message);
        return 0;
}

static int get_buffer(struct reader *r, const char *field, struct sbx_buffer *buffer)
{
        const uint8_t *data;
        size_t len;
        uint64_t cap;
        if (get_blob(r, field, SBX_MESSAGE_MAX_OUTPUT_BYTES, &data, &len) < 0 ||
            get_flag(r, field, &buffer->overflow) < 0 || get_u64(r, field, &cap) < 0)
                return -1;
        if (cap > SBX_MESSAGE_MAX_OUTPUT_BYTES || len > cap)
                return malformed(r->err, "%s: %s: %zu bytes kept under a cap of %llu", r->type,
                                 field, len, (unsigned long long)cap);
        /* Borrowed from the message buffer: alloc 0 says "not ours"; the decoded result must
         * never be passed to sbx_result_free (protocol.h). */
        buffer->data = (uint8_t *)data;
        buffer->len = len;
        buffer->cap = (size_t)cap;
        buffer->alloc = 0;
        return 0;
}

static int decode_run_outcome(struct reader *r, struct sbx_run *run)
{
        if (get_flag(r, "run.exited", &run->exited) < 0 ||
            get_int_in(r, "run.exit_code", -1, 255, &run->exit_code) < 0 ||
            get_int_in(r, "run.signal", 0, MAX_SIGNAL, &run->signal) < 0 ||
            get_flag(r, "run.wall_timeout", &run->wall_timeout) < 0 ||
            get_flag(r, "run.output_limit", &run->output_limit) < 0 ||
            get_flag(r, "run.canceled", &run->canceled) < 0 ||
            get_buffer(r, "stdout", &run->out) < 0 || get_buffer(r, "stderr", &run->err) < 0 ||
            get_flag(r, "run.disk_known", &run->disk_known) < 0 ||
            get_u64(r, "run.disk_used_bytes", &run->disk_used_bytes) < 0 ||
            get_u64(r, "run.disk_total_bytes", &run->disk_total_bytes) < 0 ||
            get_u64(r, "run.inodes_free", &run->inodes_free) < 0 ||
            get_u64(r, "run.wall_us", &run->wall_us) < 0)
                return -1;
        return 0;
}

/* compile_storage: where a run's compile stage goes (result->compile then points to it); NULL
 * while decoding a compile stage, which has none. */
static int decode_result(struct reader *r, struct sbx_result *result,
                         struct sbx_result *compile_storage)
{
        *result = (struct sbx_result){0};
        const char *id;
        if (get_string(r, "id", sizeof(result->id) - 1, &id) < 0)
                return -1;
        if (id[0] != '\0' && !sbx_execution_id_valid(id))
                return malformed(r->err, "%s: id: neither empty nor %d lowercase hex digits",
                                 r->type, SBX_EXECUTION_ID_CHARS);
        snprintf(result->id, sizeof(result->id), "%s", id);

        uint32_t status;
        if (get_u32(r, "status", &status) < 0)
                return -1;
        if (status >= SBX_STATUS_COUNT)
                return malformed(r->err, "%s: status: %u is not a status", r->type, status);
        result->status = (enum sbx_status)status;
        if (get_int_in(r, "exit_code", -1, 255, &result->exit_code) < 0 ||
            get_int_in(r, "signal", 0, MAX_SIGNAL, &result->signal) < 0)
                return -1;
        if (decode_run_outcome(r, &result->run) < 0)
                return -1;

#define GET_EVIDENCE(member, json)                                                                 \
        if (get_u64(r, "evidence." #member, &result->evidence.member) < 0)                         \
                return -1;
        SBX_EVIDENCE(GET_EVIDENCE)
#undef GET_EVIDENCE
        if (get_flag(r, "guest", &result->guest.known) < 0)
                return -1;
#define GET_GUEST(member, json)                                                                    \
        if (result->guest.known &&                                                                 \
            get_u64(r, "guest." #member, &result->guest.counters.member) < 0)                      \
                return -1;
        SBX_EVIDENCE(GET_GUEST)
#undef GET_GUEST
        if (result->guest.known &&
            get_u64(r, "guest.thrash_kills", &result->guest.thrash_kills) < 0)
                return -1;
        if (get_limits(r, &result->limits) < 0)
                return -1;
#define GET_TIMING(member)                                                                         \
        if (get_u64(r, "timing." #member, &result->timing.member) < 0)                             \
                return -1;
        SBX_TIMING(GET_TIMING)
#undef GET_TIMING
        bool present;
        if (get_flag(r, "backend", &present) < 0)
                return -1;
        if (present && decode_name(r, "backend", &result->backend) < 0)
                return -1;
        if (get_flag(r, "pooled", &result->pooled) < 0)
                return -1;
        const char *error;
        if (get_string(r, "error", sizeof(result->error) - 1, &error) < 0)
                return -1;
        snprintf(result->error, sizeof(result->error), "%s", error);
        if (get_flag(r, "cached", &result->cached) < 0)
                return -1;
        if (compile_storage == NULL)
                return 0;
        if (get_flag(r, "compile", &present) < 0)
                return -1;
        if (!present)
                return 0;
        if (decode_result(r, compile_storage, NULL) < 0)
                return -1;
        result->compile = compile_storage;
        return 0;
}

static int decode_refused(struct reader *r, struct sbx_message_refused *refused)
{
        uint32_t reason;
        if (get_u32(r, "reason", &reason) < 0)
                return -1;
        if (reason >= SBX_ARRAY_SIZE(refusal_names) || refusal_names[reason] == NULL)
                return malformed(r->err, "%s: reason: %u is not a reason", r->type, reason);
        refused->reason = (enum sbx_refusal)reason;
        return get_string(r, "detail", SBX_ERROR_MESSAGE_MAX - 1, &refused->detail);
}

static int decode_config(struct reader *r, struct sbx_message_config *config)
{
        const uint8_t *text;
        if (get_blob(r, "text", SBX_MESSAGE_MAX_CONFIG_BYTES, &text, &config->size) < 0)
                return -1;
        config->text = (const char *)text;
        return 0;
}

static int decode_stats(struct reader *r, struct sbx_message_stats *stats)
{
#define GET_STAT(member)                                                                           \
        if (get_u64(r, #member, &stats->member) < 0)                                               \
                return -1;
        SBX_MESSAGE_STATS(GET_STAT)
#undef GET_STAT
        return 0;
}

static int decode_session(struct reader *r, bool request, struct sbx_message_session *session)
{
        const uint8_t *id;
        if (take(r, "session_id", SBX_EXECUTION_ID_CHARS, &id) < 0)
                return -1;
        for (size_t i = 0; i < SBX_EXECUTION_ID_CHARS; i++)
                if (!((id[i] >= '0' && id[i] <= '9') || (id[i] >= 'a' && id[i] <= 'f')))
                        return malformed(r->err, "%s: session_id: not lowercase hex", r->type);
        memcpy(session->session_id, id, SBX_EXECUTION_ID_CHARS);
        session->session_id[SBX_EXECUTION_ID_CHARS] = '\0';
        if (request) {
                if (get_u32(r, "op", &session->op) < 0)
                        return -1;
                if (session->op < SBX_SESSION_OPEN || session->op > SBX_SESSION_CANCEL)
                        return malformed(r->err, "%s: op: %u is not an operation", r->type,
                                         session->op);
        } else if (get_i32(r, "error", &session->error) < 0) {
                return -1;
        } else if (session->error < 0 || session->error > 4095) {
                return malformed(r->err, "%s: error: %d is not an errno", r->type, session->error);
        }
        if (get_string(r, "fields", SBX_MESSAGE_MAX_SESSION_FIELDS, &session->fields) < 0)
                return -1;
        session->fields_len = strlen(session->fields);
        return get_blob(r, "data", SBX_MESSAGE_MAX_SESSION_DATA, &session->data,
                        &session->data_len);
}

int sbx_message_decode_header(const void *buf, size_t len, struct sbx_message_header *header,
                              struct sbx_error *err)
{
        *header = (struct sbx_message_header){0};
        if (len < SBX_MESSAGE_HEADER_BYTES)
                return malformed(err, "message of %zu bytes is shorter than a header", len);
        const uint8_t *p = buf;
        memcpy(&header->magic, p, 4);
        memcpy(&header->version, p + 4, 2);
        memcpy(&header->type, p + 6, 2);
        memcpy(&header->request_id, p + 8, 8);
        memcpy(&header->body_len, p + 16, 4);
        memcpy(&header->reserved, p + 20, 4);
        if (header->magic != SBX_PROTOCOL_MAGIC)
                return malformed(err, "bad magic 0x%08x", header->magic);
        if (header->version != SBX_PROTOCOL_VERSION)
                return malformed(err, "protocol version %u, expected %u", header->version,
                                 SBX_PROTOCOL_VERSION);
        if (!type_known(header->type))
                return malformed(err, "unknown message type %u", header->type);
        if (header->reserved != 0)
                return malformed(err, "%s: reserved header field is not 0",
                                 sbx_message_type_name(header->type));
        if (len > SBX_MESSAGE_MAX_BYTES)
                return malformed(err, "%s: %zu bytes, more than %u",
                                 sbx_message_type_name(header->type), len, SBX_MESSAGE_MAX_BYTES);
        if (header->body_len != len - SBX_MESSAGE_HEADER_BYTES)
                return malformed(err, "%s: body_len %u but %zu body bytes",
                                 sbx_message_type_name(header->type), header->body_len,
                                 len - SBX_MESSAGE_HEADER_BYTES);
        return 0;
}

int sbx_message_decode(const void *buf, size_t len, struct sbx_message *message,
                       struct sbx_error *err)
{
        memset(message, 0, sizeof(*message));
        if (sbx_message_decode_header(buf, len, &message->header, err) < 0)
                return -1;
        struct reader r = {
                .pos = (const uint8_t *)buf + SBX_MESSAGE_HEADER_BYTES,
                .end = (const uint8_t *)buf + len,
                .type = sbx_message_type_name(message->header.type),
                .err = err,
        };
        int rc = 0;
        switch ((enum sbx_message_type)message->header.type) {
        case SBX_MESSAGE_RUN:
                rc = decode_run(&r, &message->body.run);
                break;
        case SBX_MESSAGE_RESULT:
                rc = decode_result(&r, &message->body.result, &message->compile);
                break;
        case SBX_MESSAGE_REFUSED:
                rc = decode_refused(&r, &message->body.refused);
                break;
        case SBX_MESSAGE_CONFIG:
                /* Unasked: no request of the API's may seem answered by it. */
                rc = message->header.request_id != 0
                             ? malformed(err, "CONFIG: request_id %llu, not 0",
                                         (unsigned long long)message->header.request_id)
                             : decode_config(&r, &message->body.config);
                break;
        case SBX_MESSAGE_STATS_REPLY:
                rc = decode_stats(&r, &message->body.stats);
                break;
        case SBX_MESSAGE_SESSION:
                rc = decode_session(&r, true, &message->body.session);
                break;
        case SBX_MESSAGE_SESSION_REPLY:
        case SBX_MESSAGE_SESSION_EVENT:
                rc = decode_session(&r, false, &message->body.session);
                break;
        case SBX_MESSAGE_SESSION_ENDED:
                /* Unasked, like CONFIG. */
                rc = message->header.request_id != 0
                             ? malformed(err, "SESSION_ENDED: request_id %llu, not 0",
                                         (unsigned long long)message->header.request_id)
                             : decode_session(&r, false, &message->body.session);
                break;
        case SBX_MESSAGE_CANCEL:
        case SBX_MESSAGE_PING:
        case SBX_MESSAGE_PONG:
        case SBX_MESSAGE_STATS:
                break;
        }
        if (rc < 0)
                return -1;
        if (remaining(&r) != 0)
                return malformed(err, "%s: %zu trailing bytes", r.type, remaining(&r));
        return 0;
}
