#include "service/config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ini.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/server.h"
#include "model/backend.h"
#include "model/language.h"
#include "protocol/protocol.h"
#include "sandbox/sandbox.h"
#include "util/cleanup.h"
#include "util/hex.h"
#include "util/parse.h"

/* SIGHUP: the engine sends the file to the API process in one message. */
_Static_assert(SBX_CONFIG_FILE_MAX <= SBX_MESSAGE_MAX_CONFIG_BYTES,
               "a config file must fit in a CONFIG message");

#define MIB (1024ull * 1024ull)

/* A config file is a few dozen lines; the cap only keeps a wrong path (a log, a device) from
 * being read into memory whole. */

#define DAY_MS (24ull * 3600ull * 1000ull)

const char sbx_config_default_text[] =
        "; sandboxd's built-in configuration, used by `sandboxd serve` without --config.\n"
        "; It has no tenant: serve then creates tenant \"local\" with a fresh token.\n"
        "[server]\n"
        "listen = 127.0.0.1:8080\n"
        "data_dir = /var/lib/sandboxd\n"
        "api_uid = 1999999999\n"
        "max_body_bytes = 8388608\n"
        "max_sandboxes = 64\n"
        "shutdown_grace_s = 10\n"
        "store_output = false\n"
        "\n"
        "[tier.default]\n"
        "; Left out, as here: every max_<limit> is the built-in default, languages and backends\n"
        "; are all there are.\n"
        "max_concurrency = 4\n"
        "cpu_budget_ms = 60000\n"
        "cpu_window_s = 60\n";

enum section_kind { SECTION_NONE, SECTION_SERVER, SECTION_TIER, SECTION_TENANT, SECTION_POOL };

/* What the loader remembers about a tenant until every tier is known. */
struct tenant_source {
        char *tier_name;
        int header_line;
        int tier_line;
        int token_line;
        bool has_token;
};

struct loader {
        const char *file_name; /* for messages */
        const char *cursor;    /* the unread rest of the text */
        const char *end;
        int line; /* the line the reader returned last, counted from 1 */
        struct sbx_config *config;
        enum section_kind kind;
        char section[8 + SBX_CONFIG_NAME_MAX + 1]; /* the current section as written */
        uint64_t seen_keys;                        /* bit per key index, for duplicates */
        bool server_seen;
        struct tenant_source *sources; /* parallel to config->tenants */
        struct sbx_error *err;
        bool failed;
};

/* Records the first error as "file:line: [section] key: message"; later ones add nothing. */
__attribute__((format(printf, 4, 5))) static int loader_fail(struct loader *loader, int line,
                                                             const char *key, const char *fmt, ...)
{
        if (loader->failed)
                return 0;
        loader->failed = true;
        char message[SBX_ERROR_MESSAGE_MAX];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(message, sizeof(message), fmt, ap);
        va_end(ap);
        char section[sizeof(loader->section) + 4] = "";
        if (loader->section[0] != '\0')
                snprintf(section, sizeof(section), " [%s]", loader->section);
        /* errno 0 keeps strerror() off the message: the location and reason say it all. */
        if (section[0] == '\0' && key == NULL)
                sbx_error_set(loader->err, 0, "%s:%d: %s", loader->file_name, line, message);
        else
                sbx_error_set(loader->err, 0, "%s:%d:%s%s%s: %s", loader->file_name, line, section,
                              key ? " " : "", key ? key : "", message);
        if (loader->err != NULL)
                loader->err->code = EINVAL;
        return 0; /* inih's "handler failed" */
}

bool sbx_config_name_valid(const char *name)
{
        size_t length = strnlen(name, SBX_CONFIG_NAME_MAX + 1);
        if (length == 0 || length > SBX_CONFIG_NAME_MAX)
                return false;
        return strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") ==
               length;
}

/* ---- values ---------------------------------------------------------------------------- */

/* A whole number from min to max; why gets the reason otherwise. */
static int parse_number(const char *value, uint64_t min, uint64_t max, uint64_t *out, char *why,
                        size_t why_size)
{
        struct sbx_error err = {0};
        uint64_t number;
        if (sbx_parse_u64(value, max, &number, &err) != 0 || number < min) {
                snprintf(why, why_size, "'%s' is not a whole number from %llu to %llu", value,
                         (unsigned long long)min, (unsigned long long)max);
                return -1;
        }
        *out = number;
        return 0;
}

/* A byte count, with the K/M/G suffixes of sbx_parse_size, from min to max. */
static int parse_bytes(const char *value, uint64_t min, uint64_t max, uint64_t *out, char *why,
                       size_t why_size)
{
        struct sbx_error err = {0};
        uint64_t bytes;
        if (sbx_parse_size(value, &bytes, &err) != 0) {
                snprintf(why, why_size, "%s", err.message);
                return -1;
        }
        if (bytes < min || bytes > max) {
                snprintf(why, why_size, "'%s' is not a size from %llu to %llu bytes", value,
                         (unsigned long long)min, (unsigned long long)max);
                return -1;
        }
        *out = bytes;
        return 0;
}

