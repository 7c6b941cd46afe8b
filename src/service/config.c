/* The configuration loader. libinih splits the file into sections and keys; the reader below
 * sees every line first (section headers and line numbers, which inih does not report). Each
 * section's keys are one table of struct config_key rows, {name, kind, member, range} or a
 * function of its own, so adding a key is one row; a tier's max_NAME and default_NAME keys come
 * from the limits' table (model/limits.h). Values are parsed into a struct sbx_error, and the
 * first failure becomes "FILE:LINE: [section] key: why" (loader_fail). */
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

#define MIB    (1024ull * 1024ull)
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

enum section_kind {
        SECTION_NONE,
        SECTION_SERVER,
        SECTION_STORE,
        SECTION_TIER,
        SECTION_TENANT,
        SECTION_POOL
};

/* What the loader remembers about a tenant until every tier is known. */
struct tenant_source {
        char *tier_name;
        int header_line;
        int tier_line;
        int token_line;
        int anonymous_line;
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
        bool store_seen;
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

/* A value the format does not allow (or no memory to keep it): code, and no strerror text, since
 * the loader puts the location before the message and that says it all. Returns -1. */
__attribute__((format(printf, 3, 4))) static int value_error(struct sbx_error *err, int code,
                                                             const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->message, sizeof(err->message), fmt, ap);
        va_end(ap);
        err->code = code;
        return -1;
}

/* A whole number from min to max. */
static int parse_number(const char *value, uint64_t min, uint64_t max, uint64_t *out,
                        struct sbx_error *err)
{
        uint64_t number;
        if (sbx_parse_u64(value, max, &number, NULL) != 0 || number < min)
                return value_error(err, EINVAL, "'%s' is not a whole number from %llu to %llu",
                                   value, (unsigned long long)min, (unsigned long long)max);
        *out = number;
        return 0;
}

/* A byte count, with the K/M/G suffixes of sbx_parse_size, from min to max. */
static int parse_bytes(const char *value, uint64_t min, uint64_t max, uint64_t *out,
                       struct sbx_error *err)
{
        uint64_t bytes;
        if (sbx_parse_size(value, &bytes, err) != 0)
                return -1;
        if (bytes < min || bytes > max)
                return value_error(err, EINVAL, "'%s' is not a size from %llu to %llu bytes", value,
                                   (unsigned long long)min, (unsigned long long)max);
        *out = bytes;
        return 0;
}

static int parse_bool(const char *value, bool *out, struct sbx_error *err)
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
        return value_error(err, EINVAL, "'%s' is not a boolean (true or false)", value);
}

/* A tier's ceiling or default for one settable limit, in the limit's API unit (memory_mb: MiB)
 * and from its API minimum to the ceiling a tier may configure; a *_bytes limit takes the K/M/G
 * suffixes too. */
static int parse_limit(const char *value, const struct sbx_limit_field *field,
                       struct sbx_limits *limits, struct sbx_error *err)
{
        uint64_t number = 0;
        size_t name_length = strlen(field->name);
        bool bytes = name_length > 6 && strcmp(field->name + name_length - 6, "_bytes") == 0;
        uint64_t minimum = sbx_limit_api_min(field);
        int r = bytes ? parse_bytes(value, minimum, field->config_max, &number, err)
                      : parse_number(value, minimum, field->config_max, &number, err);
        if (r != 0)
                return -1;
        sbx_limit_set(limits, field, number * field->unit);
        return 0;
}

/* "IPv4:port" or "[IPv6]:port". Only literal addresses: the server binds before it could trust
 * a resolver, and a name resolving to several addresses would make the bound one a surprise. */
static int parse_listen(const char *value, struct sbx_server_config *server, struct sbx_error *err)
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
        if (copy == NULL)
                return value_error(err, ENOMEM, "out of memory");
        free(server->listen);
        server->listen = copy;
        server->listen_address = address;
        server->listen_address_size = size;
        return 0;
bad:
        return value_error(err, EINVAL,
                           "'%s' is not host:port with a literal address and a port from 1 to "
                           "65535 (like 127.0.0.1:8080 or [::1]:8080)",
                           value);
}

/* Splits a comma-separated list and keeps each item's canonical name from find (a static
 * string); items must be known and listed once. */
