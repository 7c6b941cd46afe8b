/* Unit tests for service/config.h: the issue's example config loads with the values written and
 * the documented defaults for the rest; the embedded default config loads; every class of
 * mistake fails with "name:line: [section] key: why" and leaves the config empty. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "engine/execution.h"
#include "model/language.h"
#include "service/config.h"

#define MIB (1024ull * 1024ull)

/* SHA-256 of "abc" (FIPS 180-2 appendix B.1), a hash any tenant could have. */
#define HASH_ABC "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
#define HASH_B   "0000000000000000000000000000000000000000000000000000000000000001"

static const char issue_example[] = "[server]\n"
                                    "listen = 127.0.0.1:8080\n"
                                    "data_dir = /var/lib/sandboxd\n"
                                    "\n"
                                    "[tier.free]\n"
                                    "max_memory_mb = 256\n"
                                    "max_wall_ms = 10000\n"
                                    "max_concurrency = 2\n"
                                    "cpu_budget_ms = 60000\n"
                                    "cpu_window_s = 60\n"
                                    "languages = python, bash, sh\n"
                                    "\n"
                                    "[tenant.acme]\n"
                                    "tier = free\n"
                                    "token_sha256 = " HASH_ABC "\n";

static void load_ok(const char *text, struct sbx_config *config)
{
        struct sbx_error err = {0};
        if (sbx_config_load_string(text, "t", config, &err) != 0)
                fail_msg("load failed: %s\n--- config:\n%s", err.message, text);
}

/* Loading text fails with a message that starts with expected. */
static void assert_load_error(const char *text, const char *expected)
{
        struct sbx_config config;
        struct sbx_error err = {0};
        if (sbx_config_load_string(text, "t", &config, &err) == 0) {
                sbx_config_free(&config);
                fail_msg("loaded, expected error '%s'\n--- config:\n%s", expected, text);
        }
        if (strncmp(err.message, expected, strlen(expected)) != 0)
                fail_msg("error '%s', expected it to start with '%s'", err.message, expected);
        assert_int_equal(err.code, EINVAL);
        assert_null(config.tiers);
        assert_null(config.tenants);
        assert_null(config.server.listen);
}

static void test_issue_example_loads(void **state)
{
        struct sbx_config config;
        load_ok(issue_example, &config);

        const struct sbx_server_config *server = &config.server;
        assert_string_equal(server->listen, "127.0.0.1:8080");
        const struct sockaddr_in *address = (const struct sockaddr_in *)&server->listen_address;
        assert_int_equal(address->sin_family, AF_INET);
        assert_int_equal(ntohs(address->sin_port), 8080);
        assert_int_equal(ntohl(address->sin_addr.s_addr), INADDR_LOOPBACK);
        assert_int_equal(server->listen_address_size, sizeof(struct sockaddr_in));
        assert_string_equal(server->data_dir, "/var/lib/sandboxd");
        /* Keys not written take their defaults. */
        assert_int_equal(server->api_uid, 1999999999);
        assert_int_equal(server->max_body_bytes, 8 * MIB);
        assert_int_equal(server->max_sandboxes, 64);
        assert_int_equal(server->shutdown_grace_s, 10);
        assert_false(server->store_output);

        /* The tier it declares, and the built-in "default" after it. */
        assert_int_equal(config.n_tiers, 2);
        assert_string_equal(config.tiers[0].name, "free");
        assert_string_equal(config.tiers[1].name, SBX_DEFAULT_TIER_NAME);
        const struct sbx_tier *tier = sbx_config_find_tier(&config, "free");
        assert_non_null(tier);
        assert_int_equal(tier->max.memory_bytes, 256 * MIB);
        assert_int_equal(tier->max.wall_ms, 10000);
        assert_int_equal(tier->max_concurrency, 2);
        assert_int_equal(tier->cpu_budget_ms, 60000);
        assert_int_equal(tier->cpu_window_s, 60);
        assert_int_equal(tier->n_languages, 3);
        assert_true(sbx_tier_allows_language(tier, "python"));
        assert_true(sbx_tier_allows_language(tier, "bash"));
        assert_true(sbx_tier_allows_language(tier, "sh"));
        assert_false(sbx_tier_allows_language(tier, "ruby"));
        assert_false(sbx_tier_allows_language(tier, NULL));
        /* Ceilings not written: the built-in defaults; no default_* set. */
        assert_int_equal(tier->max.cpu_ms, 10000);
        assert_int_equal(tier->max.pids, 64);
        assert_int_equal(tier->max.disk_bytes, 64 * MIB);
        assert_int_equal(tier->max.output_bytes, 1 * MIB);
        assert_int_equal(tier->max.open_files, 1024);
        assert_int_equal(tier->defaults.memory_bytes, 0);
        assert_int_equal(tier->defaults.wall_ms, 0);
        assert_true(sbx_tier_allows_backend(tier, "native"));
        assert_false(sbx_tier_allows_backend(tier, "gvisor"));

        assert_int_equal(config.n_tenants, 1);
        const struct sbx_tenant *tenant = &config.tenants[0];
        assert_string_equal(tenant->name, "acme");
        assert_ptr_equal(tenant->tier, tier);
        assert_int_equal(tenant->token_sha256[0], 0xba);
        assert_int_equal(tenant->token_sha256[31], 0xad);
        sbx_config_free(&config);
        assert_null(config.tiers);
        sbx_config_free(&config); /* twice is harmless */
}

