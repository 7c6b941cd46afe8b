/* The sandbox's filesystem, built in the child inside its new user + mount namespaces:
 *
 *   /             tmpfs, read-only once built
 *   /usr          a directory holding read-only, nosuid, nodev binds of the host's /usr/bin,
 *                 include, lib*, libexec, sbin and share; not /usr/local or /usr/src (the host's
 *                 own additions); bin, lib, lib64, sbin: links into it, or read-only binds where
 *                 the host has real directories
 *   /etc          curated: the distribution's files programs read (ld.so.cache, alternatives,
 *                 os-release, debian_version, services, protocols, mime.types, ssl/certs,
 *                 ssl/openssl.cnf, fonts, matplotlibrc, python3*): files up to 16 KiB copied,
 *                 the rest bound read-only, links recreated; plus generated passwd, group,
 *                 nsswitch.conf, hosts, hostname, timezone and localtime (UTC), mtab
 *   /dev          a directory of the root tmpfs with null, zero, full, random, urandom bound
 *                 from the host; a private devpts; ptmx, fd, stdin, stdout, stderr links; shm
 *                 from the scratch tmpfs
 *   /proc         a fresh proc for the new pid namespace, hidepid=invisible, subset=pid
 *   /workspace    } one tmpfs of size disk_bytes shared by the three (the disk cap: the program
 *   /tmp          } sees ENOSPC at the bound), nosuid, nodev
 *   /dev/shm      }
 *   no /sys
 *
 * then pivot_root into it and detach the old root. */
#pragma once

#include <stdint.h>
#include <sys/statfs.h>

#include "util/error.h"

/* Child side: builds the tree above and pivots into it. Must run as root of the new user
 * namespace, inside the new mount namespace and (for /proc) as pid 1 of the new pid namespace.
 * disk_bytes must not be 0 (tmpfs would read it as "unbounded"). Each step is named, and an error
 * starts with the name of the step that failed ("pivot_root: ..."). fail_step names a step to fail
 * on purpose with EPERM (test hook; NULL normally): "mount" (the first step, before anything is
 * mounted), "pivot_root", or one of mount_propagation, mount_scratch_tmpfs, mount_root,
 * mount_runtime, mount_etc, mount_dev, mount_proc, mount_scratch, mount_root_readonly. On failure
 * the tree is half built: the caller must not run the program (the mount namespace goes away with
 * the child). */
int mount_setup_root(uint64_t disk_bytes, const char *fail_step, struct sbx_error *err);

/* The setup step a failure of mount_setup_root() belongs to: "pivot_root" when err came from
 * that step, else "mount" (the steps launch.c and the fail-closed tests name). */
const char *mount_failed_step(const struct sbx_error *err);

/* Child side, after mount_setup_root: statfs of the scratch tmpfs (/workspace). */
int mount_scratch_usage(struct statfs *st, struct sbx_error *err);
