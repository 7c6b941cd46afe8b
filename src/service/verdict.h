/* A test case's verdict (a batch's cases, api/batches.c): whether a run's stdout is the expected
 * one under the batch's comparison, as judges and graders decide it. Pure functions. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "model/result.h"

enum sbx_compare {
        SBX_COMPARE_EXACT,  /* byte for byte */
        SBX_COMPARE_TRIM,   /* trailing whitespace of each line and trailing blank lines aside */
        SBX_COMPARE_TOKENS, /* the same whitespace-separated tokens in the same order */
};

/* The comparison called name ("exact", "trim", "tokens"): true and *out, false when unknown. */
bool sbx_compare_find(const char *name, enum sbx_compare *out);

/* The name of compare. */
const char *sbx_compare_name(enum sbx_compare compare);

/* Whether output (output_len bytes) equals expected under compare. */
bool sbx_output_matches(enum sbx_compare compare, const char *output, size_t output_len,
                        const char *expected, size_t expected_len);

/* The verdict of a run that ended with status: "accepted" when it is ok and its output matches
 * (or nothing was expected: expected NULL), "wrong_answer" when it is ok and does not, else the
 * status's own name ("timeout", "memory_limit", "compile_error", ...). A static string. */
const char *sbx_verdict(enum sbx_status status, enum sbx_compare compare, const char *output,
                        size_t output_len, const char *expected, size_t expected_len);
