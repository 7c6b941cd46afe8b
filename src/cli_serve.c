/* `sandboxd serve`: the HTTP service as two processes (DESIGN.md "Two processes").
 *
 *   main (root)  loads the config, prepares the data directory, binds the listen socket and
 *                makes the engine socket pair, then forks (the engine loop removes sandboxes
 *                an earlier crash left behind before it serves):
 *     API child  execs sandboxd-api (src/api/main.c), which opens the audit store, drops to the
 *                API uid with no capabilities, and serves HTTP; it talks to the engine only
 *                through the SOCK_SEQPACKET socket, passed as fd 4 (the listen socket as fd 3).
 *     engine     (the main process itself) stays root, owns every sandbox through its workers,
 *                and is the subreaper of everything below it.
 *
 * Either side ending ends the other: the API hanging up stops the engine; the engine going away
 * (the socket closes, or PDEATHSIG) stops the API. SIGTERM to either: no new work, running
 * executions finish or are canceled within server.shutdown_grace_s, exit 0. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#include "engine/compile_cache.h"
#include "engine/execution.h"
#include "engine/server.h"
#include "protocol/spool.h"
#include "sandbox/gvisor/gvisor.h"
#include "service/config.h"
#include "util/cleanup.h"
#include "util/log.h"

/* How long the engine waits for the API process to exit after the engine loop ended. */
#define API_EXIT_WAIT_MS 5000

static void serve_usage(FILE *out)
{
        fprintf(out, "usage: sandboxd serve [--config FILE]\n"
                     "Without --config the embedded defaults apply (127.0.0.1:8080, one tier),\n"
                     "and a token for a tenant \"local\" is generated and printed.\n");
}

static int load_config(const char *path, struct sbx_config *config, struct sbx_error *err)
{
        if (path != NULL)
                return sbx_config_load_file(path, config, err);
        return sbx_config_load_string(sbx_config_default_text, "<embedded>", config, err);
}

/* Makes path a directory of the API uid, mode 0700 (it may exist). */
static int prepare_api_dir(const char *path, uid_t api_uid, struct sbx_error *err)
{
        if (mkdir(path, 0700) < 0 && errno != EEXIST)
                return sbx_error_set(err, errno, "mkdir %s", path);
        _cleanup_close_ int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0 || fchown(fd, api_uid, api_uid) < 0 || fchmod(fd, 0700) < 0)
                return sbx_error_set(err, errno, "make %s the API uid's", path);
        return 0;
}

/* The data directory and its spool belong to the API uid: the API process writes the audit
 * store's WAL files after dropping root, and removes what it folded in from the spool. */
static int prepare_data_dir(const struct sbx_server_config *server, char *spool_dir,
                            size_t spool_dir_size, struct sbx_error *err)
{
        if ((size_t)snprintf(spool_dir, spool_dir_size, "%s/%s", server->data_dir,
                             SBX_SPOOL_DIR_NAME) >= spool_dir_size)
                return sbx_error_set(err, ENAMETOOLONG, "spool path in %s", server->data_dir);
        if (prepare_api_dir(server->data_dir, server->api_uid, err) < 0 ||
            prepare_api_dir(spool_dir, server->api_uid, err) < 0)
                return -1;
        return 0;
}

/* DATA_DIR/compile-cache, root's with mode 0700, opened once for the engine; false (the cache
 * off, said in the log) when it cannot be. Before the API process exists: the data directory
 * is its uid's. */
static bool prepare_compile_cache(const struct sbx_server_config *server,
                                  struct sbx_compile_cache *cache)
{
        char path[PATH_MAX];
        struct sbx_error err = {0};
        if (server->compile_cache_bytes == 0)
                return false;
        if ((size_t)snprintf(path, sizeof(path), "%s/compile-cache", server->data_dir) >=
                    sizeof(path) ||
            sbx_compile_cache_open(path, server->compile_cache_bytes, cache, &err) < 0) {
                sbx_warn("serve: the compile cache is off: %s",
                         err.message[0] ? err.message : path);
                return false;
        }
        return true;
}

static int bind_listen_socket(const struct sbx_server_config *server, struct sbx_error *err)
{
        int fd = socket(server->listen_address.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return sbx_error_set(err, errno, "socket");
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (bind(fd, (const struct sockaddr *)&server->listen_address,
                 server->listen_address_size) < 0 ||
            listen(fd, 512) < 0) {
                int saved = errno;
                close(fd);
                return sbx_error_set(err, saved, "listen on %s", server->listen);
        }
        return fd;
}

static int make_engine_sockets(int fds[2], struct sbx_error *err)
{
        /* One record per message; a large one travels as a sealed memfd (protocol/transport.c). */
        if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds) < 0)
                return sbx_error_set(err, errno, "socketpair");
        return 0;
}

