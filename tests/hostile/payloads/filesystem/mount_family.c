/* Hostile payload (filesystem): every way of changing the mount table, first directly, then from
 * a nested user namespace (the route that would hand the program CAP_SYS_ADMIN over a mount
 * namespace of its own). One JSON line per attempt on stdout. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

static void report(const char *op, long ret, int err)
{
        if (ret < 0)
                printf("{\"op\": \"%s\", \"ret\": %ld, \"errno\": \"%s\"}\n", op, ret,
                       strerrorname_np(err) ? strerrorname_np(err) : "UNKNOWN");
        else
                printf("{\"op\": \"%s\", \"ret\": %ld, \"errno\": null}\n", op, ret);
        fflush(stdout);
}

#define TRY(op, expr)                                                                              \
        do {                                                                                       \
                errno = 0;                                                                         \
                long r_ = (long)(expr);                                                            \
                report((op), r_, errno);                                                           \
        } while (0)

/* Every mount-table change the program could try; `prefix` tells the direct attempts from the
 * ones made after a successful unshare. */
static void attempt_all(const char *prefix)
{
        char op[64];
#define OP(name) (snprintf(op, sizeof(op), "%s%s", prefix, name), op)
        TRY(OP("mount"), mount("none", "/tmp", "tmpfs", 0, "size=1m"));
        TRY(OP("mount"), mount(NULL, "/", NULL, MS_REMOUNT | MS_BIND, NULL));
        TRY(OP("mount"), mount("/workspace", "/usr", NULL, MS_BIND, NULL));
        TRY(OP("mount"), mount("proc", "/tmp", "proc", 0, NULL));
        TRY(OP("umount"), umount2("/proc", MNT_DETACH));
        TRY(OP("umount"), umount2("/usr", 0));
        TRY(OP("pivot_root"), syscall(SYS_pivot_root, "/tmp", "/tmp"));
        long fd;
        errno = 0;
        fd = syscall(SYS_open_tree, AT_FDCWD, "/usr", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
        report(OP("open_tree"), fd, errno);
        if (fd >= 0) {
                TRY(OP("move_mount"), syscall(SYS_move_mount, (int)fd, "", AT_FDCWD, "/tmp",
                                              MOVE_MOUNT_F_EMPTY_PATH));
                close((int)fd);
        }
        /* Without OPEN_TREE_CLONE open_tree is an O_PATH open of a mount: the policy refuses the
         * call whole, so it must fail all the same. */
        errno = 0;
        fd = syscall(SYS_open_tree, AT_FDCWD, "/", OPEN_TREE_CLOEXEC);
        report(OP("open_tree"), fd, errno);
        if (fd >= 0)
                close((int)fd);
        errno = 0;
        fd = syscall(SYS_fsopen, "tmpfs", FSOPEN_CLOEXEC);
        report(OP("fsopen"), fd, errno);
        if (fd >= 0) {
                TRY(OP("fsconfig"),
                    syscall(SYS_fsconfig, (int)fd, FSCONFIG_CMD_CREATE, NULL, NULL, 0));
                errno = 0;
                long mfd = syscall(SYS_fsmount, (int)fd, FSMOUNT_CLOEXEC, 0);
                report(OP("fsmount"), mfd, errno);
                if (mfd >= 0) {
                        TRY(OP("move_mount"), syscall(SYS_move_mount, (int)mfd, "", AT_FDCWD,
                                                      "/tmp", MOVE_MOUNT_F_EMPTY_PATH));
                        close((int)mfd);
                }
                close((int)fd);
        }
        errno = 0;
        fd = syscall(SYS_fspick, AT_FDCWD, "/", FSPICK_CLOEXEC);
        report(OP("fspick"), fd, errno);
        if (fd >= 0)
                close((int)fd);
        struct mount_attr attr = {.attr_clr = MOUNT_ATTR_RDONLY};
        TRY(OP("mount_setattr"),
            syscall(SYS_mount_setattr, AT_FDCWD, "/usr", AT_RECURSIVE, &attr, sizeof(attr)));
        /* Last: a successful chroot would change what the paths above name. */
        TRY(OP("chroot"), chroot("/tmp"));
#undef OP
}

int main(void)
{
        attempt_all("");
        /* The escalation route: a new user namespace owns a new mount namespace, and its creator
         * holds CAP_SYS_ADMIN there. */
        errno = 0;
        long r = unshare(CLONE_NEWUSER | CLONE_NEWNS);
        report("unshare", r, errno);
        if (r == 0)
                attempt_all("nested_");
        return 0;
}
