/* The API process's registry of sessions, shared by the routes of sessions (api/sessions.c) and
 * of RL episodes (api/episodes.c): an episode is a python session whose interpreter holds a
 * Gymnasium-shaped environment (DESIGN.md "Long-lived sandboxes": one mechanism), so both are
 * entries of one table, with one lock, one set of quotas and one end (SESSION_ENDED). A route
 * finds only entries of its own kind: an episode's id is 404 under /v1/sessions and the other
 * way round. Internal to the API process. */
#pragma once

#include <jansson.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "api/engine_client.h"
#include "api/http.h"
#include "model/limits.h"
#include "protocol/protocol.h"
#include "service/config.h"
#include "util/buffer.h"

/* What an entry gets when its request and its tier say nothing, and the bounds of the engine's
 * answers past an operation's own deadline. */
#define SBX_SESSIONS_DEFAULT_IDLE_TIMEOUT_S 300
#define SBX_SESSIONS_MAX_IDLE_TIMEOUT_S     86400
#define SBX_SESSIONS_OPEN_TIMEOUT_MS        60000
#define SBX_SESSIONS_FILE_OP_TIMEOUT_MS     60000
/* A run that does not stop at its deadline is interrupted, restarted after a grace, and the new
 * interpreter may take a while to be ready (engine/session.h: 2 s and 10 s). */
#define SBX_SESSIONS_RESTART_MS 12000

struct episode;
/* Frees an episode's part of an entry (api/episodes.c); NULL is a no-op. */
void sbx_episode_free(struct episode *episode);
struct session;
/* An episode's record at its end: {steps, resets, total_reward, cpu_ms} (lock held). */
json_t *sbx_episode_summary(const struct session *s);

/* A sandbox several entries share (RL episodes opened with "sandbox": "shared", one
 * environment each in its one interpreter): the engine's session is the share's, and so are the
 * one operation at a time, the CPU charged, and the sandbox's end. */
struct session_share {
        char id[SBX_EXECUTION_ID_CHARS + 1]; /* the engine's session */
        const void *owner;       /* whose operations its entries are in (one request's), or NULL */
        unsigned operations;     /* ... how many */
        unsigned live;           /* its entries not ended: at 0 it is closed */
        unsigned refs;           /* its entries: the last one frees it */
        uint64_t cpu_charged_ms; /* as an entry's, for the sandbox */
        _Atomic uint64_t request_id; /* the operation in progress, for a cancel */
};

struct session {
        char id[SBX_EXECUTION_ID_CHARS + 1];
        char *tenant;
        char language[16];
        uint64_t created_ms, expires_ms, last_activity_ms, ended_ms; /* wall clock */
        uint64_t idle_timeout_s;
        uint64_t wall_ms; /* a run's default deadline */
        json_t *limits;   /* the effective limits, as a result's "limits" */
        json_t *clamped;
        bool busy;      /* an operation is in progress */
        unsigned users; /* requests and streams holding a pointer to it: not freed meanwhile */
        bool ended;     /* the engine said so (or it never opened) */
        bool pooled;    /* it took a session its pool opened ahead of time */
        char end_reason[32];
        /* Of the session's CPU (its cgroup's, over its life), what the tenant's budget was
         * charged: each run charges its own and what background processes used since the run
         * before; the end charges the rest. */
        uint64_t cpu_charged_ms;
        /* An episode's (api/episodes.c); NULL for a session. */
        struct episode *episode;
        /* The sandbox it shares with others; NULL: its own (its id is the engine's). */
        struct session_share *share;
        /* Its sandbox's channel to its worker (engine_client.h: an OPEN's), or -1; used by one
         * operation at a time (busy). */
        int channel;
};

struct sbx_sessions {
        struct sbx_metrics *metrics; /* counts opens, ends and runs */
        struct sbx_audit *audit;     /* a row per session (sbx_audit_session_*) */
        struct sbx_quota *quota;     /* charged the CPU no run covers, at the end */
        struct sbx_quota_pg *fleet;  /* a fleet's store: where each entry lives; or NULL */
        pthread_mutex_t lock;
        struct session **items;
        size_t n, alloc;
        size_t shares_open; /* shares with a live entry: a sandbox each */
};