static int parse_bool(const char *value, bool *out, char *why, size_t why_size)
{
        static const char *const yes[] = {"true", "yes", "on", "1"};
        static const char *const no[] = {"false", "no", "off", "0"};
        for (size_t i = 0; i < SBX_ARRAY_SIZE(yes); i++) {
                if (strcmp(value, yes[i]) == 0) {
                        *out = true;
                        return 0;
                }
                if (strcmp(value, no[i]) == 0) {
                        *out = false;
                        return 0;
                }
        }
        snprintf(why, why_size, "'%s' is not a boolean (true or false)", value);
        return -1;
}

/* "IPv4:port" or "[IPv6]:port". Only literal addresses: the server binds before it could trust
 * a resolver, and a name resolving to several addresses would make the bound one a surprise. */
static int parse_listen(const char *value, struct sbx_server_config *server, char *why,
                        size_t why_size)
{
        const char *colon = strrchr(value, ':');
        const char *host = value;
        size_t host_length = colon ? (size_t)(colon - value) : 0;
        bool bracketed = host_length >= 2 && host[0] == '[' && host[host_length - 1] == ']';
        if (bracketed) {
                host++;
                host_length -= 2;
        }
        char host_text[INET6_ADDRSTRLEN];
        uint64_t port;
        if (colon == NULL || host_length == 0 || host_length >= sizeof(host_text) ||
            sbx_parse_u64(colon + 1, 65535, &port, NULL) != 0 || port == 0)
                goto bad;
        memcpy(host_text, host, host_length);
        host_text[host_length] = '\0';

        struct sockaddr_storage address = {0};
        socklen_t size;
        if (bracketed) {
                struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&address;
                if (inet_pton(AF_INET6, host_text, &in6->sin6_addr) != 1)
                        goto bad;
                in6->sin6_family = AF_INET6;
                in6->sin6_port = htons((uint16_t)port);
                size = sizeof(*in6);
        } else {
                struct sockaddr_in *in4 = (struct sockaddr_in *)&address;
                if (inet_pton(AF_INET, host_text, &in4->sin_addr) != 1)
                        goto bad;
                in4->sin_family = AF_INET;
                in4->sin_port = htons((uint16_t)port);
                size = sizeof(*in4);
        }
        char *copy = strdup(value);
        if (copy == NULL) {
                snprintf(why, why_size, "out of memory");
                return -1;
        }
        free(server->listen);
        server->listen = copy;
        server->listen_address = address;
        server->listen_address_size = size;
        return 0;
bad:
        snprintf(why, why_size,
                 "'%s' is not host:port with a literal address and a port from 1 to 65535 "
                 "(like 127.0.0.1:8080 or [::1]:8080)",
                 value);
        return -1;
}

/* Splits a comma-separated list and keeps each item's canonical name from find (a static
 * string); items must be known and listed once. */
static int parse_name_list(const char *value, const char *(*find)(const char *), const char *what,
                           const char **names, size_t capacity, size_t *count, char *why,
                           size_t why_size)
{
        _cleanup_free_ char *copy = strdup(value);
        if (copy == NULL) {
                snprintf(why, why_size, "out of memory");
                return -1;
        }
        size_t n = 0;
        char *saveptr = NULL;
        for (char *item = strtok_r(copy, ",", &saveptr); item != NULL;
             item = strtok_r(NULL, ",", &saveptr)) {
                item += strspn(item, " \t");
                size_t length = strlen(item);
                while (length > 0 && (item[length - 1] == ' ' || item[length - 1] == '\t'))
                        item[--length] = '\0';
                const char *name = find(item);
                if (name == NULL) {
                        snprintf(why, why_size, "unknown %s '%s'", what, item);
                        return -1;
                }
                for (size_t i = 0; i < n; i++) {
                        if (names[i] == name) {
                                snprintf(why, why_size, "%s '%s' is listed twice", what, item);
                                return -1;
                        }
                }
                if (n == capacity) {
                        snprintf(why, why_size, "more than %zu items", capacity);
                        return -1;
                }
                names[n++] = name;
        }
        if (n == 0) {
                snprintf(why, why_size, "list at least one %s", what);
                return -1;
        }
        *count = n;
        return 0;
}

static const char *find_language_name(const char *name)
{
        const struct sbx_language *language = sbx_language_find(name);
        return language ? language->name : NULL;
}

/* ---- sections --------------------------------------------------------------------------- */

static void server_set_defaults(struct sbx_server_config *server)
{
        char why[SBX_ERROR_MESSAGE_MAX];
        /* Cannot fail but for memory; a NULL listen is then reported by the loader. */
        parse_listen("127.0.0.1:8080", server, why, sizeof(why));
        server->data_dir = strdup("/var/lib/sandboxd");
        /* A high uid no distribution allocates, so the API process shares no files or
         * processes with a real account; no passwd entry is needed. */
        server->api_uid = 1999999999;
        server->max_body_bytes = 8 * MIB;
        server->max_sandboxes = 64;
        server->shutdown_grace_s = 10;
        server->store_output = false;
        server->max_connections = 512;
        server->max_connections_per_ip = 128;
}

