/* Unit tests for service/auth.h: SHA-256 against the FIPS test vectors, hex both ways, the
 * constant-time comparison, bearer header parsing, tenant lookup by token, the token format, and
 * `sandboxd token` output that the config loader accepts and the lookup then finds. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "service/auth.h"
#include "service/config.h"
#include "util/hex.h"

/* FIPS 180-2 appendix B.1 and the empty message. */
#define SHA256_ABC   "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
#define SHA256_EMPTY "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

static void assert_sha256_hex(const char *data, size_t size, const char *expected)
{
        uint8_t digest[SBX_SHA256_SIZE];
        char hex[SBX_SHA256_HEX_SIZE + 1];
        struct sbx_error err = {0};
        assert_int_equal(sbx_auth_sha256(data, size, digest, &err), 0);
        sbx_hex_encode(digest, SBX_SHA256_SIZE, hex);
        assert_string_equal(hex, expected);
}

static void test_sha256_vectors(void **state)
{
        assert_sha256_hex("abc", 3, SHA256_ABC);
        assert_sha256_hex("", 0, SHA256_EMPTY);
        assert_sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", 56,
                          "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

static void test_hex(void **state)
{
        uint8_t digest[SBX_SHA256_SIZE];
        char hex[SBX_SHA256_HEX_SIZE + 1];
        assert_true(sbx_hex_decode(SHA256_ABC, digest, SBX_SHA256_SIZE));
        assert_int_equal(digest[0], 0xba);
        assert_int_equal(digest[31], 0xad);
        sbx_hex_encode(digest, SBX_SHA256_SIZE, hex);
        assert_string_equal(hex, SHA256_ABC);

        uint8_t upper[SBX_SHA256_SIZE];
        assert_true(
                sbx_hex_decode("BA7816BF8F01CFEA414140DE5DAE2223B00361A396177A9CB410FF61F20015AD",
                               upper, SBX_SHA256_SIZE));
        assert_memory_equal(upper, digest, sizeof(digest));

        /* Refused input leaves the output alone. */
        uint8_t untouched[SBX_SHA256_SIZE];
        memset(untouched, 0x5a, sizeof(untouched));
        static const char *const bad[] = {
                "",
                "ba78",
                SHA256_ABC "0",
                "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015a",
                "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ag",
                " a7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
                "0xba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015",
                NULL,
        };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                assert_false(sbx_hex_decode(bad[i], untouched, SBX_SHA256_SIZE));
                for (size_t j = 0; j < sizeof(untouched); j++)
                        assert_int_equal(untouched[j], 0x5a);
        }
}

static void test_digest_equal(void **state)
{
        uint8_t a[SBX_SHA256_SIZE], b[SBX_SHA256_SIZE];
        assert_true(sbx_hex_decode(SHA256_ABC, a, SBX_SHA256_SIZE));
        memcpy(b, a, sizeof(a));
        assert_true(sbx_auth_digest_equal(a, b));
        b[0] ^= 1;
        assert_false(sbx_auth_digest_equal(a, b));
        b[0] ^= 1;
        b[31] ^= 0x80;
        assert_false(sbx_auth_digest_equal(a, b));
}

static void test_bearer_header(void **state)
{
        assert_string_equal(sbx_auth_bearer_token("Bearer abc"), "abc");
        assert_string_equal(sbx_auth_bearer_token("bearer abc"), "abc");
        assert_string_equal(sbx_auth_bearer_token("BEARER   sbx_x-y_z"), "sbx_x-y_z");
        assert_null(sbx_auth_bearer_token(NULL));
        assert_null(sbx_auth_bearer_token(""));
        assert_null(sbx_auth_bearer_token("Bearer"));
        assert_null(sbx_auth_bearer_token("Bearer "));
        assert_null(sbx_auth_bearer_token("Bearerabc"));
        assert_null(sbx_auth_bearer_token("Basic YWxhZGRpbjpvcGVuc2VzYW1l"));
        assert_null(sbx_auth_bearer_token("Bearer a b"));
}

/* A config with tenants a, b, c whose tokens are "token-a", "token-b", "token-c". */
static void make_config(struct sbx_config *config)
{
        struct sbx_error err = {0};
        assert_int_equal(sbx_config_load_string("[tier.default]\n", "t", config, &err), 0);
        static const char *const names[] = {"a", "b", "c"};
        for (size_t i = 0; i < 3; i++) {
                char token[16];
                uint8_t digest[SBX_SHA256_SIZE];
                snprintf(token, sizeof(token), "token-%s", names[i]);
                assert_int_equal(sbx_auth_sha256(token, strlen(token), digest, &err), 0);
                assert_int_equal(sbx_config_add_tenant(config, names[i], "default", digest, &err),
                                 0);
        }
}