static int parse_name_list(const char *value, const char *(*find)(const char *), const char *what,
                           const char **names, size_t capacity, size_t *count,
                           struct sbx_error *err)
{
        _cleanup_free_ char *copy = strdup(value);
        if (copy == NULL)
                return value_error(err, ENOMEM, "out of memory");
        size_t n = 0;
        char *saveptr = NULL;
        for (char *item = strtok_r(copy, ",", &saveptr); item != NULL;
             item = strtok_r(NULL, ",", &saveptr)) {
                item += strspn(item, " \t");
                size_t length = strlen(item);
                while (length > 0 && (item[length - 1] == ' ' || item[length - 1] == '\t'))
                        item[--length] = '\0';
                const char *name = find(item);
                if (name == NULL)
                        return value_error(err, EINVAL, "unknown %s '%s'", what, item);
                for (size_t i = 0; i < n; i++)
                        if (names[i] == name)
                                return value_error(err, EINVAL, "%s '%s' is listed twice", what,
                                                   item);
                if (n == capacity)
                        return value_error(err, EINVAL, "more than %zu items", capacity);
                names[n++] = name;
        }
        if (n == 0)
                return value_error(err, EINVAL, "list at least one %s", what);
        *count = n;
        return 0;
}

static const char *find_language_name(const char *name)
{
        const struct sbx_language *language = sbx_language_find(name);
        return language ? language->name : NULL;
}

/* A set of drop-in APIs: "piston, judge0", or "none". */
static int parse_compat_apis(const char *value, unsigned *set, struct sbx_error *err)
{
        static const struct {
                const char *name;
                enum sbx_compat_api api;
        } apis[] = {{"piston", SBX_COMPAT_PISTON}, {"judge0", SBX_COMPAT_JUDGE0}};
        *set = 0;
        if (strcmp(value, "none") == 0)
                return 0;
        _cleanup_free_ char *copy = strdup(value);
        if (copy == NULL)
                return value_error(err, ENOMEM, "out of memory");
        char *saveptr = NULL;
        for (char *item = strtok_r(copy, ", \t", &saveptr); item != NULL;
             item = strtok_r(NULL, ", \t", &saveptr)) {
                size_t i = 0;
                while (i < SBX_ARRAY_SIZE(apis) && strcmp(apis[i].name, item) != 0)
                        i++;
                if (i == SBX_ARRAY_SIZE(apis))
                        return value_error(err, EINVAL, "'%s' is not piston or judge0", item);
                if (*set & apis[i].api)
                        return value_error(err, EINVAL, "'%s' is listed twice", item);
                *set |= apis[i].api;
        }
        if (*set == 0)
                return value_error(err, EINVAL, "list piston, judge0, or write none");
        return 0;
}

/* ---- key tables ------------------------------------------------------------------------ */

/* How a key's value is read, and the C type of the member it sets. */
enum key_kind {
        KEY_NUMBER,  /* uint64_t: a whole number from min to max (parse_number) */
        KEY_INTEGER, /* uint64_t: an integer from 0 to max, refused in sbx_parse_u64's words */
        KEY_BYTES,   /* uint64_t: a byte count from min to max (parse_bytes) */
        KEY_BOOL,    /* bool: true, yes, on, 1 or false, no, off, 0 */
        KEY_LIMIT,   /* struct sbx_limits: the member limit describes (parse_limit) */
        KEY_CUSTOM,  /* parse() reads the value and sets whatever it must */
};

/* One key of a section. A section's keys are one table of these, so adding a key is one row;
 * offset is that of the member the key sets in the section's record (struct sbx_server_config,
 * struct sbx_tier, struct sbx_pool_config, struct sbx_tenant). */
struct config_key {
        const char *name;
        enum key_kind kind;
        size_t offset;
        uint64_t min, max;                   /* KEY_NUMBER, KEY_INTEGER (max only), KEY_BYTES */
        const struct sbx_limit_field *limit; /* KEY_LIMIT */
        int (*parse)(struct loader *loader, void *record, const char *value,
                     struct sbx_error *err); /* KEY_CUSTOM: fails with err set */
};

/* Rows of a table whose section record is RECORD (defined around each table): the offset of
 * member, checked at compile time to be of the C type the kind sets. */
#define MEMBER(member, type)                                                                       \
        (offsetof(RECORD, member) + 0 * sizeof(_Generic(((RECORD *)0)->member, type : 0)))
#define NUMBER(member, min_value, max_value)                                                       \
        .kind = KEY_NUMBER, .offset = MEMBER(member, uint64_t), .min = (min_value),                \
        .max = (max_value)
#define INTEGER(member, max_value)                                                                 \
        .kind = KEY_INTEGER, .offset = MEMBER(member, uint64_t), .max = (max_value)
#define BYTES(member, min_value, max_value)                                                        \
        .kind = KEY_BYTES, .offset = MEMBER(member, uint64_t), .min = (min_value),                 \
        .max = (max_value)
#define BOOLEAN(member)  .kind = KEY_BOOL, .offset = MEMBER(member, bool)
#define CUSTOM(function) .kind = KEY_CUSTOM, .parse = (function)

/* Every section's keys are bits of loader->seen_keys. */
#define MAX_SECTION_KEYS 64

/* Marks the key with this bit as set in this section; false when it already was. */
static bool mark_key_seen(struct loader *loader, unsigned bit)
{
        uint64_t mask = 1ull << bit;
        if (loader->seen_keys & mask)
                return false;
        loader->seen_keys |= mask;
        return true;
}

