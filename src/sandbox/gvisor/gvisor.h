/* The gVisor backend: the program runs on gVisor's user-space kernel (runsc's sentry), so its
 * system calls never reach the host kernel; runsc itself runs in the sandbox's cgroups. */
#pragma once

#include "sandbox/sandbox.h"

extern const struct sbx_backend sbx_gvisor_backend;

/* runsc's --platform for every sandbox this process starts from now on (a static string:
 * ptrace, systrap or kvm; ptrace until set). */
void sbx_gvisor_set_platform(const char *platform);