/* The engine's session of s: its share's, or its own id. */
static inline const char *sbx_sessions_engine_id(const struct session *s)
{
        return s->share != NULL ? s->share->id : s->id;
}

/* What s's sandbox was charged of its CPU so far (its share's, or its own): the counter, and
 * its value. */
static inline uint64_t *sbx_sessions_cpu_charged(struct session *s)
{
        return s->share != NULL ? &s->share->cpu_charged_ms : &s->cpu_charged_ms;
}

static inline uint64_t sbx_sessions_cpu_charged_ms(const struct session *s)
{
        return s->share != NULL ? s->share->cpu_charged_ms : s->cpu_charged_ms;
}

/* ---- The table (each with the lock held, except where it says otherwise) ---- */

/* Drops ended entries past what is kept. */
void sbx_sessions_forget_old(struct sbx_sessions *sessions, uint64_t now_ms);
/* The entry id of tenant, of the kind asked (episode or not), held (users) until
 * sbx_sessions_release; NULL for none. */
struct session *sbx_sessions_find(struct sbx_sessions *sessions, const char *id, const char *tenant,
                                  bool episode);
/* The entry a url's rest after the collection names ("/{id}[/...]"), held, as
 * sbx_sessions_find; *after is what follows the id. Takes the lock itself. */
struct session *sbx_sessions_find_in_url(struct sbx_sessions *sessions, const char *rest,
                                         const struct sbx_tenant *tenant, bool episode,
                                         const char **after);
/* Takes the lock itself. */
void sbx_sessions_release(struct sbx_sessions *sessions, struct session *s);
void sbx_sessions_mark_ended(struct sbx_sessions *sessions, struct session *s, const char *reason);
/* An entry's public fields (a session's; an episode adds its own). */
json_t *sbx_sessions_json(const struct session *s);
void sbx_sessions_entry_free(struct session *s);

/* A new entry of tenant for an open: busy, its limits and lifetimes set; NULL when out of
 * memory. Not in the table yet. */
struct session *sbx_sessions_entry_new(const struct sbx_tenant *tenant, const char *language,
                                       const struct sbx_limits *limits, const json_t *clamped,
                                       uint64_t idle_timeout_s, uint64_t lifetime_s);
/* Puts entries (n of one kind, of tenant) into the table, held by the caller, when the tenant's
 * maximum of its kind (tenant_max) and the server's of every kind allow all of them (entries of
 * one share are one sandbox); else answers (429 or 503) and takes none. Takes the lock
 * itself. */
bool sbx_sessions_add(struct sbx_api *api, struct MHD_Connection *connection,
                      const struct sbx_tenant *tenant, struct session *const *entries, size_t n,
                      uint64_t tenant_max, enum MHD_Result *answer);

/* Marks s (and its share) busy for one operation, or says why not (ended: *answered_404).
 * Takes the lock. */
bool sbx_sessions_begin_operation(struct sbx_api *api, struct session *s, bool *answered_404);
/* The same as one of owner's operations: entries of one share can be in operations of one
 * owner at once (a request's batch), never of two. */
bool sbx_sessions_begin_operation_of(struct sbx_api *api, struct session *s, const void *owner,
                                     bool *answered_404);
void sbx_sessions_end_operation(struct sbx_api *api, struct session *s);
/* Ends the operation and the entry at once (reason): no other operation can begin between. */
void sbx_sessions_end_operation_ended(struct sbx_api *api, struct session *s, const char *reason);

/* ---- The engine ---- */

/* One operation on s (takes fields); 0 with *reply, or -1 with *code and detail for
 * sbx_sessions_engine_failure. s is marked ended when the engine says it is gone. */
int sbx_sessions_call_engine(struct sbx_api *api, struct session *s, enum sbx_session_op op,
                             json_t *fields, const void *data, size_t data_len, uint64_t timeout_ms,
                             struct sbx_engine_session_reply *reply, int *code, char *detail,
                             size_t detail_size);
