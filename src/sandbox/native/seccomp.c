/* Loads the seccomp filter. The program itself is generated at build time from seccomp_policy
 * (seccomp_build.c, seccomp_gen.c) into seccomp_filter.c in the build directory. */
#define _GNU_SOURCE
#include "sandbox/native/seccomp.h"

#include <errno.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

int seccomp_apply(enum seccomp_profile profile, struct sbx_error *err)
{
        /* The kernel refuses a filter from a process without CAP_SYS_ADMIN unless it has
         * NO_NEW_PRIVS; the caller set it already, setting it again is harmless. */
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
                return sbx_error_set(err, errno, "seccomp: PR_SET_NO_NEW_PRIVS");
        bool uml = profile == SECCOMP_PROFILE_UML_KERNEL;
        struct sock_fprog program = {
                .len = uml ? seccomp_compiled_length_uml_kernel : seccomp_compiled_length,
                .filter = (struct sock_filter *)(uml ? seccomp_compiled_filter_uml_kernel
                                                     : seccomp_compiled_filter),
        };
        if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &program) < 0)
                return sbx_error_set(err, errno, "seccomp: load filter");
        return 0;
}
