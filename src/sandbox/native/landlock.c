/* Landlock: a second, independent answer to "may this program write there?", enforced by the
 * kernel on every path lookup, behind the read-only mount layout.
 *
 * The rights handled are all those the running kernel's ABI knows, so anything not granted below
 * is refused. ABI history (Documentation/userspace-api/landlock.rst, "Previous limitations", and
 * include/uapi/linux/landlock.h):
 *   1 (5.13) filesystem rights EXECUTE .. MAKE_SYM
 *   2 (5.19) REFER: link/rename into another directory (refused outright below ABI 2)
 *   3 (6.2)  TRUNCATE
 *   4 (6.7)  TCP bind/connect (not used: see landlock_apply)
 *   5 (6.10) IOCTL_DEV: ioctl on device files
 *   6 (6.12) scoped abstract UNIX sockets and signals
 *   7 (6.15) audit logging flags (nothing to handle)
 * Debian 12's headers stop at ABI 2, so the newer constants and the grown ruleset attribute are
 * defined here from the kernel's uapi header. */
#define _GNU_SOURCE
#include "sandbox/native/landlock.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/landlock.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "util/cleanup.h"
#include "util/log.h"

#ifndef LANDLOCK_ACCESS_FS_TRUNCATE
#define LANDLOCK_ACCESS_FS_TRUNCATE (1ULL << 14) /* ABI 3 */
#endif
#ifndef LANDLOCK_ACCESS_FS_IOCTL_DEV
#define LANDLOCK_ACCESS_FS_IOCTL_DEV (1ULL << 15) /* ABI 5 */
#endif
#ifndef LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET
#define LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET (1ULL << 0) /* ABI 6 */
#endif
#ifndef LANDLOCK_SCOPE_SIGNAL
#define LANDLOCK_SCOPE_SIGNAL (1ULL << 1) /* ABI 6 */
#endif

/* The highest ABI whose features this file knows; a newer kernel gets this one's rules. */
#define LANDLOCK_ABI_KNOWN 7

/* struct landlock_ruleset_attr as of ABI 6. The kernel reads as many bytes as we say
 * (copy_struct_from_user), so an older kernel is passed only the fields it knows. */
struct landlock_ruleset_attr_v6 {
        uint64_t handled_access_fs;
        uint64_t handled_access_net; /* ABI 4: left 0, TCP is not handled */
        uint64_t scoped;             /* ABI 6 */
};

#define ACCESS_FS_ABI1 ((LANDLOCK_ACCESS_FS_MAKE_SYM << 1) - 1)

/* The rights that make sense on a file (not a directory): anything else is EINVAL there. */
#define ACCESS_FS_FILE                                                                             \
        (LANDLOCK_ACCESS_FS_EXECUTE | LANDLOCK_ACCESS_FS_WRITE_FILE |                              \
         LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_TRUNCATE |                              \
         LANDLOCK_ACCESS_FS_IOCTL_DEV)

#define ACCESS_FS_READ_EXECUTE                                                                     \
        (LANDLOCK_ACCESS_FS_EXECUTE | LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_READ_DIR)

/* Read, write and truncate (bash opens /dev/null with O_TRUNC), and the terminal ioctls. */
#define ACCESS_FS_DEVICE                                                                           \
        (LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_WRITE_FILE |                            \
         LANDLOCK_ACCESS_FS_TRUNCATE | LANDLOCK_ACCESS_FS_IOCTL_DEV)

struct landlock_path_rule {
        const char *path;
        uint64_t access; /* reduced to the handled rights, and to file rights on a non-directory */
};

static const struct landlock_path_rule landlock_path_rules[] = {
        /* The runtime: read and run, nothing else. Rules follow the hierarchy across mounts, so
         * this also covers /usr, /etc, /proc and /dev. */
        {"/", ACCESS_FS_READ_EXECUTE},
        /* The scratch tmpfs: the program's own files, including building and running binaries. */
        {"/workspace", UINT64_MAX},
        {"/tmp", UINT64_MAX},
        {"/dev/shm", UINT64_MAX},
        /* The five device binds and the private devpts (ptmx, opened through the /dev/ptmx link,
         * and its pts): one rule for all, since /dev holds nothing else to open (mount.c builds
         * it: links, and directories on the read-only root) and /dev/shm has its own rule. */
        {"/dev", ACCESS_FS_DEVICE},
};

static int sys_landlock_create_ruleset(const void *attr, size_t size, uint32_t flags)
{
        return (int)syscall(SYS_landlock_create_ruleset, attr, size, flags);
}

static int sys_landlock_add_rule(int ruleset_fd, enum landlock_rule_type type, const void *attr,
                                 uint32_t flags)
{
        return (int)syscall(SYS_landlock_add_rule, ruleset_fd, type, attr, flags);
}