static void test_embedded_default_loads(void **state)
{
        struct sbx_config config;
        struct sbx_error err = {0};
        assert_int_equal(
                sbx_config_load_string(sbx_config_default_text, "<embedded>", &config, &err), 0);
        assert_string_equal(config.server.listen, "127.0.0.1:8080");
        assert_string_equal(config.server.data_dir, "/var/lib/sandboxd");
        assert_string_equal(config.server.gvisor_platform, "ptrace");
        assert_int_equal(config.n_tenants, 0);
        const struct sbx_tier *tier = sbx_config_find_tier(&config, "default");
        assert_non_null(tier);
        assert_int_equal(tier->max.memory_bytes, 256 * MIB);
        assert_int_equal(tier->max_concurrency, 4);
        assert_int_equal(tier->n_languages, sbx_language_count()); /* every one */
        sbx_config_free(&config);
}

static void test_every_key(void **state)
{
        struct sbx_config config;
        load_ok("; a comment\n"
                "# another\n"
                "[server]\n"
                "listen = [::1]:9000 ; inline comment\n"
                "data_dir = /srv/sbx\n"
                "api_uid = 4242\n"
                "max_body_bytes = 2M\n"
                "max_sandboxes = 8\n"
                "shutdown_grace_s = 0\n"
                "store_output = yes\n"
                "max_connections = 1000\n"
                "max_connections_per_ip = 10\n"
                "gvisor_platform = kvm\n"
                "metrics_token_sha256 = "
                "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff\n"
                "[tier.big]\n"
                "max_wall_ms = 60000\n"
                "max_cpu_ms = 30000\n"
                "max_memory_mb = 1024\n"
                "max_pids = 256\n"
                "max_disk_mb = 512\n"
                "max_output_bytes = 4M\n"
                "max_open_files = 1024\n"
                "default_wall_ms = 5000\n"
                "default_cpu_ms = 4000\n"
                "default_memory_mb = 128\n"
                "default_pids = 32\n"
                "default_disk_mb = 16\n"
                "default_output_bytes = 65536\n"
                "default_open_files = 64\n"
                "max_concurrency = 16\n"
                "cpu_budget_ms = 1000000\n"
                "cpu_window_s = 3600\n"
                "languages = sh\n"
                "backends = native\n"
                "[tier.empty]\n",
                &config);
        const struct sbx_server_config *server = &config.server;
        const struct sockaddr_in6 *address = (const struct sockaddr_in6 *)&server->listen_address;
        assert_int_equal(address->sin6_family, AF_INET6);
        assert_int_equal(ntohs(address->sin6_port), 9000);
        assert_true(IN6_IS_ADDR_LOOPBACK(&address->sin6_addr));
        assert_int_equal(server->listen_address_size, sizeof(struct sockaddr_in6));
        assert_string_equal(server->data_dir, "/srv/sbx");
        assert_int_equal(server->api_uid, 4242);
        assert_int_equal(server->max_body_bytes, 2 * MIB);
        assert_int_equal(server->max_sandboxes, 8);
        assert_int_equal(server->shutdown_grace_s, 0);
        assert_true(server->store_output);
        assert_int_equal(server->max_connections, 1000);
        assert_int_equal(server->max_connections_per_ip, 10);
        assert_string_equal(server->gvisor_platform, "kvm");
        assert_true(server->metrics_token_required);
        assert_int_equal(server->metrics_token_sha256[0], 0x00);
        assert_int_equal(server->metrics_token_sha256[1], 0x11);
        assert_int_equal(server->metrics_token_sha256[31], 0xff);

        const struct sbx_tier *big = sbx_config_find_tier(&config, "big");
        assert_non_null(big);
        assert_int_equal(big->max.wall_ms, 60000);
        assert_int_equal(big->max.cpu_ms, 30000);
        assert_int_equal(big->max.memory_bytes, 1024 * MIB);
        assert_int_equal(big->max.pids, 256);
        assert_int_equal(big->max.disk_bytes, 512 * MIB);
        assert_int_equal(big->max.output_bytes, 4 * MIB);
        assert_int_equal(big->max.open_files, 1024);
        assert_int_equal(big->defaults.wall_ms, 5000);
        assert_int_equal(big->defaults.cpu_ms, 4000);
        assert_int_equal(big->defaults.memory_bytes, 128 * MIB);
        assert_int_equal(big->defaults.pids, 32);
        assert_int_equal(big->defaults.disk_bytes, 16 * MIB);
        assert_int_equal(big->defaults.output_bytes, 65536);
        assert_int_equal(big->defaults.open_files, 64);
        assert_int_equal(big->max_concurrency, 16);
        assert_int_equal(big->cpu_budget_ms, 1000000);
        assert_int_equal(big->cpu_window_s, 3600);
        assert_int_equal(big->n_languages, 1);
        assert_true(sbx_tier_allows_language(big, "sh"));
        assert_false(sbx_tier_allows_language(big, "python"));

        /* A section with no keys still defines the tier, with every default. */
        const struct sbx_tier *empty = sbx_config_find_tier(&config, "empty");
        assert_non_null(empty);
        assert_int_equal(empty->max.memory_bytes, 256 * MIB);
        assert_int_equal(empty->max_concurrency, 4);
        assert_int_equal(empty->cpu_budget_ms, 60000);
        assert_int_equal(empty->cpu_window_s, 60);
        assert_int_equal(empty->n_languages, sbx_language_count());
        assert_int_equal(empty->n_backends, 1);
        sbx_config_free(&config);
}

