/* `sandboxd store migrate` (store_migrate.h). */
#include "api/store_migrate.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "service/audit.h"
#include "service/audit_copy.h"
#include "service/pg.h"
#include "util/cleanup.h"
#include "util/log.h"

#define USAGE                                                                                      \
        "usage: sandboxd store migrate --from sqlite:PATH --to postgresql://... [--node NAME]\n"   \
        "  PATH: a node's data directory or its " SBX_AUDIT_FILE_NAME "\n"                         \
        "  NAME: the node's name in the fleet ([store] node; default: the host's name)\n"

static void print_table(void *ctx, const struct sbx_audit_copied *table)
{
        (void)ctx;
        printf("%-12s %8" PRIu64 " rows, %8" PRIu64 " copied\n", table->table, table->rows,
               table->copied);
        fflush(stdout);
}

/* The data directory of a source PATH (the directory, or the directory of its audit.db) in
 * directory; -1 with err when it holds no audit store. */
static int source_directory(const char *path, char directory[PATH_MAX], struct sbx_error *err)
{
        struct stat st;
        if (stat(path, &st) < 0)
                return sbx_error_set(err, errno, "%s", path);
        if (S_ISDIR(st.st_mode)) {
                snprintf(directory, PATH_MAX, "%s", path);
        } else {
                const char *name = strrchr(path, '/');
                if (strcmp(name != NULL ? name + 1 : path, SBX_AUDIT_FILE_NAME) != 0)
                        return sbx_error_set(err, EINVAL, "%s: neither a data directory nor its %s",
                                             path, SBX_AUDIT_FILE_NAME);
                char copy[PATH_MAX];
                snprintf(copy, sizeof(copy), "%s", path);
                snprintf(directory, PATH_MAX, "%s", dirname(copy));
        }
        char file[PATH_MAX + 16];
        snprintf(file, sizeof(file), "%s/%s", directory, SBX_AUDIT_FILE_NAME);
        if (stat(file, &st) < 0 || !S_ISREG(st.st_mode))
                return sbx_error_set(err, ENOENT, "%s: no audit store (%s) there", path,
                                     SBX_AUDIT_FILE_NAME);
        return 0;
}

static int migrate(const char *from, const char *to, const char *node)
{
        struct sbx_error err = {0};
        char directory[PATH_MAX];
        if (source_directory(from, directory, &err) < 0) {
                fprintf(stderr, "sandboxd store migrate: %s\n", err.message);
                return 1;
        }
        struct sbx_audit *source = sbx_audit_open(directory, &err);
        struct sbx_pg *pg = NULL;
        struct sbx_audit *target = NULL;
        int rc = 1;
        if (source == NULL)
                fprintf(stderr, "sandboxd store migrate: the source: %s\n", err.message);
        else if (sbx_pg_open(to, 1, &pg, &err) < 0)
                fprintf(stderr, "sandboxd store migrate: the target: %s\n", err.message);
        else if ((target = sbx_audit_open_shared(pg, node, &err)) == NULL)
                fprintf(stderr, "sandboxd store migrate: the target: %s\n", err.message);
        else if (sbx_audit_copy(source, target, node, print_table, NULL, &err) < 0)
                fprintf(stderr, "sandboxd store migrate: %s (a second run copies the rest)\n",
                        err.message);
        else
                rc = 0;
        sbx_audit_close(target);
        sbx_pg_close(pg);
        sbx_audit_close(source);
        return rc;
}

int sbx_store_main(int argc, char **argv)
{
        if (argc < 2 || strcmp(argv[1], "migrate") != 0) {
                fputs(USAGE, stderr);
                return 64;
        }
        static const struct option options[] = {
                {"from", required_argument, NULL, 'f'},
                {"to", required_argument, NULL, 't'},
                {"node", required_argument, NULL, 'n'},
                {NULL, 0, NULL, 0},
        };
        const char *from = NULL, *to = NULL, *node = NULL;
        int opt;
        optind = 1;
        while ((opt = getopt_long(argc - 1, argv + 1, "", options, NULL)) != -1) {
                if (opt == 'f')
                        from = optarg;
                else if (opt == 't')
                        to = optarg;
                else if (opt == 'n')
                        node = optarg;
                else
                        return 64;
        }
        if (from == NULL || to == NULL || optind != argc - 1 ||
            strncmp(from, "sqlite:", strlen("sqlite:")) != 0 ||
            (strncmp(to, "postgresql://", strlen("postgresql://")) != 0 &&
             strncmp(to, "postgres://", strlen("postgres://")) != 0)) {
                fputs(USAGE, stderr);
                return 64;
        }
        char host[256] = "";
        if (node == NULL) {
                if (gethostname(host, sizeof(host) - 1) < 0) {
                        perror("sandboxd store migrate: gethostname");
                        return 1;
                }
                node = host;
        }
        sbx_log_init(SBX_LOG_WARN);
        return migrate(from + strlen("sqlite:"), to, node);
}