static void tier_set_defaults(struct sbx_tier *tier)
{
        char why[SBX_ERROR_MESSAGE_MAX];
        sbx_limits_default(&tier->max);
        tier->max.cpu_millicores = 0;
        tier->max_concurrency = 4;
        tier->cpu_budget_ms = 60 * 1000;
        tier->cpu_window_s = 60;
        parse_name_list(sbx_language_names(), find_language_name, "language", tier->languages,
                        SBX_ARRAY_SIZE(tier->languages), &tier->n_languages, why, sizeof(why));
        tier->backends[0] = sbx_backend_name_find(SBX_BACKEND_DEFAULT);
        tier->n_backends = 1;
}

static bool tier_name_taken(const struct sbx_config *config, const char *name)
{
        return sbx_config_find_tier(config, name) != NULL;
}

static bool tenant_name_taken(const struct sbx_config *config, const char *name)
{
        for (size_t i = 0; i < config->n_tenants; i++)
                if (strcmp(config->tenants[i].name, name) == 0)
                        return true;
        return false;
}

static int begin_tier(struct loader *loader, const char *name)
{
        struct sbx_config *config = loader->config;
        if (!sbx_config_name_valid(name))
                return loader_fail(loader, loader->line, NULL,
                                   "tier name must be 1 to %d letters, digits, '_' or '-'",
                                   SBX_CONFIG_NAME_MAX);
        if (tier_name_taken(config, name))
                return loader_fail(loader, loader->line, NULL, "tier '%s' is defined twice", name);
        struct sbx_tier *tiers = reallocarray(config->tiers, config->n_tiers + 1, sizeof(*tiers));
        if (tiers == NULL)
                return loader_fail(loader, loader->line, NULL, "out of memory");
        config->tiers = tiers;
        struct sbx_tier *tier = &tiers[config->n_tiers];
        *tier = (struct sbx_tier){.name = strdup(name)};
        if (tier->name == NULL)
                return loader_fail(loader, loader->line, NULL, "out of memory");
        config->n_tiers++;
        tier_set_defaults(tier);
        return 1;
}

/* The tier called "default" exists in every configuration, with the built-in limits unless a
 * [tier.default] section says otherwise: so the lines `sandboxd token` prints (tier = default)
 * work in any config. It goes last, so that a config's first tier stays its first. */
static void add_builtin_default_tier(struct loader *loader)
{
        if (!tier_name_taken(loader->config, SBX_DEFAULT_TIER_NAME))
                begin_tier(loader, SBX_DEFAULT_TIER_NAME);
}

static int begin_tenant(struct loader *loader, const char *name)
{
        struct sbx_config *config = loader->config;
        if (!sbx_config_name_valid(name))
                return loader_fail(loader, loader->line, NULL,
                                   "tenant name must be 1 to %d letters, digits, '_' or '-'",
                                   SBX_CONFIG_NAME_MAX);
        if (tenant_name_taken(config, name))
                return loader_fail(loader, loader->line, NULL, "tenant '%s' is defined twice",
                                   name);
        size_t n = config->n_tenants;
        struct sbx_tenant *tenants = reallocarray(config->tenants, n + 1, sizeof(*tenants));
        if (tenants != NULL)
                config->tenants = tenants;
        struct tenant_source *sources = reallocarray(loader->sources, n + 1, sizeof(*sources));
        if (sources != NULL)
                loader->sources = sources;
        if (tenants == NULL || sources == NULL)
                return loader_fail(loader, loader->line, NULL, "out of memory");
        tenants[n] = (struct sbx_tenant){.name = strdup(name)};
        sources[n] = (struct tenant_source){.header_line = loader->line};
        if (tenants[n].name == NULL)
                return loader_fail(loader, loader->line, NULL, "out of memory");
        config->n_tenants++;
        return 1;
}

/* ---- pools ---------------------------------------------------------------------------- */

static bool mark_key_seen(struct loader *loader, unsigned index);

/* Python's pool is on by default (2 ready, at most 4, replaced after 5 minutes idle), so that a
 * fresh `make run` answers Python fast; a [pool.python] section changes it. */
static void pools_set_defaults(struct sbx_config *config)
{
        config->pools[0] = (struct sbx_pool_config){
                .language = "python", .min_idle = 2, .max_idle = 4, .max_idle_s = 300};
        config->n_pools = 1;
}

static struct sbx_pool_config *current_pool(struct loader *loader)
{
        const char *language = loader->section + strlen("pool.");
        for (size_t i = 0; i < loader->config->n_pools; i++)
                if (strcmp(loader->config->pools[i].language, language) == 0)
                        return &loader->config->pools[i];
        return NULL;
}