/* [pool.LANGUAGE], [pool.LANGUAGE.BACKEND] and [session_pool.LANGUAGE] are three pools of one
 * language; an alias names the same pool; a session pool exists for the languages with a session
 * agent only, a gVisor pool for Python's loader only. */
static void test_pools(void **state)
{
        (void)state;
        struct sbx_config config;
        load_ok("[pool.py]\nmin_idle = 1\n[session_pool.python]\nmin_idle = 3\n"
                "[pool.python]\nmax_idle = 5\n[session_pool.bash]\nmin_idle = 1\n",
                &config);
        assert_int_equal(config.n_pools, 3);
        assert_string_equal(config.pools[0].language, "python");
        assert_false(config.pools[0].sessions);
        assert_int_equal(config.pools[0].min_idle, 1);
        assert_int_equal(config.pools[0].max_idle, 5);
        assert_string_equal(config.pools[1].language, "python");
        assert_true(config.pools[1].sessions);
        assert_int_equal(config.pools[1].min_idle, 3);
        assert_int_equal(config.pools[1].max_idle, 3);
        assert_true(config.pools[2].sessions);
        assert_string_equal(config.pools[2].language, "bash");
        for (size_t i = 0; i < config.n_pools; i++)
                assert_string_equal(config.pools[i].backend, "native");
        sbx_config_free(&config);
        load_ok("[pool.python.gvisor]\nmin_idle = 2\n[pool.py.gvisor]\nmax_idle = 3\n"
                "[pool.python.native]\nmin_idle = 0\n",
                &config);
        assert_int_equal(config.n_pools, 2);
        assert_string_equal(config.pools[0].language, "python");
        assert_string_equal(config.pools[0].backend, "native");
        assert_int_equal(config.pools[0].min_idle, 0);
        assert_string_equal(config.pools[1].backend, "gvisor");
        assert_int_equal(config.pools[1].min_idle, 2);
        assert_int_equal(config.pools[1].max_idle, 3);
        sbx_config_free(&config);
        assert_load_error("[pool.javascript.gvisor]\n",
                          "t:1: [pool.javascript.gvisor]: no warm pool exists");
        assert_load_error("[pool.python.firecracker]\n",
                          "t:1: [pool.python.firecracker]: no warm pool exists");
        assert_load_error("[session_pool.python.gvisor]\n",
                          "t:1: [session_pool.python.gvisor]: no session pool exists");
        assert_load_error("[session_pool.javascript]\n",
                          "t:1: [session_pool.javascript]: no session pool exists for "
                          "[session_pool.javascript]");
        assert_load_error("[session_pool.ruby]\n", "t:1: [session_pool.ruby]: no session pool");

        /* A uml pool's guests boot with a memory size of their own (the pool's key); no other
         * pool's entries have one. */
        load_ok("[pool.python.uml]\nmin_idle = 1\nmemory_mb = 512\n", &config);
        assert_string_equal(config.pools[1].backend, "uml");
        assert_int_equal(config.pools[1].memory_mb, 512);
        assert_int_equal(config.pools[0].memory_mb, 0);
        sbx_config_free(&config);
        /* Its exec entries: the languages without a loader (bash, sh), not JavaScript's. */
        load_ok("[pool.bash.uml]\nmin_idle = 1\n", &config);
        assert_string_equal(config.pools[1].language, "bash");
        sbx_config_free(&config);
        assert_load_error("[pool.javascript.uml]\n",
                          "t:1: [pool.javascript.uml]: no warm pool exists");
        assert_load_error("[pool.python]\nmemory_mb = 512\n",
                          "t:2: [pool.python] memory_mb: only a uml pool's entries");
        assert_load_error("[pool.python.gvisor]\nmemory_mb = 512\n",
                          "t:2: [pool.python.gvisor] memory_mb: only a uml pool's entries");
        assert_load_error("[pool.python.uml]\nmemory_mb = 16\n",
                          "t:2: [pool.python.uml] memory_mb: at least 32");
}

