/* The service's configuration: one INI file (libinih) with a [server] section, [tier.NAME]
 * sections (ceilings, defaults, languages, quotas) and [tenant.NAME] sections (tier and the
 * SHA-256 of the bearer token). Loading is strict: an unknown section or key, a bad value, a
 * duplicate, or a tenant naming an unknown tier fails with "FILE:LINE: [section] key: why", so a
 * typo never silently weakens a limit. The README documents every key. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "model/limits.h"
#include "service/webhook_policy.h"
#include "util/error.h"

#define SBX_CONFIG_FILE_MAX    (1024 * 1024) /* the largest config file loaded */
#define SBX_SHA256_SIZE        32
#define SBX_SHA256_HEX_SIZE    64 /* without the terminating NUL */
#define SBX_CONFIG_NAME_MAX    64 /* tier and tenant names; they become metric labels */
#define SBX_TIER_MAX_LANGUAGES 16
#define SBX_TIER_MAX_BACKENDS  4

struct sbx_server_config {
        char *listen;                           /* as written: "127.0.0.1:8080" or "[::1]:8080" */
        struct sockaddr_storage listen_address; /* the same, ready for bind() */
        socklen_t listen_address_size;
        char *data_dir; /* absolute */
        uid_t api_uid;  /* the API process's uid and gid; never 0 */
        uint64_t max_body_bytes;
        uint64_t max_sandboxes;          /* concurrent workers in the engine */
        uint64_t max_sessions;           /* sessions open at once; 0: max_sandboxes / 2 */
        uint64_t shutdown_grace_s;       /* SIGTERM: how long running executions may finish */
        bool store_output;               /* keep stdout/stderr in the audit log */
        bool templates;                  /* python pool entries forked from a template */
        uint64_t max_connections;        /* HTTP connections at once */
        uint64_t max_connections_per_ip; /* ... from one client address */
        uint64_t compile_cache_bytes;    /* the compile cache's bound; 0: no cache */
        const char *gvisor_platform;     /* static: runsc's --platform (gvisor_platform key) */
        /* Webhook deliveries (api/webhooks.h): one attempt's bound, the first retry's delay
         * (doubled each time, with jitter), the attempts before it is recorded failed. */
        uint64_t webhook_timeout_ms;
        uint64_t webhook_backoff_ms;
        uint64_t webhook_max_attempts;
        /* GET /metrics needs this token's hash when set (it names every tenant). */
        bool metrics_token_required;
        uint8_t metrics_token_sha256[SBX_SHA256_SIZE];
};

/* Where the service keeps the state a fleet of nodes shares ([store]). Without a url every node
 * keeps its own (SQLite under data_dir, quotas in memory); with a PostgreSQL url, quotas hold
 * fleet-wide there (service/quota_pg.h). */
struct sbx_store_config {
        char *url;            /* "postgresql://..." or "postgres://..."; NULL: none */
        char *node;           /* this node's name in the store; NULL: the host's name */
        char *advertise;      /* the URL other nodes reach this one's API at; NULL: from listen */
        uint64_t connections; /* PostgreSQL connections the API process keeps (default 4) */
        uint64_t lease_ttl_s; /* how long a node's leases count after its last renewal (10) */
};

/* The drop-in APIs of other services (api/compat.h), as bits of a set. */
enum sbx_compat_api {
        SBX_COMPAT_PISTON = 1u << 0, /* Piston v2: /api/v2/... */
        SBX_COMPAT_JUDGE0 = 1u << 1, /* Judge0 CE: /submissions, /languages, /statuses */
};
#define SBX_COMPAT_ALL (SBX_COMPAT_PISTON | SBX_COMPAT_JUDGE0)

struct sbx_tier {
        char *name;
        struct sbx_limits max; /* the ceilings of the settable limits (cpu_millicores unused) */
        struct sbx_limits max_compile;   /* ... of a compile stage's (max_compile_NAME) */
        struct sbx_limits defaults;      /* a field 0 = not set: the built-in default applies */
        uint64_t max_concurrency;        /* executions in flight per tenant */
        uint64_t cpu_budget_ms;          /* CPU a tenant may use ... */
        uint64_t cpu_window_s;           /* ... within this rolling window */
        uint64_t max_sessions;           /* sessions open at once per tenant (default 8) */
        uint64_t max_session_lifetime_s; /* a session's longest life (default 3600) */
        uint64_t max_episodes;           /* RL episodes open at once per tenant (default 32) */
        uint64_t max_queued;  /* asynchronous executions waiting per tenant (default 10000) */
        unsigned compat_apis; /* the drop-in APIs its tenants may use (default all) */
        /* Where its tenants' webhooks may go besides public addresses (webhook_policy.h). */
        struct sbx_webhook_allow webhook_allow;
        const char *languages[SBX_TIER_MAX_LANGUAGES]; /* static names (sbx_language_find) */
        size_t n_languages;
        const char *backends[SBX_TIER_MAX_BACKENDS]; /* static names (sbx_backend_find) */
        size_t n_backends;
};

