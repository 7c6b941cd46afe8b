/* What the API process does at start, before it serves: accounts for the executions that an
 * earlier API process began (their audit records say "running") but never saw end, because it
 * was killed or crashed. Each result the engine's workers could not hand over is in the spool
 * (protocol/spool.h): it completes its record and is removed. Whatever is still running after that
 * ended without a result anyone kept: its record becomes internal_error, saying so. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "service/audit.h"
#include "util/error.h"

/* The counts of one recovery, for the log and tests. */
struct sbx_recovery {
        uint64_t from_spool;  /* records completed from a spooled result */
        uint64_t interrupted; /* records completed as internal_error without a result */
        uint64_t unreadable;  /* spool files that could not be read or decoded (left in place) */
};

/* Recovers as described above, from spool_dir (a missing directory holds nothing). Fails only
 * when the audit store does; a bad spool file is counted, logged and left for an operator. */
int sbx_api_recover(struct sbx_audit *audit, const char *spool_dir, bool store_output,
                    struct sbx_recovery *recovery, struct sbx_error *err);