static int sys_landlock_restrict_self(int ruleset_fd, uint32_t flags)
{
        return (int)syscall(SYS_landlock_restrict_self, ruleset_fd, flags);
}

static uint64_t landlock_handled_fs(int abi)
{
        uint64_t access = ACCESS_FS_ABI1;
        if (abi >= 2)
                access |= LANDLOCK_ACCESS_FS_REFER;
        if (abi >= 3)
                access |= LANDLOCK_ACCESS_FS_TRUNCATE;
        if (abi >= 5)
                access |= LANDLOCK_ACCESS_FS_IOCTL_DEV;
        return access;
}

static int landlock_add_path(int ruleset_fd, const struct landlock_path_rule *rule,
                             uint64_t handled_fs, struct sbx_error *err)
{
        _cleanup_close_ int fd = open(rule->path, O_PATH | O_CLOEXEC);
        if (fd < 0) {
                if (errno == ENOENT) {
                        sbx_debug("landlock: %s does not exist, no rule", rule->path);
                        return 0;
                }
                return sbx_error_set(err, errno, "landlock: open %s", rule->path);
        }
        struct stat st;
        if (fstat(fd, &st) < 0)
                return sbx_error_set(err, errno, "landlock: stat %s", rule->path);

        uint64_t access = rule->access & handled_fs;
        if (!S_ISDIR(st.st_mode))
                access &= ACCESS_FS_FILE;
        if (access == 0)
                return 0;

        struct landlock_path_beneath_attr beneath = {.allowed_access = access, .parent_fd = fd};
        if (sys_landlock_add_rule(ruleset_fd, LANDLOCK_RULE_PATH_BENEATH, &beneath, 0) < 0)
                return sbx_error_set(err, errno, "landlock: add rule for %s (access %#llx)",
                                     rule->path, (unsigned long long)access);
        return 0;
}

int landlock_abi_version(void)
{
        int abi = sys_landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION);
        return abi < 0 ? 0 : abi;
}

int landlock_prepare(int *ruleset, struct sbx_error *err)
{
        *ruleset = -1;
        int abi = sys_landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION);
        if (abi < 0) {
                if (errno == ENOSYS || errno == EOPNOTSUPP) {
                        /* ENOSYS: built without Landlock; EOPNOTSUPP: built in but not enabled
                         * at boot (lsm=). The mount layout still holds. */
                        sbx_debug("landlock: not available on this kernel, skipped");
                        return 0;
                }
                return sbx_error_set(err, errno, "landlock: query ABI version");
        }
        if (abi > LANDLOCK_ABI_KNOWN)
                abi = LANDLOCK_ABI_KNOWN;

        struct landlock_ruleset_attr_v6 attr = {.handled_access_fs = landlock_handled_fs(abi)};
        size_t attr_size = offsetof(struct landlock_ruleset_attr_v6, handled_access_net);
        /* TCP (ABI 4) is not handled: the program may bind and connect on its own loopback, as
         * local servers, asyncio, multiprocessing managers and test suites need. The boundary for
         * every IP packet is the network namespace (netns.c: only lo, no route out), the same
         * one that already confined UDP; Landlock's TCP rules could not tell the sandbox's
         * loopback from the host's anyway (they see ports, not namespaces). */
        if (abi >= 6) {
                /* No connecting to abstract UNIX sockets, no signals, to anything outside this
                 * Landlock domain, i.e. outside the program and its descendants. */
                attr.scoped = LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET | LANDLOCK_SCOPE_SIGNAL;
                attr_size = sizeof(attr);
        }

        _cleanup_close_ int ruleset_fd = sys_landlock_create_ruleset(&attr, attr_size, 0);
        if (ruleset_fd < 0)
                return sbx_error_set(err, errno, "landlock: create ruleset (ABI %d)", abi);

        for (size_t i = 0; i < SBX_ARRAY_SIZE(landlock_path_rules); i++)
                if (landlock_add_path(ruleset_fd, &landlock_path_rules[i], attr.handled_access_fs,
                                      err) < 0)
                        return -1;

        *ruleset = ruleset_fd;
        ruleset_fd = -1; /* the caller's now */
        return abi;
}

int landlock_restrict(int ruleset, struct sbx_error *err)
{
        if (ruleset < 0)
                return 0; /* no Landlock on this kernel */
        /* Needs NO_NEW_PRIVS or CAP_SYS_ADMIN in our user namespace; the sandbox's root has the
         * latter at this point, and the caller sets the former right after. */
        int rc = sys_landlock_restrict_self(ruleset, 0);
        int saved = errno;
        close(ruleset);
        if (rc < 0)
                return sbx_error_set(err, saved, "landlock: restrict self");
        return 0;
}

int landlock_apply(struct sbx_error *err)
{
        int ruleset;
        if (landlock_prepare(&ruleset, err) < 0)
                return -1;
        return landlock_restrict(ruleset, err);
}
