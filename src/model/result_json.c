#include "model/result_json.h"

#include <stdlib.h>
#include <string.h>

#include "util/cleanup.h"

#define MIB (1024u * 1024u)

/* Length of the valid UTF-8 sequence at s (at most len bytes), or 0 when it is not one.
 * Rejects overlong forms, surrogates and code points past U+10FFFF (RFC 3629). */
static size_t utf8_sequence_length(const unsigned char *s, size_t len)
{
        unsigned char c = s[0];
        if (c < 0x80)
                return 1;
        size_t need;
        unsigned min_second = 0x80, max_second = 0xBF;
        if (c >= 0xC2 && c <= 0xDF) {
                need = 2;
        } else if (c >= 0xE0 && c <= 0xEF) {
                need = 3;
                if (c == 0xE0)
                        min_second = 0xA0; /* overlong */
                if (c == 0xED)
                        max_second = 0x9F; /* surrogates */
        } else if (c >= 0xF0 && c <= 0xF4) {
                need = 4;
                if (c == 0xF0)
                        min_second = 0x90; /* overlong */
                if (c == 0xF4)
                        max_second = 0x8F; /* past U+10FFFF */
        } else {
                return 0;
        }
        if (len < need)
                return 0;
        if (s[1] < min_second || s[1] > max_second)
                return 0;
        for (size_t i = 2; i < need; i++)
                if ((s[i] & 0xC0) != 0x80)
                        return 0;
        return need;
}

json_t *sbx_json_string_from_bytes(const void *bytes, size_t len)
{
        const uint8_t *data = bytes;
        if (len == 0 || data == NULL)
                return json_string("");
        /* Worst case every byte becomes the three bytes of U+FFFD. */
        _cleanup_free_ char *clean = malloc(len * 3 + 1);
        if (clean == NULL)
                return NULL;
        size_t out = 0;
        for (size_t i = 0; i < len;) {
                size_t n = utf8_sequence_length(data + i, len - i);
                if (n == 0) {
                        memcpy(clean + out, "\xEF\xBF\xBD", 3);
                        out += 3;
                        i++;
                } else {
                        memcpy(clean + out, data + i, n);
                        out += n;
                        i += n;
                }
        }
        return json_stringn(clean, out);
}

json_t *sbx_limits_to_json(const struct sbx_limits *l)
{
        return json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:f}", "wall_ms",
                         (json_int_t)l->wall_ms, "cpu_ms", (json_int_t)l->cpu_ms, "memory_mb",
                         (json_int_t)(l->memory_bytes / MIB), "pids", (json_int_t)l->pids,
                         "disk_mb", (json_int_t)(l->disk_bytes / MIB), "output_bytes",
                         (json_int_t)l->output_bytes, "open_files", (json_int_t)l->open_files,
                         "cpus", (double)l->cpu_millicores / 1000.0);
}

static json_t *evidence_json(const struct sbx_result *r)
{
        const struct sbx_evidence *e = &r->evidence;
        return json_pack(
                "{s:I, s:I, s:I, s:I, s:I, s:I, s:b, s:b, s:b}", "oom_kills",
                (json_int_t)e->oom_kills, "memory_max_events", (json_int_t)e->memory_max_events,
                "pids_max_events", (json_int_t)e->pids_max_events, "cpu_usage_us",
                (json_int_t)e->cpu_usage_us, "cpu_throttled_us", (json_int_t)e->cpu_throttled_us,
                "cpu_nr_throttled", (json_int_t)e->cpu_nr_throttled, "wall_timeout",
                r->run.wall_timeout, "output_limit", r->run.output_limit, "disk_full",
                r->status == SBX_STATUS_DISK_FULL);
}

static json_t *usage_json(const struct sbx_result *r)
{
        return json_pack("{s:I, s:I, s:I, s:I, s:I}", "cpu_ms",
                         (json_int_t)(r->evidence.cpu_usage_us / 1000), "wall_ms",
                         (json_int_t)(r->run.wall_us / 1000), "memory_peak_bytes",
                         (json_int_t)r->evidence.memory_peak_bytes, "pids_peak",
                         (json_int_t)r->evidence.pids_peak, "disk_used_bytes",
                         (json_int_t)r->run.disk_used_bytes);
}

static json_t *timing_json(const struct sbx_timing *t)
{
        return json_pack("{s:I, s:I, s:I, s:I, s:I}", "acquire_us", (json_int_t)t->acquire_us,
                         "setup_us", (json_int_t)t->setup_us, "run_us", (json_int_t)t->run_us,
                         "teardown_us", (json_int_t)t->teardown_us, "total_us",
                         (json_int_t)t->total_us);
}

json_t *sbx_result_to_json(const struct sbx_result *r)
{
        bool has_error = sbx_status_has_error(r->status);
        bool exited = !has_error && r->run.exited;
        bool signaled = !has_error && !r->run.exited && r->run.signal != 0;
        json_t *object = json_pack(
                "{s:s, s:s, s:o, s:o, s:o, s:o, s:{s:b, s:b}, s:o, s:o, s:o, s:o, s:s, s:b}", "id",
                r->id, "status", sbx_status_name(r->status), "exit_code",
                exited ? json_integer(r->run.exit_code) : json_null(), "signal",
                signaled ? json_integer(r->run.signal) : json_null(), "stdout",
                sbx_json_string_from_bytes(r->run.out.data, r->run.out.len), "stderr",
                sbx_json_string_from_bytes(r->run.err.data, r->run.err.len), "truncated", "stdout",
                r->run.out.overflow, "stderr", r->run.err.overflow, "usage", usage_json(r),
                "limits", sbx_limits_to_json(&r->limits), "evidence", evidence_json(r), "timing",
                timing_json(&r->timing), "backend", r->backend ? r->backend : "native", "pooled",
                r->pooled);
        if (object != NULL && has_error)
                json_object_set_new(object, "error", json_string(r->error));
        return object;
}
