/* Giving up capabilities for good, as both processes do: the sandbox's processes before they
 * exec (sandbox/native/caps.c) and the API process when it drops root (api/main.c). */
#pragma once

#include <stddef.h>

#include "util/error.h"

/* Clears the ambient set and drops from the bounding set every capability not in keep[] (numbers
 * as in linux/capability.h), up to the kernel's last one, so that no later exec can gain one
 * outside keep. Needs CAP_SETPCAP. Error messages begin "caps: ". */
int sbx_capability_limit_bounding(const int *keep, size_t n_keep, struct sbx_error *err);
