/* sandboxd-api: the API process of `sandboxd serve`, exec'd by the engine right after fork.
 * Not meant to be started by hand.
 *
 *   sandboxd-api [--config FILE] [--create-local-tenant]
 *     fd 3  the listening HTTP socket (bound by root)
 *     fd 4  the engine's SOCK_SEQPACKET socket
 *   sandboxd-api token [TENANT]     what `sandboxd token` runs
 *
 * It loads the same configuration as the engine (the embedded one without --config; with
 * --create-local-tenant, because none is configured, it adds the tenant "local" with the token
 * kept in <data_dir>/local-token, made on the first start, and prints that token), opens the
 * audit store while still root, then drops to the API uid with no capabilities for the rest of
 * its life. Before it serves, it records what an earlier API process left unfinished
 * (api/recover.h). Tokens are made here and only here: this is
 * the one program that links the crypto library, which would cost every `sandboxd run` ~0.3 ms of
 * start-up (bench/results/exec_latency.md). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <grp.h>
#include <linux/capability.h>
#include <pthread.h>
#include <curl/curl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "api/engine_client.h"
#include "api/async.h"
#include "api/webhooks.h"
#include "api/http.h"
#include "api/sessions.h"
#include "api/store_migrate.h"
#include "api/live_config.h"
#include "api/metrics.h"
#include "api/openapi.h"
#include "mcp/stdio.h"
#include "api/recover.h"
#include "protocol/spool.h"
#include "service/audit.h"
#include "service/auth.h"
#include "service/config.h"
#include "service/quota.h"
#include "service/quota_pg.h"
#include "util/capability.h"
#include "util/cleanup.h"
#include "util/log.h"

#define LISTEN_FD 3
#define ENGINE_FD 4

/* The process gives up root for good: no supplementary groups, the API uid/gid, an empty
 * bounding set, no capabilities, no_new_privs. A bug in HTTP or JSON handling then runs with the
 * rights of an unprivileged user that owns nothing but the data directory. */
static int drop_privileges(uid_t uid, struct sbx_error *err)
{
        if (sbx_capability_limit_bounding(NULL, 0, err) < 0)
                return -1;
        if (setgroups(0, NULL) < 0 || setresgid(uid, uid, uid) < 0 || setresuid(uid, uid, uid) < 0)
                return sbx_error_set(err, errno, "switch to uid %u", (unsigned)uid);
        /* Changing every uid away from 0 cleared the permitted and effective sets; make the
         * inheritable one empty too, whatever it was. */
        struct __user_cap_header_struct header = {_LINUX_CAPABILITY_VERSION_3, 0};
        struct __user_cap_data_struct data[2] = {{0}};
        if (syscall(SYS_capset, &header, data) < 0)
                return sbx_error_set(err, errno, "capset");
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
                return sbx_error_set(err, errno, "no_new_privs");
        return 0;
}

static void engine_lost(void *ctx)
{
        /* Wakes the main thread's sigwait(): without an engine there is no service. */
        kill(getpid(), SIGUSR1);
}

/* The local tenant's token, kept in the data directory so that it stays the same from one start
 * to the next: read when the file holds one, else made and written (mode 0600, root's). */
static int local_token(const char *data_dir, char token[SBX_TOKEN_LENGTH + 1],
                       struct sbx_error *err)
{
        char path[PATH_MAX];
        if (snprintf(path, sizeof(path), "%s/%s", data_dir, SBX_LOCAL_TOKEN_FILE) >=
            (int)sizeof(path))
                return sbx_error_set(err, ENAMETOOLONG, "path of the local token");
        _cleanup_close_ int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (fd >= 0) {
                char text[SBX_TOKEN_LENGTH + 2] = "";
                ssize_t n = read(fd, text, sizeof(text) - 1);
                if (n >= SBX_TOKEN_LENGTH && strncmp(text, SBX_TOKEN_PREFIX, 4) == 0 &&
                    (n == SBX_TOKEN_LENGTH || text[SBX_TOKEN_LENGTH] == '\n')) {
                        memcpy(token, text, SBX_TOKEN_LENGTH);
                        token[SBX_TOKEN_LENGTH] = '\0';
                        return 0;
                }
                sbx_warn("local token: %s does not hold a token; making a new one", path);
        }
        if (sbx_auth_token_new(token, err) < 0)
                return -1;
        /* A new file each time (rename), so a reader never sees half a token. */
        char temporary[PATH_MAX + 8];
        snprintf(temporary, sizeof(temporary), "%s.new", path);
        _cleanup_close_ int out =
                open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (out < 0 || dprintf(out, "%s\n", token) < 0 || rename(temporary, path) < 0)
                return sbx_error_set(err, errno, "write %s", path);
        return 0;
}

