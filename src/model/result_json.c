#include "model/result_json.h"

#include <stdlib.h>
#include <string.h>

#include "util/cleanup.h"

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

json_t *sbx_limits_to_json(const struct sbx_limits *limits)
{
        json_t *object = json_object();
        for (size_t i = 0; object != NULL && i < SBX_LIMIT_COUNT; i++) {
                const struct sbx_limit_field *field = &sbx_limit_fields[i];
                uint64_t value = sbx_limit_get(limits, field);
                json_t *member = field->kind == SBX_LIMIT_CORES
                                         ? json_real((double)value / (double)field->unit)
                                         : json_integer((json_int_t)(value / field->unit));
                if (json_object_set_new(object, field->name, member) < 0) {
                        json_decref(object);
                        object = NULL;
                }
        }
        return object;
}

/* A result's "usage": what the program used, one row per member, X(name, its value in the
 * result r). */
#define SBX_USAGE(X)                                                                               \
        X(cpu_ms, r->evidence.cpu_usage_us / 1000)                                                 \
        X(wall_ms, r->run.wall_us / 1000)                                                          \
        X(memory_peak_bytes, r->evidence.memory_peak_bytes)                                        \
        X(pids_peak, r->evidence.pids_peak)                                                        \
        X(disk_used_bytes, r->run.disk_used_bytes)

/* What a result's "evidence" adds to the kernel's counters (SBX_EVIDENCE rows marked EVIDENCE):
 * which of the supervisor's own caps ended the run, X(name, whether it did, in the result r). */
#define SBX_EVIDENCE_FLAGS(X)                                                                      \
        X(wall_timeout, r->run.wall_timeout)                                                       \
        X(output_limit, r->run.output_limit)                                                       \
        X(disk_full, r->status == SBX_STATUS_DISK_FULL)

#define USAGE_MEMBER(name, value) {#name, false},
const struct sbx_json_member sbx_usage_json_members[] = {SBX_USAGE(USAGE_MEMBER)};
const size_t sbx_usage_json_count = SBX_ARRAY_SIZE(sbx_usage_json_members);

#define EVIDENCE_MEMBER_EVIDENCE(member) {#member, false},
#define EVIDENCE_MEMBER_USAGE(member)
#define EVIDENCE_MEMBER(member, json)     EVIDENCE_MEMBER_##json(member)
#define EVIDENCE_FLAG_MEMBER(name, value) {#name, true},
const struct sbx_json_member sbx_evidence_json_members[] = {
        SBX_EVIDENCE(EVIDENCE_MEMBER) SBX_EVIDENCE_FLAGS(EVIDENCE_FLAG_MEMBER)};
const size_t sbx_evidence_json_count = SBX_ARRAY_SIZE(sbx_evidence_json_members);

#define GUEST_EVIDENCE_MEMBER(member, json) {#member, false},
const struct sbx_json_member sbx_guest_evidence_json_members[] = {
        SBX_EVIDENCE(GUEST_EVIDENCE_MEMBER){"thrash_kills", false}};
const size_t sbx_guest_evidence_json_count = SBX_ARRAY_SIZE(sbx_guest_evidence_json_members);

#define TIMING_MEMBER(member) {#member, false},
const struct sbx_json_member sbx_timing_json_members[] = {SBX_TIMING(TIMING_MEMBER)};
const size_t sbx_timing_json_count = SBX_ARRAY_SIZE(sbx_timing_json_members);

/* Sets name to value (stolen) in *object; on failure *object becomes NULL (and later calls do
 * nothing but drop their value). */
static void set_member(json_t **object, const char *name, json_t *value)
{
        if (*object == NULL) {
                json_decref(value);
        } else if (json_object_set_new(*object, name, value) < 0) {
                json_decref(*object);
                *object = NULL;
        }
}

static json_t *usage_json(const struct sbx_result *r)
{
        json_t *object = json_object();
#define SET_USAGE(name, value) set_member(&object, #name, json_integer((json_int_t)(value)));
        SBX_USAGE(SET_USAGE)
#undef SET_USAGE
        return object;
}