static int parse_value(struct loader *loader, const struct config_key *row, void *record,
                       const char *value, struct sbx_error *err)
{
        void *member = (char *)record + row->offset;
        switch (row->kind) {
        case KEY_NUMBER:
                return parse_number(value, row->min, row->max, member, err);
        case KEY_INTEGER:
                return sbx_parse_u64(value, row->max, member, err);
        case KEY_BYTES:
                return parse_bytes(value, row->min, row->max, member, err);
        case KEY_BOOL:
                return parse_bool(value, member, err);
        case KEY_LIMIT:
                return parse_limit(value, row->limit, member, err);
        case KEY_CUSTOM:
                return row->parse(loader, record, value, err);
        }
        return value_error(err, EINVAL, "key of unknown kind %d", (int)row->kind);
}

/* Sets the key row describes in record from value, unless the section set it already (bit: its
 * bit in loader->seen_keys). Returns what inih expects of a handler: 1, or 0 after loader_fail. */
static int set_key(struct loader *loader, const struct config_key *row, unsigned bit, void *record,
                   const char *value)
{
        if (!mark_key_seen(loader, bit))
                return loader_fail(loader, loader->line, row->name,
                                   "set twice (an indented line continues the key above)");
        struct sbx_error why = {0};
        if (parse_value(loader, row, record, value, &why) < 0)
                return loader_fail(loader, loader->line, row->name, "%s", why.message);
        return 1;
}

/* Looks key up in keys[0..n_keys) and sets it in record (see set_key); first_bit is the bit of
 * keys[0]. */
static int set_table_key(struct loader *loader, const struct config_key *keys, size_t n_keys,
                         unsigned first_bit, void *record, const char *key, const char *value)
{
        for (size_t i = 0; i < n_keys; i++)
                if (strcmp(keys[i].name, key) == 0)
                        return set_key(loader, &keys[i], first_bit + (unsigned)i, record, value);
        return loader_fail(loader, loader->line, key, "unknown key");
}

/* ---- [server] -------------------------------------------------------------------------- */

static int server_listen(struct loader *loader, void *record, const char *value,
                         struct sbx_error *err)
{
        return parse_listen(value, record, err);
}

static int server_data_dir(struct loader *loader, void *record, const char *value,
                           struct sbx_error *err)
{
        struct sbx_server_config *server = record;
        if (value[0] != '/' || strlen(value) >= 4096)
                return value_error(err, EINVAL, "'%s' is not an absolute path", value);
        free(server->data_dir);
        server->data_dir = strdup(value);
        if (server->data_dir == NULL)
                return value_error(err, ENOMEM, "out of memory");
        return 0;
}

/* runsc's platforms: ptrace everywhere (and the only one Debian 12's runsc runs on these
 * machines, MACHINE.md); systrap on a runsc from 2023 on; kvm on a host with /dev/kvm. */
static int server_gvisor_platform(struct loader *loader, void *record, const char *value,
                                  struct sbx_error *err)
{
        (void)loader;
        static const char *const platforms[] = {"ptrace", "systrap", "kvm"};
        struct sbx_server_config *server = record;
        for (size_t i = 0; i < SBX_ARRAY_SIZE(platforms); i++)
                if (strcmp(value, platforms[i]) == 0) {
                        server->gvisor_platform = platforms[i];
                        return 0;
                }
        return value_error(err, EINVAL, "'%s' is not ptrace, systrap or kvm", value);
}

/* Never 0: the API process parses untrusted input and must not be root; never (uid_t)-1, which
 * set*id() reads as "unchanged"; never one of the sandboxes' uids, whose processes it would
 * own. */
static int server_api_uid(struct loader *loader, void *record, const char *value,
                          struct sbx_error *err)
{
        struct sbx_server_config *server = record;
        uint64_t number = 0;
        if (parse_number(value, 1, 4294967294u, &number, err) < 0)
                return -1;
        if (number >= SBX_SANDBOX_HOST_IDS_FIRST)
                return value_error(err, EINVAL,
                                   "uids from %u on belong to the sandboxes (it must be below)",
                                   SBX_SANDBOX_HOST_IDS_FIRST);
        server->api_uid = (uid_t)number;
        return 0;
}

static int server_metrics_token(struct loader *loader, void *record, const char *value,
                                struct sbx_error *err)
{
        struct sbx_server_config *server = record;
        server->metrics_token_required = false;
        if (strlen(value) != SBX_SHA256_HEX_SIZE ||
            !sbx_hex_decode(value, server->metrics_token_sha256, SBX_SHA256_SIZE))
                return value_error(err, EINVAL, "not %d hex digits", SBX_SHA256_HEX_SIZE);
        server->metrics_token_required = true;
        return 0;
}

