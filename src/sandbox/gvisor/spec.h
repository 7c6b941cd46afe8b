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
 * PATH SIZE FLAG ... E NAME=VALUE ... MODE ARGV..., which writes the N files into /workspace from
 * its stdin, in order (head -c reads exactly SIZE bytes each: the rest of stdin is the program's;
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
 * command ends, and would report on the program's stderr.
 *
 * MODE "-" ends there. Else MODE is a compile stage's artifact path (spec->artifact_path): no fd
 * reaches into runsc's sandbox, so the program's fd 3, where a compile copies its artifact at its
 * end, is stdout itself, and once the program has exited 0 the shell follows it with
 * GVISOR_ARTIFACT_TRAILER_FORMAT, the size of the file at MODE: gvisor.c takes the artifact
 * from the end of stdout. Only the compile's environment (sandboxd's, never the request's) is
 * exported by then. */
#define GVISOR_STAGE_SCRIPT                                                                        \
        "n=$1; shift; while [ \"$n\" -gt 0 ]; do "                                                 \
        "case $1 in */*) mkdir -p -- \"${1%/*}\" || exit 125;; esac; "                             \
        "head -c \"$2\" > \"$1\" || exit 125; "                                                    \
        "if [ \"$3\" = x ]; then chmod +x -- \"$1\" || exit 125; fi; "                             \
        "shift 3; n=$((n - 1)); done; "                                                            \
        "e=$1; shift; unset PATH PWD; while [ \"$e\" -gt 0 ]; do "                                 \
        "export \"$1\" || exit 125; shift; e=$((e - 1)); done; "                                   \
        "m=$1; shift; exec 4>&2 2>/dev/null; "                                                     \
        "if [ \"$m\" = - ]; then (exec /usr/bin/setpriv --no-new-privs -- \"$@\" 2>&4 4>&-); "     \
        "exit $?; fi; "                                                                            \
        "(exec /usr/bin/setpriv --no-new-privs -- \"$@\" 2>&4 4>&- 3>&1); s=$?; "                  \
        "[ \"$s\" -eq 0 ] || exit \"$s\"; "                                                        \
        "printf '" GVISOR_ARTIFACT_TRAILER_FORMAT "' \"$(/usr/bin/wc -c < \"$m\")\" || exit 125"

/* A compile stage's stdout ends with this line (GVISOR_STAGE_SCRIPT): a newline, the marker, the
 * artifact's size in 20 digits, a newline; the artifact's bytes come right before it. */
#define GVISOR_ARTIFACT_MARKER         "SANDBOXD-ARTIFACT "
#define GVISOR_ARTIFACT_TRAILER_FORMAT "\\n" GVISOR_ARTIFACT_MARKER "%020d\\n"
#define GVISOR_ARTIFACT_TRAILER_BYTES  (1 + sizeof(GVISOR_ARTIFACT_MARKER) - 1 + 20 + 1)

/* The stage shell's own environment (GVISOR_STAGE_SCRIPT). */
#define GVISOR_STAGE_ENVIRONMENT "PATH=/usr/bin:/bin"

/* The capabilities the sandbox's root keeps, by their OCI names: the native backend's set
 * (native/caps.h, CAPS_ROOT_SET_MASK; a unit test checks they agree), so that chown and
 * subprocess(user=...) work as there. */
#define GVISOR_ROOT_CAPABILITIES 6
extern const char *const gvisor_root_capabilities[GVISOR_ROOT_CAPABILITIES];

/* A compile stage's stdout (GVISOR_STAGE_SCRIPT, MODE a path) of len bytes: the program's own
 * output, then the artifact, then the trailer. Sets *program (the program's bytes, first) and
 * *size (the artifact's, which follow); -1 when stdout does not end with a trailer whose size
 * fits before it. */
int gvisor_artifact_split(const void *out, size_t len, size_t *program, size_t *size);

/* The bundle's directory for the read-only files' bytes, outside the root: open, and its path on
 * the host (the mounts' source). */
struct gvisor_files {
        int fd;
        const char *path;
};

/* Makes the bundle's root directory in rootfs_fd (an empty directory): the mount points, the
 * host's top-level links into /usr, the /etc links and generated files; and returns the runtime
 * spec for spec's execution, whose files' bytes come first on its stdin (pool mode, spec->agent:
 * the loader of argv, given the arguments "stdio pid"). An exec entry (spec->exec_on_acquire: a
 * language without a loader, sh's and bash's) runs Python's loader instead, told by "exec" too
 * to execute its execution's argv in its own place (the only way into runsc's sandbox is stdin,
 * which the other backends' init reads instead): the program keeps the loader's pid, which the
 * Wait call is for, its rlimits, files and no_new_privs; its argv, environment and signal
 * dispositions are the execution's, as a cold run's. The read-only files' bytes are written into
 * files and bound from there (a pool entry has none). NULL on failure. */
json_t *gvisor_bundle(const struct sbx_spec *spec, int rootfs_fd, const struct gvisor_files *files,
                      struct sbx_error *err);