/* Creates the tenant "local" with its kept token (its hash in digest), and tells the operator. */
static int create_local_tenant(struct sbx_config *config, uint8_t digest[SBX_SHA256_SIZE],
                               struct sbx_error *err)
{
        char token[SBX_TOKEN_LENGTH + 1];
        if (local_token(config->server.data_dir, token, err) < 0 ||
            sbx_auth_sha256(token, strlen(token), digest, err) < 0 ||
            sbx_config_add_local_tenant(config, digest, err) < 0)
                return -1;
        printf("sandboxd: no tenants configured; tenant \"local\" (tier %s)\n"
               "  token: %s   (kept in %s/%s: delete it for a new one)\n"
               "  try:   curl -s -H 'Authorization: Bearer %s' -H 'Content-Type: application/json' "
               "\\\n"
               "           -d '{\"language\":\"python\",\"code\":\"print(2+2)\"}' "
               "http://%s/v1/executions\n"
               "  or open http://%s/ in a browser (the playground) and paste the token\n",
               config->tiers[0].name, token, config->server.data_dir, SBX_LOCAL_TOKEN_FILE, token,
               config->server.listen, config->server.listen);
        fflush(stdout);
        return 0;
}

/* Loads the config; with create_local, adds the local tenant, its token's hash in
 * local_digest. */
static int load_config(const char *path, bool create_local, struct sbx_config *config,
                       uint8_t local_digest[SBX_SHA256_SIZE], struct sbx_error *err)
{
        int rc = path != NULL ? sbx_config_load_file(path, config, err)
                              : sbx_config_load_string(sbx_config_default_text, "<embedded>",
                                                       config, err);
        if (rc < 0 || !create_local)
                return rc;
        return create_local_tenant(config, local_digest, err);
}

/* `sandboxd token [TENANT]`. */
static int print_token(int argc, char **argv)
{
        if (argc > 2) {
                fprintf(stderr, "usage: sandboxd token [TENANT]\n");
                return 64;
        }
        struct sbx_error err = {0};
        if (sbx_auth_print_token(stdout, argc == 2 ? argv[1] : NULL, &err) < 0) {
                fprintf(stderr, "sandboxd token: %s\n", err.message);
                return 64;
        }
        return 0;
}

/* What the engine read again on SIGHUP: the new tiers and tenants. */
struct reload_context {
        struct sbx_live_config *live;
        const char *name;
        struct sbx_sessions *sessions; /* told when the engine ends a session */
};

static void session_ended(void *ctx, const struct sbx_message_session *ended)
{
        struct reload_context *reload = ctx;
        sbx_sessions_ended(reload->sessions, ended);
}

static void config_arrived(void *ctx, const char *text, size_t size)
{
        struct reload_context *reload = ctx;
        struct sbx_error err = {0};
        if (sbx_live_config_reload(reload->live, text, size, reload->name, &err) < 0)
                sbx_warn("reload refused, the tenants and tiers stay as they were: %s",
                         err.message);
}

/* Where the other nodes reach this node's API (api/forward.h): [store] advertise, else http://
 * and the listen address, whose host is host_name when it listens on every address. */
static void advertised_url(const struct sbx_config *config, const char *host_name, char *url,
                           size_t size)
{
        if (config->store.advertise != NULL) {
                snprintf(url, size, "%s", config->store.advertise);
                return;
        }
        const char *listen = config->server.listen;
        const char *port = strrchr(listen, ':');
        size_t host_len = port != NULL ? (size_t)(port - listen) : strlen(listen);
        bool any = (host_len == 7 && strncmp(listen, "0.0.0.0", 7) == 0) ||
                   (host_len == 4 && strncmp(listen, "[::]", 4) == 0);
        if (any)
                snprintf(url, size, "http://%s%s", host_name, port != NULL ? port : "");
        else
                snprintf(url, size, "http://%s", listen);
}