#define RECORD struct sbx_server_config
static const struct config_key server_keys[] = {
        {"listen", CUSTOM(server_listen)},
        {"data_dir", CUSTOM(server_data_dir)},
        {"api_uid", CUSTOM(server_api_uid)},
        /* At least a small request; at most the engine's largest message (48 MiB): a bigger
         * body could not be forwarded anyway. */
        {"max_body_bytes", BYTES(max_body_bytes, 1024, 48 * MIB)},
        {"max_sandboxes", NUMBER(max_sandboxes, 1, SBX_ENGINE_MAX_SANDBOXES_LIMIT)},
        /* Sessions open at once, all tenants together: each holds a sandbox for its life, and
         * executions need the rest. 0: half of max_sandboxes. */
        {"max_sessions", NUMBER(max_sessions, 0, SBX_ENGINE_MAX_SANDBOXES_LIMIT)},
        {"shutdown_grace_s", NUMBER(shutdown_grace_s, 0, 3600)},
        {"store_output", BOOLEAN(store_output)},
        /* Python pool entries forked from a template interpreter (DESIGN.md "Warm pools:
         * templates"); false: each starts its own. */
        {"templates", BOOLEAN(templates)},
        /* A thread each (libmicrohttpd's thread-per-connection mode). */
        {"max_connections", NUMBER(max_connections, 1, 16384)},
        {"max_connections_per_ip", NUMBER(max_connections_per_ip, 1, 16384)},
        /* GET /metrics then needs the token. */
        {"metrics_token_sha256", CUSTOM(server_metrics_token)},
        /* The compiled artifacts kept under DATA_DIR/compile-cache; 0 turns the cache off. */
        {"compile_cache_bytes", BYTES(compile_cache_bytes, 0, 1ull << 40)},
        /* The gvisor backend's runsc --platform. */
        {"gvisor_platform", CUSTOM(server_gvisor_platform)},
        /* Webhooks (api/webhooks.h). */
        {"webhook_timeout_ms", NUMBER(webhook_timeout_ms, 100, 120000)},
        {"webhook_backoff_ms", NUMBER(webhook_backoff_ms, 10, 3600000)},
        {"webhook_max_attempts", NUMBER(webhook_max_attempts, 1, 50)},
};
#undef RECORD
_Static_assert(SBX_ARRAY_SIZE(server_keys) <= MAX_SECTION_KEYS, "too many [server] keys");

static void server_set_defaults(struct sbx_server_config *server)
{
        struct sbx_error ignored = {0};
        /* Cannot fail but for memory; a NULL listen is then reported by the loader. */
        parse_listen("127.0.0.1:8080", server, &ignored);
        server->data_dir = strdup(SBX_DEFAULT_DATA_DIR);
        server->gvisor_platform = "ptrace";
        /* A high uid no distribution allocates, so the API process shares no files or
         * processes with a real account; no passwd entry is needed. */
        server->api_uid = 1999999999;
        server->max_body_bytes = 8 * MIB;
        server->compile_cache_bytes = 1024 * MIB;
        server->max_sandboxes = 64;
        server->shutdown_grace_s = 10;
        server->store_output = false;
        server->templates = true;
        server->max_connections = 512;
        server->max_connections_per_ip = 128;
        server->webhook_timeout_ms = 10000;
        server->webhook_backoff_ms = 1000;
        server->webhook_max_attempts = 8;
}

static int server_key(struct loader *loader, const char *key, const char *value)
{
        return set_table_key(loader, server_keys, SBX_ARRAY_SIZE(server_keys), 0,
                             &loader->config->server, key, value);
}

/* ---- [store] --------------------------------------------------------------------------- */

/* Copies value into *member (a char *), replacing what was there. */
static int set_string(char **member, const char *value, struct sbx_error *err)
{
        char *copy = strdup(value);
        if (copy == NULL)
                return value_error(err, ENOMEM, "out of memory");
        free(*member);
        *member = copy;
        return 0;
}

/* A PostgreSQL connection URI (libpq parses the rest when it connects). */
static int store_url(struct loader *loader, void *record, const char *value, struct sbx_error *err)
{
        (void)loader;
        struct sbx_store_config *store = record;
        /* Not echoed: it may hold a password. */
        if (strncmp(value, "postgresql://", 13) != 0 && strncmp(value, "postgres://", 11) != 0)
                return value_error(err, EINVAL,
                                   "not a postgresql:// URL (without one the store is SQLite "
                                   "under data_dir)");
        return set_string(&store->url, value, err);
}

/* A node's name: its leases' and liveness's in the store (service/quota_pg.h). */
static int store_node(struct loader *loader, void *record, const char *value, struct sbx_error *err)
{
        (void)loader;
        struct sbx_store_config *store = record;
        if (!sbx_config_name_valid(value))
                return value_error(err, EINVAL, "'%s' is not 1 to %d of [A-Za-z0-9_-]", value,
                                   SBX_CONFIG_NAME_MAX);
        return set_string(&store->node, value, err);
}

