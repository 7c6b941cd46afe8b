/* The native backend: Linux namespaces + Landlock + capabilities + rlimits + seccomp + cgroups,
 * set up by sandboxd itself (no external runtime). */
#pragma once

#include "sandbox/sandbox.h"

extern const struct sbx_backend sbx_native_backend;

/* The uml backend's pool entries (uml/uml.c), whose program, the UML kernel, speaks a protocol of
 * its own on the agent channel: a started pool-mode sandbox takes request as the spec it runs from
 * now (wait reads its deadline, output cap, stdin, cancel and streaming), its limits on its
 * cgroup and as the program's rlimits (prlimit, as a loader's), and counts its evidence from
 * now; nothing is sent. *agent_fd: the channel, still the
 * sandbox's (destroy closes it). */
int sbx_native_take(struct sbx_sandbox *sandbox, const struct sbx_spec *request, int *agent_fd,
                    struct sbx_error *err);
