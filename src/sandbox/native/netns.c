/* Network namespace: the child is already in a fresh one (clone3 CLONE_NEWNET), which holds only
 * a loopback interface, down. */
#define _GNU_SOURCE

#include "sandbox/native/netns.h"

#include <errno.h>
#include <net/if.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include "util/cleanup.h"

static void free_interface_list(struct if_nameindex **list)
{
        if (*list != NULL)
                if_freenameindex(*list);
}

/* Fails unless loopback is the only interface: a sandbox that somehow shares a network namespace
 * with anything (the host's, another sandbox's) must not run. */
static int check_loopback_only(struct sbx_error *err)
{
        __attribute__((cleanup(free_interface_list))) struct if_nameindex *interfaces =
                if_nameindex();
        if (interfaces == NULL)
                return sbx_error_set(err, errno, "netns: list interfaces");
        for (struct if_nameindex *i = interfaces; i->if_index != 0; i++)
                if (strcmp(i->if_name, "lo") != 0)
                        return sbx_error_set(err, EEXIST,
                                             "netns: interface %s exists: not a fresh namespace",
                                             i->if_name);
        return 0;
}

static int bring_loopback_up(struct sbx_error *err)
{
        /* Any socket will do as a handle for the interface ioctls. */
        _cleanup_close_ int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return sbx_error_set(err, errno, "netns: socket");
        struct ifreq request;
        memset(&request, 0, sizeof(request));
        memcpy(request.ifr_name, "lo", sizeof("lo"));
        if (ioctl(fd, SIOCGIFFLAGS, &request) < 0)
                return sbx_error_set(err, errno, "netns: get flags of lo");
        request.ifr_flags |= IFF_UP;
        if (ioctl(fd, SIOCSIFFLAGS, &request) < 0)
                return sbx_error_set(err, errno, "netns: bring lo up");
        return 0;
}

int netns_apply(enum sbx_network network, struct sbx_error *err)
{
        switch (network) {
        case SBX_NETWORK_NONE:
                if (check_loopback_only(err) < 0)
                        return -1;
                return bring_loopback_up(err);
        }
        return sbx_error_set(err, EINVAL, "netns: unknown network policy %d", (int)network);
}
