/* The API process's side of the engine protocol: a thread-safe client over the SOCK_SEQPACKET
 * socket to the engine. Any number of HTTP threads call it at once; one dispatcher thread reads
 * every reply (RESULT, PONG, STATS_REPLY) and wakes the caller waiting for that request_id.
 *
 * Errors a call reports in err->code:
 *   EPIPE      the engine is unavailable: its socket hung up or failed (now, or earlier: after the
 *              first loss every call fails at once), or the client was shut down. HTTP 503.
 *   ETIMEDOUT  no reply within the call's bound (the engine may be alive but stuck).
 *   EBADMSG    the engine's reply could not be decoded.
 *   EINVAL     the request cannot be carried by the protocol (see protocol.h).
 * and, for a RUN the engine REFUSED (nothing ran; err->message is the engine's detail):
 *   EBUSY      max_sandboxes executions are running
 *   ESHUTDOWN  the engine is shutting down
 *   EAGAIN     the engine could not start a worker
 *   EPROTO     the engine found the RUN invalid (a bug on the API's side) */
#pragma once

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "model/request.h"
#include "protocol/protocol.h"
#include "model/result.h"
#include "util/error.h"

/* How long past its wall deadline a RUN may take before the client gives up on the engine: setup,
 * teardown and a loaded machine fit well within it. */
#define SBX_ENGINE_RUN_SLACK_MS 30000

struct sbx_engine_client;

/* A RESULT as received. result's pointers (stdout, stderr, backend) point into message, which
 * this struct owns: free both with sbx_engine_result_free(), never with sbx_result_free().
 * result.compile points into the struct itself: never copy or move it. */
struct sbx_engine_result {
        struct sbx_result result;
        struct sbx_result compile; /* where result.compile points, if it has one: do not copy */
        void *message;
};

/* What the engine tells the API unasked; each is called from the dispatcher thread, so it must
 * not call back into the client (shutdown would join its own thread). */
struct sbx_engine_client_events {
        /* Once, when the engine hangs up or its socket fails (not after
         * sbx_engine_client_shutdown): it should only tell the rest of the process, e.g. raise a
         * signal. */
        void (*on_lost)(void *ctx);
        /* The config file the engine read again on SIGHUP (size bytes, NUL-terminated). */
        void (*on_config)(void *ctx, const char *text, size_t size);
        /* A session ended on its own or was closed (SESSION_ENDED; session valid for the call). */
        void (*on_session_ended)(void *ctx, const struct sbx_message_session *session);
        void *ctx;
};

/* Starts a client on fd (a connected SOCK_SEQPACKET socket to the engine; owned by the client
 * from now on, also on failure) and its dispatcher thread, which runs with every signal blocked.
 * events (copied; its callbacks may be NULL) says what to do with what the engine sends unasked. */
int sbx_engine_client_start(int fd, const struct sbx_engine_client_events *events,
                            struct sbx_engine_client **out, struct sbx_error *err);

/* Runs request as execution_id (32 lowercase hex) and waits for its RESULT, at most
 * request->limits.wall_ms + SBX_ENGINE_RUN_SLACK_MS (then CANCEL is sent and ETIMEDOUT
 * returned). Any RESULT is a success here (0), also one with status internal_error or canceled:
 * the execution was started. A REFUSED is -1 with the codes above. */
int sbx_engine_client_run(struct sbx_engine_client *client, const char *execution_id,
                          const struct sbx_request *request, struct sbx_engine_result *out,
                          struct sbx_error *err);

/* Frees a result from sbx_engine_client_run. NULL and a zeroed struct are no-ops. */
void sbx_engine_result_free(struct sbx_engine_result *result);

/* A SESSION_REPLY as received: reply's pointers point into message, which this struct owns
 * (free with sbx_engine_session_reply_free). */
struct sbx_engine_session_reply {
        struct sbx_message_session reply;
        void *message;
        /* Where message is not NULL: an OPEN's answer brings the session worker's end of a
         * channel of the session's own (-1 for none), which the reply owns until taken (set it
         * to -1 then). Its operations may then go straight to the worker
         * (sbx_engine_session_call.direct). */
        int channel;
};

/* A streamed run's event (SESSION_EVENT; valid for the call). */
typedef void (*sbx_engine_event_fn)(void *ctx, const struct sbx_message_session *event);

