/* Where a webhook may be sent (issue 17, DESIGN.md "Asynchronous work and webhooks"): never to
 * this machine or its networks unless a tier allows it. A callback's host is resolved and every
 * address it has is checked; the delivery then connects to a checked address only (api/
 * webhooks.c pins it), so a DNS answer that changes in between cannot point it elsewhere.
 *
 * Refused unless allowed: loopback (127.0.0.0/8, ::1), "this network" (0.0.0.0/8, ::),
 * private (10/8, 172.16/12, 192.168/16, fc00::/7), shared (100.64/10), link-local (169.254/16,
 * fe80::/10; 169.254.169.254 is the cloud metadata service), multicast and reserved (224/4,
 * 240/4, ff00::/8), an IPv4 address mapped into IPv6 as its IPv4 self, and the IPv6 forms
 * that carry an IPv4 address a gateway may reach (NAT64 64:ff9b::/96 and 64:ff9b:1::/48,
 * IPv4-compatible ::/96, SIIT ::ffff:0:0:0/96, 6to4 2002::/16, Teredo 2001::/32) and site-local
 * fec0::/10.
 *
 * A tier's webhook_allow lists what it may reach anyway: "host:port" (the callback URL's host
 * as written, a name or an address literal, "[v6]:port" for IPv6) or a CIDR block ("10.0.0.0/8",
 * "fd00::/8", or one address). Pure functions. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

#include "util/error.h"

/* Entries a webhook_allow may have. */
#define SBX_WEBHOOK_ALLOW_MAX 32

struct sbx_webhook_allow_entry {
        bool cidr;
        char host[256]; /* host:port: the host, lowercase, without brackets */
        unsigned port;
        int family; /* cidr: AF_INET or AF_INET6 */
        unsigned char address[16];
        unsigned prefix;
};

struct sbx_webhook_allow {
        struct sbx_webhook_allow_entry entries[SBX_WEBHOOK_ALLOW_MAX];
        size_t n;
};

/* Parses a webhook_allow value (entries separated by commas, blanks around them ignored). -1
 * with err naming the bad entry. */
int sbx_webhook_allow_parse(const char *text, struct sbx_webhook_allow *out, struct sbx_error *err);

/* Whether a webhook to host:port (the URL's host as written) may go to address: allowed by an
 * entry, or public. false with *why (a static phrase: "loopback", "private", ...) otherwise. */
bool sbx_webhook_address_allowed(const struct sbx_webhook_allow *allow, const char *host,
                                 unsigned port, const struct sockaddr *address, const char **why);