static void test_unknown_names(void **state)
{
        assert_load_error("[server]\nlisten = 127.0.0.1:1\n[serve]\n",
                          "t:3: [serve]: unknown section");
        assert_load_error("[tiers.x]\n", "t:1: [tiers.x]: unknown section");
        assert_load_error("[server]\nlisen = 127.0.0.1:1\n", "t:2: [server] lisen: unknown key");
        assert_load_error("[tier.x]\nmax_memory = 5\n", "t:2: [tier.x] max_memory: unknown key");
        assert_load_error("[tier.x]\nmax_cpus = 5\n", "t:2: [tier.x] max_cpus: unknown key");
        assert_load_error("[tier.x]\ndefault_concurrency = 5\n",
                          "t:2: [tier.x] default_concurrency: unknown key");
        assert_load_error("[tenant.a]\ntier = x\ntoken = abc\n",
                          "t:3: [tenant.a] token: unknown key");
        assert_load_error("listen = 127.0.0.1:1\n", "t:1: listen: key outside any section");
        assert_load_error("[tier.x]\nlanguages = python, ruby\n",
                          "t:2: [tier.x] languages: unknown language 'ruby'");
        assert_load_error("[tier.x]\nlanguages = python,python\n",
                          "t:2: [tier.x] languages: language 'python' is listed twice");
        assert_load_error("[tier.x]\nlanguages = ,\n",
                          "t:2: [tier.x] languages: list at least one language");
        assert_load_error("[tier.x]\nbackends = native, firecracker\n",
                          "t:2: [tier.x] backends: unknown backend 'firecracker'");
        assert_load_error("[tier.bad name]\n", "t:1: [tier.bad name]: tier name must be");
        assert_load_error("[tier.]\n", "t:1: [tier.]: tier name must be");
        assert_load_error("[tenant.a/b]\n", "t:1: [tenant.a/b]: tenant name must be");
}

static void test_bad_values(void **state)
{
        assert_load_error("[server]\nmax_sandboxes = many\n",
                          "t:2: [server] max_sandboxes: 'many' is not a whole number");
        assert_load_error("[server]\nmax_sandboxes = 0\n",
                          "t:2: [server] max_sandboxes: '0' is not a whole number from 1");
        assert_load_error("[server]\nmax_sandboxes = -1\n", "t:2: [server] max_sandboxes:");
        assert_load_error("[server]\napi_uid = 0\n", "t:2: [server] api_uid:");
        assert_load_error("[server]\napi_uid = 4294967295\n", "t:2: [server] api_uid:");
        assert_load_error("[server]\napi_uid = 2000000000\n",
                          "t:2: [server] api_uid: uids from 2000000000 on belong to the sandboxes");
        assert_load_error("[server]\ndata_dir = var/lib\n",
                          "t:2: [server] data_dir: 'var/lib' is not an absolute path");
        assert_load_error("[server]\nstore_output = maybe\n",
                          "t:2: [server] store_output: 'maybe' is not a boolean");
        assert_load_error("[server]\nmax_body_bytes = 10\n", "t:2: [server] max_body_bytes:");
        assert_load_error("[server]\ngvisor_platform = firecracker\n",
                          "t:2: [server] gvisor_platform: 'firecracker' is not ptrace, systrap or "
                          "kvm");
        assert_load_error("[server]\nmax_body_bytes = 1G\n", "t:2: [server] max_body_bytes:");
        assert_load_error("[tier.x]\nmax_memory_mb = 256M\n",
                          "t:2: [tier.x] max_memory_mb: '256M' is not a whole number");
        assert_load_error("[tier.x]\nmax_memory_mb = 0\n", "t:2: [tier.x] max_memory_mb:");
        assert_load_error("[tier.x]\nmax_memory_mb = 99999999\n", "t:2: [tier.x] max_memory_mb:");
        assert_load_error("[tier.x]\nmax_output_bytes = 1G\n", "t:2: [tier.x] max_output_bytes:");
        assert_load_error("[tier.x]\ndefault_wall_ms = 1.5\n", "t:2: [tier.x] default_wall_ms:");
        assert_load_error("[tier.x]\nmax_concurrency = 0\n", "t:2: [tier.x] max_concurrency:");
        assert_load_error("[tier.x]\ncpu_window_s = 0\n", "t:2: [tier.x] cpu_window_s:");
        assert_load_error("[tier.x]\ncpu_budget_ms =\n", "t:2: [tier.x] cpu_budget_ms:");
        assert_load_error("[server]\nmax_sandboxes = 1025\n", "t:2: [server] max_sandboxes:");
        assert_load_error("[server]\nmax_connections = 0\n", "t:2: [server] max_connections:");
        assert_load_error("[server]\nmax_connections_per_ip = x\n",
                          "t:2: [server] max_connections_per_ip:");
        assert_load_error("[server]\nmetrics_token_sha256 = abc\n",
                          "t:2: [server] metrics_token_sha256: not 64 hex digits");
        assert_load_error("[server]\nmetrics_token_sha256 = "
                          "zz112233445566778899aabbccddeeff00112233445566778899aabbccddeeff\n",
                          "t:2: [server] metrics_token_sha256: not 64 hex digits");
}

