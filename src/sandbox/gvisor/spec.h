/* A gVisor sandbox's OCI bundle: its config.json (the runtime spec, built with jansson) and its
 * root directory, made by sandboxd for each sandbox. The view is the native backend's
 * (sandbox/view.h): the host's runtime parts bound read-only, nosuid, nodev; a curated /etc with
 * generated accounts; tmpfs of disk_bytes each at /workspace, /tmp and /dev/shm; an empty
 * read-only /sys (runsc would mount its own sysfs); no network but loopback; the native root's
 * capabilities, no_new_privs; the rlimits of the native backend's plan (native/rlimit.h). No
 * cgroupsPath: runsc runs inside the slot's cgroups, which gvisor.c moves it into (runsc 2022-12
 * given a cgroupsPath makes directories in every v1 hierarchy and never joins the hybrid layout's
 * unified one, where sandboxd reads CPU). */
#pragma once

#include <jansson.h>

#include "sandbox/sandbox.h"
#include "util/error.h"

/* The stage script: the container's process is /bin/sh -c GVISOR_STAGE_SCRIPT sandboxd-stage N
 * PATH SIZE FLAG ... E NAME=VALUE ... ARGV..., which writes the N files into /workspace from its
 * stdin, in order (head -c reads exactly SIZE bytes each: the rest of stdin is the program's;
 * FLAG "x" makes one executable), then exports the E variables of the program's environment and
 * runs ARGV there (the shell's own PWD unset) under no_new_privs (runsc 2022-12 does not set it
 * from the spec's noNewPrivileges; its exec honours setuid bits all the same, inside its own
 * kernel: hostile payload setuid_filecaps). The shell and its helpers run with
 * GVISOR_STAGE_ENVIRONMENT only: none of the request's variables (GCONV_PATH, LOCPATH, LC_ALL,
 * ...) reaches mkdir, head or chmod, whose code must be the host's alone while the files come in
 * (gvisor.c's start_cold holds the CPU quota open until then). The shell stays pid 1, the
 * sandbox's init, as the native backend's init is: the program is not pid 1 (kill(-1), ptrace
 * and signals to pid 1 see what they see natively), and when it exits, the shell exits with its
 * status and the sandbox ends with everything it started. While the program runs, the shell's
 * own stderr is /dev/null: its report of a program killed by a signal ("Killed") is not the
 * program's output, which has no such line natively. The program's stderr is set in a subshell
 * that becomes it (exec): dash applies a command's redirections in the shell itself until the
 * command ends, and would report on the program's stderr. */
#define GVISOR_STAGE_SCRIPT                                                                        \
        "n=$1; shift; while [ \"$n\" -gt 0 ]; do "                                                 \
        "case $1 in */*) mkdir -p -- \"${1%/*}\" || exit 125;; esac; "                             \
        "head -c \"$2\" > \"$1\" || exit 125; "                                                    \
        "if [ \"$3\" = x ]; then chmod +x -- \"$1\" || exit 125; fi; "                             \
        "shift 3; n=$((n - 1)); done; "                                                            \
        "e=$1; shift; unset PATH PWD; while [ \"$e\" -gt 0 ]; do "                                 \
        "export \"$1\" || exit 125; shift; e=$((e - 1)); done; "                                   \
        "exec 3>&2 2>/dev/null; "                                                                  \
        "(exec /usr/bin/setpriv --no-new-privs -- \"$@\" 2>&3 3>&-); exit $?"

/* The stage shell's own environment (GVISOR_STAGE_SCRIPT). */
#define GVISOR_STAGE_ENVIRONMENT "PATH=/usr/bin:/bin"

/* The capabilities the sandbox's root keeps, by their OCI names: the native backend's set
 * (native/caps.h, CAPS_ROOT_SET_MASK; a unit test checks they agree), so that chown and
 * subprocess(user=...) work as there. */
#define GVISOR_ROOT_CAPABILITIES 6
extern const char *const gvisor_root_capabilities[GVISOR_ROOT_CAPABILITIES];

/* Makes the bundle's root directory in rootfs_fd (an empty directory): the mount points, the
 * host's top-level links into /usr, the /etc links and generated files; and returns the runtime
 * spec for spec's execution, whose files' bytes come first on its stdin (pool mode, spec->agent:
 * the loader of argv, given the arguments "stdio pid"). An exec entry (spec->exec_on_acquire: a
 * language without a loader, sh's and bash's) runs Python's loader instead, told by "exec" too
 * to execute its execution's argv in its own place (the only way into runsc's sandbox is stdin,
 * which the other backends' init reads instead): the program keeps the loader's pid, which the
 * Wait call is for, its rlimits, files and no_new_privs; its argv, environment and signal
 * dispositions are the execution's, as a cold run's. NULL on failure. */
json_t *gvisor_bundle(const struct sbx_spec *spec, int rootfs_fd, struct sbx_error *err);
