/* Capabilities. The sandbox's init ends with none; the program's root keeps a small set over its
 * own user namespace and cannot get any other.
 *
 * Why every step matters for uid 0 in a user namespace: for uid 0 execve() recomputes the
 * capability sets as if every file were fully privileged ("root is special", capabilities(7)):
 * permitted becomes inheritable | bounding. The bounding set is therefore what an exec as the
 * sandbox's root can ever hold, and it is reduced, irreversibly, to the kept set. Ambient
 * capabilities would survive execve for any uid, so they are cleared and
 * SECBIT_NO_CAP_AMBIENT_RAISE (locked) keeps them from being raised again; SECBIT_KEEP_CAPS_LOCKED
 * (off) means a change to another uid always drops every capability, and the NOROOT and
 * NO_SETUID_FIXUP switches are locked off so that the rules stay exactly the host's.
 *
 * What the kept set reaches (capabilities over a user namespace act only on what that namespace
 * owns): CHOWN, DAC_OVERRIDE and FOWNER only on inodes whose owner and group are ids of the
 * sandbox's own range, i.e. its scratch tmpfs and its own processes' /proc files (the host's
 * files are owned by unmapped ids, and bound read-only); SETUID and SETGID only to ids of its
 * range (setgroups stays denied); KILL only inside its pid namespace, whose init ignores what
 * it has no handler for. Nothing of CAP_SYS_ADMIN, CAP_NET_ADMIN, CAP_NET_RAW, CAP_SYS_PTRACE,
 * CAP_MKNOD, CAP_SETFCAP or CAP_SETPCAP: mounts, the network, raw packets, other processes'
 * memory, devices and file capabilities stay out of reach. */
#include "sandbox/native/caps.h"

#include <errno.h>
#include <linux/securebits.h>
#include <stdbool.h>
#include <sys/capability.h>
#include <sys/prctl.h>

#include "util/capability.h"
#include "util/cleanup.h"

/* For init, which ends with nothing: no root privilege on exec, no setuid fix-ups, no ambient
 * raise, all locked. */
#define CAPS_SECUREBITS_NONE                                                                       \
        (SECBIT_KEEP_CAPS_LOCKED /* setuid() can never keep capabilities */ |                      \
         SECBIT_NO_SETUID_FIXUP | SECBIT_NO_SETUID_FIXUP_LOCKED /* uid changes leave the sets */ | \
         SECBIT_NOROOT | SECBIT_NOROOT_LOCKED /* execve as uid 0 grants nothing */ |               \
         SECBIT_NO_CAP_AMBIENT_RAISE | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED)

/* For the program's root: the host's rules, locked (see the top of this file). */
#define CAPS_SECUREBITS_ROOT_SET                                                                   \
        (SECBIT_KEEP_CAPS_LOCKED | SECBIT_NO_SETUID_FIXUP_LOCKED | SECBIT_NOROOT_LOCKED |          \
         SECBIT_NO_CAP_AMBIENT_RAISE | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED)

static const cap_value_t caps_root_set[] = {
        CAP_CHOWN,        /* chown(2) to another id of the sandbox's range */
        CAP_DAC_OVERRIDE, /* root reads and writes its own range's files, whoever owns them */
        CAP_FOWNER,       /* chmod and utimes on them */
        CAP_KILL,         /* signal its own children that run as another id */
        CAP_SETGID,       /* subprocess(group=...) */
        CAP_SETUID,       /* subprocess(user=...) */
};

/* cap_value_t is what util/capability.h takes, an int. */
_Static_assert(sizeof(cap_value_t) == sizeof(int), "cap_value_t is an int");

_Static_assert(((1ULL << CAP_CHOWN) | (1ULL << CAP_DAC_OVERRIDE) | (1ULL << CAP_FOWNER) |
                (1ULL << CAP_KILL) | (1ULL << CAP_SETGID) | (1ULL << CAP_SETUID)) ==
                       CAPS_ROOT_SET_MASK,
               "caps_root_set and CAPS_ROOT_SET_MASK must name the same capabilities");

static void caps_freep(cap_t *caps)
{
        if (*caps != NULL)
                cap_free(*caps);
}

/* securebits first, while CAP_SETPCAP is still held: changing them needs it; the bounding set
 * next (dropping needs CAP_SETPCAP too); then the three sets, which gives CAP_SETPCAP up. */
static int set_caps(unsigned long securebits, const cap_value_t *keep, size_t n_keep,
                    struct sbx_error *err)
{
        if (prctl(PR_SET_SECUREBITS, securebits, 0, 0, 0) < 0)
                return sbx_error_set(err, errno, "caps: lock securebits");
        if (sbx_capability_limit_bounding(keep, n_keep, err) < 0)
                return -1;

        /* cap_init() is the empty set: effective, permitted and inheritable all clear. */
        __attribute__((cleanup(caps_freep))) cap_t caps = cap_init();
        if (caps == NULL)
                return sbx_error_set(err, errno, "caps: allocate a set");
        if (n_keep > 0 && (cap_set_flag(caps, CAP_PERMITTED, (int)n_keep, keep, CAP_SET) < 0 ||
                           cap_set_flag(caps, CAP_EFFECTIVE, (int)n_keep, keep, CAP_SET) < 0))
                return sbx_error_set(err, errno, "caps: build the kept set");
        if (cap_set_proc(caps) < 0)
                return sbx_error_set(err, errno, "caps: set effective/permitted/inheritable");
        return 0;
}

int caps_drop_all(struct sbx_error *err)
{
        return set_caps(CAPS_SECUREBITS_NONE, NULL, 0, err);
}

int caps_limit_to_root_set(struct sbx_error *err)
{
        return set_caps(CAPS_SECUREBITS_ROOT_SET, caps_root_set, SBX_ARRAY_SIZE(caps_root_set),
                        err);
}