static void test_find_tenant(void **state)
{
        struct sbx_config config;
        make_config(&config);
        assert_ptr_equal(sbx_auth_find_tenant(&config, "token-a"), &config.tenants[0]);
        assert_ptr_equal(sbx_auth_find_tenant(&config, "token-b"), &config.tenants[1]);
        assert_ptr_equal(sbx_auth_find_tenant(&config, "token-c"), &config.tenants[2]);
        assert_null(sbx_auth_find_tenant(&config, "token-d"));
        assert_null(sbx_auth_find_tenant(&config, "token-"));
        assert_null(sbx_auth_find_tenant(&config, "token-aa"));
        assert_null(sbx_auth_find_tenant(&config, ""));
        assert_null(sbx_auth_find_tenant(&config, NULL));
        sbx_config_free(&config);

        struct sbx_config empty = {0};
        assert_null(sbx_auth_find_tenant(&empty, "token-a"));
}

static void assert_token_format(const char *token)
{
        assert_int_equal(strlen(token), SBX_TOKEN_LENGTH);
        assert_int_equal(strncmp(token, "sbx_", 4), 0);
        size_t body = strspn(token + 4, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                        "0123456789-_");
        assert_int_equal(body, 43);
}

static void test_token_new(void **state)
{
        char first[SBX_TOKEN_LENGTH + 1], second[SBX_TOKEN_LENGTH + 1];
        struct sbx_error err = {0};
        assert_int_equal(sbx_auth_token_new(first, &err), 0);
        assert_int_equal(sbx_auth_token_new(second, &err), 0);
        assert_token_format(first);
        assert_token_format(second);
        assert_string_not_equal(first, second);

        /* Over many tokens every base64url character shows up, '-' and '_' included: the
         * '+' and '/' of plain base64 were translated, not dropped. */
        bool seen_dash = false, seen_underscore = false;
        for (int i = 0; i < 200; i++) {
                assert_int_equal(sbx_auth_token_new(first, &err), 0);
                assert_token_format(first);
                seen_dash |= strchr(first + 4, '-') != NULL;
                seen_underscore |= strchr(first + 4, '_') != NULL;
        }
        assert_true(seen_dash);
        assert_true(seen_underscore);
}

/* The output of `sandboxd token NAME`, as a string the caller frees. */
static char *print_token(const char *name, int *result)
{
        char *text = NULL;
        size_t size = 0;
        FILE *out = open_memstream(&text, &size);
        assert_non_null(out);
        struct sbx_error err = {0};
        *result = sbx_auth_print_token(out, name, &err);
        fclose(out);
        return text;
}

static void test_print_token(void **state)
{
        int result;
        char *text = print_token("acme", &result);
        assert_int_equal(result, 0);
        char token[SBX_TOKEN_LENGTH + 1], hex[SBX_SHA256_HEX_SIZE + 1];
        assert_int_equal(sscanf(text,
                                "token: %47s\n[tenant.acme]\ntier = default\ntoken_sha256 = %64s\n",
                                token, hex),
                         2);
        assert_token_format(token);
        uint8_t digest[SBX_SHA256_SIZE];
        char expected[SBX_SHA256_HEX_SIZE + 1];
        struct sbx_error err = {0};
        assert_int_equal(sbx_auth_sha256(token, strlen(token), digest, &err), 0);
        sbx_hex_encode(digest, SBX_SHA256_SIZE, expected);
        assert_string_equal(hex, expected);

        /* The lines after "token:" paste into a config, and the token then authenticates. */
        char config_text[512];
        snprintf(config_text, sizeof(config_text), "[tier.default]\n%s", strchr(text, '\n') + 1);
        struct sbx_config config;
        assert_int_equal(sbx_config_load_string(config_text, "pasted", &config, &err), 0);
        const struct sbx_tenant *tenant = sbx_auth_find_tenant(&config, token);
        assert_non_null(tenant);
        assert_string_equal(tenant->name, "acme");
        sbx_config_free(&config);
        free(text);

        text = print_token(NULL, &result);
        assert_int_equal(result, 0);
        assert_non_null(strstr(text, "\n[tenant.local]\n"));
        free(text);

        text = print_token("bad name", &result);
        assert_int_equal(result, -1);
        assert_string_equal(text, "");
        free(text);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_sha256_vectors), cmocka_unit_test(test_hex),
                cmocka_unit_test(test_digest_equal),   cmocka_unit_test(test_bearer_header),
                cmocka_unit_test(test_find_tenant),    cmocka_unit_test(test_token_new),
                cmocka_unit_test(test_print_token),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
