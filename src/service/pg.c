#include "service/pg.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "util/cleanup.h"

struct sbx_pg {
        pthread_mutex_t lock;
        pthread_cond_t freed;
        PGconn **connections;
        bool *busy;
        size_t n;
};

/* The schema, one migration per version (index + 1). Never edit a migration that has shipped:
 * add the next one. */
static const char *const migrations[] = {
        /* 1: quotas fleet-wide (service/quota_pg.c). A lease is an execution in flight; it counts
         * while its node is alive (the node renews alive_until every few seconds), so a dead
         * node's leases lapse by themselves. A charge is CPU used, counted within its tenant's
         * window. sandboxd_reserve decides and takes a lease in one round trip, under a
         * transaction-scoped advisory lock per tenant so that two nodes' decisions for one tenant
         * never interleave; each of its statements takes a fresh snapshot (READ COMMITTED,
         * VOLATILE), so the count sees every lease committed before the lock was granted. Its
         * verdicts are sbx_quota_verdict_name's ("allowed", "concurrency", "cpu_budget"). */
        "CREATE TABLE sandboxd_nodes (name text PRIMARY KEY, alive_until timestamptz NOT NULL);\n"
        "CREATE TABLE sandboxd_leases (id bigserial PRIMARY KEY, tenant text NOT NULL,\n"
        "  node text NOT NULL, expected_end timestamptz NOT NULL);\n"
        "CREATE INDEX sandboxd_leases_tenant ON sandboxd_leases (tenant);\n"
        "CREATE INDEX sandboxd_leases_node ON sandboxd_leases (node);\n"
        "CREATE TABLE sandboxd_charges (tenant text NOT NULL, at timestamptz NOT NULL,\n"
        "  cpu_ms bigint NOT NULL);\n"
        "CREATE INDEX sandboxd_charges_tenant_at ON sandboxd_charges (tenant, at);\n"
        "CREATE FUNCTION sandboxd_reserve(p_tenant text, p_node text, p_max_concurrency bigint,\n"
        "  p_budget_ms bigint, p_window_ms bigint, p_expected_ms bigint,\n"
        "  OUT verdict text, OUT retry_after_ms bigint, OUT lease bigint)\n"
        "LANGUAGE plpgsql VOLATILE AS $$\n"
        "DECLARE\n"
        "  now_at timestamptz;\n"
        "  window_start timestamptz;\n"
        "  running bigint;\n"
        "  concurrency_at timestamptz;\n"
        "  charged bigint;\n"
        "  budget_at timestamptz;\n"
        "BEGIN\n"
        "  PERFORM pg_advisory_xact_lock(hashtext('sandboxd tenant ' || p_tenant));\n"
        "  now_at := clock_timestamp();\n"
        "  window_start := now_at - p_window_ms * interval '1 millisecond';\n"
        "  SELECT count(*), min(greatest(l.expected_end, now_at)) INTO running, concurrency_at\n"
        "    FROM sandboxd_leases l JOIN sandboxd_nodes n ON n.name = l.node\n"
        "    WHERE l.tenant = p_tenant AND n.alive_until > now_at;\n"
        "  SELECT coalesce(sum(cpu_ms), 0) INTO charged FROM sandboxd_charges\n"
        "    WHERE tenant = p_tenant AND at > window_start;\n"
        "  lease := 0;\n"
        "  IF running < p_max_concurrency AND charged < p_budget_ms THEN\n"
        "    INSERT INTO sandboxd_leases (tenant, node, expected_end)\n"
        "      VALUES (p_tenant, p_node, now_at + p_expected_ms * interval '1 millisecond')\n"
        "      RETURNING id INTO lease;\n"
        "    verdict := 'allowed';\n"
        "    retry_after_ms := 0;\n"
        "    RETURN;\n"
        "  END IF;\n"
        "  IF charged >= p_budget_ms THEN\n"
        /* The moment enough of the oldest charges have left the window for the rest to be
         * under budget (as service/quota.c's budget_frees_at). */
        "    SELECT c.at + p_window_ms * interval '1 millisecond' INTO budget_at FROM (\n"
        "      SELECT at, charged - sum(cpu_ms) OVER (ORDER BY at ROWS UNBOUNDED PRECEDING)\n"
        "        AS remaining FROM sandboxd_charges\n"
        "        WHERE tenant = p_tenant AND at > window_start) c\n"
        "      WHERE c.remaining < p_budget_ms ORDER BY c.at LIMIT 1;\n"
        "  END IF;\n"
        /* Both bind: name the one that frees last, the one the client waits for. */
        "  IF charged >= p_budget_ms AND\n"
        "     (running < p_max_concurrency OR budget_at > concurrency_at) THEN\n"
        "    verdict := 'cpu_budget';\n"
        "    retry_after_ms := ceil(extract(epoch FROM budget_at - now_at) * 1000);\n"
        "  ELSE\n"
        "    verdict := 'concurrency';\n"
        "    retry_after_ms := ceil(extract(epoch FROM concurrency_at - now_at) * 1000);\n"
        "  END IF;\n"
        "END $$;\n",
        /* 2: where each open session and RL episode lives (service/placement_pg.c): the node
         * that holds its sandbox, until the end of its longest life, so that any other node can
         * tell a client that its node died. */
        "CREATE TABLE sandboxd_placements (id text PRIMARY KEY, kind text NOT NULL,\n"
        "  tenant text NOT NULL, node text NOT NULL, until timestamptz NOT NULL);\n"
        "CREATE INDEX sandboxd_placements_node ON sandboxd_placements (node);\n",
};

