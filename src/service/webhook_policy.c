/* Where a webhook may be sent (webhook_policy.h). */
#include "service/webhook_policy.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "util/parse.h"

/* A range of addresses and what it is. */
struct refused_range {
        int family;
        unsigned char prefix_bytes[16];
        unsigned prefix;
        const char *why;
};

/* Most specific first: the metadata address is link-local too, and says more. */
static const struct refused_range refused[] = {
        {AF_INET, {169, 254, 169, 254}, 32, "the cloud metadata address"},
        {AF_INET, {127}, 8, "loopback"},
        {AF_INET, {0}, 8, "\"this network\""},
        {AF_INET, {10}, 8, "private"},
        {AF_INET, {172, 16}, 12, "private"},
        {AF_INET, {192, 168}, 16, "private"},
        {AF_INET, {100, 64}, 10, "shared (carrier-grade NAT)"},
        {AF_INET, {169, 254}, 16, "link-local"},
        {AF_INET, {224}, 4, "multicast"},
        {AF_INET, {240}, 4, "reserved"},
        {AF_INET6, {0}, 128, "unspecified"},
        {AF_INET6, {[15] = 1}, 128, "loopback"},
        {AF_INET6, {0xfc}, 7, "private"},
        {AF_INET6, {0xfe, 0x80}, 10, "link-local"},
        {AF_INET6, {0xff}, 8, "multicast"},
        /* Forms that carry an IPv4 address a gateway may reach (NAT64 of 10.0.0.5 is
         * 64:ff9b::a00:5): refused whatever the address inside. */
        {AF_INET6, {0x00, 0x64, 0xff, 0x9b}, 96, "NAT64"},
        {AF_INET6, {0x00, 0x64, 0xff, 0x9b, 0x00, 0x01}, 48, "NAT64 (local)"},
        {AF_INET6, {0}, 96, "IPv4-compatible"},
        {AF_INET6, {[10] = 0xff, [11] = 0xff}, 96, "IPv4-mapped"},
        {AF_INET6, {0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff}, 96, "IPv4-translated (SIIT)"},
        {AF_INET6, {0x20, 0x02}, 16, "6to4"},
        {AF_INET6, {0x20, 0x01, 0x00, 0x00}, 32, "Teredo"},
        {AF_INET6, {0xfe, 0xc0}, 10, "site-local"},
};

static bool in_prefix(const unsigned char *address, const unsigned char *network, unsigned prefix)
{
        unsigned whole = prefix / 8, rest = prefix % 8;
        if (memcmp(address, network, whole) != 0)
                return false;
        if (rest == 0)
                return true;
        unsigned char mask = (unsigned char)(0xff << (8 - rest));
        return (address[whole] & mask) == (network[whole] & mask);
}

static int parse_cidr(const char *text, struct sbx_webhook_allow_entry *entry)
{
        char copy[64];
        if (snprintf(copy, sizeof(copy), "%s", text) >= (int)sizeof(copy))
                return -1;
        char *slash = strchr(copy, '/');
        if (slash != NULL)
                *slash = '\0';
        entry->cidr = true;
        if (inet_pton(AF_INET, copy, entry->address) == 1)
                entry->family = AF_INET;
        else if (inet_pton(AF_INET6, copy, entry->address) == 1)
                entry->family = AF_INET6;
        else
                return -1;
        unsigned max = entry->family == AF_INET ? 32 : 128;
        entry->prefix = max;
        if (slash != NULL) {
                char *end = NULL;
                errno = 0;
                unsigned long prefix = strtoul(slash + 1, &end, 10);
                if (errno != 0 || end == slash + 1 || *end != '\0' || prefix > max)
                        return -1;
                entry->prefix = (unsigned)prefix;
        }
        return 0;
}