/* The fleet's store of a [store] url: its quotas (quota_pg.h) in *fleet and its audit store in
 * *audit. */
static int open_fleet_store(const struct sbx_config *config, struct sbx_quota_pg **fleet,
                            struct sbx_audit **audit, struct sbx_error *err)
{
        char host[256] = "";
        if (gethostname(host, sizeof(host) - 1) < 0)
                return sbx_error_set(err, errno, "store: gethostname");
        const char *node = config->store.node != NULL ? config->store.node : host;
        char url[600];
        advertised_url(config, host, url, sizeof(url));
        uint64_t longest_window_s = 0;
        for (size_t i = 0; i < config->n_tiers; i++)
                if (config->tiers[i].cpu_window_s > longest_window_s)
                        longest_window_s = config->tiers[i].cpu_window_s;
        if (sbx_quota_pg_open(&config->store, node, url, longest_window_s, fleet, err) < 0)
                return -1;
        *audit = sbx_audit_open_shared(sbx_quota_pg_store(*fleet), node, err);
        if (*audit == NULL)
                return sbx_error_prefix(err, "audit store");
        sbx_info("store: quotas and records are fleet-wide in PostgreSQL, this node is '%s' at %s",
                 node, url);
        return 0;
}

/* Serves with config (moved into the live configuration); fleet is NULL without a store. */
static int serve(struct sbx_config *config, const char *config_path, const uint8_t *local_digest,
                 struct sbx_audit *audit, struct sbx_quota_pg *fleet, const sigset_t *signals)
{
        struct sbx_error err = {0};
        _cleanup_free_ const char **tenants = calloc(config->n_tenants + 1, sizeof(*tenants));
        if (tenants == NULL)
                return 1;
        for (size_t i = 0; i < config->n_tenants; i++)
                tenants[i] = config->tenants[i].name;
        struct sbx_metrics *metrics = sbx_metrics_new(tenants, config->n_tenants, &err);
        struct sbx_quota *quota = sbx_quota_new(config->server.max_sandboxes);
        if (quota != NULL && fleet != NULL)
                sbx_quota_share(quota, fleet);
        struct sbx_live_config *live =
                metrics ? sbx_live_config_new(config, local_digest, metrics) : NULL;
        struct sbx_sessions *sessions =
                metrics ? sbx_sessions_new(metrics, audit, quota, fleet) : NULL;
        struct reload_context reload = {.live = live,
                                        .name = config_path ? config_path : "<embedded>",
                                        .sessions = sessions};
        const struct sbx_engine_client_events events = {.on_lost = engine_lost,
                                                        .on_config = config_arrived,
                                                        .on_session_ended = session_ended,
                                                        .ctx = &reload};
        struct sbx_engine_client *engine = NULL;
        int rc = 1;
        if (metrics == NULL || quota == NULL || live == NULL || sessions == NULL) {
                fprintf(stderr, "sandboxd-api: out of memory\n");
        } else if (sbx_engine_client_start(ENGINE_FD, &events, &engine, &err) < 0) {
                fprintf(stderr, "sandboxd-api: engine client: %s\n", err.message);
        } else {
                struct sbx_api api = {
                        .config = sbx_live_config_initial(live),
                        .live = live,
                        .audit = audit,
                        .metrics = metrics,
                        .quota = quota,
                        .engine = engine,
                        .sessions = sessions,
                        .listen_fd = LISTEN_FD,
                };
                /* The senders first: the runners wake them. */
                api.webhooks = sbx_webhooks_start(&api, &err);
                if (api.webhooks != NULL)
                        api.async = sbx_async_start(&api, &err);
                if (api.async == NULL || api.webhooks == NULL)
                        fprintf(stderr, "sandboxd-api: %s\n", err.message);
                else if (sbx_api_serve(&api, signals, &err) < 0)
                        fprintf(stderr, "sandboxd-api: %s\n", err.message);
                else
                        rc = 0;
                sbx_async_stop(api.async);
                sbx_webhooks_stop(api.webhooks);
        }
        sbx_engine_client_free(engine); /* no reload can arrive after this */
        sbx_sessions_free(sessions);
        sbx_live_config_free(live);
        sbx_quota_free(quota);
        sbx_metrics_free(metrics);
        return rc;
}

