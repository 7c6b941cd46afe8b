/* Where each open session and RL episode lives in a fleet ([store] url; the table is
 * service/pg.c's): the node that holds its sandbox, recorded when it opens and dropped when it
 * ends. Its requests reach that node through the load balancer (deploy/haproxy.cfg routes them by
 * the id); a node that receives one for an id it does not hold asks here, so that the client
 * learns why: the session's node died (its liveness in the store lapsed: the sandbox and its
 * state are lost), or it lives on a node that is alive and the request missed it.
 *
 * A node drops its previous life's placements when it starts again; what a node that never came
 * back left is deleted once past its session's longest life (service/quota_pg.c's pruning). */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "service/quota_pg.h"
#include "util/error.h"

/* What the store knows of an id's placement. */
struct sbx_placement {
        char node[256];         /* the node that holds it */
        char url[520];          /* where that node's API is reached ("": not known) */
        bool alive;             /* whether that node's liveness is current */
        int64_t alive_until_ms; /* when its liveness ends or ended (Unix epoch ms) */
};

/* Records that this node holds the session or episode (kind "session" or "episode") id of
 * tenant, until until_ms (its longest life's end, Unix epoch ms). */
int sbx_placement_record(struct sbx_quota_pg *fleet, const char *kind, const char *id,
                         const char *tenant, int64_t until_ms, struct sbx_error *err);

/* Drops id's placement: it ended. Never waits on the store (the engine client's thread ends
 * sessions): the heartbeat's thread deletes the row (sbx_quota_pg_later); what the store never
 * took goes with the node's next start or past its until. */
void sbx_placement_forget(struct sbx_quota_pg *fleet, const char *id);

/* Where tenant's kind id lives: 1 with *out, 0 when the store has no such placement, -1 with
 * err. */
int sbx_placement_find(struct sbx_quota_pg *fleet, const char *kind, const char *id,
                       const char *tenant, struct sbx_placement *out, struct sbx_error *err);