static void begin_pool(struct loader *loader, const char *language_name)
{
        const struct sbx_language *language = sbx_language_find(language_name);
        if (language == NULL || !language->pooled) {
                loader_fail(loader, loader->line, NULL,
                            "no warm pool exists for language '%s' (only python)", language_name);
                return;
        }
        if (current_pool(loader) == NULL) {
                if (loader->config->n_pools == SBX_CONFIG_MAX_POOLS) {
                        loader_fail(loader, loader->line, NULL, "too many pools");
                        return;
                }
                loader->config->pools[loader->config->n_pools++] =
                        (struct sbx_pool_config){.language = language->name};
        }
}

static int pool_key(struct loader *loader, const char *key, const char *value)
{
        static const char *const keys[] = {"min_idle", "max_idle", "max_idle_s"};
        static const uint64_t bounds[] = {SBX_ENGINE_MAX_SANDBOXES_LIMIT,
                                          SBX_ENGINE_MAX_SANDBOXES_LIMIT, 7 * 24 * 3600};
        struct sbx_pool_config *pool = current_pool(loader);
        unsigned index = 0;
        while (index < SBX_ARRAY_SIZE(keys) && strcmp(keys[index], key) != 0)
                index++;
        if (pool == NULL || index == SBX_ARRAY_SIZE(keys))
                return loader_fail(loader, loader->line, key, "unknown key");
        if (!mark_key_seen(loader, index))
                return loader_fail(loader, loader->line, key,
                                   "set twice (an indented line continues the key above)");
        uint64_t number;
        struct sbx_error why = {0};
        if (sbx_parse_u64(value, bounds[index], &number, &why) < 0)
                return loader_fail(loader, loader->line, key, "%s", why.message);
        uint64_t *fields[] = {&pool->min_idle, &pool->max_idle, &pool->max_idle_s};
        *fields[index] = number;
        if (pool->max_idle < pool->min_idle && index != 2)
                pool->max_idle = pool->min_idle; /* max_idle below min_idle means "min_idle" */
        return 1;
}

/* Called by the reader for a "[name]" line, before inih sees it: inih (as packaged) tells the
 * handler neither about sections without keys nor the line number, and both matter here. */
static void begin_section(struct loader *loader, const char *name, size_t length)
{
        loader->seen_keys = 0;
        if (length >= sizeof(loader->section)) {
                loader->kind = SECTION_NONE;
                loader->section[0] = '\0';
                loader_fail(loader, loader->line, NULL, "section name too long");
                return;
        }
        memcpy(loader->section, name, length);
        loader->section[length] = '\0';
        const char *section = loader->section;
        if (strcmp(section, "server") == 0) {
                loader->kind = SECTION_SERVER;
                if (loader->server_seen)
                        loader_fail(loader, loader->line, NULL, "section appears twice");
                loader->server_seen = true;
        } else if (strncmp(section, "tier.", 5) == 0) {
                loader->kind = SECTION_TIER;
                begin_tier(loader, section + 5);
        } else if (strncmp(section, "tenant.", 7) == 0) {
                loader->kind = SECTION_TENANT;
                begin_tenant(loader, section + 7);
        } else if (strncmp(section, "pool.", 5) == 0) {
                loader->kind = SECTION_POOL;
                begin_pool(loader, section + 5);
        } else {
                loader->kind = SECTION_NONE;
                loader_fail(loader, loader->line, NULL,
                            "unknown section (expected [server], [tier.NAME], [tenant.NAME] or "
                            "[pool.LANGUAGE])");
        }
}

/* ---- keys ------------------------------------------------------------------------------ */

/* Marks key number index as set in this section; false when it already was. */
static bool mark_key_seen(struct loader *loader, unsigned index)
{
        uint64_t bit = 1ull << index;
        if (loader->seen_keys & bit)
                return false;
        loader->seen_keys |= bit;
        return true;
}

/* The keys of [server], in the order of their bits in loader->seen_keys. */
enum server_key_index {
        SERVER_LISTEN,
        SERVER_DATA_DIR,
        SERVER_API_UID,
        SERVER_MAX_BODY_BYTES,
        SERVER_MAX_SANDBOXES,
        SERVER_SHUTDOWN_GRACE_S,
        SERVER_STORE_OUTPUT,
        SERVER_MAX_CONNECTIONS,
        SERVER_MAX_CONNECTIONS_PER_IP,
        SERVER_METRICS_TOKEN_SHA256,
        SERVER_KEY_COUNT,
};

static const char *const server_keys[SERVER_KEY_COUNT] = {
        [SERVER_LISTEN] = "listen",
        [SERVER_DATA_DIR] = "data_dir",
        [SERVER_API_UID] = "api_uid",
        [SERVER_MAX_BODY_BYTES] = "max_body_bytes",
        [SERVER_MAX_SANDBOXES] = "max_sandboxes",
        [SERVER_SHUTDOWN_GRACE_S] = "shutdown_grace_s",
        [SERVER_STORE_OUTPUT] = "store_output",
        [SERVER_MAX_CONNECTIONS] = "max_connections",
        [SERVER_MAX_CONNECTIONS_PER_IP] = "max_connections_per_ip",
        [SERVER_METRICS_TOKEN_SHA256] = "metrics_token_sha256",
};