/* The tier "default" is in every config, so the lines `sandboxd token` prints (tier = default)
 * load as printed into a config that declares other tiers or none; [tier.default] changes it. */
/* The keys of issue 17: a tier's max_queued and webhook_allow, a tenant's webhook_secret, the
 * server's webhook_* bounds; their defaults and their refusals. */
static void test_asynchronous_work_keys(void **state)
{
        struct sbx_config config;
        load_ok("[server]\n"
                "webhook_timeout_ms = 500\n"
                "webhook_backoff_ms = 20\n"
                "webhook_max_attempts = 3\n"
                "[tier.t]\n"
                "max_queued = 7\n"
                "webhook_allow = 127.0.0.1:9000, 10.0.0.0/8\n"
                "[tenant.acme]\n"
                "tier = t\n"
                "token_sha256 = " HASH_ABC "\n"
                "webhook_secret = whsec_c2FuZGJveGQtdGVzdC13ZWJob29rLWtleS0zMmJ5dGU=\n",
                &config);
        assert_int_equal(config.server.webhook_timeout_ms, 500);
        assert_int_equal(config.server.webhook_backoff_ms, 20);
        assert_int_equal(config.server.webhook_max_attempts, 3);
        const struct sbx_tier *t = sbx_config_find_tier(&config, "t");
        assert_int_equal(t->max_queued, 7);
        assert_int_equal(t->webhook_allow.n, 2);
        assert_string_equal(config.tenants[0].webhook_secret,
                            "whsec_c2FuZGJveGQtdGVzdC13ZWJob29rLWtleS0zMmJ5dGU=");
        const struct sbx_tier *fallback = sbx_config_find_tier(&config, "default");
        assert_int_equal(fallback->max_queued, 10000);
        assert_int_equal(fallback->webhook_allow.n, 0);
        sbx_config_free(&config);
        load_ok("", &config);
        assert_int_equal(config.server.webhook_timeout_ms, 10000);
        assert_int_equal(config.server.webhook_backoff_ms, 1000);
        assert_int_equal(config.server.webhook_max_attempts, 8);
        sbx_config_free(&config);
        assert_load_error("[tier.t]\nwebhook_allow = localhost\n",
                          "t:2: [tier.t] webhook_allow: 'localhost' is neither");
        assert_load_error("[tier.t]\nmax_queued = 0\n", "t:2: [tier.t] max_queued");
        assert_load_error("[server]\nwebhook_max_attempts = 51\n",
                          "t:2: [server] webhook_max_attempts");
        assert_load_error("[tier.t]\n[tenant.acme]\ntier = t\ntoken_sha256 = " HASH_ABC
                          "\nwebhook_secret = short\n",
                          "t:5: [tenant.acme] webhook_secret");
}

/* The keys of issue 19: a tier's compat_apis (default both drop-in APIs), a tenant's
 * anonymous_apis (default none; one tenant per API at most). */
static void test_compat_keys(void **state)
{
        struct sbx_config config;
        load_ok("[tier.t]\n"
                "compat_apis = judge0\n"
                "[tier.u]\n"
                "compat_apis = none\n"
                "[tenant.acme]\n"
                "tier = t\n"
                "token_sha256 = " HASH_ABC "\n"
                "anonymous_apis = piston, judge0\n",
                &config);
        assert_int_equal(sbx_config_find_tier(&config, "t")->compat_apis, SBX_COMPAT_JUDGE0);
        assert_int_equal(sbx_config_find_tier(&config, "u")->compat_apis, 0);
        assert_int_equal(sbx_config_find_tier(&config, "default")->compat_apis, SBX_COMPAT_ALL);
        assert_int_equal(config.tenants[0].anonymous_apis, SBX_COMPAT_ALL);
        assert_ptr_equal(sbx_config_anonymous_tenant(&config, SBX_COMPAT_PISTON),
                         &config.tenants[0]);
        sbx_config_free(&config);
        load_ok("[tenant.acme]\ntier = default\ntoken_sha256 = " HASH_ABC "\n", &config);
        assert_int_equal(config.tenants[0].anonymous_apis, 0);
        assert_null(sbx_config_anonymous_tenant(&config, SBX_COMPAT_JUDGE0));
        sbx_config_free(&config);
        assert_load_error("[tier.t]\ncompat_apis = e2b\n",
                          "t:2: [tier.t] compat_apis: 'e2b' is not piston or judge0");
        assert_load_error("[tier.t]\ncompat_apis = piston, piston\n",
                          "t:2: [tier.t] compat_apis: 'piston' is listed twice");
        assert_load_error("[tier.t]\ncompat_apis = ,\n", "t:2: [tier.t] compat_apis: list");
        assert_load_error("[tenant.a]\ntier = default\ntoken_sha256 = " HASH_ABC
                          "\nanonymous_apis = piston\n"
                          "[tenant.b]\ntier = default\ntoken_sha256 = " HASH_B
                          "\nanonymous_apis = judge0, piston\n",
                          "t:8: [tenant.b] anonymous_apis: tenant 'a' takes token-less");
}

