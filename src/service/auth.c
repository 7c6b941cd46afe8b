#include "service/auth.h"

#include <errno.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>

#include "util/hex.h"

#define TOKEN_RANDOM_BYTES 32 /* 256 bits: guessing is hopeless, and 43 base64url characters */

int sbx_auth_sha256(const void *data, size_t size, uint8_t digest[SBX_SHA256_SIZE],
                    struct sbx_error *err)
{
        unsigned int digest_size = 0;
        if (EVP_Digest(data, size, digest, &digest_size, EVP_sha256(), NULL) != 1 ||
            digest_size != SBX_SHA256_SIZE)
                return sbx_error_set(err, ENOMEM, "SHA-256 failed");
        return 0;
}

bool sbx_auth_digest_equal(const uint8_t a[SBX_SHA256_SIZE], const uint8_t b[SBX_SHA256_SIZE])
{
        return CRYPTO_memcmp(a, b, SBX_SHA256_SIZE) == 0;
}

const char *sbx_auth_bearer_token(const char *authorization)
{
        static const char scheme[] = "Bearer";
        if (authorization == NULL || strncasecmp(authorization, scheme, strlen(scheme)) != 0)
                return NULL;
        const char *token = authorization + strlen(scheme);
        if (*token != ' ')
                return NULL;
        while (*token == ' ')
                token++;
        /* RFC 6750 b64token: one word. Trailing blanks are already stripped by the HTTP layer. */
        if (*token == '\0' || strchr(token, ' ') != NULL)
                return NULL;
        return token;
}

const struct sbx_tenant *sbx_auth_find_tenant(const struct sbx_config *config, const char *token)
{
        if (token == NULL)
                return NULL;
        uint8_t digest[SBX_SHA256_SIZE];
        if (sbx_auth_sha256(token, strlen(token), digest, NULL) != 0)
                return NULL;
        /* Every tenant is compared, even after a match: the time taken then depends only on the
         * number of tenants, never on which one matched. */
        const struct sbx_tenant *found = NULL;
        for (size_t i = 0; i < config->n_tenants; i++) {
                bool equal = sbx_auth_digest_equal(digest, config->tenants[i].token_sha256);
                if (equal)
                        found = &config->tenants[i];
        }
        return found;
}

/* Fills buf with size random bytes from the kernel's CSPRNG. */
static int random_bytes(void *buf, size_t size, struct sbx_error *err)
{
        size_t done = 0;
        while (done < size) {
                ssize_t n = getrandom((char *)buf + done, size - done, 0);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        return sbx_error_set(err, errno, "getrandom");
                }
                done += (size_t)n;
        }
        return 0;
}

int sbx_auth_token_new(char token[SBX_TOKEN_LENGTH + 1], struct sbx_error *err)
{
        unsigned char bytes[TOKEN_RANDOM_BYTES];
        if (random_bytes(bytes, sizeof(bytes), err) != 0)
                return -1;
        /* EVP_EncodeBlock writes standard base64 with '=' padding: 44 characters for 32 bytes.
         * base64url (RFC 4648 section 5) swaps two letters and drops the padding, so the token
         * can sit in a URL, a shell word or a header without quoting. */
        unsigned char encoded[4 * ((TOKEN_RANDOM_BYTES + 2) / 3) + 1];
        int length = EVP_EncodeBlock(encoded, bytes, (int)sizeof(bytes));
        OPENSSL_cleanse(bytes, sizeof(bytes));
        size_t body = SBX_TOKEN_LENGTH - strlen(SBX_TOKEN_PREFIX);
        if (length < (int)body)
                return sbx_error_set(err, EINVAL, "base64 encoding failed");
        memcpy(token, SBX_TOKEN_PREFIX, strlen(SBX_TOKEN_PREFIX));
        for (size_t i = 0; i < body; i++) {
                unsigned char c = encoded[i];
                token[strlen(SBX_TOKEN_PREFIX) + i] = c == '+' ? '-' : c == '/' ? '_' : (char)c;
        }
        token[SBX_TOKEN_LENGTH] = '\0';
        OPENSSL_cleanse(encoded, sizeof(encoded));
        return 0;
}

int sbx_auth_print_token(FILE *out, const char *tenant_name, struct sbx_error *err)
{
        if (tenant_name == NULL)
                tenant_name = "local";
        if (!sbx_config_name_valid(tenant_name))
                return sbx_error_set(err, EINVAL,
                                     "invalid tenant name '%s': use 1 to %d letters, digits, '_' "
                                     "or '-'",
                                     tenant_name, SBX_CONFIG_NAME_MAX);
        char token[SBX_TOKEN_LENGTH + 1];
        uint8_t digest[SBX_SHA256_SIZE];
        char hex[SBX_SHA256_HEX_SIZE + 1];
        if (sbx_auth_token_new(token, err) != 0 ||
            sbx_auth_sha256(token, strlen(token), digest, err) != 0)
                return -1;
        sbx_hex_encode(digest, SBX_SHA256_SIZE, hex);
        int written = fprintf(out, "token: %s\n[tenant.%s]\ntier = default\ntoken_sha256 = %s\n",
                              token, tenant_name, hex);
        OPENSSL_cleanse(token, sizeof(token));
        if (written < 0 || fflush(out) != 0)
                return sbx_error_set(err, errno, "write token");
        return 0;
}