/* "host:port" or "[v6]:port". */
static int parse_host_port(const char *text, struct sbx_webhook_allow_entry *entry)
{
        const char *colon = strrchr(text, ':');
        if (colon == NULL || colon == text)
                return -1;
        const char *host = text;
        size_t host_len = (size_t)(colon - text);
        if (host[0] == '[') {
                if (host_len < 3 || host[host_len - 1] != ']')
                        return -1;
                host++;
                host_len -= 2;
        } else if (memchr(host, ':', host_len) != NULL) {
                return -1; /* an IPv6 literal needs its brackets */
        }
        if (host_len == 0 || host_len >= sizeof(entry->host))
                return -1;
        char *end = NULL;
        errno = 0;
        unsigned long port = strtoul(colon + 1, &end, 10);
        if (errno != 0 || end == colon + 1 || *end != '\0' || port == 0 || port > 65535)
                return -1;
        for (size_t i = 0; i < host_len; i++)
                entry->host[i] = (char)tolower((unsigned char)host[i]);
        entry->host[host_len] = '\0';
        entry->port = (unsigned)port;
        return 0;
}

int sbx_webhook_allow_parse(const char *text, struct sbx_webhook_allow *out, struct sbx_error *err)
{
        *out = (struct sbx_webhook_allow){0};
        const char *at = text;
        while (*at != '\0') {
                while (*at == ' ' || *at == '\t' || *at == ',')
                        at++;
                if (*at == '\0')
                        break;
                size_t len = strcspn(at, ", \t");
                char item[300];
                if (len >= sizeof(item))
                        return sbx_error_plain(err, EINVAL, "an entry is too long");
                memcpy(item, at, len);
                item[len] = '\0';
                at += len;
                if (out->n == SBX_WEBHOOK_ALLOW_MAX)
                        return sbx_error_plain(err, EINVAL, "more than %d entries",
                                               SBX_WEBHOOK_ALLOW_MAX);
                struct sbx_webhook_allow_entry *entry = &out->entries[out->n];
                *entry = (struct sbx_webhook_allow_entry){0};
                /* A CIDR block, or a single address; else host:port. */
                bool cidr = strchr(item, '/') != NULL || parse_cidr(item, entry) == 0;
                *entry = (struct sbx_webhook_allow_entry){0};
                if (cidr ? parse_cidr(item, entry) < 0 : parse_host_port(item, entry) < 0)
                        return sbx_error_plain(err, EINVAL,
                                               "'%s' is neither host:port nor a "
                                               "CIDR block",
                                               item);
                out->n++;
        }
        return 0;
}

/* The address's family and bytes; an IPv4-mapped IPv6 address as IPv4. */
static int address_bytes(const struct sockaddr *address, unsigned char bytes[16])
{
        if (address->sa_family == AF_INET) {
                memcpy(bytes, &((const struct sockaddr_in *)address)->sin_addr, 4);
                return AF_INET;
        }
        const struct in6_addr *v6 = &((const struct sockaddr_in6 *)address)->sin6_addr;
        if (IN6_IS_ADDR_V4MAPPED(v6)) {
                memcpy(bytes, &v6->s6_addr[12], 4);
                return AF_INET;
        }
        memcpy(bytes, v6->s6_addr, 16);
        return AF_INET6;
}

bool sbx_webhook_address_allowed(const struct sbx_webhook_allow *allow, const char *host,
                                 unsigned port, const struct sockaddr *address, const char **why)
{
        *why = NULL;
        if (address->sa_family != AF_INET && address->sa_family != AF_INET6) {
                *why = "not an internet address";
                return false;
        }
        unsigned char bytes[16];
        int family = address_bytes(address, bytes);
        for (size_t i = 0; allow != NULL && i < allow->n; i++) {
                const struct sbx_webhook_allow_entry *entry = &allow->entries[i];
                if (entry->cidr ? entry->family == family &&
                                          in_prefix(bytes, entry->address, entry->prefix)
                                : entry->port == port && strcasecmp(entry->host, host) == 0)
                        return true;
        }
        for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++)
                if (refused[i].family == family &&
                    in_prefix(bytes, refused[i].prefix_bytes, refused[i].prefix)) {
                        *why = refused[i].why;
                        return false;
                }
        return true;
}
