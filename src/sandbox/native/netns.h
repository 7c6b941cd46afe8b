/* Network namespace: the sandbox gets a fresh one (clone3 CLONE_NEWNET) with only loopback. */
#pragma once

#include "sandbox/sandbox.h"
#include "util/error.h"

/* Child side: brings loopback up, so that the program can talk to itself; nothing else exists. */
int netns_apply(enum sbx_network network, struct sbx_error *err);
