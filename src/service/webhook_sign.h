/* Webhook signatures per the Standard Webhooks convention (standardwebhooks.com): the headers
 * webhook-id, webhook-timestamp (seconds since the epoch) and webhook-signature, "v1," and the
 * base64 of HMAC-SHA256 over "<id>.<timestamp>.<body>". The key is a tenant's webhook_secret:
 * "whsec_" and base64 (the convention's form: the key is the decoded bytes), or any other string
 * (its bytes are the key). */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "util/error.h"

/* "v1," + 44 base64 characters + NUL. */
#define SBX_WEBHOOK_SIGNATURE_SIZE 48

/* Writes the webhook-signature value of body (size bytes) for id and timestamp with secret.
 * -1 with err when the secret's base64 is invalid or libcrypto fails. */
int sbx_webhook_sign(const char *secret, const char *id, int64_t timestamp, const void *body,
                     size_t size, char signature[SBX_WEBHOOK_SIGNATURE_SIZE],
                     struct sbx_error *err);
