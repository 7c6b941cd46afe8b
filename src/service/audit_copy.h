/* Copying a node's own audit store into a fleet's (`sandboxd store migrate`): every table's rows,
 * in the order they were written, under the same names. A row the target has already (its key)
 * is left as it is there, so that a copy stopped halfway can be run again. The copied executions
 * and sessions that ran or live on a node become node's (its next start then ends what was still
 * running, as it would have in its own store); queued executions stay any node's to take. */
#pragma once

#include <stdint.h>

#include "service/audit.h"
#include "util/error.h"

/* The tables copied, in their order. */
#define SBX_AUDIT_TABLES "executions", "sessions", "queue", "batches", "batch_cases", "deliveries"

struct sbx_audit_copied {
        const char *table;
        uint64_t rows;   /* read from the source */
        uint64_t copied; /* new in the target */
};

/* Copies from into to as node, reporting each table to on_table (may be NULL) when it is done.
 * Each table is one transaction of the target: a failure leaves its rows out, those of the
 * tables before it in. */
int sbx_audit_copy(struct sbx_audit *from, struct sbx_audit *to, const char *node,
                   void (*on_table)(void *ctx, const struct sbx_audit_copied *table), void *ctx,
                   struct sbx_error *err);
