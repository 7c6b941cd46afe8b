/* A result as the JSON object of DESIGN.md's POST /v1/executions response. */
#pragma once

#include <jansson.h>

#include "engine/result.h"

/* A new JSON object (caller owns the reference), or NULL when memory runs out. Output that is not
 * valid UTF-8 has each invalid byte replaced by U+FFFD. */
json_t *sbx_result_to_json(const struct sbx_result *result);