/* Where the other nodes send the requests for what lives on this one (api/forward.h). */
static int store_advertise(struct loader *loader, void *record, const char *value,
                           struct sbx_error *err)
{
        (void)loader;
        struct sbx_store_config *store = record;
        if ((strncmp(value, "http://", 7) != 0 && strncmp(value, "https://", 8) != 0) ||
            strlen(value) > 512 || strpbrk(value, " \t\r\n?#") != NULL)
                return value_error(err, EINVAL,
                                   "'%.80s' is not an http:// or https:// URL of at most 512 "
                                   "characters without a query",
                                   value);
        return set_string(&store->advertise, value, err);
}

#define RECORD struct sbx_store_config
static const struct config_key store_keys[] = {
        {"url", CUSTOM(store_url)},
        {"node", CUSTOM(store_node)},
        {"advertise", CUSTOM(store_advertise)},
        {"connections", NUMBER(connections, 1, 64)},
        /* Under 2 s a heartbeat (a fifth of it) would be more often than the store should bear
         * from every node; over 25 s the heartbeat would be longer than the grace a node's
         * liveness gets before another node takes its executions for dead
         * (SBX_AUDIT_REAP_GRACE_S): a node back from a store outage renews within a heartbeat. */
        {"lease_ttl_s", NUMBER(lease_ttl_s, 2, 25)},
};
#undef RECORD

static int store_key(struct loader *loader, const char *key, const char *value)
{
        return set_table_key(loader, store_keys, SBX_ARRAY_SIZE(store_keys), 0,
                             &loader->config->store, key, value);
}

/* ---- [tier.NAME] ----------------------------------------------------------------------- */

static int tier_languages(struct loader *loader, void *record, const char *value,
                          struct sbx_error *err)
{
        struct sbx_tier *tier = record;
        return parse_name_list(value, find_language_name, "language", tier->languages,
                               SBX_ARRAY_SIZE(tier->languages), &tier->n_languages, err);
}

static int tier_webhook_allow(struct loader *loader, void *record, const char *value,
                              struct sbx_error *err)
{
        (void)loader;
        struct sbx_tier *tier = record;
        struct sbx_error parse_err = {0};
        if (sbx_webhook_allow_parse(value, &tier->webhook_allow, &parse_err) < 0)
                return value_error(err, EINVAL, "%s", parse_err.message);
        return 0;
}

static int tier_compat_apis(struct loader *loader, void *record, const char *value,
                            struct sbx_error *err)
{
        (void)loader;
        return parse_compat_apis(value, &((struct sbx_tier *)record)->compat_apis, err);
}

static int tier_backends(struct loader *loader, void *record, const char *value,
                         struct sbx_error *err)
{
        struct sbx_tier *tier = record;
        return parse_name_list(value, sbx_backend_name_find, "backend", tier->backends,
                               SBX_ARRAY_SIZE(tier->backends), &tier->n_backends, err);
}

/* A tier's keys besides max_NAME and default_NAME, which every settable limit of model/limits.h
 * has (tier_limit_key). */
#define RECORD struct sbx_tier
static const struct config_key tier_keys[] = {
        {"max_concurrency", NUMBER(max_concurrency, 1, 65536)},
        /* Up to a year of CPU: large enough to mean "no budget", small enough that sums of
         * charges never overflow. */
        {"cpu_budget_ms", NUMBER(cpu_budget_ms, 1, 365 * DAY_MS)},
        /* The quota keeps one entry per second of the window at most: a day bounds its
         * memory. */
        {"cpu_window_s", NUMBER(cpu_window_s, 1, 24 * 3600)},
        {"languages", CUSTOM(tier_languages)},
        {"backends", CUSTOM(tier_backends)},
        /* Sessions (api/sessions.h): open at once per tenant, and their longest life. */
        {"max_sessions", NUMBER(max_sessions, 1, 65536)},
        {"max_session_lifetime_s", NUMBER(max_session_lifetime_s, 1, 30 * 24 * 3600)},
        /* RL episodes (api/episodes.c): open at once per tenant (their life is a session's). */
        {"max_episodes", NUMBER(max_episodes, 1, 65536)},
        /* Asynchronous executions (api/async.h) waiting in the queue per tenant. */
        {"max_queued", NUMBER(max_queued, 1, 1000000)},
        /* Webhooks to this machine's networks it may send anyway (webhook_policy.h). */
        {"webhook_allow", CUSTOM(tier_webhook_allow)},
        /* The drop-in APIs (api/compat.h) its tenants may use. */
        {"compat_apis", CUSTOM(tier_compat_apis)},
};
#undef RECORD

/* The bits of loader->seen_keys: max_NAME by limit index, default_NAME after them,
 * max_compile_NAME after those, then tier_keys. */
