/* One execution, start to end: pick the backend, resolve the language, create the sandbox,
 * start it, supervise it, read the evidence, tear it down, decide the status, time every phase. */
#pragma once

#include <stddef.h>

#include "engine/result.h"
#include "sandbox/sandbox.h"
#include "util/error.h"

struct sbx_request {
        const char *language; /* sbx_language_find() name */
        const char *code;     /* the program text: /workspace/<language file_name> */
        size_t code_size;
        const char *const *args; /* extra argv after the program file */
        size_t n_args;
        const void *stdin_data;
        size_t stdin_size;
        struct sbx_limits limits;
        const char *backend; /* NULL = "native" */
        struct sbx_test_hooks test;
};

/* The built-in default limits (README documents them). */
void sbx_limits_default(struct sbx_limits *limits);

/* Runs the request. Returns 0 whenever result was filled, including status internal_error when
 * sandboxd failed to set up (the program never ran); -1 with err only for a request that cannot
 * be run at all (unknown language or backend). Free the result with sbx_result_free(). */
int sbx_execute(const struct sbx_request *request, struct sbx_result *result,
                struct sbx_error *err);
