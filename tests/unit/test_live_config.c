/* Unit tests for api/live_config.h: a reload replaces the tenants and tiers for new requests
 * while a request that holds the old snapshot keeps its tenant and tier to its end; a text that
 * does not load changes nothing; the local tenant made at start stays while the file configures
 * none; a tenant a reload adds gets its own metrics series; [server] stays as started. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "api/live_config.h"
#include "service/auth.h"

#define HASH_A "00000000000000000000000000000000000000000000000000000000000000aa"
#define HASH_B "00000000000000000000000000000000000000000000000000000000000000bb"

static const char first[] = "[server]\n"
                            "listen = 127.0.0.1:9001\n"
                            "[tier.small]\n"
                            "max_pids = 8\n"
                            "[tenant.acme]\n"
                            "tier = small\n"
                            "token_sha256 = " HASH_A "\n";

static const char second[] = "[server]\n"
                             "listen = 127.0.0.1:9999\n"
                             "[tier.small]\n"
                             "max_pids = 16\n"
                             "[tenant.newbie]\n"
                             "tier = small\n"
                             "token_sha256 = " HASH_B "\n";

static struct sbx_live_config *start(const char *text, const uint8_t *local,
                                     struct sbx_metrics *metrics)
{
        struct sbx_config config;
        struct sbx_error err = {0};
        if (sbx_config_load_string(text, "t", &config, &err) < 0)
                fail_msg("config: %s", err.message);
        struct sbx_live_config *live = sbx_live_config_new(&config, local, metrics);
        assert_non_null(live);
        assert_null(config.tenants); /* moved */
        return live;
}

/* Not inlined: -Wnull-dereference would otherwise see its NULL path through the asserts. */
__attribute__((noinline)) static const struct sbx_tenant *tenant(const struct sbx_config *config,
                                                                 const char *name)
{
        for (size_t i = 0; i < config->n_tenants; i++)
                if (strcmp(config->tenants[i].name, name) == 0)
                        return &config->tenants[i];
        return NULL;
}

static void test_reload_swaps_for_new_requests_only(void **state)
{
        struct sbx_error err = {0};
        static const char *const names[] = {"acme"};
        struct sbx_metrics *metrics = sbx_metrics_new(names, 1, &err);
        struct sbx_live_config *live = start(first, NULL, metrics);

        const struct sbx_config *held = sbx_live_config_acquire(live);
        const struct sbx_tenant *acme = tenant(held, "acme");
        assert_non_null(acme);
        assert_int_equal(sbx_live_config_reload(live, second, strlen(second), "t2", &err), 0);

        /* The request that came in before keeps its tenant and its tier's limits. */
        assert_string_equal(acme->name, "acme");
        assert_int_equal(acme->tier->max.pids, 8);
        const struct sbx_config *now = sbx_live_config_acquire(live);
        assert_null(tenant(now, "acme"));
        assert_int_equal(tenant(now, "newbie")->tier->max.pids, 16);
        sbx_live_config_release(live, held);
        sbx_live_config_release(live, now);

        /* [server] stays as started. */
        assert_string_equal(sbx_live_config_initial(live)->server.listen, "127.0.0.1:9001");
        /* The new tenant has a series of its own. */
        sbx_metrics_count_execution(metrics, "newbie", "native", "ok", 1000);
        char *text = sbx_metrics_render(metrics, NULL);
        assert_non_null(strstr(text, "tenant=\"newbie\",status=\"ok\"} 1"));
        free(text);
        sbx_live_config_free(live);
        sbx_metrics_free(metrics);
}

static void test_bad_text_changes_nothing(void **state)
{
        struct sbx_live_config *live = start(first, NULL, NULL);
        struct sbx_error err = {0};
        static const char bad[] = "[tier.small]\nmax_pids = many\n";
        assert_int_equal(sbx_live_config_reload(live, bad, strlen(bad), "bad.ini", &err), -1);
        assert_non_null(strstr(err.message, "bad.ini:2"));
        const struct sbx_config *now = sbx_live_config_acquire(live);
        assert_non_null(tenant(now, "acme"));
        sbx_live_config_release(live, now);
        sbx_live_config_free(live);
}

static void test_local_tenant_stays_while_none_is_configured(void **state)
{
        uint8_t local[SBX_SHA256_SIZE] = {0x42};
        static const char none[] = "[tier.only]\nmax_pids = 4\n";
        struct sbx_live_config *live = start(none, local, NULL);
        struct sbx_error err = {0};
        /* The start added it before sbx_live_config_new; a reload of a file without tenants
         * adds it again, in the first tier. */
        assert_int_equal(sbx_live_config_reload(live, none, strlen(none), "t", &err), 0);
        const struct sbx_config *now = sbx_live_config_acquire(live);
        const struct sbx_tenant *found = tenant(now, "local");
        assert_non_null(found);
        assert_memory_equal(found->token_sha256, local, SBX_SHA256_SIZE);
        assert_string_equal(found->tier->name, "only");
        sbx_live_config_release(live, now);
        /* A file that configures tenants of its own replaces it. */
        assert_int_equal(sbx_live_config_reload(live, second, strlen(second), "t", &err), 0);
        now = sbx_live_config_acquire(live);
        assert_null(tenant(now, "local"));
        sbx_live_config_release(live, now);
        sbx_live_config_free(live);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_reload_swaps_for_new_requests_only),
                cmocka_unit_test(test_bad_text_changes_nothing),
                cmocka_unit_test(test_local_tenant_stays_while_none_is_configured),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
