#include "service/pg.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
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
        /* 3: the audit store (service/audit.c, audit_queue.c, audit_deliveries.c), the tables of
         * a node's own SQLite store at its version 9 with PostgreSQL's types: the same columns
         * under the same names, so that the store's statements are one text for both (sql.h).
         * rowid is the order of the inserts, which SQLite gives every table and the statements
         * order by; JSON columns are text as there (stored as written, read back whole). node:
         * which node runs an execution or holds a session (NULL: queued, any node's to take). */
        "CREATE TABLE executions (rowid bigserial NOT NULL, id text PRIMARY KEY,\n"
        "  tenant text NOT NULL, created_at bigint NOT NULL, finished_at bigint,\n"
        "  language text NOT NULL, status text NOT NULL, exit_code bigint, signal bigint,\n"
        "  error text, requested text, effective text, clamped text, usage text,\n"
        "  evidence text, timing text, stdout_bytes bigint, stderr_bytes bigint,\n"
        "  stdout_sha256 text, stderr_sha256 text, stdout bytea, stderr bytea, compile text,\n"
        "  node text);\n"
        "CREATE INDEX executions_by_tenant ON executions (tenant, created_at);\n"
        "CREATE INDEX executions_running ON executions (node) WHERE status = 'running';\n"
        "CREATE INDEX executions_queued ON executions (created_at) WHERE status = 'queued';\n"
        "CREATE TABLE sessions (id text PRIMARY KEY, tenant text NOT NULL,\n"
        "  language text NOT NULL, created_at bigint NOT NULL, ended_at bigint,\n"
        "  end_reason text, requested text, effective text, clamped text, evidence text,\n"
        "  kind text NOT NULL DEFAULT 'session', summary text, node text);\n"
        "CREATE INDEX sessions_by_tenant ON sessions (tenant, created_at);\n"
        "CREATE INDEX sessions_open ON sessions (node) WHERE ended_at IS NULL;\n"
        "CREATE TABLE queue (id text PRIMARY KEY, tenant text NOT NULL, request text NOT NULL,\n"
        "  retry bigint NOT NULL, wall_ms bigint NOT NULL);\n"
        "CREATE FUNCTION sandboxd_queue_item_ended() RETURNS trigger LANGUAGE plpgsql AS $$\n"
        "BEGIN\n"
        "  DELETE FROM queue WHERE id = (CASE WHEN TG_OP = 'DELETE' THEN OLD.id ELSE NEW.id END);\n"
        "  RETURN NULL;\n"
        "END $$;\n"
        "CREATE TRIGGER queue_item_ended AFTER UPDATE OF status ON executions FOR EACH ROW\n"
        "  WHEN (NEW.status NOT IN ('queued', 'running'))\n"
        "  EXECUTE FUNCTION sandboxd_queue_item_ended();\n"
        "CREATE TRIGGER queue_item_forgotten AFTER DELETE ON executions FOR EACH ROW\n"
        "  EXECUTE FUNCTION sandboxd_queue_item_ended();\n"
        "CREATE TABLE batches (id text PRIMARY KEY, tenant text NOT NULL,\n"
        "  created_at bigint NOT NULL, compare text, cases bigint NOT NULL, callback_url text,\n"
        "  requested text);\n"
        "CREATE INDEX batches_by_tenant ON batches (tenant, created_at);\n"
        "CREATE TABLE batch_cases (batch_id text NOT NULL, idx bigint NOT NULL,\n"
        "  execution_id text NOT NULL UNIQUE, expected_stdout bytea,\n"
        "  PRIMARY KEY (batch_id, idx));\n"
        "CREATE TABLE deliveries (rowid bigserial NOT NULL, id text PRIMARY KEY,\n"
        "  tenant text NOT NULL, kind text NOT NULL, target_id text NOT NULL UNIQUE,\n"
        "  url text NOT NULL, status text NOT NULL, attempts bigint NOT NULL,\n"
        "  next_attempt_at bigint NOT NULL, last_error text, created_at bigint NOT NULL,\n"
        "  finished_at bigint);\n"
        "CREATE INDEX deliveries_due ON deliveries (next_attempt_at) WHERE status = 'pending';\n"
        "CREATE INDEX deliveries_by_tenant ON deliveries (tenant, status, created_at);\n",
        /* 4: where each node's API is reached ([store] advertise), so that a node asked for a
         * session another node holds forwards the request there (api/forward.c). */
        "ALTER TABLE sandboxd_nodes ADD COLUMN url text;\n",
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

size_t sbx_pg_hold(struct sbx_pg *pg)
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

void sbx_pg_let_go(struct sbx_pg *pg, size_t slot)
{
        pthread_mutex_lock(&pg->lock);
        pg->busy[slot] = false;
        pthread_cond_signal(&pg->freed);
        pthread_mutex_unlock(&pg->lock);
}

