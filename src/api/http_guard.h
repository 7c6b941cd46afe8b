/* The HTTP server's defence against slow clients (slowloris): a client that opens connections
 * and sends its request head a byte at a time holds a connection thread each for as long as it
 * likes, since every byte resets libmicrohttpd's idle timeout, and enough such connections fill
 * the connection limit and lock every other client out (/health included).
 *
 * libmicrohttpd bounds connections per client address (MHD_OPTION_PER_IP_CONNECTION_LIMIT) and
 * idle time; it has no bound on how long a request head may take. This guard adds that one: a
 * connection must deliver a complete request head within SBX_HTTP_HEADER_TIMEOUT_S of being
 * accepted or of the end of its previous request (a keep-alive connection waiting for its next
 * request counts the same), else the guard shuts its socket down and libmicrohttpd closes it. A
 * request whose head arrived is never cut: its body and the execution may take their time (the
 * body is read only for an authenticated POST). */
#pragma once

#include <microhttpd.h>

#include "util/error.h"

#define SBX_HTTP_HEADER_TIMEOUT_S 10

struct sbx_http_guard;

/* Starts the guard and its watch thread (every signal blocked in it). NULL with err on failure. */
struct sbx_http_guard *sbx_http_guard_start(struct sbx_error *err);

/* Stops the watch thread and frees the guard; call after MHD_stop_daemon (every connection is
 * closed by then). NULL is a no-op. */
void sbx_http_guard_stop(struct sbx_http_guard *guard);

/* The MHD_OPTION_NOTIFY_CONNECTION callback; cls is the guard. */
void sbx_http_guard_notify(void *cls, struct MHD_Connection *connection, void **socket_context,
                           enum MHD_ConnectionNotificationCode code);

/* Marks the connection's request head as complete (the first call of the request handler) ... */
void sbx_http_guard_request_started(struct MHD_Connection *connection);

/* ... and its request as finished (MHD_OPTION_NOTIFY_COMPLETED): the wait for the next head
 * starts now. */
void sbx_http_guard_request_finished(struct MHD_Connection *connection);