struct sbx_tenant {
        char *name;
        const struct sbx_tier *tier; /* points into sbx_config.tiers */
        uint8_t token_sha256[SBX_SHA256_SIZE];
        char *webhook_secret; /* signs its webhooks (webhook_sign.h); NULL: it may not have any */
        /* The drop-in APIs on which a request without any token acts as this tenant (for the
         * clients that cannot send one); at most one tenant per API. Default none. */
        unsigned anonymous_apis;
};

/* A warm pool ([pool.LANGUAGE], or [pool.LANGUAGE.BACKEND] on another backend than the default):
 * entries are sandboxes with the language's loader started; or,
 * with sessions ([session_pool.LANGUAGE], python or bash), sessions opened ahead of time that an
 * OPEN of that language takes. */
struct sbx_pool_config {
        const char *language; /* static: the sbx_language_find() name */
        const char *backend;  /* static: the sbx_backend_name_find() name */
        bool sessions;
        uint64_t min_idle;   /* entries kept ready; 0 turns the pool off */
        uint64_t max_idle;   /* at most this many idle entries */
        uint64_t max_idle_s; /* an entry idle longer is replaced; 0 = never */
        uint64_t memory_mb;  /* a uml pool's guests' RAM for this memory cap; 0 = the default */
};

#define SBX_CONFIG_MAX_POOLS 16 /* one per language at most */

struct sbx_config {
        struct sbx_server_config server;
        struct sbx_store_config store;
        struct sbx_pool_config pools[SBX_CONFIG_MAX_POOLS];
        size_t n_pools;
        struct sbx_tier *tiers;
        size_t n_tiers;
        struct sbx_tenant *tenants;
        size_t n_tenants;
};

/* The data_dir a config without one has; and the file in it where `sandboxd serve` keeps the
 * token of the tenant "local" it creates when none is configured (`sandboxd mcp` reads it). */
#define SBX_DEFAULT_DATA_DIR "/var/lib/sandboxd"
#define SBX_LOCAL_TOKEN_FILE "local-token"

/* The tier every configuration has (the built-in limits unless [tier.default] changes them). */
#define SBX_DEFAULT_TIER_NAME "default"

/* The configuration `sandboxd serve` uses without --config: listen 127.0.0.1:8080, data_dir
 * /var/lib/sandboxd, the tier "default" and no tenant. */
extern const char sbx_config_default_text[];

/* Loads the INI file at path into config; free it with sbx_config_free(). Fails on I/O errors
 * and on anything the format does not allow, err then saying "path:line: [section] key: why",
 * and leaves config zeroed. Keys left out take the defaults the README lists. Files over 1 MiB
 * are refused. */
int sbx_config_load_file(const char *path, struct sbx_config *config, struct sbx_error *err);

/* Like sbx_config_load_file for INI text in memory; name stands for the file in messages
 * ("<embedded>"). */
int sbx_config_load_string(const char *text, const char *name, struct sbx_config *config,
                           struct sbx_error *err);

/* Like sbx_config_load_string for size bytes of text (at most SBX_CONFIG_FILE_MAX). */
int sbx_config_load_buffer(const char *text, size_t size, const char *name,
                           struct sbx_config *config, struct sbx_error *err);

/* Frees everything config owns and zeroes it. Safe on a zeroed or partly loaded config. */
void sbx_config_free(struct sbx_config *config);

/* Whether name may name a tier or tenant: [A-Za-z0-9_-], 1 to SBX_CONFIG_NAME_MAX bytes. */
bool sbx_config_name_valid(const char *name);

/* The tier called name, or NULL. */
const struct sbx_tier *sbx_config_find_tier(const struct sbx_config *config, const char *name);

/* The tenant called name, or NULL. */
const struct sbx_tenant *sbx_config_find_tenant(const struct sbx_config *config, const char *name);

/* Adds a tenant after loading (serve without --config creates "local"). Fails when the name is
 * invalid or taken, the tier unknown, or the token hash already used. Moves config->tenants:
 * call it before anything holds a tenant pointer. */
int sbx_config_add_tenant(struct sbx_config *config, const char *name, const char *tier_name,
                          const uint8_t token_sha256[SBX_SHA256_SIZE], struct sbx_error *err);

/* Adds the tenant "local" in the first tier: serve without a configured tenant (the API process
 * generates its token; the engine never sees tenants). */
int sbx_config_add_local_tenant(struct sbx_config *config,
                                const uint8_t token_sha256[SBX_SHA256_SIZE], struct sbx_error *err);

/* The tenant that token-less requests on the drop-in API api act as, or NULL. */
const struct sbx_tenant *sbx_config_anonymous_tenant(const struct sbx_config *config,
                                                     enum sbx_compat_api api);

/* Whether the tier lets requests use the language / backend called name. */
bool sbx_tier_allows_language(const struct sbx_tier *tier, const char *name);
bool sbx_tier_allows_backend(const struct sbx_tier *tier, const char *name);
