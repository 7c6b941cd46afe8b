/* A gVisor sandbox's OCI bundle: its config.json (the runtime spec, built with jansson) and its
 * root directory, made by sandboxd for each sandbox. The view is the native backend's
 * (sandbox/view.h): the host's runtime parts bound read-only, nosuid, nodev; a curated /etc with
 * generated accounts; tmpfs of disk_bytes each at /workspace, /tmp and /dev/shm; an empty
 * read-only /sys (runsc would mount its own sysfs); no network but loopback; no capabilities,
 * no_new_privs; the rlimits of the native backend's plan (native/rlimit.h). No cgroupsPath:
 * runsc runs inside the slot's cgroups, which gvisor.c moves it into (runsc 2022-12 given a
 * cgroupsPath makes directories in every v1 hierarchy and never joins the hybrid layout's unified
 * one, where sandboxd reads CPU). */
#pragma once

#include <jansson.h>

#include "sandbox/sandbox.h"
#include "util/error.h"

/* Where the execution's files wait (a read-only bind of a host directory) until the stage
 * script copies them into /workspace and execs the program. */
#define GVISOR_INPUT_PATH "/.sandboxd/input"

/* The stage script: the container's process is /bin/sh -c GVISOR_STAGE_SCRIPT sandboxd-stage
 * ARGV..., which copies the files (modes kept) and execs ARGV in /workspace. */
#define GVISOR_STAGE_SCRIPT "cp -pR " GVISOR_INPUT_PATH "/. /workspace/ && exec \"$@\""

/* Makes the bundle's root directory in rootfs_fd (an empty directory): the mount points, the
 * host's top-level links into /usr, the /etc links and generated files; and returns the runtime
 * spec for spec's execution, its files in the host directory input_dir. NULL on failure. */
json_t *gvisor_bundle(const struct sbx_spec *spec, int rootfs_fd, const char *input_dir,
                      struct sbx_error *err);