static void test_store_keys(void **state)
{
        struct sbx_config config;
        load_ok("[server]\n", &config);
        assert_null(config.store.url);
        assert_null(config.store.node);
        assert_null(config.store.advertise);
        assert_int_equal(config.store.connections, 4);
        assert_int_equal(config.store.lease_ttl_s, 10);
        sbx_config_free(&config);
        load_ok("[store]\n"
                "url = postgresql://sbx:secret@db.example:5432/sandboxd?sslmode=require\n"
                "node = node-1\n"
                "advertise = http://10.0.0.5:8080\n"
                "connections = 8\n"
                "lease_ttl_s = 3\n",
                &config);
        assert_string_equal(config.store.advertise, "http://10.0.0.5:8080");
        assert_string_equal(config.store.url,
                            "postgresql://sbx:secret@db.example:5432/sandboxd?sslmode=require");
        assert_string_equal(config.store.node, "node-1");
        assert_int_equal(config.store.connections, 8);
        assert_int_equal(config.store.lease_ttl_s, 3);
        sbx_config_free(&config);
        assert_load_error("[store]\nlease_ttl_s = 1\n", "t:2: [store] lease_ttl_s:");
        assert_load_error("[store]\nlease_ttl_s = 26\n", "t:2: [store] lease_ttl_s:");
        load_ok("[store]\nurl = postgres://localhost/x\n", &config);
        assert_string_equal(config.store.url, "postgres://localhost/x");
        sbx_config_free(&config);
        /* A URL of another scheme is refused without being echoed (it may hold a password). */
        assert_load_error("[store]\nurl = mysql://u:hunter2@h/x\n",
                          "t:2: [store] url: not a postgresql:// URL");
        struct sbx_config refused;
        struct sbx_error err = {0};
        assert_int_equal(sbx_config_load_string("[store]\nurl = mysql://u:hunter2@h/x\n", "t",
                                                &refused, &err),
                         -1);
        assert_null(strstr(err.message, "hunter2"));
        assert_load_error("[store]\nnode = node.1\n", "t:2: [store] node: 'node.1' is not");
        assert_load_error("[store]\nconnections = 0\n", "t:2: [store] connections:");
        assert_load_error("[store]\nconnections = 65\n", "t:2: [store] connections:");
        assert_load_error("[store]\nnode = a\n[store]\n", "t:3: [store]: section appears twice");
        assert_load_error("[store]\nport = 5432\n", "t:2: [store] port: unknown key");
        assert_load_error("[store]\nadvertise = ftp://h\n", "t:2: [store] advertise: 'ftp://h'");
        assert_load_error("[store]\nadvertise = http://h/?x=1\n", "t:2: [store] advertise:");
}

static void test_default_tier_always_exists(void **state)
{
        static const char printed[] =
                "[tenant.acme]\n"
                "tier = default\n"
                "token_sha256 = 00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff\n";
        struct sbx_config config;
        char text[1024];
        snprintf(text, sizeof(text), "[server]\nlisten = 127.0.0.1:9\n[tier.free]\n%s", printed);
        load_ok(text, &config);
        assert_int_equal(config.n_tiers, 2);
        assert_string_equal(config.tiers[0].name, "free"); /* the local tenant's tier */
        assert_ptr_equal(config.tenants[0].tier, &config.tiers[1]);
        assert_string_equal(config.tenants[0].tier->name, SBX_DEFAULT_TIER_NAME);
        struct sbx_limits builtin;
        sbx_limits_default(&builtin);
        assert_int_equal(config.tenants[0].tier->max.memory_bytes, builtin.memory_bytes);
        sbx_config_free(&config);

        load_ok(printed, &config);
        assert_int_equal(config.n_tiers, 1);
        sbx_config_free(&config);

        snprintf(text, sizeof(text), "[tier.default]\nmax_memory_mb = 32\n%s", printed);
        load_ok(text, &config);
        assert_int_equal(config.n_tiers, 1);
        assert_int_equal(config.tenants[0].tier->max.memory_bytes, 32 * MIB);
        sbx_config_free(&config);
}

static void test_listen_must_be_host_port(void **state)
{
        static const char *const bad[] = {
                "127.0.0.1",     "127.0.0.1:",      ":8080",    "localhost:8080",
                "127.0.0.1:0",   "127.0.0.1:65536", "::1:8080", "[::1]",
                "[::1:8080",     "[127.0.0.1]:80",  "1.2.3:80", "127.0.0.1:8a",
                "127.0.0.1:+80",
        };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                char text[128];
                snprintf(text, sizeof(text), "[server]\nlisten = %s\n", bad[i]);
                assert_load_error(text, "t:2: [server] listen: '");
        }
        struct sbx_config config;
        load_ok("[server]\nlisten = 0.0.0.0:65535\n", &config);
        sbx_config_free(&config);
        load_ok("[server]\nlisten = [::]:1\n", &config);
        sbx_config_free(&config);
}