/* What an engine's refusal or error reply says: *code and detail (as sbx_sessions_call_engine);
 * ends s for ESRCH and EPIPE. Frees reply. */
void sbx_sessions_reply_failure(struct sbx_api *api, struct session *s,
                                struct sbx_engine_session_reply *reply, int *code, char *detail,
                                size_t detail_size);

/* ---- Requests and answers ---- */

/* The effective limits: the request's (API units) over the tier's defaults over the built-in
 * ones, each lowered to the tier's ceiling (the names lowered appended to clamped). */
int sbx_sessions_limits(const json_t *requested, const struct sbx_tier *tier,
                        struct sbx_limits *out, json_t *clamped, const char **bad_field,
                        const char **why);
/* The limits as OPEN's fields carry them. */
json_t *sbx_sessions_limits_fields(const struct sbx_limits *limits);
uint64_t sbx_sessions_tier_max_lifetime_s(const struct sbx_tier *tier);
/* An optional integer of seconds from 1 to max in body's name: false when it is something
 * else. */
bool sbx_sessions_seconds_field(const json_t *body, const char *name, uint64_t max, uint64_t *out);
/* files: [{path, content, executable}] into OPEN's entries ({path, size, executable}) and their
 * bytes, in order (data's cap is the 4 MiB of code; over it: data->overflow). NULL when valid,
 * else what is wrong. */
const char *sbx_sessions_files(const json_t *listed, json_t *entries, struct sbx_buffer *data);
/* {"bytes": N, "sha256": "..."} standing for data in a record. */
json_t *sbx_sessions_digest_of(const char *data, size_t size);
/* The request as an audit row keeps it: a copy of body whose "code" and files' contents are
 * their digests. */
json_t *sbx_sessions_requested(const json_t *body);

/* The body as a JSON object, or NULL with *answer (413, 400). */
json_t *sbx_sessions_parse_body(struct sbx_api *api, struct MHD_Connection *connection,
                                const void *body, size_t body_len, bool body_too_large,
                                enum MHD_Result *answer);
enum MHD_Result sbx_sessions_bad_request(struct sbx_api *api, struct MHD_Connection *connection,
                                         const char *field, const char *message);
/* In a fleet, records in the store that this node holds s (service/placement_pg.h); a failure is
 * logged: the placement only says more of a later miss. */
void sbx_sessions_place(struct sbx_sessions *sessions, const struct session *s);
/* A request: its method, its url (no query), its body. */
struct sbx_sessions_request {
        const char *method;
        const char *url;
        const void *body;
        size_t body_len;
        bool body_too_large;
};

/* The answer to a request for an entry (episode or session) this node does not hold, its id at
 * rest + 1: 404 "no such", or in a fleet what the store knows of it: 404 node-gone when its node
 * died; when it lives on another node, alive, that node's answer to the request forwarded there
 * (api/forward.h), or 421 misdirected when it cannot be (a request forwarded already, or the
 * holder out of reach). */
enum MHD_Result sbx_sessions_not_held(struct sbx_api *api, struct MHD_Connection *connection,
                                      const char *rest, const struct sbx_tenant *tenant,
                                      bool episode, const struct sbx_sessions_request *request);
/* 404: no such entry (s NULL), or it ended (and why). */
enum MHD_Result sbx_sessions_not_found(struct sbx_api *api, struct MHD_Connection *connection,
                                       const struct session *s);
/* The answer to an engine failure (*code and detail as sbx_sessions_call_engine set them). */
enum MHD_Result sbx_sessions_engine_failure(struct sbx_api *api, struct MHD_Connection *connection,
                                            int code, const char *detail, const char *path);
/* 409 for an entry busy with another operation, 404 for one that ended. */
enum MHD_Result sbx_sessions_busy(struct sbx_api *api, struct MHD_Connection *connection,
                                  const struct session *s, bool ended);
/* The file routes of s (PUT, GET, DELETE /files/{path}; GET /files?path= when listing). */
enum MHD_Result sbx_sessions_file_route(struct sbx_api *api, struct MHD_Connection *connection,
                                        struct session *s, const char *method, const char *after,
                                        const void *body, size_t body_len, bool body_too_large);
