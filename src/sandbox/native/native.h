/* The native backend: Linux namespaces + Landlock + capabilities + rlimits + seccomp + cgroups,
 * set up by sandboxd itself (no external runtime). */
#pragma once

#include "sandbox/sandbox.h"

extern const struct sbx_backend sbx_native_backend;