static void test_tenant_errors(void **state)
{
        assert_load_error("[tier.free]\n[tenant.a]\ntier = gold\ntoken_sha256 = " HASH_ABC "\n",
                          "t:3: [tenant.a] tier: unknown tier 'gold'");
        assert_load_error("[tier.free]\n[tenant.a]\ntoken_sha256 = " HASH_ABC "\n",
                          "t:2: [tenant.a] tier: missing");
        assert_load_error("[tier.free]\n[tenant.a]\ntier = free\n",
                          "t:2: [tenant.a] token_sha256: missing");
        assert_load_error("[tenant.a]\ntier = free\ntoken_sha256 = abc\n",
                          "t:3: [tenant.a] token_sha256: not 64 hex digits");
        /* 63 digits, 65 digits, a non-hex character. */
        assert_load_error("[tenant.a]\ntoken_sha256 = "
                          "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015a\n",
                          "t:2: [tenant.a] token_sha256: not 64 hex digits");
        assert_load_error("[tenant.a]\ntoken_sha256 = " HASH_ABC "0\n",
                          "t:2: [tenant.a] token_sha256: not 64 hex digits");
        assert_load_error("[tenant.a]\ntoken_sha256 = "
                          "ga7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad\n",
                          "t:2: [tenant.a] token_sha256: not 64 hex digits");
        assert_load_error("[tier.f]\n[tenant.a]\ntier = f\ntoken_sha256 = " HASH_ABC "\n"
                          "[tenant.b]\ntier = f\ntoken_sha256 = " HASH_ABC "\n",
                          "t:7: [tenant.b] token_sha256: same token as tenant 'a'");

        /* A tenant may come before its tier; hex in either case. */
        struct sbx_config config;
        load_ok("[tenant.a]\ntier = late\ntoken_sha256 = "
                "BA7816BF8F01CFEA414140DE5DAE2223B00361A396177A9CB410FF61F20015AD\n"
                "[tier.late]\n",
                &config);
        assert_ptr_equal(config.tenants[0].tier, sbx_config_find_tier(&config, "late"));
        assert_int_equal(config.tenants[0].token_sha256[0], 0xba);
        sbx_config_free(&config);
}

static void test_duplicates(void **state)
{
        assert_load_error("[tier.a]\n[tier.b]\n[tier.a]\n",
                          "t:3: [tier.a]: tier 'a' is defined twice");
        assert_load_error("[tier.f]\n[tenant.x]\ntier = f\ntoken_sha256 = " HASH_ABC "\n"
                          "[tenant.x]\n",
                          "t:5: [tenant.x]: tenant 'x' is defined twice");
        assert_load_error("[server]\n[tier.a]\n[server]\n", "t:3: [server]: section appears twice");
        assert_load_error("[server]\nmax_sandboxes = 1\nmax_sandboxes = 2\n",
                          "t:3: [server] max_sandboxes: set twice");
        assert_load_error("[tier.a]\nmax_pids = 2\nmax_pids = 3\n",
                          "t:3: [tier.a] max_pids: set twice");
        assert_load_error("[tier.a]\nlanguages = sh\nlanguages = sh\n",
                          "t:3: [tier.a] languages: set twice");
        assert_load_error("[tenant.a]\ntier = x\ntier = y\n", "t:3: [tenant.a] tier: set twice");
        /* An indented line continues the key above (inih), which the loader refuses. */
        assert_load_error("[tier.a]\nlanguages = sh\n  bash\n",
                          "t:3: [tier.a] languages: set twice");
}

static void test_syntax(void **state)
{
        assert_load_error("[server]\nlisten\n", "t:2: syntax error");
        /* inih also reads "name: value"; the key is then simply unknown. */
        assert_load_error("[server]\nlisten 127.0.0.1:1\n",
                          "t:2: [server] listen 127.0.0.1: unknown key");
        assert_load_error("[server\nlisten = 127.0.0.1:1\n", "t:1: syntax error");
        assert_load_error("[tier.a]\n[server\n", "t:2: syntax error");
        assert_load_error("[server] extra\n", "t:1: text after the section header");
        assert_load_error("[tier.a]\nmax_pids = 2\n  [tier.b]\n",
                          "t:3: a section header must start the line");
        char long_line[400];
        snprintf(long_line, sizeof(long_line), "[server]\ndata_dir = /%0300d\n", 0);
        assert_load_error(long_line, "t:2: [server]: line longer than 197 bytes");

        /* CRLF line ends and a byte order mark are fine. */
        struct sbx_config config;
        load_ok("\xEF\xBB\xBF[server]\r\nmax_sandboxes = 3\r\n", &config);
        assert_int_equal(config.server.max_sandboxes, 3);
        sbx_config_free(&config);
}