static json_t *evidence_json(const struct sbx_result *r)
{
        json_t *object = json_object();
#define SET_EVIDENCE_EVIDENCE(member)                                                              \
        set_member(&object, #member, json_integer((json_int_t)r->evidence.member));
#define SET_EVIDENCE_USAGE(member)
#define SET_EVIDENCE(member, json)     SET_EVIDENCE_##json(member)
#define SET_EVIDENCE_FLAG(name, value) set_member(&object, #name, json_boolean(value));
        SBX_EVIDENCE(SET_EVIDENCE)
        SBX_EVIDENCE_FLAGS(SET_EVIDENCE_FLAG)
        if (r->guest.known) {
                json_t *guest = json_object();
#define SET_GUEST(member, json)                                                                    \
        set_member(&guest, #member, json_integer((json_int_t)r->guest.counters.member));
                SBX_EVIDENCE(SET_GUEST)
#undef SET_GUEST
                set_member(&guest, "thrash_kills", json_integer((json_int_t)r->guest.thrash_kills));
                set_member(&object, "guest", guest);
        }
        return object;
}

static json_t *timing_json(const struct sbx_timing *t)
{
        json_t *object = json_object();
#define SET_TIMING(member) set_member(&object, #member, json_integer((json_int_t)t->member));
        SBX_TIMING(SET_TIMING)
#undef SET_TIMING
        return object;
}

/* What a run and a compile stage report alike: the outcome, the output, what was used, the
 * limits, the kernel's evidence and the timing; and the error text of a status that has one. */
static json_t *stage_json(const struct sbx_result *r)
{
        bool has_error = sbx_status_has_error(r->status);
        bool exited = !has_error && r->run.exited;
        bool signaled = !has_error && !r->run.exited && r->run.signal != 0;
        json_t *object =
                json_pack("{s:s, s:o, s:o, s:o, s:o, s:{s:b, s:b}, s:o, s:o, s:o, s:o}", "status",
                          sbx_status_name(r->status), "exit_code",
                          exited ? json_integer(r->run.exit_code) : json_null(), "signal",
                          signaled ? json_integer(r->run.signal) : json_null(), "stdout",
                          sbx_json_string_from_bytes(r->run.out.data, r->run.out.len), "stderr",
                          sbx_json_string_from_bytes(r->run.err.data, r->run.err.len), "truncated",
                          "stdout", r->run.out.overflow, "stderr", r->run.err.overflow, "usage",
                          usage_json(r), "limits", sbx_limits_to_json(&r->limits), "evidence",
                          evidence_json(r), "timing", timing_json(&r->timing));
        if (has_error)
                set_member(&object, "error", json_string(r->error));
        return object;
}

json_t *sbx_result_to_json(const struct sbx_result *r)
{
        json_t *object = json_pack("{s:s}", "id", r->id);
        json_t *stage = stage_json(r);
        if (object == NULL || stage == NULL || json_object_update(object, stage) < 0) {
                json_decref(object);
                object = NULL;
        }
        json_decref(stage);
        set_member(&object, "backend", json_string(r->backend ? r->backend : "native"));
        set_member(&object, "pooled", json_boolean(r->pooled));
        json_t *compile = json_null();
        if (r->compile != NULL) {
                compile = stage_json(r->compile);
                set_member(&compile, "cached", json_boolean(r->compile->cached));
                set_member(&compile, "pooled", json_boolean(r->compile->pooled));
        }
        set_member(&object, "compile", compile);
        return object;
}

/* The length of buf's prefix that ends on a UTF-8 character boundary (a trailing character
 * whose bytes have not all arrived is left for the next batch). */
size_t sbx_utf8_whole_prefix(const uint8_t *buf, size_t len)
{
        for (size_t back = 1; back <= 4 && back <= len; back++) {
                uint8_t byte = buf[len - back];
                if ((byte & 0xC0) == 0x80)
                        continue; /* a continuation byte: look further back */
                size_t need = 1;
                if ((byte & 0xE0) == 0xC0)
                        need = 2;
                else if ((byte & 0xF0) == 0xE0)
                        need = 3;
                else if ((byte & 0xF8) == 0xF0)
                        need = 4;
                return back < need ? len - back : len;
        }
        return len;
}
