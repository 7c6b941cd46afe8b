/* Build time: turns seccomp_policy into a BPF program with libseccomp. The build runs
 * seccomp_gen.c, which writes the program into a C array compiled into sandboxd, so the daemon
 * neither links libseccomp nor pays its ~0.3 ms of filter generation per sandbox; the unit tests
 * link this file to check the table and the generator's output.
 *
 * Architectures: the filter holds only the native architecture. Anything else is the "bad
 * architecture" action, KILL_PROCESS: on x86_64 that is `int $0x80` (the i386 ABI, audit arch
 * I386), which would otherwise reach a second system call table no rule looks at. x32 system
 * calls (nr | 0x40000000) arrive with the x86_64 audit arch; libseccomp 2.5.4 handles them for an
 * x86_64-only filter by emitting "nr >= 0x40000000 && nr != -1 -> bad architecture action" right
 * after the arch check, so they too end in KILL_PROCESS. We rely on that rather than adding the
 * x32 arch (which would make x32 a second policy to keep in step); tests/unit/test_seccomp_policy.c
 * checks both with a real SIGSYS, so a libseccomp that stops doing this fails the build. */
#define _GNU_SOURCE
#include "sandbox/native/seccomp_build.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "util/cleanup.h"
#include "util/log.h"

static void seccomp_releasep(scmp_filter_ctx *ctx)
{
        if (*ctx != NULL)
                seccomp_release(*ctx);
}
#define _cleanup_seccomp_ __attribute__((cleanup(seccomp_releasep)))

static int seccomp_add_rule(scmp_filter_ctx ctx, const struct seccomp_rule *rule,
                            struct sbx_error *err)
{
        int nr = seccomp_syscall_resolve_name(rule->syscall);
        if (nr == __NR_SCMP_ERROR) {
                /* An older libseccomp whose table predates the call: nothing to refuse by
                 * number, and the kernel it was built for most likely lacks the call too. */
                sbx_debug("seccomp: skipping unknown syscall %s", rule->syscall);
                return 0;
        }

        struct scmp_arg_cmp cmp = {.arg = rule->arg};
        unsigned n_cmp = 1;
        switch (rule->match) {
        case SECCOMP_MATCH_ALWAYS:
                n_cmp = 0;
                break;
        case SECCOMP_MATCH_ARG_MASKED_EQ:
                cmp.op = SCMP_CMP_MASKED_EQ;
                cmp.datum_a = rule->mask;
                cmp.datum_b = rule->value;
                break;
        case SECCOMP_MATCH_ARG_EQ:
                cmp.op = SCMP_CMP_EQ;
                cmp.datum_a = rule->value;
                break;
        case SECCOMP_MATCH_ARG_GT:
                cmp.op = SCMP_CMP_GT;
                cmp.datum_a = rule->value;
                break;
        default:
                return sbx_error_set(err, EINVAL, "seccomp: rule for %s has an unknown match %d",
                                     rule->syscall, (int)rule->match);
        }

        /* Not the _exact variant: on an architecture without this call (a pseudo-syscall
         * number) libseccomp then drops the rule instead of failing. */
        int rc = seccomp_rule_add_array(ctx, SCMP_ACT_ERRNO((uint32_t)rule->errnum), nr, n_cmp,
                                        n_cmp == 0 ? NULL : &cmp);
        if (rc < 0)
                return sbx_error_set(err, -rc, "seccomp: add rule for %s (arg %u, value %#llx)",
                                     rule->syscall, rule->arg, (unsigned long long)rule->value);
        return 0;
}

int seccomp_build(scmp_filter_ctx *out, enum seccomp_profile profile, struct sbx_error *err)
{
        *out = NULL;
        _cleanup_seccomp_ scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
        if (ctx == NULL)
                return sbx_error_set(err, ENOMEM, "seccomp: init filter");

        int rc = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
        if (rc < 0)
                return sbx_error_set(err, -rc, "seccomp: set bad-architecture action");
        /* Loading without privilege needs NO_NEW_PRIVS; the caller sets it before, this makes
         * the filter safe to load on its own too. */
        rc = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_NNP, 1);
        if (rc < 0)
                return sbx_error_set(err, -rc, "seccomp: set no_new_privs attribute");
        /* Report the kernel's errno from seccomp_load rather than a generic ECANCELED. */
        rc = seccomp_attr_set(ctx, SCMP_FLTATR_API_SYSRAWRC, 1);
        if (rc < 0)
                sbx_debug("seccomp: raw return codes unsupported: %d", rc);
        /* A binary tree over syscall numbers: every allowed call (most of them) would otherwise
         * walk past every rule of the deny-list. Only a cost, so failure is not fatal. */
        rc = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_OPTIMIZE, 2);
        if (rc < 0)
                sbx_debug("seccomp: binary tree optimisation unsupported: %d", rc);

        for (size_t i = 0; i < seccomp_policy_len; i++)
                if (!(profile == SECCOMP_PROFILE_UML_KERNEL &&
                      seccomp_policy[i].uml_kernel_needs) &&
                    seccomp_add_rule(ctx, &seccomp_policy[i], err) < 0)
                        return -1;

        *out = steal_pointer(&ctx);
        return 0;
}

int seccomp_compile(struct sock_filter **program, unsigned short *length,
                    enum seccomp_profile profile, struct sbx_error *err)
{
        _cleanup_seccomp_ scmp_filter_ctx ctx = NULL;
        if (seccomp_build(&ctx, profile, err) < 0)
                return -1;
        /* libseccomp 2.5 exports BPF only to an fd; a memfd keeps it in memory. */
        _cleanup_close_ int fd = memfd_create("sandboxd-seccomp", MFD_CLOEXEC);
        if (fd < 0)
                return sbx_error_set(err, errno, "seccomp: memfd_create");
        int rc = seccomp_export_bpf(ctx, fd);
        if (rc < 0)
                return sbx_error_set(err, -rc, "seccomp: compile filter");
        off_t size = lseek(fd, 0, SEEK_END);
        if (size <= 0 || size % (off_t)sizeof(struct sock_filter) != 0 ||
            size / (off_t)sizeof(struct sock_filter) > BPF_MAXINSNS)
                return sbx_error_set(err, EINVAL, "seccomp: compiled filter has a bad size");
        _cleanup_free_ struct sock_filter *compiled = malloc((size_t)size);
        if (compiled == NULL)
                return sbx_error_set(err, ENOMEM, "seccomp: allocate filter");
        if (pread(fd, compiled, (size_t)size, 0) != size)
                return sbx_error_set(err, errno ? errno : EIO, "seccomp: read compiled filter");
        *length = (unsigned short)(size / (off_t)sizeof(struct sock_filter));
        *program = steal_pointer(&compiled);
        return 0;
}
