/* Copying a node's audit store into a fleet's (audit_copy.h). */
#include "service/audit_copy.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "service/audit_store.h"
#include "util/cleanup.h"

/* The most columns a table of the store has (executions: 23 with its node). */
#define COPY_MAX_COLUMNS 32

struct copy {
        struct sbx_sql_conn *target;
        const char *table;
        const char *node;
        char insert[2048]; /* made from the first row's column names */
        uint64_t rows, copied;
};

/* INSERT of the row's columns, leaving a row whose key the target has. */
static int make_insert(struct copy *copy, struct sbx_sql_row *row, struct sbx_error *err)
{
        char values[256] = "";
        int n = snprintf(copy->insert, sizeof(copy->insert), "INSERT INTO %s (", copy->table);
        size_t used = n > 0 ? (size_t)n : 0, values_used = 0;
        int columns = sbx_sql_column_count(row);
        for (int i = 0; i < columns && used < sizeof(copy->insert); i++) {
                const char *separator = i + 1 < columns ? ", " : "";
                n = snprintf(copy->insert + used, sizeof(copy->insert) - used, "%s%s",
                             sbx_sql_column_name(row, i), separator);
                used += n > 0 ? (size_t)n : 0;
                n = snprintf(values + values_used, sizeof(values) - values_used, "?%d%s", i + 1,
                             separator);
                values_used += n > 0 ? (size_t)n : 0;
        }
        if (used < sizeof(copy->insert))
                used += (size_t)snprintf(copy->insert + used, sizeof(copy->insert) - used,
                                         ") VALUES (%s) ON CONFLICT DO NOTHING", values);
        if (used >= sizeof(copy->insert) || values_used >= sizeof(values))
                return sbx_error_set(err, ENAMETOOLONG, "copy %s: too many columns", copy->table);
        return 0;
}

/* Whether column i of row is the node of a row that ran or lives somewhere: an execution not
 * queued, or a session. */
static bool takes_node(struct sbx_sql_row *row, int i)
{
        if (strcmp(sbx_sql_column_name(row, i), "node") != 0)
                return false;
        for (int c = 0; c < sbx_sql_column_count(row); c++)
                if (strcmp(sbx_sql_column_name(row, c), "status") == 0) {
                        size_t size = 0;
                        const char *status = sbx_sql_column_text(row, c, &size);
                        return status == NULL || strcmp(status, SBX_AUDIT_STATUS_QUEUED) != 0;
                }
        return true;
}

static int copy_row(void *ctx, struct sbx_sql_row *row, struct sbx_error *err)
{
        struct copy *copy = ctx;
        int columns = sbx_sql_column_count(row);
        if (columns > COPY_MAX_COLUMNS)
                return sbx_error_set(err, E2BIG, "copy %s: too many columns", copy->table);
        if (copy->insert[0] == '\0' && make_insert(copy, row, err) < 0)
                return -1;
        struct sbx_sql_value values[COPY_MAX_COLUMNS];
        for (int i = 0; i < columns; i++) {
                size_t size = 0;
                if (takes_node(row, i) && copy->node != NULL) {
                        values[i] = sbx_sql_text(copy->node);
                } else if (sbx_sql_is_null(row, i)) {
                        values[i] = sbx_sql_null();
                } else if (sbx_sql_column_type(row, i) == SBX_SQL_INT) {
                        values[i] = sbx_sql_int(sbx_sql_column_int(row, i));
                } else if (sbx_sql_column_type(row, i) == SBX_SQL_BLOB) {
                        const void *data = sbx_sql_column_blob(row, i, &size);
                        values[i] = sbx_sql_blob(data, size);
                } else {
                        values[i] = sbx_sql_text(sbx_sql_column_text(row, i, &size));
                }
        }
        uint64_t changes = 0;
        if (sbx_sql_run_once(copy->target, copy->insert, values, (size_t)columns, NULL, NULL,
                             &changes, copy->table, err) < 0)
                return -1;
        copy->rows++;
        copy->copied += changes;
        return 0;
}

int sbx_audit_copy(struct sbx_audit *from, struct sbx_audit *to, const char *node,
                   void (*on_table)(void *ctx, const struct sbx_audit_copied *table), void *ctx,
                   struct sbx_error *err)
{
        static const char *const tables[] = {SBX_AUDIT_TABLES};
        for (size_t t = 0; t < SBX_ARRAY_SIZE(tables); t++) {
                struct copy copy = {.table = tables[t], .node = node};
                char select[96];
                snprintf(select, sizeof(select), "SELECT * FROM %s ORDER BY rowid", tables[t]);
                copy.target = sbx_sql_hold(to->sql);
                struct sbx_sql_conn *source = sbx_sql_hold(from->sql);
                int rc = sbx_sql_begin(copy.target, err);
                if (rc == 0)
                        rc = sbx_sql_run_once(source, select, NULL, 0, copy_row, &copy, NULL,
                                              tables[t], err);
                if (rc == 0)
                        rc = sbx_sql_commit(copy.target, err);
                sbx_sql_let_go(source);
                sbx_sql_let_go(copy.target); /* rolls back what did not commit */
                if (rc < 0)
                        return sbx_error_prefix(err, "copy %s", tables[t]);
                if (on_table != NULL)
                        on_table(ctx,
                                 &(struct sbx_audit_copied){tables[t], copy.rows, copy.copied});
        }
        return 0;
}
