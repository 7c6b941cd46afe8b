/* Webhook deliveries in the audit store (api/webhooks.h sends them): one row per execution or
 * batch whose request named a callback_url, written in the transaction that queued it
 * (sbx_audit_enqueue), so that no crash loses one, and claimed for sending once its target has
 * ended. A row is pending (with its next attempt's time), delivered, or failed (after the last
 * attempt; a retry makes it pending again). Thread-safe, as audit.h. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "protocol/protocol.h"
#include "service/audit.h"
#include "util/error.h"

/* "msg_" and 32 hex digits: the webhook-id header. */
#define SBX_DELIVERY_ID_SIZE (4 + SBX_EXECUTION_ID_CHARS + 1)
#define SBX_DELIVERY_URL_MAX 2048

/* A delivery claimed for an attempt. */
struct sbx_audit_delivery {
        char id[SBX_DELIVERY_ID_SIZE];
        char tenant[128];
        char kind[16]; /* "execution", "batch", or "judge0" (an execution, Judge0's callback) */
        char target_id[SBX_EXECUTION_ID_CHARS + 1];
        char url[SBX_DELIVERY_URL_MAX + 1];
        unsigned attempts; /* made before this one */
};

/* Claims the pending delivery due first (next attempt at or before now_ms) whose execution has
 * ended, or whose batch has no case queued or running: its next attempt is put lease_ms ahead so
 * that no other sender takes it meanwhile. 1 with *out, 0 when none is due, -1 with err. */
int sbx_audit_delivery_claim(struct sbx_audit *audit, int64_t now_ms, int64_t lease_ms,
                             struct sbx_audit_delivery *out, struct sbx_error *err);

/* What an attempt at id came to: delivered; or not, with error, then pending again from
 * next_attempt_ms, or failed for good when next_attempt_ms is negative. Counts the attempt. */
int sbx_audit_delivery_attempted(struct sbx_audit *audit, const char *id, bool delivered,
                                 const char *error, int64_t next_attempt_ms, int64_t now_ms,
                                 struct sbx_error *err);

/* tenant's deliveries, newest first, at most limit, with status (NULL: any) as a JSON array of
 * {id, kind, target_id, url, status, attempts, next_attempt_at, last_error, created_at,
 * finished_at} (caller owns it). */
int sbx_audit_deliveries_list(struct sbx_audit *audit, const char *tenant, const char *status,
                              unsigned limit, json_t **out, struct sbx_error *err);

/* Makes tenant's failed delivery id pending again, due at now_ms, its attempts counted anew: 1,
 * or 0 when tenant has no failed delivery of that id. */
int sbx_audit_delivery_retry(struct sbx_audit *audit, const char *tenant, const char *id,
                             int64_t now_ms, struct sbx_error *err);