static int server_key(struct loader *loader, const char *key, const char *value)
{
        struct sbx_server_config *server = &loader->config->server;
        unsigned index = 0;
        while (index < SERVER_KEY_COUNT && strcmp(server_keys[index], key) != 0)
                index++;
        if (index == SERVER_KEY_COUNT)
                return loader_fail(loader, loader->line, key, "unknown key");
        if (!mark_key_seen(loader, index))
                return loader_fail(loader, loader->line, key,
                                   "set twice (an indented line continues the key above)");
        char why[SBX_ERROR_MESSAGE_MAX] = "";
        uint64_t number;
        int r = 0;
        switch ((enum server_key_index)index) {
        case SERVER_LISTEN:
                r = parse_listen(value, server, why, sizeof(why));
                break;
        case SERVER_DATA_DIR:
                if (value[0] != '/' || strlen(value) >= 4096) {
                        snprintf(why, sizeof(why), "'%s' is not an absolute path", value);
                        r = -1;
                        break;
                }
                free(server->data_dir);
                server->data_dir = strdup(value);
                if (server->data_dir == NULL) {
                        snprintf(why, sizeof(why), "out of memory");
                        r = -1;
                }
                break;
        case SERVER_API_UID:
                /* Never 0: the API process parses untrusted input and must not be root; never
                 * (uid_t)-1, which set*id() reads as "unchanged"; never one of the sandboxes'
                 * uids, whose processes it would own. */
                r = parse_number(value, 1, 4294967294u, &number, why, sizeof(why));
                if (r == 0 && number >= SBX_SANDBOX_HOST_IDS_FIRST) {
                        snprintf(why, sizeof(why),
                                 "uids from %u on belong to the sandboxes (it must be below)",
                                 SBX_SANDBOX_HOST_IDS_FIRST);
                        r = -1;
                }
                server->api_uid = (uid_t)number;
                break;
        case SERVER_MAX_BODY_BYTES:
                /* At least a small request; at most the engine's largest message (48 MiB): a
                 * bigger body could not be forwarded anyway. */
                r = parse_bytes(value, 1024, 48 * MIB, &server->max_body_bytes, why, sizeof(why));
                break;
        case SERVER_MAX_SANDBOXES:
                r = parse_number(value, 1, SBX_ENGINE_MAX_SANDBOXES_LIMIT, &server->max_sandboxes,
                                 why, sizeof(why));
                break;
        case SERVER_SHUTDOWN_GRACE_S:
                r = parse_number(value, 0, 3600, &server->shutdown_grace_s, why, sizeof(why));
                break;
        case SERVER_STORE_OUTPUT:
                r = parse_bool(value, &server->store_output, why, sizeof(why));
                break;
        case SERVER_MAX_CONNECTIONS:
                /* A thread each (libmicrohttpd's thread-per-connection mode). */
                r = parse_number(value, 1, 16384, &server->max_connections, why, sizeof(why));
                break;
        case SERVER_MAX_CONNECTIONS_PER_IP:
                r = parse_number(value, 1, 16384, &server->max_connections_per_ip, why,
                                 sizeof(why));
                break;
        case SERVER_METRICS_TOKEN_SHA256:
                if (strlen(value) != SBX_SHA256_HEX_SIZE ||
                    !sbx_hex_decode(value, server->metrics_token_sha256, SBX_SHA256_SIZE)) {
                        snprintf(why, sizeof(why), "not %d hex digits", SBX_SHA256_HEX_SIZE);
                        r = -1;
                }
                server->metrics_token_required = r == 0;
                break;
        case SERVER_KEY_COUNT:
                break;
        }
        if (r != 0)
                return loader_fail(loader, loader->line, key, "%s", why);
        return 1;
}

/* Key indexes of a tier section: max_<limit> by limit index, default_<limit> after them, then
 * these. */
enum tier_key {
        TIER_KEY_MAX_CONCURRENCY = 2 * SBX_LIMIT_COUNT,
        TIER_KEY_CPU_BUDGET_MS,
        TIER_KEY_CPU_WINDOW_S,
        TIER_KEY_LANGUAGES,
        TIER_KEY_BACKENDS,
};
_Static_assert(TIER_KEY_BACKENDS < 64, "a tier's keys are bits of loader->seen_keys");

static int tier_limit_key(struct sbx_tier *tier, const struct sbx_limit_field *field,
                          bool is_default, const char *value, char *why, size_t why_size)
{
        uint64_t number;
        size_t name_length = strlen(field->name);
        bool bytes = name_length > 6 && strcmp(field->name + name_length - 6, "_bytes") == 0;
        uint64_t minimum = sbx_limit_api_min(field);
        int r = bytes ? parse_bytes(value, minimum, field->config_max, &number, why, why_size)
                      : parse_number(value, minimum, field->config_max, &number, why, why_size);
        if (r != 0)
                return -1;
        sbx_limit_set(is_default ? &tier->defaults : &tier->max, field, number * field->unit);
        return 0;
}