static void test_load_file(void **state)
{
        char path[] = "/tmp/test_config_XXXXXX";
        int fd = mkstemp(path);
        assert_true(fd >= 0);
        assert_int_equal(write(fd, issue_example, strlen(issue_example)),
                         (ssize_t)strlen(issue_example));
        close(fd);
        struct sbx_config config;
        struct sbx_error err = {0};
        assert_int_equal(sbx_config_load_file(path, &config, &err), 0);
        assert_int_equal(config.n_tenants, 1);
        sbx_config_free(&config);

        /* Errors name the file. */
        fd = open(path, O_WRONLY | O_TRUNC);
        assert_true(fd >= 0);
        assert_int_equal(write(fd, "[tier.x]\nmax_pids = x\n", 22), 22);
        close(fd);
        assert_int_equal(sbx_config_load_file(path, &config, &err), -1);
        char expected[128];
        snprintf(expected, sizeof(expected), "%s:2: [tier.x] max_pids:", path);
        assert_true(strncmp(err.message, expected, strlen(expected)) == 0);

        /* A NUL byte in the file is refused, not read as the end. */
        fd = open(path, O_WRONLY | O_TRUNC);
        assert_int_equal(write(fd, "[server]\n\0[serve]\n", 18), 18);
        close(fd);
        assert_int_equal(sbx_config_load_file(path, &config, &err), -1);
        assert_non_null(strstr(err.message, "NUL"));
        unlink(path);

        assert_int_equal(sbx_config_load_file(path, &config, &err), -1);
        assert_int_equal(err.code, ENOENT);
        assert_non_null(strstr(err.message, path));
}

static void test_add_tenant(void **state)
{
        struct sbx_config config;
        load_ok(issue_example, &config);
        uint8_t hash[SBX_SHA256_SIZE] = {1};
        struct sbx_error err = {0};
        assert_int_equal(sbx_config_add_tenant(&config, "local", "free", hash, &err), 0);
        assert_int_equal(config.n_tenants, 2);
        assert_string_equal(config.tenants[1].name, "local");
        assert_ptr_equal(config.tenants[1].tier, sbx_config_find_tier(&config, "free"));
        assert_memory_equal(config.tenants[1].token_sha256, hash, sizeof(hash));

        assert_int_equal(sbx_config_add_tenant(&config, "local", "free", hash, &err), -1);
        assert_int_equal(err.code, EEXIST);
        hash[0] = 2;
        assert_int_equal(sbx_config_add_tenant(&config, "other", "gold", hash, &err), -1);
        assert_int_equal(err.code, EINVAL);
        assert_int_equal(sbx_config_add_tenant(&config, "", "free", hash, &err), -1);
        hash[0] = 1;
        assert_int_equal(sbx_config_add_tenant(&config, "other", "free", hash, &err), -1);
        assert_int_equal(config.n_tenants, 2);
        sbx_config_free(&config);
}

static void test_add_local_tenant(void **state)
{
        struct sbx_config config;
        load_ok(issue_example, &config);
        uint8_t hash[SBX_SHA256_SIZE] = {7};
        struct sbx_error err = {0};
        assert_int_equal(sbx_config_add_local_tenant(&config, hash, &err), 0);
        assert_int_equal(config.n_tenants, 2);
        assert_string_equal(config.tenants[1].name, "local");
        assert_ptr_equal(config.tenants[1].tier, &config.tiers[0]);
        assert_memory_equal(config.tenants[1].token_sha256, hash, sizeof(hash));
        assert_int_equal(sbx_config_add_local_tenant(&config, hash, &err), -1);
        assert_int_equal(err.code, EEXIST);
        sbx_config_free(&config);
}

static void test_names(void **state)
{
        assert_true(sbx_config_name_valid("acme"));
        assert_true(sbx_config_name_valid("A-b_9"));
        assert_false(sbx_config_name_valid(""));
        assert_false(sbx_config_name_valid("a b"));
        assert_false(sbx_config_name_valid("a.b"));
        assert_false(sbx_config_name_valid("é"));
        char name[SBX_CONFIG_NAME_MAX + 2];
        memset(name, 'a', sizeof(name));
        name[SBX_CONFIG_NAME_MAX] = '\0';
        assert_true(sbx_config_name_valid(name));
        name[SBX_CONFIG_NAME_MAX] = 'a';
        name[SBX_CONFIG_NAME_MAX + 1] = '\0';
        assert_false(sbx_config_name_valid(name));
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_issue_example_loads),
                cmocka_unit_test(test_embedded_default_loads),
                cmocka_unit_test(test_every_key),
                cmocka_unit_test(test_store_keys),
                cmocka_unit_test(test_unknown_names),
                cmocka_unit_test(test_bad_values),
                cmocka_unit_test(test_listen_must_be_host_port),
                cmocka_unit_test(test_default_tier_always_exists),
                cmocka_unit_test(test_tenant_errors),
                cmocka_unit_test(test_duplicates),
                cmocka_unit_test(test_syntax),
                cmocka_unit_test(test_load_file),
                cmocka_unit_test(test_add_tenant),
                cmocka_unit_test(test_add_local_tenant),
                cmocka_unit_test(test_names),
                cmocka_unit_test(test_pools),
                cmocka_unit_test(test_asynchronous_work_keys),
                cmocka_unit_test(test_compat_keys),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
