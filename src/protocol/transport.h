/* The engine protocol's transport: how the encoded messages of protocol/protocol.h travel over a
 * connected SOCK_SEQPACKET socket (system calls; the codec itself is pure).
 *
 * One message per SOCK_SEQPACKET record. The kernel cannot carry a record much larger than 4 MiB
 * (the record is one physically contiguous allocation; measured on 6.18: 4 MiB goes, 4 MiB +
 * 100 kB fails with ENOBUFS whatever SO_SNDBUF says), and large contiguous allocations fail under
 * fragmentation long before that. So a message over SBX_MESSAGE_INLINE_MAX travels in a sealed
 * memfd attached (SCM_RIGHTS) to a record that holds a copy of its header: still one sendmsg per
 * message, so messages from concurrent senders (API threads, engine workers) never interleave.
 * sbx_message_send and sbx_message_receive hide the difference. A record of an inline message
 * may instead carry one fd handed to the peer (sbx_message_send_passing: a session's channel),
 * which only sbx_message_receive_passed accepts. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "protocol/protocol.h"
#include "util/error.h"

/* Largest message sent inline in its record; larger ones go in a memfd. Records this small are
 * built from order-0..3 pages, which the kernel can always find. */
#define SBX_MESSAGE_INLINE_MAX (64u * 1024u)

/* Sends the encoded message buf[0..len) with one sendmsg (MSG_NOSIGNAL: a vanished peer is
 * EPIPE, not a signal), inline or in a sealed memfd as described at the top. Blocks while the
 * socket buffer is full. Safe to call from several threads or processes sharing fd. */
int sbx_message_send(int fd, const void *buf, size_t len, struct sbx_error *err);

/* Like sbx_message_send, but fails with EAGAIN instead of waiting when the socket buffer is full:
 * for a single-threaded loop that must never hang on a peer that stopped reading. */
int sbx_message_send_nowait(int fd, const void *buf, size_t len, struct sbx_error *err);

/* Like sbx_message_send for a message of more than a header and at most SBX_MESSAGE_INLINE_MAX
 * bytes, with passed (an open fd: a channel handed to the peer) attached to its record. */
int sbx_message_send_passing(int fd, const void *buf, size_t len, int passed,
                             struct sbx_error *err);

/* Receives one message into a new malloc'd buffer (*out, *out_len; free() it) without decoding
 * it. Returns 1 with a message, 0 when the peer has hung up (a zero-length record, which no
 * sender of this protocol makes, is dropped as malformed instead), -1 with err otherwise. With
 * err->code EMSGSIZE (over SBX_MESSAGE_MAX_BYTES or an inline record over SBX_MESSAGE_INLINE_MAX),
 * EBADMSG (a record breaking the transport rules: bad attached fd, truncation) or ENOMEM, that one
 * record was consumed and dropped and the socket is still usable (sbx_message_dropped); any other
 * code is the socket's own failure. Retries EINTR. Closes every fd that arrives with a record. Only
 * one thread may receive on a socket (it peeks at the record's size before reading it). */
int sbx_message_receive(int fd, void **out, size_t *out_len, struct sbx_error *err);

/* Like sbx_message_receive, also taking an fd passed with an inline message
 * (sbx_message_send_passing): *passed is that fd, the caller's to close, or -1. */
int sbx_message_receive_passed(int fd, void **out, size_t *out_len, int *passed,
                               struct sbx_error *err);

/* Whether a failed sbx_message_receive only dropped one record (err->code), the socket still
 * usable. */
bool sbx_message_dropped(const struct sbx_error *err);