static int tier_key(struct loader *loader, const char *key, const char *value)
{
        struct sbx_tier *tier = &loader->config->tiers[loader->config->n_tiers - 1];
        char why[SBX_ERROR_MESSAGE_MAX] = "";
        int r = -1;
        unsigned index;
        if (strncmp(key, "max_", 4) == 0 || strncmp(key, "default_", 8) == 0) {
                bool is_default = key[0] == 'd';
                const char *name = key + (is_default ? 8 : 4);
                for (index = 0; index < SBX_LIMIT_COUNT; index++)
                        if (sbx_limit_fields[index].kind == SBX_LIMIT_SETTABLE &&
                            strcmp(sbx_limit_fields[index].name, name) == 0)
                                break;
                if (index < SBX_LIMIT_COUNT) {
                        if (!mark_key_seen(loader, index + (is_default ? SBX_LIMIT_COUNT : 0)))
                                goto twice;
                        r = tier_limit_key(tier, &sbx_limit_fields[index], is_default, value, why,
                                           sizeof(why));
                        goto done;
                }
        }
        static const char *const other_keys[] = {"max_concurrency", "cpu_budget_ms", "cpu_window_s",
                                                 "languages", "backends"};
        for (index = 0; index < SBX_ARRAY_SIZE(other_keys); index++)
                if (strcmp(other_keys[index], key) == 0)
                        break;
        if (index == SBX_ARRAY_SIZE(other_keys))
                return loader_fail(loader, loader->line, key, "unknown key");
        index += TIER_KEY_MAX_CONCURRENCY;
        if (!mark_key_seen(loader, index))
                goto twice;
        switch ((enum tier_key)index) {
        case TIER_KEY_MAX_CONCURRENCY:
                r = parse_number(value, 1, 65536, &tier->max_concurrency, why, sizeof(why));
                break;
        case TIER_KEY_CPU_BUDGET_MS:
                /* Up to a year of CPU: large enough to mean "no budget", small enough that
                 * sums of charges never overflow. */
                r = parse_number(value, 1, 365 * DAY_MS, &tier->cpu_budget_ms, why, sizeof(why));
                break;
        case TIER_KEY_CPU_WINDOW_S:
                /* The quota keeps one entry per second of the window at most: a day bounds
                 * its memory. */
                r = parse_number(value, 1, 24 * 3600, &tier->cpu_window_s, why, sizeof(why));
                break;
        case TIER_KEY_LANGUAGES:
                r = parse_name_list(value, find_language_name, "language", tier->languages,
                                    SBX_ARRAY_SIZE(tier->languages), &tier->n_languages, why,
                                    sizeof(why));
                break;
        case TIER_KEY_BACKENDS:
                r = parse_name_list(value, sbx_backend_name_find, "backend", tier->backends,
                                    SBX_ARRAY_SIZE(tier->backends), &tier->n_backends, why,
                                    sizeof(why));
                break;
        }
done:
        if (r != 0)
                return loader_fail(loader, loader->line, key, "%s", why);
        return 1;
twice:
        return loader_fail(loader, loader->line, key,
                           "set twice (an indented line continues the key above)");
}

static int tenant_key(struct loader *loader, const char *key, const char *value)
{
        size_t n = loader->config->n_tenants - 1;
        struct sbx_tenant *tenant = &loader->config->tenants[n];
        struct tenant_source *source = &loader->sources[n];
        if (strcmp(key, "tier") == 0) {
                if (!mark_key_seen(loader, 0))
                        goto twice;
                source->tier_name = strdup(value);
                source->tier_line = loader->line;
                if (source->tier_name == NULL)
                        return loader_fail(loader, loader->line, key, "out of memory");
                return 1;
        }
        if (strcmp(key, "token_sha256") == 0) {
                if (!mark_key_seen(loader, 1))
                        goto twice;
                if (!sbx_hex_decode(value, tenant->token_sha256, SBX_SHA256_SIZE))
                        return loader_fail(loader, loader->line, key,
                                           "not 64 hex digits (the SHA-256 `sandboxd token` "
                                           "prints)");
                source->has_token = true;
                source->token_line = loader->line;
                return 1;
        }
        return loader_fail(loader, loader->line, key, "unknown key");
twice:
        return loader_fail(loader, loader->line, key,
                           "set twice (an indented line continues the key above)");
}

static int handle_key(void *user, const char *section, const char *key, const char *value)
{
        struct loader *loader = user;
        if (loader->failed)
                return 0;
        /* The reader tracks sections itself; the two must agree or a key would land in the
         * wrong section. */
        if (loader->kind != SECTION_NONE && strcmp(section, loader->section) != 0)
                return loader_fail(loader, loader->line, NULL, "section header not understood");
        switch (loader->kind) {
        case SECTION_SERVER:
                return server_key(loader, key, value);
        case SECTION_TIER:
                return tier_key(loader, key, value);
        case SECTION_TENANT:
                return tenant_key(loader, key, value);
        case SECTION_POOL:
                return pool_key(loader, key, value);
        case SECTION_NONE:
                break;
        }
        return loader_fail(loader, loader->line, key, "key outside any section");
}