#define TIER_LIMIT_KEY_BITS (3 * SBX_LIMIT_COUNT)
_Static_assert(TIER_LIMIT_KEY_BITS + SBX_ARRAY_SIZE(tier_keys) <= MAX_SECTION_KEYS,
               "too many tier keys");

/* The row of key when it is max_NAME, default_NAME or max_compile_NAME of a settable limit, made
 * into *row with its bit in *bit; false for any other key. */
static bool tier_limit_key(const char *key, struct config_key *row, unsigned *bit)
{
        bool is_default = strncmp(key, "default_", 8) == 0;
        bool is_compile = strncmp(key, "max_compile_", 12) == 0;
        if (!is_default && strncmp(key, "max_", 4) != 0)
                return false;
        const char *name = key + (is_default ? 8 : is_compile ? 12 : 4);
        for (unsigned i = 0; i < SBX_LIMIT_COUNT; i++) {
                const struct sbx_limit_field *field = &sbx_limit_fields[i];
                if (field->kind != SBX_LIMIT_SETTABLE || strcmp(field->name, name) != 0)
                        continue;
                *row = (struct config_key){
                        .name = key,
                        .kind = KEY_LIMIT,
                        .offset = is_default   ? offsetof(struct sbx_tier, defaults)
                                  : is_compile ? offsetof(struct sbx_tier, max_compile)
                                               : offsetof(struct sbx_tier, max),
                        .limit = field,
                };
                *bit = i + (is_default ? SBX_LIMIT_COUNT : is_compile ? 2 * SBX_LIMIT_COUNT : 0);
                return true;
        }
        return false;
}

static void tier_set_defaults(struct sbx_tier *tier)
{
        struct sbx_error ignored = {0};
        sbx_limits_default(&tier->max);
        tier->max.cpu_millicores = 0;
        sbx_language_compile_ceilings(&tier->max_compile);
        tier->max_concurrency = 4;
        tier->cpu_budget_ms = 60 * 1000;
        tier->cpu_window_s = 60;
        tier->max_sessions = 8;
        tier->max_session_lifetime_s = 3600;
        tier->max_episodes = 32;
        tier->max_queued = 10000;
        tier->compat_apis = SBX_COMPAT_ALL;
        parse_name_list(sbx_language_names(), find_language_name, "language", tier->languages,
                        SBX_ARRAY_SIZE(tier->languages), &tier->n_languages, &ignored);
        tier->backends[0] = sbx_backend_name_find(SBX_BACKEND_DEFAULT);
        tier->n_backends = 1;
}