/* Where sandboxd-api is: next to this program (the build directory, or the install's bin). */
static int api_program_path(char *path, size_t size, struct sbx_error *err)
{
        ssize_t n = readlink("/proc/self/exe", path, size - 1);
        if (n < 0)
                return sbx_error_set(err, errno, "readlink /proc/self/exe");
        path[n] = '\0';
        char *slash = strrchr(path, '/');
        if (slash == NULL || (size_t)(slash - path) + sizeof("/sandboxd-api") > size)
                return sbx_error_set(err, ENAMETOOLONG, "path of sandboxd-api");
        strcpy(slash, "/sandboxd-api");
        return 0;
}

/* The API child: fds 3 and 4 are the listen and engine sockets, everything else closed, then
 * exec. Only returns on failure (the caller _exits). */
static void exec_api(const char *program, const char *config_path, bool create_local_tenant,
                     int listen_fd, int engine_fd)
{
        /* Above every fd number in use, so that neither dup2 below clobbers the other source. */
        int listen_copy = fcntl(listen_fd, F_DUPFD, 10);
        int engine_copy = fcntl(engine_fd, F_DUPFD, 10);
        if (listen_copy < 0 || engine_copy < 0 || dup2(listen_copy, 3) < 0 ||
            dup2(engine_copy, 4) < 0 || close_range(5, ~0U, 0) < 0) {
                perror("sandboxd serve: prepare the API's fds");
                return;
        }
        const char *argv[8];
        size_t n = 0;
        argv[n++] = program;
        if (config_path != NULL) {
                argv[n++] = "--config";
                argv[n++] = config_path;
        }
        if (create_local_tenant)
                argv[n++] = "--create-local-tenant";
        argv[n] = NULL;
        execv(program, (char *const *)argv);
        fprintf(stderr, "sandboxd serve: exec %s: %s\n", program, strerror(errno));
}

static void wait_for_api(pid_t api_pid)
{
        for (int waited = 0; waited < API_EXIT_WAIT_MS; waited += 10) {
                pid_t done = waitpid(api_pid, NULL, WNOHANG);
                if (done == api_pid || (done < 0 && errno == ECHILD))
                        return;
                usleep(10 * 1000);
        }
        sbx_warn("serve: the API process did not exit; killing it");
        kill(api_pid, SIGKILL);
        waitpid(api_pid, NULL, 0);
}

