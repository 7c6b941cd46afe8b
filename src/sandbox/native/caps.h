/* Capabilities: the program runs with none, in every set, and can never regain them. */
#pragma once

#include "util/error.h"

/* Child side: locks the securebits (no root privilege on exec, no setuid fix-ups, no ambient
 * raise), then drops every capability from the bounding, ambient, inheritable, permitted and
 * effective sets. */
int caps_drop_all(struct sbx_error *err);

/* Clears the ambient set and empties the bounding set, so that no later exec can gain a
 * capability; needs CAP_SETPCAP. Part of caps_drop_all; also the API process's first step in
 * giving up root. */
int caps_drop_bounding_and_ambient(struct sbx_error *err);
