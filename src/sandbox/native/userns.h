/* User namespace: the sandbox's ids 0..SBX_HOST_IDS_PER_SLOT-1 map to a range of unprivileged
 * host uids/gids unique to its slot, never 0 and never shared by two live sandboxes. */
#pragma once

#include <sys/types.h>

#include "sandbox/sandbox.h"
#include "util/error.h"

/* First host uid/gid of the sandbox ranges; slot N maps its ids from SBX_HOST_ID_BASE +
 * N * SBX_HOST_IDS_PER_SLOT on. Far above the ranges Debian and systemd hand out to users and
 * containers. */
#define SBX_HOST_ID_BASE SBX_SANDBOX_HOST_IDS_FIRST

/* Ids per sandbox: 0 (its root) to 65535, so that the ids programs name (1000, nobody's 65534)
 * exist inside and chown(2) and setuid(2) to them work, as a container's subordinate range
 * (subuid(5)) does. */
#define SBX_HOST_IDS_PER_SLOT 65536u

/* Parent side: writes uid_map "0 host_id SBX_HOST_IDS_PER_SLOT", setgroups "deny" and the same
 * gid_map for the child pid (which must be blocked, not yet past its sync point). host_id is the
 * first id of the slot's range. */
int userns_prepare(pid_t pid, unsigned host_id, struct sbx_error *err);

/* Child side, after the maps are written: becomes uid/gid 0 inside the namespace (host_id
 * outside), so that nothing afterwards runs with the parent's host credentials. */
int userns_apply(struct sbx_error *err);
