/* Webhook signatures (webhook_sign.h), with libcrypto's HMAC and base64. */
#include "service/webhook_sign.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "util/cleanup.h"

#define SECRET_PREFIX "whsec_"

int sbx_webhook_sign(const char *secret, const char *id, int64_t timestamp, const void *body,
                     size_t size, char signature[SBX_WEBHOOK_SIGNATURE_SIZE], struct sbx_error *err)
{
        const unsigned char *key = (const unsigned char *)secret;
        size_t key_len = strlen(secret);
        unsigned char decoded[256];
        if (strncmp(secret, SECRET_PREFIX, strlen(SECRET_PREFIX)) == 0) {
                const char *text = secret + strlen(SECRET_PREFIX);
                size_t len = strlen(text);
                if (len == 0 || len % 4 != 0 || len / 4 * 3 > sizeof(decoded))
                        return sbx_error_plain(err, EINVAL, "webhook_secret: bad base64 length");
                int n = EVP_DecodeBlock(decoded, (const unsigned char *)text, (int)len);
                if (n < 0)
                        return sbx_error_plain(err, EINVAL, "webhook_secret: not base64");
                /* EVP_DecodeBlock counts the padding's bytes too. */
                for (size_t i = len; i > 0 && text[i - 1] == '='; i--)
                        n--;
                key = decoded;
                key_len = (size_t)n;
        }
        char prefix[128];
        int prefix_len = snprintf(prefix, sizeof(prefix), "%s.%" PRId64 ".", id, timestamp);
        if (prefix_len < 0 || (size_t)prefix_len >= sizeof(prefix))
                return sbx_error_plain(err, EINVAL, "webhook: the id is too long");
        _cleanup_free_ unsigned char *message = malloc((size_t)prefix_len + size);
        if (message == NULL)
                return sbx_error_set(err, ENOMEM, "webhook: sign %zu bytes", size);
        memcpy(message, prefix, (size_t)prefix_len);
        if (size > 0)
                memcpy(message + prefix_len, body, size);
        unsigned char mac[EVP_MAX_MD_SIZE];
        unsigned mac_len = 0;
        if (HMAC(EVP_sha256(), key, (int)key_len, message, (size_t)prefix_len + size, mac,
                 &mac_len) == NULL)
                return sbx_error_set(err, EIO, "webhook: HMAC-SHA256 failed");
        memcpy(signature, "v1,", 3);
        EVP_EncodeBlock((unsigned char *)signature + 3, mac, (int)mac_len);
        return 0;
}
