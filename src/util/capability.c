#include "util/capability.h"

#include <errno.h>
#include <stdbool.h>
#include <sys/prctl.h>

int sbx_capability_limit_bounding(const int *keep, size_t n_keep, struct sbx_error *err)
{
        if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0)
                return sbx_error_set(err, errno, "caps: clear ambient set");

        /* Up to the kernel's last capability, found by dropping until EINVAL (past the last
         * one): the headers may know fewer, and /proc/sys/kernel/cap_last_cap is not mounted
         * inside the sandbox. One call a capability (this runs in every program's start). */
        unsigned long highest_kept = 0;
        for (size_t i = 0; i < n_keep; i++)
                if ((unsigned long)keep[i] > highest_kept)
                        highest_kept = (unsigned long)keep[i];
        for (unsigned long cap = 0;; cap++) {
                bool kept = false;
                for (size_t i = 0; i < n_keep; i++)
                        kept = kept || (unsigned long)keep[i] == cap;
                if (kept)
                        continue;
                if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0) {
                        /* Kept capabilities exist; past them, EINVAL is the end. */
                        if (errno == EINVAL && cap > highest_kept && cap > 0)
                                break;
                        return sbx_error_set(err, errno, "caps: drop bounding cap %lu", cap);
                }
        }
        return 0;
}
