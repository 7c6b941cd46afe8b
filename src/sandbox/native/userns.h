/* User namespace: the sandbox's root maps to one host uid/gid unique to its slot, never 0 and never
 * shared by two live sandboxes. */
#pragma once

#include <sys/types.h>

#include "util/error.h"

/* First host uid/gid of the sandbox range; slot N uses SBX_HOST_ID_BASE + N. Far above the ranges
 * Debian and systemd hand out to users and containers. */
#define SBX_HOST_ID_BASE 2000000000u

/* Parent side: writes uid_map "0 host_id 1", setgroups "deny" and gid_map "0 host_id 1" for
 * the child pid (which must be blocked, not yet past its sync point). */
int userns_prepare(pid_t pid, unsigned host_id, struct sbx_error *err);

/* Child side, after the maps are written: becomes uid/gid 0 inside the namespace (host_id
 * outside), so that nothing afterwards runs with the parent's host credentials. */
int userns_apply(struct sbx_error *err);