/* What a session call may add to the round trip (every member may be NULL). */
struct sbx_engine_session_call {
        /* A RUN with "stream": each SESSION_EVENT that comes before the reply, in order, from
         * the calling thread. */
        sbx_engine_event_fn on_event;
        /* Called once the message is sent, before the wait: work that may overlap the engine's
         * (the run's audit record). Below 0: a CANCEL follows at once, and the wait goes on. */
        int (*on_sent)(void *ctx);
        void *ctx;
        /* Set to the request's id before it is sent (for sbx_engine_client_cancel_session
         * from another thread). */
        _Atomic uint64_t *request_id;
        /* Through the session's channel (an OPEN's, sbx_engine_session_reply.channel) instead
         * of the engine: the worker answers there, and the caller reads its answer itself, so
         * that the round trip wakes neither the engine's loop nor the dispatcher. One
         * operation at a time per channel; once the worker hung up, the operation goes to the
         * engine, which answers it after the worker's SESSION_ENDED. */
        bool direct;
        int channel;
};

/* Sends SESSION (session->op on session->session_id) and waits up to timeout_ms for its
 * SESSION_REPLY: 0 with *out (whose reply.error may still be an errno: the operation's own
 * refusal), or -1 with the codes above (a REFUSED OPEN included). On ETIMEDOUT a CANCEL goes
 * after it (an OPEN's session then ends, a run is interrupted) and a late answer is dropped.
 * with may be NULL. */
int sbx_engine_client_session(struct sbx_engine_client *client,
                              const struct sbx_message_session *session, uint64_t timeout_ms,
                              const struct sbx_engine_session_call *with,
                              struct sbx_engine_session_reply *out, struct sbx_error *err);
void sbx_engine_session_reply_free(struct sbx_engine_session_reply *reply);

/* n SESSIONs at once, each to another session (an RL batch step): all are sent, then every
 * reply awaited within timeout_ms of the sends. For each i, errs[i].code 0 and out[i] (whose
 * reply.error may still be the operation's refusal), or errs[i] as sbx_engine_client_session
 * reports it (a late one is canceled). request_ids (NULL, or n pointers that may be NULL) are
 * told each request's id before it is sent (for sbx_engine_client_cancel). Returns how many got
 * a reply. */
size_t sbx_engine_client_sessions(struct sbx_engine_client *client,
                                  const struct sbx_message_session *sessions, size_t n,
                                  uint64_t timeout_ms, struct sbx_engine_session_reply *out,
                                  struct sbx_error *errs, _Atomic uint64_t *const *request_ids);

/* Like sbx_engine_client_run, for a request with stream set: each SESSION_EVENT (the output as
 * it is read) that comes before the RESULT is handed to on_event, in order, from the calling
 * thread; *request_id is set before the RUN is sent, and back to 0 when it could not be sent
 * (so that a caller can tell a RUN that never left from one the engine may have taken). on_event
 * may be NULL: a plain run whose request id is still told. */
int sbx_engine_client_run_stream(struct sbx_engine_client *client, const char *execution_id,
                                 const struct sbx_request *request, sbx_engine_event_fn on_event,
                                 void *ctx, _Atomic uint64_t *request_id,
                                 struct sbx_engine_result *out, struct sbx_error *err);

/* Whether calls can still start: false once the engine hung up or the client was shut down
 * (every call then fails at once with EPIPE, having sent nothing). */
bool sbx_engine_client_alive(struct sbx_engine_client *client);

/* Sends CANCEL for request_id: a RUN is canceled. */
void sbx_engine_client_cancel(struct sbx_engine_client *client, uint64_t request_id);
/* Interrupts session_id's run of request_id (a SESSION CANCEL: the engine signals its worker,
 * whichever way the run came); a run that has not begun never does. */
void sbx_engine_client_cancel_session(struct sbx_engine_client *client, const char *session_id,
                                      uint64_t request_id);

/* Sends PING and waits up to timeout_ms for the PONG. 0 when the engine answered. */
int sbx_engine_client_ping(struct sbx_engine_client *client, unsigned timeout_ms,
                           struct sbx_error *err);

/* Sends STATS and waits up to timeout_ms for the engine's counters. */
int sbx_engine_client_stats(struct sbx_engine_client *client, unsigned timeout_ms,
                            struct sbx_message_stats *stats, struct sbx_error *err);

/* Stops the client: shuts the socket down in both directions (the engine sees the API hang up
 * and shuts down itself), wakes every waiting call with EPIPE, joins the dispatcher. Calls made
 * afterwards fail at once. Idempotent; thread-safe against concurrent calls. */
void sbx_engine_client_shutdown(struct sbx_engine_client *client);

/* Shuts down (if not yet), closes the socket and frees the client. The caller guarantees that no
 * other thread is inside or will enter a call. NULL is a no-op. */
void sbx_engine_client_free(struct sbx_engine_client *client);
