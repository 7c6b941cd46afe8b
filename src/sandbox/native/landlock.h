/* Landlock: filesystem access read-only/execute everywhere but /workspace, /tmp, /dev/shm (and
 * writes to the /dev nodes and /dev/pts); where the ABI allows, no TCP bind/connect (ABI 4) and
 * scoped abstract UNIX sockets and signals (ABI 6). */
#pragma once

#include "util/error.h"

/* The kernel's Landlock ABI version, 0 when it has none. The supervisor asks once to warn the
 * operator: the child cannot (its stderr is the program's). */
int landlock_abi_version(void);

/* Child side, after the root is built: restricts this process and its future children.
 * Returns the ABI version applied (the kernel's, capped at the newest this code knows), 0 when the
 * kernel has no Landlock (logged, not an error: it is defense in depth behind the mount layout), or
 * -1 on failure. */
int landlock_apply(struct sbx_error *err);
