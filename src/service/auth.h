/* Bearer-token authentication. The config keeps only the SHA-256 of each tenant's token, so a
 * leaked config or audit database does not leak tokens; a request's token is hashed and compared
 * with every tenant's hash in constant time, so response timing reveals neither which tenant
 * nearly matched nor how many bytes did. Tokens are "sbx_" + 43 base64url characters: 256 random
 * bits from getrandom(). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "service/config.h"
#include "util/error.h"

#define SBX_TOKEN_PREFIX "sbx_"
#define SBX_TOKEN_LENGTH 47 /* "sbx_" + base64url(32 bytes) unpadded; without the NUL */

/* Computes the SHA-256 of size bytes at data. Fails only if OpenSSL cannot (no memory). */
int sbx_auth_sha256(const void *data, size_t size, uint8_t digest[SBX_SHA256_SIZE],
                    struct sbx_error *err);

/* Whether two digests are equal, in time independent of their contents (CRYPTO_memcmp). */
bool sbx_auth_digest_equal(const uint8_t a[SBX_SHA256_SIZE], const uint8_t b[SBX_SHA256_SIZE]);

/* The token of an Authorization header value "Bearer <token>" (scheme case-insensitive, RFC
 * 6750), pointing into authorization; NULL when the header is NULL, another scheme, or the
 * token is empty or contains a space. */
const char *sbx_auth_bearer_token(const char *authorization);

/* The tenant whose token_sha256 is the hash of token, or NULL (also for NULL token). Hashes
 * once and compares against every tenant without stopping at a match. */
const struct sbx_tenant *sbx_auth_find_tenant(const struct sbx_config *config, const char *token);

/* Generates a new random token into token (SBX_TOKEN_LENGTH characters and a NUL). */
int sbx_auth_token_new(char token[SBX_TOKEN_LENGTH + 1], struct sbx_error *err);

/* `sandboxd token [NAME]`: generates a token and writes to out
 *   token: sbx_...
 *   [tenant.NAME]
 *   tier = default
 *   token_sha256 = <hex>
 * tenant_name NULL means "local". Fails for an invalid name (sbx_config_name_valid) or a write
 * error. */
int sbx_auth_print_token(FILE *out, const char *tenant_name, struct sbx_error *err);