int main(int argc, char **argv)
{
        static const struct option options[] = {
                {"config", required_argument, NULL, 'c'},
                {"create-local-tenant", no_argument, NULL, 't'},
                {NULL, 0, NULL, 0},
        };
        if (argc >= 2 && strcmp(argv[1], "token") == 0)
                return print_token(argc - 1, argv + 1);
        if (argc >= 2 && strcmp(argv[1], "mcp") == 0)
                return sbx_mcp_stdio_main(argc - 1, argv + 1);
        if (argc >= 2 && strcmp(argv[1], "store") == 0)
                return sbx_store_main(argc - 1, argv + 1);
        const char *config_path = NULL;
        bool create_local = false;
        int opt;
        while ((opt = getopt_long(argc, argv, "", options, NULL)) != -1) {
                if (opt == 'c')
                        config_path = optarg;
                else if (opt == 't')
                        create_local = true;
                else
                        return 64;
        }
        sbx_log_init(SBX_LOG_INFO); /* as the engine's `serve`, which runs it */
        /* A client that hangs up mid-response must not kill the server. SIGHUP is the engine's
         * to act on (it sends the config file read again); one sent to the whole process group
         * must not end this process. */
        signal(SIGPIPE, SIG_IGN);
        signal(SIGHUP, SIG_IGN);

        /* The signals sigwait() takes are blocked before any thread exists: all inherit it. */
        sigset_t signals;
        sigemptyset(&signals);
        sigaddset(&signals, SIGTERM);
        sigaddset(&signals, SIGINT);
        sigaddset(&signals, SIGUSR1);
        pthread_sigmask(SIG_BLOCK, &signals, NULL);

        /* libcurl's global state (webhooks), before any thread exists. */
        if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
                fprintf(stderr, "sandboxd-api: libcurl failed to start\n");
                return 1;
        }
        /* Made once, here, so that no request meets a server without its document. */
        if (sbx_openapi_json() == NULL) {
                fprintf(stderr, "sandboxd-api: the OpenAPI document: out of memory\n");
                return 1;
        }
        struct sbx_error err = {0};
        struct sbx_config config = {0};
        uint8_t local_digest[SBX_SHA256_SIZE];
        if (load_config(config_path, create_local, &config, local_digest, &err) < 0) {
                fprintf(stderr, "sandboxd-api: config: %s\n", err.message);
                return 78;
        }
        /* A node's own audit store is opened while root (its file in the data directory); a
         * fleet's, in its PostgreSQL, once the privileges are dropped: opening it starts the
         * heartbeat's thread, and a thread started before the drop would keep every capability
         * (they are a thread's own). */
        struct sbx_quota_pg *fleet = NULL;
        struct sbx_audit *audit = NULL;
        if (config.store.url == NULL &&
            (audit = sbx_audit_open(config.server.data_dir, &err)) == NULL) {
                fprintf(stderr, "sandboxd-api: audit store: %s\n", err.message);
                sbx_config_free(&config);
                return 1;
        }
        int rc = 1;
        char spool_dir[PATH_MAX];
        snprintf(spool_dir, sizeof(spool_dir), "%s/%s", config.server.data_dir, SBX_SPOOL_DIR_NAME);
        struct sbx_recovery recovery;
        if (drop_privileges(config.server.api_uid, &err) < 0)
                fprintf(stderr, "sandboxd-api: drop privileges: %s\n", err.message);
        else if (audit == NULL && open_fleet_store(&config, &fleet, &audit, &err) < 0)
                fprintf(stderr, "sandboxd-api: %s\n", err.message);
        else if (sbx_api_recover(audit, spool_dir, config.server.store_output, &recovery, &err) < 0)
                fprintf(stderr, "sandboxd-api: recover: %s\n", err.message);
        else
                rc = serve(&config, config_path, create_local ? local_digest : NULL, audit, fleet,
                           &signals);
        sbx_audit_close(audit);
        sbx_quota_pg_close(fleet);
        sbx_config_free(&config);
        return rc;
}