int sbx_pg_schema_version(void)
{
        return (int)SBX_ARRAY_SIZE(migrations);
}

/* The server's message for a failed result or connection, without libpq's trailing newline. */
static int pg_error(struct sbx_error *err, PGconn *conn, const PGresult *result, const char *what)
{
        const char *message = result ? PQresultErrorMessage(result) : "";
        if (message[0] == '\0')
                message = PQerrorMessage(conn);
        size_t length = strcspn(message, "\n");
        return sbx_error_plain(err, EIO, "postgresql: %s: %.*s", what, (int)length, message);
}

static bool result_ok(const PGresult *result)
{
        ExecStatusType status = PQresultStatus(result);
        return status == PGRES_TUPLES_OK || status == PGRES_COMMAND_OK;
}

/* The server's notices ("relation ... already exists, skipping") are not the service's to
 * print on stderr, which libpq does by default. */
static void drop_notice(void *arg, const char *message)
{
        (void)arg;
        (void)message;
}

static PGconn *connect_to(const char *url)
{
        /* Keywords first, the URL's own settings override them (expand_dbname). The store's rows
         * are quota state, renewed all the time: a commit need not wait for its WAL to reach the
         * disk (synchronous_commit off: a PostgreSQL crash can lose the last few hundred ms of
         * leases and charges, never corrupt them), which takes that wait off every request. */
        const char *const keywords[] = {"connect_timeout", "application_name", "options", "dbname",
                                        NULL};
        const char *const values[] = {"5", "sandboxd", "-c synchronous_commit=off", url, NULL};
        PGconn *conn = PQconnectdbParams(keywords, values, 1);
        if (conn != NULL)
                PQsetNoticeProcessor(conn, drop_notice, NULL);
        return conn;
}

/* Runs a statement without parameters on conn. */
static int exec_on(PGconn *conn, const char *sql, const char *what, struct sbx_error *err)
{
        PGresult *result = PQexec(conn, sql);
        int r = result_ok(result) ? 0 : pg_error(err, conn, result, what);
        PQclear(result);
        return r;
}

/* Applies the migrations newer than the database's version, in one transaction. */
static int migrate(PGconn *conn, struct sbx_error *err)
{
        if (exec_on(conn, "BEGIN", "begin", err) < 0)
                return -1;
        int r = -1;
        /* Any constant every node uses: the lock is the schema's, not a tenant's. */
        if (exec_on(conn, "SELECT pg_advisory_xact_lock(7291093)", "lock the schema", err) < 0 ||
            exec_on(conn,
                    "CREATE TABLE IF NOT EXISTS sandboxd_schema (version integer PRIMARY KEY, "
                    "applied_at timestamptz NOT NULL DEFAULT now())",
                    "create sandboxd_schema", err) < 0)
                goto out;
        PGresult *result = PQexec(conn, "SELECT coalesce(max(version), 0) FROM sandboxd_schema");
        if (!result_ok(result)) {
                pg_error(err, conn, result, "read the schema version");
                PQclear(result);
                goto out;
        }
        int version = atoi(PQgetvalue(result, 0, 0));
        PQclear(result);
        if (version > sbx_pg_schema_version()) {
                sbx_error_plain(err, EPROTO,
                                "postgresql: the database's schema is version %d, newer than this "
                                "sandboxd's %d: upgrade sandboxd",
                                version, sbx_pg_schema_version());
                goto out;
        }
        for (int v = version + 1; v <= sbx_pg_schema_version(); v++) {
                char record[96];
                snprintf(record, sizeof(record),
                         "INSERT INTO sandboxd_schema (version) VALUES (%d)", v);
                char what[48];
                snprintf(what, sizeof(what), "migration %d", v);
                if (exec_on(conn, migrations[v - 1], what, err) < 0 ||
                    exec_on(conn, record, what, err) < 0)
                        goto out;
        }
        r = exec_on(conn, "COMMIT", "commit the migrations", err);
out:
        if (r < 0) {
                PGresult *rollback = PQexec(conn, "ROLLBACK");
                PQclear(rollback);
        }
        return r;
}

