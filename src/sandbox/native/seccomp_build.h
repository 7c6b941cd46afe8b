/* Build time: the policy table to a BPF program, with libseccomp. Used by the generator
 * (seccomp_gen.c) and the unit tests; sandboxd itself links only the generated program. */
#pragma once

#include <linux/filter.h>
#include <seccomp.h>

#include "sandbox/native/seccomp.h"
#include "util/error.h"

/* Builds the filter from seccomp_policy without loading it: default allow, each rule's errno,
 * non-native architectures (i386 `int $0x80`) and x32 system call numbers killed. Rows whose
 * syscall name this libseccomp does not know are skipped (logged at debug). On success *out owns
 * the filter (seccomp_release() it); on failure *out is NULL. */
int seccomp_build(scmp_filter_ctx *out, enum seccomp_profile profile, struct sbx_error *err);

/* Builds and compiles the filter; *program is malloc'd (*length instructions). */
int seccomp_compile(struct sock_filter **program, unsigned short *length,
                    enum seccomp_profile profile, struct sbx_error *err);
