/* Landlock: filesystem access read-only/execute everywhere but /workspace, /tmp, /dev/shm (and
 * writes to the /dev nodes and /dev/pts); where the ABI allows, no TCP bind/connect (ABI 4) and
 * scoped abstract UNIX sockets and signals (ABI 6). */
#pragma once

#include "util/error.h"

/* The kernel's Landlock ABI version, 0 when it has none. The supervisor asks once to warn the
 * operator: the child cannot (its stderr is the program's). */
int landlock_abi_version(void);

/* Child side, after the root is built: restricts this process and its future children.
 * Returns 0 when done or when the kernel has no Landlock (logged, not an error: it is defense in
 * depth behind the mount layout), or -1 on failure. landlock_prepare and landlock_restrict. */
int landlock_apply(struct sbx_error *err);

/* The first half: builds the ruleset (on the root as it is now) into *ruleset, a close-on-exec
 * fd, or -1 when the kernel has no Landlock. Returns the ABI version it was built for (the
 * kernel's, capped at the newest this code knows), 0 without Landlock, -1 on failure. An exec
 * entry's init prepares it before it waits, so that its program only restricts itself. */
int landlock_prepare(int *ruleset, struct sbx_error *err);

/* The second half: restricts this process (and its future children) with ruleset and closes it;
 * a ruleset of -1 (no Landlock) does nothing. */
int landlock_restrict(int ruleset, struct sbx_error *err);
