/* The seccomp filter: a deny-list over a default-allow policy, loaded last, right before execve.
 * Each rule carries the reason it exists; the table is pure data (seccomp_policy.c) so a unit test
 * can check it. Non-native architectures and x32 system calls kill the process. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stdint.h>

#include "util/error.h"

enum seccomp_match {
        SECCOMP_MATCH_ALWAYS,        /* the syscall is refused whatever its arguments */
        SECCOMP_MATCH_ARG_MASKED_EQ, /* refused when (arg[arg] & mask) == value */
        SECCOMP_MATCH_ARG_EQ,        /* refused when arg[arg] == value */
        SECCOMP_MATCH_ARG_GT,        /* refused when arg[arg] > value */
};

struct seccomp_rule {
        const char *syscall; /* name as libseccomp knows it */
        int errnum;          /* errno returned to the caller */
        enum seccomp_match match;
        unsigned arg;
        uint64_t mask;
        uint64_t value;
        const char *reason; /* why the sandbox refuses this */
        /* Left out of the UML kernel's filter: the uml backend's user-mode-linux kernel needs it
         * to run its guest's processes (it traces them: they are its own, in its sandbox). */
        bool uml_kernel_needs;
};

/* Which filter a sandbox's program gets: every row, or the rows a UML kernel can run under. */
enum seccomp_profile {
        SECCOMP_PROFILE_PROGRAM,
        SECCOMP_PROFILE_UML_KERNEL,
};

/* The policy, in table order. */
extern const struct seccomp_rule seccomp_policy[];
extern const size_t seccomp_policy_len;

/* The BPF programs compiled from seccomp_policy at build time (seccomp_filter.c, generated), one
 * per profile. */
extern const struct sock_filter seccomp_compiled_filter[];
extern const unsigned short seccomp_compiled_length;
extern const struct sock_filter seccomp_compiled_filter_uml_kernel[];
extern const unsigned short seccomp_compiled_length_uml_kernel;

/* Child side: sets NO_NEW_PRIVS and loads the compiled filter. Must be the last step before
 * execve: it would refuse the setup calls after it. */
int seccomp_apply(enum seccomp_profile profile, struct sbx_error *err);