PGresult *sbx_pg_exec_on(struct sbx_pg *pg, size_t slot, const char *sql, int n, const Oid *types,
                         const char *const *values, const int *lengths, const int *formats,
                         bool may_retry, struct sbx_error *err)
{
        PGconn *conn = pg->connections[slot];
        /* Twice at most: once more after a reset when the server had dropped the connection. */
        for (int attempt = 0; attempt < 2; attempt++) {
                if (PQstatus(conn) != CONNECTION_OK) {
                        PQreset(conn);
                        if (PQstatus(conn) != CONNECTION_OK) {
                                pg_error(err, conn, NULL, "connect");
                                return NULL;
                        }
                }
                PGresult *result = PQexecParams(conn, sql, n, types, values, lengths, formats, 0);
                if (result_ok(result))
                        return result;
                bool dropped = PQstatus(conn) != CONNECTION_OK;
                pg_error(err, conn, result, "query");
                PQclear(result);
                if (!dropped || !may_retry)
                        return NULL;
        }
        return NULL;
}

PGresult *sbx_pg_query(struct sbx_pg *pg, const char *sql, int n, const char *const *values,
                       struct sbx_error *err)
{
        size_t slot = sbx_pg_hold(pg);
        PGresult *result = sbx_pg_exec_on(pg, slot, sql, n, NULL, values, NULL, NULL, true, err);
        sbx_pg_let_go(pg, slot);
        return result;
}

struct sbx_pg_listener {
        char *url;
        char listen[96]; /* LISTEN <channel> */
        PGconn *conn;    /* NULL after a failure, until the next wait connects again */
};

/* Connects and LISTENs; -1 with err, the connection closed. */
static int listener_connect(struct sbx_pg_listener *listener, struct sbx_error *err)
{
        listener->conn = connect_to(listener->url);
        if (listener->conn == NULL)
                return sbx_error_set(err, ENOMEM, "postgresql: connect");
        if (PQstatus(listener->conn) != CONNECTION_OK ||
            exec_on(listener->conn, listener->listen, "listen", err) < 0) {
                if (PQstatus(listener->conn) != CONNECTION_OK)
                        pg_error(err, listener->conn, NULL, "connect");
                PQfinish(listener->conn);
                listener->conn = NULL;
                return -1;
        }
        return 0;
}

int sbx_pg_listen(const char *url, const char *channel, struct sbx_pg_listener **out,
                  struct sbx_error *err)
{
        *out = NULL;
        struct sbx_pg_listener *listener = calloc(1, sizeof(*listener));
        if (listener == NULL || (listener->url = strdup(url)) == NULL) {
                sbx_pg_listener_close(listener);
                return sbx_error_set(err, ENOMEM, "postgresql: listen");
        }
        int n = snprintf(listener->listen, sizeof(listener->listen), "LISTEN %s", channel);
        if (n < 0 || (size_t)n >= sizeof(listener->listen)) {
                sbx_pg_listener_close(listener);
                return sbx_error_set(err, ENAMETOOLONG, "postgresql: listen %s", channel);
        }
        if (listener_connect(listener, err) < 0) {
                sbx_pg_listener_close(listener);
                return -1;
        }
        *out = listener;
        return 0;
}

/* Takes every notification that arrived; true when there was one. */
static bool take_notifications(PGconn *conn)
{
        bool any = false;
        PGnotify *notify;
        while ((notify = PQnotifies(conn)) != NULL) {
                any = true;
                PQfreemem(notify);
        }
        return any;
}

int sbx_pg_listener_wait(struct sbx_pg_listener *listener, int timeout_ms, struct sbx_error *err)
{
        if (listener->conn == NULL && listener_connect(listener, err) < 0)
                return -1;
        PGconn *conn = listener->conn;
        if (take_notifications(conn))
                return 1;
        struct pollfd pfd = {.fd = PQsocket(conn), .events = POLLIN};
        int ready = poll(&pfd, 1, timeout_ms);
        if (ready < 0 && errno != EINTR)
                return sbx_error_set(err, errno, "postgresql: poll");
        if (ready <= 0)
                return 0;
        if (!PQconsumeInput(conn) || PQstatus(conn) != CONNECTION_OK) {
                pg_error(err, conn, NULL, "listen");
                PQfinish(conn);
                listener->conn = NULL;
                return -1;
        }
        return take_notifications(conn);
}

void sbx_pg_listener_close(struct sbx_pg_listener *listener)
{
        if (listener == NULL)
                return;
        if (listener->conn != NULL)
                PQfinish(listener->conn);
        free(listener->url);
        free(listener);
}