int sbx_pg_open(const char *url, size_t connections, struct sbx_pg **out, struct sbx_error *err)
{
        *out = NULL;
        if (connections == 0)
                connections = 1;
        struct sbx_pg *pg = calloc(1, sizeof(*pg));
        if (pg == NULL)
                return sbx_error_set(err, ENOMEM, "postgresql");
        pthread_mutex_init(&pg->lock, NULL);
        pthread_cond_init(&pg->freed, NULL);
        pg->connections = calloc(connections, sizeof(*pg->connections));
        pg->busy = calloc(connections, sizeof(*pg->busy));
        if (pg->connections == NULL || pg->busy == NULL) {
                sbx_pg_close(pg);
                return sbx_error_set(err, ENOMEM, "postgresql");
        }
        pg->n = connections;
        for (size_t i = 0; i < connections; i++) {
                pg->connections[i] = connect_to(url);
                if (pg->connections[i] == NULL || PQstatus(pg->connections[i]) != CONNECTION_OK) {
                        if (pg->connections[i] == NULL)
                                sbx_error_set(err, ENOMEM, "postgresql: connect");
                        else
                                pg_error(err, pg->connections[i], NULL, "connect");
                        sbx_pg_close(pg);
                        return -1;
                }
        }
        if (migrate(pg->connections[0], err) < 0) {
                sbx_pg_close(pg);
                return -1;
        }
        *out = pg;
        return 0;
}

void sbx_pg_close(struct sbx_pg *pg)
{
        if (pg == NULL)
                return;
        for (size_t i = 0; i < pg->n; i++)
                if (pg->connections[i] != NULL)
                        PQfinish(pg->connections[i]);
        free(pg->connections);
        free(pg->busy);
        pthread_cond_destroy(&pg->freed);
        pthread_mutex_destroy(&pg->lock);
        free(pg);
}

static size_t acquire(struct sbx_pg *pg)
{
        pthread_mutex_lock(&pg->lock);
        for (;;) {
                for (size_t i = 0; i < pg->n; i++)
                        if (!pg->busy[i]) {
                                pg->busy[i] = true;
                                pthread_mutex_unlock(&pg->lock);
                                return i;
                        }
                pthread_cond_wait(&pg->freed, &pg->lock);
        }
}

static void give_back(struct sbx_pg *pg, size_t i)
{
        pthread_mutex_lock(&pg->lock);
        pg->busy[i] = false;
        pthread_cond_signal(&pg->freed);
        pthread_mutex_unlock(&pg->lock);
}

PGresult *sbx_pg_query(struct sbx_pg *pg, const char *sql, int n, const char *const *values,
                       struct sbx_error *err)
{
        size_t i = acquire(pg);
        PGconn *conn = pg->connections[i];
        PGresult *result = NULL;
        /* Twice at most: once more after a reset when the server had dropped the connection. */
        for (int attempt = 0; attempt < 2; attempt++) {
                if (PQstatus(conn) != CONNECTION_OK) {
                        PQreset(conn);
                        if (PQstatus(conn) != CONNECTION_OK) {
                                pg_error(err, conn, NULL, "connect");
                                break;
                        }
                }
                result = PQexecParams(conn, sql, n, NULL, values, NULL, NULL, 0);
                if (result_ok(result))
                        break;
                bool dropped = PQstatus(conn) != CONNECTION_OK;
                pg_error(err, conn, result, "query");
                PQclear(result);
                result = NULL;
                if (!dropped)
                        break;
        }
        give_back(pg, i);
        return result;
}