int cli_serve(int argc, char **argv)
{
        static const struct option options[] = {
                {"config", required_argument, NULL, 'c'},
                {"help", no_argument, NULL, 'h'},
                {NULL, 0, NULL, 0},
        };
        const char *config_path = NULL;
        optind = 1;
        opterr = 0;
        int opt;
        while ((opt = getopt_long(argc, argv, "+c:h", options, NULL)) != -1) {
                switch (opt) {
                case 'c':
                        config_path = optarg;
                        break;
                case 'h':
                        serve_usage(stdout);
                        return 0;
                default:
                        fprintf(stderr, "sandboxd serve: unknown or incomplete option '%s'\n",
                                argv[optind - 1]);
                        serve_usage(stderr);
                        return CLI_EXIT_USAGE;
                }
        }
        if (optind != argc) {
                serve_usage(stderr);
                return CLI_EXIT_USAGE;
        }
        if (geteuid() != 0) {
                fprintf(stderr, "sandboxd serve: must run as root (it creates namespaces and "
                                "cgroups, then drops root in the API process)\n");
                return CLI_EXIT_NOPERM;
        }

        struct sbx_error err = {0};
        struct sbx_config config = {0};
        if (load_config(config_path, &config, &err) < 0) {
                fprintf(stderr, "sandboxd serve: config: %s\n", err.message);
                return CLI_EXIT_CONFIG;
        }
        int rc = CLI_EXIT_SOFTWARE;
        int listen_fd = -1;
        int engine_fds[2] = {-1, -1};
        char api_program[PATH_MAX];
        if (api_program_path(api_program, sizeof(api_program), &err) < 0 ||
            access(api_program, X_OK) < 0) {
                fprintf(stderr, "sandboxd serve: cannot find sandboxd-api next to sandboxd: %s\n",
                        err.message[0] ? err.message : strerror(errno));
                goto out;
        }
        char spool_dir[PATH_MAX];
        if (prepare_data_dir(&config.server, spool_dir, sizeof(spool_dir), &err) < 0) {
                fprintf(stderr, "sandboxd serve: data dir: %s\n", err.message);
                goto out;
        }
        listen_fd = bind_listen_socket(&config.server, &err);
        if (listen_fd < 0) {
                fprintf(stderr, "sandboxd serve: %s\n", err.message);
                goto out;
        }
        if (make_engine_sockets(engine_fds, &err) < 0) {
                fprintf(stderr, "sandboxd serve: %s\n", err.message);
                goto out;
        }
        fflush(NULL);

        /* Root's alone: the engine writes it and the API process never reads an artifact. */
        struct sbx_compile_cache compile_cache = {.dir_fd = -1};
        bool cache_on = prepare_compile_cache(&config.server, &compile_cache);
        pid_t api_pid = fork();
        if (api_pid < 0) {
                fprintf(stderr, "sandboxd serve: fork: %s\n", strerror(errno));
                goto out;
        }
        if (api_pid == 0) {
                /* If the engine dies, so does the API (its socket closes too). */
                prctl(PR_SET_PDEATHSIG, SIGTERM);
                /* With no tenant configured, the API process creates "local" and prints its
                 * token: tokens and their hashes are its business alone. */
                exec_api(api_program, config_path, config.n_tenants == 0, listen_fd, engine_fds[1]);
                _exit(CLI_EXIT_SOFTWARE);
        }
        close(engine_fds[1]);
        engine_fds[1] = -1;
        close(listen_fd);
        listen_fd = -1;
        sbx_info("serve: listening on %s (API pid %d)", config.server.listen, (int)api_pid);
        sbx_gvisor_set_platform(config.server.gvisor_platform);

        struct sbx_engine_pool pools[SBX_CONFIG_MAX_POOLS];
        size_t n_pools = 0;
        for (size_t i = 0; i < config.n_pools; i++) {
                if (config.pools[i].min_idle == 0)
                        continue; /* off */
                pools[n_pools++] = (struct sbx_engine_pool){
                        .language = config.pools[i].language,
                        .backend = config.pools[i].backend,
                        .sessions = config.pools[i].sessions,
                        .min_idle = (unsigned)config.pools[i].min_idle,
                        .max_idle = (unsigned)config.pools[i].max_idle,
                        .max_idle_s = (unsigned)config.pools[i].max_idle_s,
                        .memory_bytes = sbx_pool_guest_memory_bytes(
                                config.pools[i].backend, config.pools[i].memory_mb << 20),
                };
        }
        struct sbx_engine_options engine_options = {
                .max_sandboxes = (unsigned)config.server.max_sandboxes,
                .templates = config.server.templates,
                .shutdown_grace_ms = (uint32_t)(config.server.shutdown_grace_s * 1000),
                .api_pid = api_pid,
                .pools = pools,
                .n_pools = n_pools,
                .spool_dir = spool_dir,
                .spool_owner = config.server.api_uid,
                .compile_cache = cache_on ? &compile_cache : NULL,
                .config_path = config_path,
        };
        rc = sbx_engine_serve(engine_fds[0], &engine_options, &err) < 0 ? CLI_EXIT_SOFTWARE : 0;
        if (rc != 0)
                fprintf(stderr, "sandboxd serve: engine: %s\n", err.message);
        /* The engine is done: the API must not keep accepting work nobody will run, and a
         * call it still waits on fails at once (the engine's end closed) instead of holding
         * its drain until the kill below. */
        close(engine_fds[0]);
        engine_fds[0] = -1;
        kill(api_pid, SIGTERM);
        wait_for_api(api_pid);
out:
        if (listen_fd >= 0)
                close(listen_fd);
        for (int i = 0; i < 2; i++)
                if (engine_fds[i] >= 0)
                        close(engine_fds[i]);
        sbx_config_free(&config);
        return rc;
}

/* The most arguments a command run by sandboxd-api takes (store migrate's six). */
#define API_COMMAND_MAX_ARGS 8

/* Runs `sandboxd-api COMMAND ARGS...` in this process (exec): the commands that need what only
 * sandboxd-api links (the crypto library for tokens, libcurl for the MCP server, libpq for the
 * store), so that `sandboxd run` starts without them. Returns only on failure. */
static int exec_api_command(const char *command, int argc, char **argv)
{
        if (argc > API_COMMAND_MAX_ARGS + 1) {
                fprintf(stderr, "sandboxd %s: too many arguments\n", command);
                return CLI_EXIT_USAGE;
        }
        struct sbx_error err = {0};
        char api_program[PATH_MAX];
        if (api_program_path(api_program, sizeof(api_program), &err) < 0) {
                fprintf(stderr, "sandboxd %s: %s\n", command, err.message);
                return CLI_EXIT_SOFTWARE;
        }
        const char *api_argv[API_COMMAND_MAX_ARGS + 3] = {api_program, command};
        for (int i = 1; i < argc; i++)
                api_argv[i + 1] = argv[i];
        fflush(NULL);
        execv(api_program, (char *const *)api_argv);
        fprintf(stderr, "sandboxd %s: cannot run %s: %s\n", command, api_program, strerror(errno));
        return CLI_EXIT_SOFTWARE;
}

int cli_token(int argc, char **argv)
{
        if (argc > 2) {
                fprintf(stderr, "usage: sandboxd token [TENANT]\n");
                return CLI_EXIT_USAGE;
        }
        return exec_api_command("token", argc, argv);
}

int cli_store(int argc, char **argv)
{
        return exec_api_command("store", argc, argv);
}

int cli_mcp(int argc, char **argv)
{
        if (argc > 1) {
                fprintf(stderr, "usage: sandboxd mcp   (SANDBOXD_URL, SANDBOXD_TOKEN in the "
                                "environment)\n");
                return CLI_EXIT_USAGE;
        }
        return exec_api_command("mcp", argc, argv);
}