/* ---- reading ---------------------------------------------------------------------------- */

/* Looks at a line before inih does, for section headers (see begin_section). */
static void notice_section_header(struct loader *loader, const char *line)
{
        const char *start = line;
        if (loader->line == 1 && strncmp(start, "\xEF\xBB\xBF", 3) == 0)
                start += 3; /* a UTF-8 byte order mark, which inih skips too */
        const char *first = start + strspn(start, " \t\r\v\f");
        if (*first != '[')
                return;
        /* inih reads an indented line after a key as that key's continuation; a header must
         * start the line so that both of us agree on what it is. */
        loader->section[0] = '\0'; /* errors below are about the header line itself */
        if (first != start) {
                loader_fail(loader, loader->line, NULL, "a section header must start the line");
                return;
        }
        const char *close = strchr(first, ']');
        if (close == NULL) {
                loader_fail(loader, loader->line, NULL, "syntax error: no ']' after '['");
                return;
        }
        const char *rest = close + 1 + strspn(close + 1, " \t\r\n\v\f");
        if (*rest != '\0' && *rest != ';' && *rest != '#') {
                loader_fail(loader, loader->line, NULL, "text after the section header");
                return;
        }
        begin_section(loader, first + 1, (size_t)(close - first - 1));
}

/* inih's fgets-like reader over loader->cursor, one whole line per call so that inih's line
 * count and ours agree. */
static char *read_line(char *buffer, int size, void *stream)
{
        struct loader *loader = stream;
        if (loader->cursor >= loader->end)
                return NULL;
        const char *newline = memchr(loader->cursor, '\n', (size_t)(loader->end - loader->cursor));
        const char *line_end = newline ? newline + 1 : loader->end;
        size_t length = (size_t)(line_end - loader->cursor);
        loader->cursor = line_end;
        loader->line++;
        if (length + 1 > (size_t)size) {
                /* inih would split it into two lines, the second read as a key of its own. */
                loader_fail(loader, loader->line, NULL, "line longer than %d bytes", size - 3);
                strcpy(buffer, "\n");
                return buffer;
        }
        memcpy(buffer, line_end - length, length);
        buffer[length] = '\0';
        if (!loader->failed)
                notice_section_header(loader, buffer);
        return buffer;
}

/* ---- loading ---------------------------------------------------------------------------- */

/* Resolves each tenant's tier and checks what only the whole file shows. */
static int finish_tenants(struct loader *loader)
{
        struct sbx_config *config = loader->config;
        loader->kind = SECTION_TENANT;
        for (size_t i = 0; i < config->n_tenants; i++) {
                struct sbx_tenant *tenant = &config->tenants[i];
                const struct tenant_source *source = &loader->sources[i];
                snprintf(loader->section, sizeof(loader->section), "tenant.%s", tenant->name);
                if (source->tier_name == NULL)
                        return loader_fail(loader, source->header_line, "tier", "missing");
                if (!source->has_token)
                        return loader_fail(loader, source->header_line, "token_sha256", "missing");
                tenant->tier = sbx_config_find_tier(config, source->tier_name);
                if (tenant->tier == NULL)
                        return loader_fail(loader, source->tier_line, "tier", "unknown tier '%s'",
                                           source->tier_name);
                /* memcmp: the hashes compared are the ones in the file being read, so the time
                 * taken reveals nothing to anybody who could not read them. */
                for (size_t j = 0; j < i; j++)
                        if (memcmp(config->tenants[j].token_sha256, tenant->token_sha256,
                                   SBX_SHA256_SIZE) == 0)
                                return loader_fail(loader, source->token_line, "token_sha256",
                                                   "same token as tenant '%s'",
                                                   config->tenants[j].name);
        }
        return 0;
}

static int load_text(const char *text, size_t size, const char *name, struct sbx_config *config,
                     struct sbx_error *err)
{
        *config = (struct sbx_config){0};
        struct loader loader = {
                .file_name = name,
                .cursor = text,
                .end = text + size,
                .config = config,
                .err = err,
        };
        server_set_defaults(&config->server);
        pools_set_defaults(config);
        if (config->server.listen == NULL || config->server.data_dir == NULL)
                loader_fail(&loader, 0, NULL, "out of memory");
        int line = 0;
        if (!loader.failed && memchr(text, '\0', size) != NULL)
                loader_fail(&loader, 1, NULL, "the file contains a NUL byte");
        if (!loader.failed)
                line = ini_parse_stream(read_line, &loader, handle_key, &loader);
        if (!loader.failed && line == -2)
                loader_fail(&loader, 0, NULL, "out of memory");
        if (!loader.failed && line > 0) {
                loader.section[0] = '\0';
                loader_fail(&loader, line, NULL,
                            "syntax error: expected [section], key = value or a comment");
        }
        if (!loader.failed)
                add_builtin_default_tier(&loader);
        if (!loader.failed)
                finish_tenants(&loader);
        for (size_t i = 0; i < config->n_tenants; i++)
                free(loader.sources[i].tier_name);
        free(loader.sources);
        if (loader.failed) {
                sbx_config_free(config);
                return -1;
        }
        return 0;
}

