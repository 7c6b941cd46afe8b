/* Unit tests for service/webhook_sign.h (the Standard Webhooks test vector, a plain secret, a
 * bad one) and service/webhook_policy.h (what is refused by default, v4-mapped addresses, what a
 * tier's webhook_allow lets through, and its parse errors). */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "service/webhook_policy.h"
#include "service/webhook_sign.h"

static void test_the_standard_webhooks_vector(void **state)
{
        char signature[SBX_WEBHOOK_SIGNATURE_SIZE];
        struct sbx_error err = {0};
        const char body[] = "{\"test\": 2432232314}";
        assert_int_equal(sbx_webhook_sign("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
                                          "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body,
                                          strlen(body), signature, &err),
                         0);
        assert_string_equal(signature, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
        /* Another timestamp, another signature. */
        char other[SBX_WEBHOOK_SIGNATURE_SIZE];
        assert_int_equal(sbx_webhook_sign("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
                                          "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265331, body,
                                          strlen(body), other, &err),
                         0);
        assert_string_not_equal(signature, other);
        /* A plain secret is its own bytes; a broken whsec_ one is refused. */
        assert_int_equal(sbx_webhook_sign("plain", "msg_1", 1, "", 0, signature, &err), 0);
        assert_int_equal(strlen(signature), 47);
        assert_int_equal(sbx_webhook_sign("whsec_abc", "msg_1", 1, "", 0, signature, &err), -1);
}

static struct sockaddr_storage address_of(const char *text)
{
        struct sockaddr_storage storage = {0};
        struct sockaddr_in *v4 = (struct sockaddr_in *)&storage;
        struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&storage;
        if (inet_pton(AF_INET, text, &v4->sin_addr) == 1)
                v4->sin_family = AF_INET;
        else if (inet_pton(AF_INET6, text, &v6->sin6_addr) == 1)
                v6->sin6_family = AF_INET6;
        else
                fail_msg("not an address: %s", text);
        return storage;
}

static const char *refusal(const struct sbx_webhook_allow *allow, const char *host, unsigned port,
                           const char *address)
{
        struct sockaddr_storage storage = address_of(address);
        const char *why = NULL;
        bool allowed =
                sbx_webhook_address_allowed(allow, host, port, (struct sockaddr *)&storage, &why);
        assert_true(allowed == (why == NULL));
        return why;
}

static void test_what_is_refused_by_default(void **state)
{
        static const char *const refused[] = {"127.0.0.1",
                                              "127.9.9.9",
                                              "0.0.0.0",
                                              "10.1.2.3",
                                              "172.16.0.1",
                                              "172.31.255.255",
                                              "192.168.1.1",
                                              "100.64.0.1",
                                              "169.254.169.254",
                                              "169.254.1.1",
                                              "224.0.0.1",
                                              "255.255.255.255",
                                              "::1",
                                              "::",
                                              "fd00::1",
                                              "fe80::1",
                                              "ff02::1",
                                              "::ffff:127.0.0.1",
                                              "::ffff:10.0.0.1"};
        for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++)
                assert_non_null(refusal(NULL, "example.com", 443, refused[i]));
        assert_string_equal(refusal(NULL, "h", 80, "169.254.169.254"),
                            "the cloud metadata address");
        assert_string_equal(refusal(NULL, "h", 80, "::ffff:127.0.0.1"), "loopback");
        assert_string_equal(refusal(NULL, "h", 80, "64:ff9b::a00:5"), "NAT64");
        assert_string_equal(refusal(NULL, "h", 80, "::1"), "loopback");
        static const char *const allowed[] = {"93.184.216.34", "172.32.0.1", "8.8.8.8",
                                              "2606:4700::1111", "::ffff:8.8.8.8"};
        for (size_t i = 0; i < sizeof(allowed) / sizeof(allowed[0]); i++)
                assert_null(refusal(NULL, "example.com", 443, allowed[i]));
}

static void test_a_tiers_allow_list(void **state)
{
        struct sbx_webhook_allow allow;
        struct sbx_error err = {0};
        assert_int_equal(sbx_webhook_allow_parse(" 127.0.0.1:8080, [::1]:9000,10.0.0.0/8 , "
                                                 "Hooks.Internal:443,fd00::/16, 192.168.1.7",
                                                 &allow, &err),
                         0);
        assert_int_equal(allow.n, 6);
        /* host:port: that host as written, that port only. */
        assert_null(refusal(&allow, "127.0.0.1", 8080, "127.0.0.1"));
        assert_non_null(refusal(&allow, "127.0.0.1", 8081, "127.0.0.1"));
        assert_null(refusal(&allow, "::1", 9000, "::1"));
        assert_null(refusal(&allow, "hooks.internal", 443, "10.9.9.9"));
        assert_null(refusal(&allow, "hooks.internal", 443, "192.168.5.5"));
        assert_non_null(refusal(&allow, "localhost", 8080, "127.0.0.1"));
        /* CIDR blocks and single addresses, any port. */
        assert_null(refusal(&allow, "x", 1, "10.200.0.1"));
        assert_null(refusal(&allow, "x", 1, "fd00:1::5"));
        assert_non_null(refusal(&allow, "x", 1, "fd01::5"));
        assert_null(refusal(&allow, "x", 1, "192.168.1.7"));
        assert_non_null(refusal(&allow, "x", 1, "192.168.1.8"));
        static const char *const bad[] = {"localhost",  "1.2.3.4/33", "host:8080:1", "host:0",
                                          "host:99999", "/8",         "[::1:80"};
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
                assert_int_equal(sbx_webhook_allow_parse(bad[i], &allow, &err), -1);
        assert_int_equal(sbx_webhook_allow_parse("", &allow, &err), 0);
        assert_int_equal(allow.n, 0);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_the_standard_webhooks_vector),
                cmocka_unit_test(test_what_is_refused_by_default),
                cmocka_unit_test(test_a_tiers_allow_list),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
