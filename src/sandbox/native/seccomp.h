/* The seccomp filter: a deny-list over a default-allow policy, loaded last, right before execve.
 * Each rule carries the reason it exists; the table is pure data (seccomp_policy.c) so a unit test
 * can check it. Non-native architectures and x32 system calls kill the process. */
#pragma once

#include <stddef.h>
#include <seccomp.h>
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
};

/* The policy, in table order. */
extern const struct seccomp_rule seccomp_policy[];
extern const size_t seccomp_policy_len;

/* Builds the filter from seccomp_policy without loading it: default allow, each rule's errno,
 * non-native architectures (i386 `int $0x80`) and x32 system call numbers killed. Rows whose
 * syscall name this libseccomp does not know are skipped (logged at debug). On success *out owns
 * the filter (seccomp_release() it); on failure *out is NULL. */
int seccomp_build(scmp_filter_ctx *out, struct sbx_error *err);

/* Parent side: builds the filter once per process and compiles it to BPF, kept for every later
 * sandbox (libseccomp's build and compile cost ~0.3 ms; a forked child then only copies the
 * program). Safe to call again: it compiles once. */
int seccomp_prepare(struct sbx_error *err);

/* Child side, after seccomp_prepare() in the parent: sets NO_NEW_PRIVS and loads the compiled
 * filter. Must be the last step before execve: it would refuse the setup calls after it. */
int seccomp_apply(struct sbx_error *err);