int sbx_config_load_string(const char *text, const char *name, struct sbx_config *config,
                           struct sbx_error *err)
{
        return load_text(text, strlen(text), name, config, err);
}

int sbx_config_load_buffer(const char *text, size_t size, const char *name,
                           struct sbx_config *config, struct sbx_error *err)
{
        if (size > SBX_CONFIG_FILE_MAX)
                return sbx_error_set(err, EFBIG, "config %s is larger than %d bytes", name,
                                     SBX_CONFIG_FILE_MAX);
        return load_text(text, size, name, config, err);
}

int sbx_config_load_file(const char *path, struct sbx_config *config, struct sbx_error *err)
{
        *config = (struct sbx_config){0};
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return sbx_error_set(err, errno, "open config %s", path);
        _cleanup_free_ char *text = malloc(SBX_CONFIG_FILE_MAX + 1);
        if (text == NULL)
                return sbx_error_set(err, ENOMEM, "read config %s", path);
        size_t size = 0;
        for (;;) {
                ssize_t n = read(fd, text + size, SBX_CONFIG_FILE_MAX + 1 - size);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return sbx_error_set(err, errno, "read config %s", path);
                if (n == 0)
                        break;
                size += (size_t)n;
                if (size > SBX_CONFIG_FILE_MAX)
                        return sbx_error_set(err, EFBIG, "config %s is larger than %d bytes", path,
                                             SBX_CONFIG_FILE_MAX);
        }
        return load_text(text, size, path, config, err);
}

void sbx_config_free(struct sbx_config *config)
{
        free(config->server.listen);
        free(config->server.data_dir);
        for (size_t i = 0; i < config->n_tiers; i++)
                free(config->tiers[i].name);
        free(config->tiers);
        for (size_t i = 0; i < config->n_tenants; i++)
                free(config->tenants[i].name);
        free(config->tenants);
        *config = (struct sbx_config){0};
}

const struct sbx_tier *sbx_config_find_tier(const struct sbx_config *config, const char *name)
{
        for (size_t i = 0; i < config->n_tiers; i++)
                if (strcmp(config->tiers[i].name, name) == 0)
                        return &config->tiers[i];
        return NULL;
}

int sbx_config_add_tenant(struct sbx_config *config, const char *name, const char *tier_name,
                          const uint8_t token_sha256[SBX_SHA256_SIZE], struct sbx_error *err)
{
        if (!sbx_config_name_valid(name))
                return sbx_error_set(err, EINVAL, "invalid tenant name '%s'", name);
        if (tenant_name_taken(config, name))
                return sbx_error_set(err, EEXIST, "tenant '%s' already exists", name);
        const struct sbx_tier *tier = sbx_config_find_tier(config, tier_name);
        if (tier == NULL)
                return sbx_error_set(err, EINVAL, "tenant '%s': unknown tier '%s'", name,
                                     tier_name);
        for (size_t i = 0; i < config->n_tenants; i++)
                if (memcmp(config->tenants[i].token_sha256, token_sha256, SBX_SHA256_SIZE) == 0)
                        return sbx_error_set(err, EEXIST, "tenant '%s': same token as '%s'", name,
                                             config->tenants[i].name);
        _cleanup_free_ char *copy = strdup(name);
        struct sbx_tenant *tenants =
                copy ? reallocarray(config->tenants, config->n_tenants + 1, sizeof(*tenants))
                     : NULL;
        if (tenants == NULL)
                return sbx_error_set(err, ENOMEM, "add tenant '%s'", name);
        config->tenants = tenants;
        struct sbx_tenant *tenant = &tenants[config->n_tenants++];
        *tenant = (struct sbx_tenant){.name = steal_pointer(&copy), .tier = tier};
        memcpy(tenant->token_sha256, token_sha256, SBX_SHA256_SIZE);
        return 0;
}

int sbx_config_add_local_tenant(struct sbx_config *config,
                                const uint8_t token_sha256[SBX_SHA256_SIZE], struct sbx_error *err)
{
        if (config->n_tiers == 0)
                return sbx_error_set(err, EINVAL, "no tier to put the local tenant in");
        return sbx_config_add_tenant(config, "local", config->tiers[0].name, token_sha256, err);
}

static bool list_contains(const char *const *names, size_t count, const char *name)
{
        if (name == NULL)
                return false;
        for (size_t i = 0; i < count; i++)
                if (strcmp(names[i], name) == 0)
                        return true;
        return false;
}

bool sbx_tier_allows_language(const struct sbx_tier *tier, const char *name)
{
        return list_contains(tier->languages, tier->n_languages, name);
}

bool sbx_tier_allows_backend(const struct sbx_tier *tier, const char *name)
{
        return list_contains(tier->backends, tier->n_backends, name);
}
