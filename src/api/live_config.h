/* The tenants and tiers the API process serves, replaced while it runs: SIGHUP to the engine
 * makes it read the config file again and send it here (engine protocol CONFIG), so that an
 * operator adds or removes a tenant, changes a tier, or rotates a token without a restart.
 *
 * A request takes the snapshot current when it starts and keeps it to its end, so that its
 * tenant and tier never change under it; a snapshot is freed when the last request holding it
 * ends. A text that does not load changes nothing (the error is logged). Only tiers and tenants
 * are taken: [server] and [pool.*] keys keep the values the process started with (they need a
 * restart, and a change to them is logged as such). The "local" tenant made at start (no tenant
 * configured) stays while the file still configures none. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "api/metrics.h"
#include "service/config.h"
#include "util/error.h"

struct sbx_live_config;

/* Takes config (moved: the caller's struct is zeroed) as the first snapshot. local_sha256: the
 * local tenant's token hash when the process made one (no tenant configured), else NULL.
 * metrics, if not NULL, learns every tenant a reload adds. NULL when memory runs out. */
struct sbx_live_config *sbx_live_config_new(struct sbx_config *config, const uint8_t *local_sha256,
                                            struct sbx_metrics *metrics);

/* Frees it; no request may hold a snapshot any more. NULL is a no-op. */
void sbx_live_config_free(struct sbx_live_config *live);

/* The configuration the process started with: its [server] keys are the ones in force. */
const struct sbx_config *sbx_live_config_initial(const struct sbx_live_config *live);

/* The current snapshot, held until sbx_live_config_release(): its tenants and tiers. */
const struct sbx_config *sbx_live_config_acquire(struct sbx_live_config *live);
void sbx_live_config_release(struct sbx_live_config *live, const struct sbx_config *snapshot);

/* One more hold on a snapshot already held (for work that outlives its request: a streamed
 * run), released with sbx_live_config_release. */
void sbx_live_config_hold(struct sbx_live_config *live, const struct sbx_config *snapshot);

/* Loads text (size bytes; name for messages) and makes it the current snapshot's tiers and
 * tenants. Fails (-1 with err, nothing changed) when it does not load. */
int sbx_live_config_reload(struct sbx_live_config *live, const char *text, size_t size,
                           const char *name, struct sbx_error *err);
