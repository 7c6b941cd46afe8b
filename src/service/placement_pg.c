#include "service/placement_pg.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "service/pg.h"

int sbx_placement_record(struct sbx_quota_pg *fleet, const char *kind, const char *id,
                         const char *tenant, int64_t until_ms, struct sbx_error *err)
{
        char until[24];
        snprintf(until, sizeof(until), "%" PRId64, until_ms);
        const char *values[] = {id, kind, tenant, sbx_quota_pg_node(fleet), until};
        PGresult *result = sbx_pg_query(
                sbx_quota_pg_store(fleet),
                "INSERT INTO sandboxd_placements (id, kind, tenant, node, until) "
                "VALUES ($1, $2, $3, $4, to_timestamp($5::bigint / 1000.0)) "
                "ON CONFLICT (id) DO UPDATE SET kind = excluded.kind, tenant = excluded.tenant, "
                "node = excluded.node, until = excluded.until",
                5, values, err);
        if (result == NULL)
                return -1;
        PQclear(result);
        return 0;
}

void sbx_placement_forget(struct sbx_quota_pg *fleet, const char *id)
{
        const char *values[] = {id};
        sbx_quota_pg_later(fleet, "DELETE FROM sandboxd_placements WHERE id = $1",
                           "a placement's end", 1, values);
}

int sbx_placement_find(struct sbx_quota_pg *fleet, const char *kind, const char *id,
                       const char *tenant, struct sbx_placement *out, struct sbx_error *err)
{
        const char *values[] = {id, kind, tenant};
        /* A node with no row of liveness (pruned) counts as dead since the epoch. */
        PGresult *result = sbx_pg_query(
                sbx_quota_pg_store(fleet),
                "SELECT p.node, coalesce(n.alive_until > clock_timestamp(), false), "
                "coalesce(floor(extract(epoch FROM n.alive_until) * 1000), 0)::bigint, "
                "coalesce(n.url, '') "
                "FROM sandboxd_placements p LEFT JOIN sandboxd_nodes n ON n.name = p.node "
                "WHERE p.id = $1 AND p.kind = $2 AND p.tenant = $3",
                3, values, err);
        if (result == NULL)
                return -1;
        int found = PQntuples(result) == 1 && PQnfields(result) == 4;
        if (found) {
                snprintf(out->node, sizeof(out->node), "%s", PQgetvalue(result, 0, 0));
                out->alive = strcmp(PQgetvalue(result, 0, 1), "t") == 0;
                out->alive_until_ms = strtoll(PQgetvalue(result, 0, 2), NULL, 10);
                snprintf(out->url, sizeof(out->url), "%s", PQgetvalue(result, 0, 3));
        }
        PQclear(result);
        return found;
}