static bool tier_name_taken(const struct sbx_config *config, const char *name)
{
        return sbx_config_find_tier(config, name) != NULL;
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

static int tier_key(struct loader *loader, const char *key, const char *value)
{
        struct sbx_tier *tier = &loader->config->tiers[loader->config->n_tiers - 1];
        struct config_key limit_row;
        unsigned bit;
        if (tier_limit_key(key, &limit_row, &bit))
                return set_key(loader, &limit_row, bit, tier, value);
        return set_table_key(loader, tier_keys, SBX_ARRAY_SIZE(tier_keys), TIER_LIMIT_KEY_BITS,
                             tier, key, value);
}

/* ---- [tenant.NAME] --------------------------------------------------------------------- */

static struct tenant_source *current_source(struct loader *loader)
{
        return &loader->sources[loader->config->n_tenants - 1];
}

/* Kept by name: the tier may come later in the file (finish_tenants resolves it). */
static int tenant_tier(struct loader *loader, void *record, const char *value,
                       struct sbx_error *err)
{
        struct tenant_source *source = current_source(loader);
        source->tier_name = strdup(value);
        source->tier_line = loader->line;
        if (source->tier_name == NULL)
                return value_error(err, ENOMEM, "out of memory");
        return 0;
}

static int tenant_token(struct loader *loader, void *record, const char *value,
                        struct sbx_error *err)
{
        struct sbx_tenant *tenant = record;
        struct tenant_source *source = current_source(loader);
        if (!sbx_hex_decode(value, tenant->token_sha256, SBX_SHA256_SIZE))
                return value_error(err, EINVAL,
                                   "not 64 hex digits (the SHA-256 `sandboxd token` prints)");
        source->has_token = true;
        source->token_line = loader->line;
        return 0;
}

/* The key that signs a tenant's webhooks: "whsec_" and base64 (Standard Webhooks), or any
 * string of at least 16 characters. */
static int tenant_webhook_secret(struct loader *loader, void *record, const char *value,
                                 struct sbx_error *err)
{
        (void)loader;
        struct sbx_tenant *tenant = record;
        if (strlen(value) < 16 || strlen(value) > 256)
                return value_error(err, EINVAL, "16 to 256 characters");
        free(tenant->webhook_secret);
        tenant->webhook_secret = strdup(value);
        if (tenant->webhook_secret == NULL)
                return value_error(err, ENOMEM, "out of memory");
        return 0;
}

static int tenant_anonymous_apis(struct loader *loader, void *record, const char *value,
                                 struct sbx_error *err)
{
        current_source(loader)->anonymous_line = loader->line;
        return parse_compat_apis(value, &((struct sbx_tenant *)record)->anonymous_apis, err);
}

static const struct config_key tenant_keys[] = {
        {"tier", CUSTOM(tenant_tier)},
        {"token_sha256", CUSTOM(tenant_token)},
        {"webhook_secret", CUSTOM(tenant_webhook_secret)},
        {"anonymous_apis", CUSTOM(tenant_anonymous_apis)},
};

static int begin_tenant(struct loader *loader, const char *name)
{
        struct sbx_config *config = loader->config;
        if (!sbx_config_name_valid(name))
                return loader_fail(loader, loader->line, NULL,
                                   "tenant name must be 1 to %d letters, digits, '_' or '-'",
                                   SBX_CONFIG_NAME_MAX);
        if (sbx_config_find_tenant(config, name) != NULL)
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

static int tenant_key(struct loader *loader, const char *key, const char *value)
{
        return set_table_key(loader, tenant_keys, SBX_ARRAY_SIZE(tenant_keys), 0,
                             &loader->config->tenants[loader->config->n_tenants - 1], key, value);
}

/* ---- [pool.LANGUAGE], [pool.LANGUAGE.BACKEND] ------------------------------------------ */

#define RECORD struct sbx_pool_config
static const struct config_key pool_keys[] = {
        {"min_idle", INTEGER(min_idle, SBX_ENGINE_MAX_SANDBOXES_LIMIT)},
        {"max_idle", INTEGER(max_idle, SBX_ENGINE_MAX_SANDBOXES_LIMIT)},
        {"max_idle_s", INTEGER(max_idle_s, 7 * 24 * 3600)},
        {"memory_mb", INTEGER(memory_mb, 1u << 20)},
};
#undef RECORD

/* A uml entry's guest boots with the RAM of a memory cap (execution.h's
 * sbx_pool_guest_memory_bytes): the pool's key, as a guest's RAM cannot grow. At least what its
 * waiting interpreter needs (python's loader: 32 MiB). */
#define POOL_MEMORY_MB_MIN 32

/* Python's pool is on by default (2 ready, at most 4, replaced after 5 minutes idle), so that a
 * fresh `make run` answers Python fast; a [pool.python] section changes it. */
static void pools_set_defaults(struct sbx_config *config)
{
        config->pools[0] = (struct sbx_pool_config){.language = "python",
                                                    .backend = SBX_BACKEND_DEFAULT,
                                                    .min_idle = 2,
                                                    .max_idle = 4,
                                                    .max_idle_s = 300};
        config->n_pools = 1;
}

/* The pool a section names: [pool.LANGUAGE] (the default backend's), [pool.LANGUAGE.BACKEND],
 * or [session_pool.LANGUAGE] (sessions). false for a name that is none of them. */
static bool pool_section(const char *section, const struct sbx_language **language,
                         const char **backend, bool *sessions)
{
        *sessions = strncmp(section, "session_pool.", 13) == 0;
        const char *name = strchr(section, '.') + 1;
        const char *dot = strchr(name, '.');
        char language_name[32];
        snprintf(language_name, sizeof(language_name), "%.*s",
                 (int)(dot != NULL ? (size_t)(dot - name) : strlen(name)), name);
        *language = sbx_language_find(language_name);
        *backend = dot != NULL ? sbx_backend_name_find(dot + 1) : SBX_BACKEND_DEFAULT;
        return *language != NULL && *backend != NULL && !(*sessions && dot != NULL);
}

static struct sbx_pool_config *current_pool(struct loader *loader)
{
        const struct sbx_language *language;
        const char *backend;
        bool sessions;
        if (!pool_section(loader->section, &language, &backend, &sessions))
                return NULL;
        for (size_t i = 0; i < loader->config->n_pools; i++) {
                const struct sbx_pool_config *pool = &loader->config->pools[i];
                if (strcmp(pool->language, language->name) == 0 &&
                    strcmp(pool->backend, backend) == 0 && pool->sessions == sessions)
                        return &loader->config->pools[i];
        }
        return NULL;
}

static void begin_pool(struct loader *loader)
{
        /* Every language has one on the native backend: python's entries wait in its
         * interpreter, the others' in an exec entry (a set-up sandbox whose init starts the
         * program on acquire); other backends' are sbx_backend_pools_language's. Sessions: the
         * languages with a session agent, on the native backend. */
        const struct sbx_language *language;
        const char *backend;
        bool sessions;
        if (!pool_section(loader->section, &language, &backend, &sessions) ||
            (sessions && !language->sessions) || !sbx_backend_pools_language(backend, language)) {
                loader_fail(loader, loader->line, NULL,
                            sessions ? "no session pool exists for [%s] (python, bash)"
                                     : "no warm pool exists for [%s] (languages: %s; backends: "
                                       "%s; the gvisor and uml backends': python)",
                            loader->section, sbx_language_names(), sbx_backend_names());
                return;
        }
        if (current_pool(loader) == NULL) {
                if (loader->config->n_pools == SBX_CONFIG_MAX_POOLS) {
                        loader_fail(loader, loader->line, NULL, "too many pools");
                        return;
                }
                loader->config->pools[loader->config->n_pools++] = (struct sbx_pool_config){
                        .language = language->name, .backend = backend, .sessions = sessions};
        }
}

static int pool_key(struct loader *loader, const char *key, const char *value)
{
        struct sbx_pool_config *pool = current_pool(loader);
        if (pool == NULL)
                return loader_fail(loader, loader->line, key, "unknown key");
        int r = set_table_key(loader, pool_keys, SBX_ARRAY_SIZE(pool_keys), 0, pool, key, value);
        if (r == 1 && strcmp(key, "memory_mb") == 0 && strcmp(pool->backend, "uml") != 0)
                return loader_fail(loader, loader->line, key,
                                   "only a uml pool's entries have a memory size of their own "
                                   "(a guest's RAM); the others take the request's cap");
        if (r == 1 && strcmp(key, "memory_mb") == 0 && pool->memory_mb < POOL_MEMORY_MB_MIN)
                return loader_fail(loader, loader->line, key, "at least %d", POOL_MEMORY_MB_MIN);
        /* After every key, whichever order they come in: max_idle below min_idle means
         * "min_idle". */
        if (r == 1 && pool->max_idle < pool->min_idle)
                pool->max_idle = pool->min_idle;
        return r;
}

/* ---- sections -------------------------------------------------------------------------- */

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
        } else if (strcmp(section, "store") == 0) {
                loader->kind = SECTION_STORE;
                if (loader->store_seen)
                        loader_fail(loader, loader->line, NULL, "section appears twice");
                loader->store_seen = true;
        } else if (strncmp(section, "tier.", 5) == 0) {
                loader->kind = SECTION_TIER;
                begin_tier(loader, section + 5);
        } else if (strncmp(section, "tenant.", 7) == 0) {
                loader->kind = SECTION_TENANT;
                begin_tenant(loader, section + 7);
        } else if (strncmp(section, "pool.", 5) == 0) {
                loader->kind = SECTION_POOL;
                begin_pool(loader);
        } else if (strncmp(section, "session_pool.", 13) == 0) {
                loader->kind = SECTION_POOL;
                begin_pool(loader);
        } else {
                loader->kind = SECTION_NONE;
                loader_fail(
                        loader, loader->line, NULL,
                        "unknown section (expected [server], [store], [tier.NAME], [tenant.NAME], "
                        "[pool.LANGUAGE], [pool.LANGUAGE.BACKEND] or "
                        "[session_pool.LANGUAGE])");
        }
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
        case SECTION_STORE:
                return store_key(loader, key, value);
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
                for (size_t j = 0; j < i; j++)
                        if (config->tenants[j].anonymous_apis & tenant->anonymous_apis)
                                return loader_fail(loader, source->anonymous_line, "anonymous_apis",
                                                   "tenant '%s' takes token-less requests there "
                                                   "already",
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
        config->store.connections = 4;
        config->store.lease_ttl_s = 10;
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
        /* A config file is a few dozen lines; the cap only keeps a wrong path (a log, a device)
         * from being read into memory whole. */
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
        free(config->store.url);
        free(config->store.node);
        free(config->store.advertise);
        for (size_t i = 0; i < config->n_tiers; i++)
                free(config->tiers[i].name);
        free(config->tiers);
        for (size_t i = 0; i < config->n_tenants; i++) {
                free(config->tenants[i].name);
                free(config->tenants[i].webhook_secret);
        }
        free(config->tenants);
        *config = (struct sbx_config){0};
}

const struct sbx_tenant *sbx_config_find_tenant(const struct sbx_config *config, const char *name)
{
        for (size_t i = 0; i < config->n_tenants; i++)
                if (strcmp(config->tenants[i].name, name) == 0)
                        return &config->tenants[i];
        return NULL;
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
        if (sbx_config_find_tenant(config, name) != NULL)
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

const struct sbx_tenant *sbx_config_anonymous_tenant(const struct sbx_config *config,
                                                     enum sbx_compat_api api)
{
        for (size_t i = 0; i < config->n_tenants; i++)
                if (config->tenants[i].anonymous_apis & api)
                        return &config->tenants[i];
        return NULL;
}

bool sbx_tier_allows_backend(const struct sbx_tier *tier, const char *name)
{
        return list_contains(tier->backends, tier->n_backends, name);
}
