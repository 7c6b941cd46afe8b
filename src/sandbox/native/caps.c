/* Capabilities: the sandbox's root ends with none and cannot get any back.
 *
 * Why every step matters for uid 0 in a user namespace: the program keeps running as uid 0
 * there, and for uid 0 execve() recomputes the capability sets as if every file were fully
 * privileged ("root is special", capabilities(7)): permitted becomes inheritable | bounding. So
 * clearing permitted and effective alone would last only until the first execve, which is the
 * very next call. Two independent locks prevent that: SECBIT_NOROOT (locked) switches the root
 * rule off, and the emptied bounding set leaves nothing for it to grant. Ambient capabilities
 * would survive execve too, so they are cleared and SECBIT_NO_CAP_AMBIENT_RAISE (locked) keeps
 * them from being raised again. The capabilities are over the sandbox's own namespaces only, but
 * those include its mounts (remounting the root read-write), its network and the kernel code that
 * only CAP_SYS_ADMIN / CAP_NET_ADMIN reach. */
#include "sandbox/native/caps.h"

#include <errno.h>
#include <linux/securebits.h>
#include <sys/capability.h>
#include <sys/prctl.h>

#define CAPS_SECUREBITS                                                                            \
        (SECBIT_KEEP_CAPS_LOCKED /* setuid() can never keep capabilities */ |                      \
         SECBIT_NO_SETUID_FIXUP | SECBIT_NO_SETUID_FIXUP_LOCKED /* uid changes leave the sets */ | \
         SECBIT_NOROOT | SECBIT_NOROOT_LOCKED /* execve as uid 0 grants nothing */ |               \
         SECBIT_NO_CAP_AMBIENT_RAISE | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED)

static void caps_freep(cap_t *caps)
{
        if (*caps != NULL)
                cap_free(*caps);
}

int caps_drop_bounding_and_ambient(struct sbx_error *err)
{
        if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0)
                return sbx_error_set(err, errno, "caps: clear ambient set");

        /* Up to the kernel's last capability, found by probing: the headers may know fewer,
         * and /proc/sys/kernel/cap_last_cap is not mounted inside the sandbox. */
        for (unsigned long cap = 0;; cap++) {
                /* Dropping an absent cap succeeds; EINVAL means past the last one. */
                if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0) {
                        if (errno == EINVAL && cap > 0)
                                break;
                        return sbx_error_set(err, errno, "caps: drop bounding cap %lu", cap);
                }
        }
        return 0;
}

int caps_drop_all(struct sbx_error *err)
{
        /* First, while CAP_SETPCAP is still held: changing securebits needs it. */
        if (prctl(PR_SET_SECUREBITS, CAPS_SECUREBITS, 0, 0, 0) < 0)
                return sbx_error_set(err, errno, "caps: lock securebits");

        /* Dropping from the bounding set needs CAP_SETPCAP too, so this comes before clearing
         * effective. */
        if (caps_drop_bounding_and_ambient(err) < 0)
                return -1;

        /* cap_init() is the empty set: effective, permitted and inheritable all clear. */
        __attribute__((cleanup(caps_freep))) cap_t empty = cap_init();
        if (empty == NULL)
                return sbx_error_set(err, errno, "caps: allocate empty set");
        if (cap_set_proc(empty) < 0)
                return sbx_error_set(err, errno, "caps: clear effective/permitted/inheritable");
        return 0;
}
