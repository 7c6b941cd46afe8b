/* A result as the JSON object of DESIGN.md's POST /v1/executions response. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "model/result.h"

/* A member of a result's nested objects ("usage", "evidence", "timing"). The lists below say what
 * sbx_result_to_json writes there, in order; the OpenAPI document's schemas are made from them
 * (api/openapi.c). */
struct sbx_json_member {
        const char *name;
        bool boolean; /* a JSON boolean; otherwise an integer, never negative */
};

extern const struct sbx_json_member sbx_usage_json_members[];
extern const size_t sbx_usage_json_count;
extern const struct sbx_json_member sbx_evidence_json_members[];
extern const size_t sbx_evidence_json_count;
/* The "guest" object in "evidence", present for a backend with a kernel of its own. */
extern const struct sbx_json_member sbx_guest_evidence_json_members[];
extern const size_t sbx_guest_evidence_json_count;
extern const struct sbx_json_member sbx_timing_json_members[];
extern const size_t sbx_timing_json_count;

/* A new JSON object (caller owns the reference), or NULL when memory runs out. Output that is not
 * valid UTF-8 has each invalid byte replaced by U+FFFD. */
json_t *sbx_result_to_json(const struct sbx_result *result);

/* The "limits" object of a result: the limits in the request's units (memory_mb, disk_mb, cpus).
 * A new reference, or NULL when memory runs out. */
json_t *sbx_limits_to_json(const struct sbx_limits *limits);

/* A new JSON string of len bytes of program output (NULL when memory runs out): JSON strings are
 * UTF-8, so each byte that is not part of a valid UTF-8 sequence (RFC 3629: no overlong forms,
 * no surrogates, nothing past U+10FFFF) becomes U+FFFD. */
json_t *sbx_json_string_from_bytes(const void *bytes, size_t len);

/* The length of the prefix of buf that ends on a UTF-8 character boundary: a trailing character
 * whose bytes have not all arrived is left out (for output streamed in pieces). */
size_t sbx_utf8_whole_prefix(const uint8_t *buf, size_t len);
