#include "util/capability.h"

#include <errno.h>
#include <stdbool.h>
#include <sys/prctl.h>

int sbx_capability_limit_bounding(const int *keep, size_t n_keep, struct sbx_error *err)
{
        if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0)
                return sbx_error_set(err, errno, "caps: clear ambient set");

        /* Up to the kernel's last capability, found by probing: the headers may know fewer,
         * and /proc/sys/kernel/cap_last_cap is not mounted inside the sandbox. */
        for (unsigned long cap = 0;; cap++) {
                bool kept = false;
                for (size_t i = 0; i < n_keep; i++)
                        kept = kept || (unsigned long)keep[i] == cap;
                /* Probed even when kept: EINVAL means past the last one. PR_CAPBSET_READ
                 * answers that without dropping anything. */
                if (prctl(PR_CAPBSET_READ, cap, 0, 0, 0) < 0) {
                        if (errno == EINVAL && cap > 0)
                                break;
                        return sbx_error_set(err, errno, "caps: read bounding cap %lu", cap);
                }
                if (!kept && prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0)
                        return sbx_error_set(err, errno, "caps: drop bounding cap %lu", cap);
        }
        return 0;
}
