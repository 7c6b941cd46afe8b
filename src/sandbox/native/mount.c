/* The sandbox's filesystem (see mount.h for the tree). Runs in the child, inside its new user,
 * mount and pid namespaces, before anything of the program exists.
 *
 * The tree is built in a fresh tmpfs mounted on /tmp of the child's private mount namespace (the
 * host's /tmp is untouched: the mount exists only in this namespace), on top of the scratch tmpfs
 * mounted there first (see setup_scratch_tmpfs). The child chdir()s into it so that every target
 * below is a path relative to the new root, while every host source is an absolute path still
 * resolved through the old root. pivot_root then swaps the two and the old root is detached,
 * taking every host mount with it (the scratch tmpfs's own mount too) except the binds made on
 * purpose.
 *
 * Binds of host trees use the new mount API (open_tree + mount_setattr + move_mount): a classic
 * MS_REMOUNT|MS_BIND in a user namespace must restate every flag the host mount has locked (atime,
 * nosuid, ...) or fails with EPERM, whereas mount_setattr only adds the flags asked for.
 *
 * On failure the tree is left half built; the caller must not run the program, and the mount
 * namespace disappears with the child. */
#define _GNU_SOURCE

#include "sandbox/native/mount.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "sandbox/view.h"
#include "util/cleanup.h"
#include "util/file.h"
#include "util/log.h"

/* Where the new root is built. Any directory of the old root would do; /tmp exists everywhere and
 * the mount over it is private to the child's namespace. */
#define MOUNT_NEW_ROOT "/tmp"

/* Host regular files up to this size are copied into the root tmpfs (size=1m) instead of bound.
 * A copy costs its pages twice (filled at setup, freed when the sandbox's tmpfs goes): binding
 * ld.so.cache (42 KB) and mime.types (74 KB) instead of copying them measured 0.13 ms less per
 * sandbox; a file of a page or two (nsswitch.conf) is cheaper copied than bound. */
#define MOUNT_COPY_MAX_BYTES (16 * 1024)

/* Host runtime trees: read-only (the program must not change what other sandboxes run), nosuid (a
 * setuid binary must not gain anything, on top of no_new_privs) and nodev (no host device node in
 * /usr may be opened through them). */
#define MOUNT_RUNTIME_ATTR (MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV)

/* Host device nodes bound into /dev: read-only so that the sandbox cannot chmod, chown or touch
 * the host's inode (writing to the device itself is not affected: the kernel checks a mount's
 * read-only flag for regular files, not for device nodes), nosuid and noexec because nothing
 * there is a program. nodev is obviously absent: the binds exist to be opened as devices. */
#define MOUNT_DEVICE_ATTR (MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC)

struct mount_context {
        uint64_t disk_bytes;
        int scratch_fd; /* the scratch tmpfs's root, under the new root; -1 until mounted */
};

static int make_directory(const char *path, mode_t mode, struct sbx_error *err)
{
        /* Exact modes (01777 for tmp and shm): mount_setup_root clears the umask first. */
        if (mkdir(path, mode) < 0)
                return sbx_error_set(err, errno, "mkdir %s", path);
        return 0;
}

/* An empty regular file, as the mount point of a bound file or device node. */
static int make_mount_point_file(const char *path, struct sbx_error *err)
{
        _cleanup_close_ int fd =
                open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0444);
        if (fd < 0)
                return sbx_error_set(err, errno, "create %s", path);
        return 0;
}

static int write_new_file(const char *path, const char *text, struct sbx_error *err)
{
        _cleanup_close_ int fd =
                open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (fd < 0)
                return sbx_error_set(err, errno, "create %s", path);
        if (sbx_write_all(fd, text, strlen(text)) < 0)
                return sbx_error_set(err, errno, "write %s", path);
        return 0;
}

static int make_symlink(const char *link_target, const char *path, struct sbx_error *err)
{
        if (symlink(link_target, path) < 0)
                return sbx_error_set(err, errno, "symlink %s -> %s", path, link_target);
        return 0;
}

/* Recreates the host's symlink source at path with the same target text. The target is resolved
 * inside the sandbox, so a link can only ever lead to what the sandbox already contains. */
static int copy_symlink(const char *source, const char *path, struct sbx_error *err)
{
        char link_target[PATH_MAX];
        ssize_t n = readlink(source, link_target, sizeof(link_target));
        if (n < 0)
                return sbx_error_set(err, errno, "readlink %s", source);
        if ((size_t)n >= sizeof(link_target))
                return sbx_error_set(err, ENAMETOOLONG, "readlink %s", source);
        link_target[n] = '\0';
        return make_symlink(link_target, path, err);
}

/* Binds source (with everything mounted below it) onto the existing mount point target, adding
 * the MOUNT_ATTR_* flags in attr_set to every mount of the copy. Recursive because a
 * non-recursive copy of a tree with mounts locked below it is refused (EINVAL) in a user
 * namespace, and because a host submount must not show through as a hole in the read-only copy. */
static int bind_tree(const char *source, const char *target, uint64_t attr_set,
                     struct sbx_error *err)
{
        /* AT_SYMLINK_NOFOLLOW: callers looked at the source with lstat(); a link swapped in since
         * must not redirect the bind. */
        _cleanup_close_ int tree =
                open_tree(AT_FDCWD, source,
                          OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE | AT_SYMLINK_NOFOLLOW);
        if (tree < 0)
                return sbx_error_set(err, errno, "open_tree %s", source);
        if (attr_set != 0) {
                struct mount_attr attr = {.attr_set = attr_set};
                if (mount_setattr(tree, "", AT_EMPTY_PATH | AT_RECURSIVE, &attr, sizeof(attr)) < 0)
                        return sbx_error_set(err, errno, "mount_setattr %s", source);
        }
        if (move_mount(tree, "", AT_FDCWD, target, MOVE_MOUNT_F_EMPTY_PATH) < 0)
                return sbx_error_set(err, errno, "move_mount %s onto %s", source, target);
        return 0;
}

/* Makes the one mount at path read-only, leaving the flags of the mounts below it alone. */
static int make_mount_readonly(const char *path, struct sbx_error *err)
{
        struct mount_attr attr = {.attr_set = MOUNT_ATTR_RDONLY};
        if (mount_setattr(AT_FDCWD, path, 0, &attr, sizeof(attr)) < 0)
                return sbx_error_set(err, errno, "mount_setattr read-only %s", path);
        return 0;
}

/* Copies a small host file into the root tmpfs (read-only once built). */
static int copy_small_file(const char *source, const char *path, struct sbx_error *err)
{
        _cleanup_close_ int in = open(source, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (in < 0)
                return sbx_error_set(err, errno, "open %s", source);
        _cleanup_close_ int out =
                open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (out < 0)
                return sbx_error_set(err, errno, "create %s", path);
        /* One page: the files copied are small, and every page of a larger frame would be
         * touched on entry (stack-clash probing), a page fault each in a fresh init. */
        char buffer[4096];
        size_t total = 0;
        for (;;) {
                ssize_t n = read(in, buffer, sizeof(buffer));
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        return sbx_error_set(err, errno, "read %s", source);
                }
                if (n == 0)
                        return 0;
                total += (size_t)n;
                /* The file grew past the bound since lstat(): the root tmpfs is small. */
                if (total > MOUNT_COPY_MAX_BYTES)
                        return sbx_error_set(err, EFBIG, "%s grew while being copied", source);
                if (sbx_write_all(out, buffer, (size_t)n) < 0)
                        return sbx_error_set(err, errno, "write %s", path);
        }
}

/* Recreates the host entry source at path: a symlink as the same symlink, a small regular file
 * as a copy, a directory or larger file bound read-only; an absent entry is skipped (hosts differ:
 * no lib32, no python3.12...). Anything else (a socket, a device) is refused: binding one would
 * hand the sandbox a channel to the host. */
static int mirror_host_entry(const char *source, const char *path, struct sbx_error *err)
{
        struct stat st;
        if (lstat(source, &st) < 0) {
                if (errno == ENOENT)
                        return 0;
                return sbx_error_set(err, errno, "lstat %s", source);
        }
        if (S_ISLNK(st.st_mode))
                return copy_symlink(source, path, err);
        if (S_ISDIR(st.st_mode)) {
                if (make_directory(path, 0755, err) < 0)
                        return -1;
        } else if (S_ISREG(st.st_mode)) {
                if (st.st_size <= MOUNT_COPY_MAX_BYTES)
                        return copy_small_file(source, path, err);
                if (make_mount_point_file(path, err) < 0)
                        return -1;
        } else {
                return sbx_error_set(err, EINVAL, "%s is neither a file, a directory nor a link",
                                     source);
        }
        return bind_tree(source, path, MOUNT_RUNTIME_ATTR, err);
}

/* Step: mount propagation. First, because until the whole namespace is private every mount below
 * could propagate to a shared peer (a host with systemd mounts / shared), and host mounts made
 * later under /usr would propagate into the sandbox. pivot_root also refuses a shared parent. */
static int setup_private_propagation(struct mount_context *context, struct sbx_error *err)
{
        if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
                return sbx_error_set(err, errno, "make / private");
        return 0;
}

/* Step: the new root, a small tmpfs that only holds mount points, links and the generated /etc
 * files; 1 MiB and 4096 inodes are far more than that and bound what a bug could pin in kernel
 * memory. nosuid, nodev, noexec: nothing in it is a program or a device (programs run from the
 * /usr bind and /workspace, which are mounts of their own with their own flags). */
static int setup_root_tmpfs(struct mount_context *context, struct sbx_error *err)
{
        if (mount("tmpfs", MOUNT_NEW_ROOT, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
                  "size=1m,nr_inodes=4096,mode=0755") < 0)
                return sbx_error_set(err, errno, "mount tmpfs on %s", MOUNT_NEW_ROOT);
        /* From here on targets are relative to the new root; pivot_root(".", ".") relies on it. */
        if (chdir(MOUNT_NEW_ROOT) < 0)
                return sbx_error_set(err, errno, "chdir %s", MOUNT_NEW_ROOT);
        return 0;
}

/* Step: the runtime. /usr is a directory of the root tmpfs holding a read-only bind of each part
 * of the host's /usr a program runs from (FHS 4.1-4.8, games aside); left out are /usr/local, the
 * host's own installs (cloud SDKs, docker, admin tools, their credentials' helpers), /usr/src (the
 * host's kernel headers and build trees) and anything a host added beside the standard parts. bin
 * and lib are required; the top-level aliases are whatever the host has: merged-/usr hosts have
 * links (bin -> usr/bin), older ones real directories. */
static int setup_runtime(struct mount_context *context, struct sbx_error *err)
{
        for (size_t i = 0; i < sbx_view_n_usr_required; i++) {
                const char *required = sbx_view_usr_required[i];
                struct stat st;
                if (lstat(required, &st) < 0)
                        return sbx_error_set(err, errno, "lstat %s", required);
                if (!S_ISDIR(st.st_mode))
                        return sbx_error_set(err, ENOTDIR, "%s is not a directory", required);
        }
        if (make_directory("usr", 0755, err) < 0)
                return -1;
        for (size_t i = 0; i < sbx_view_n_usr_parts; i++) {
                char source[32];
                char path[32];
                snprintf(source, sizeof(source), "/usr/%s", sbx_view_usr_parts[i]);
                snprintf(path, sizeof(path), "usr/%s", sbx_view_usr_parts[i]);
                if (mirror_host_entry(source, path, err) < 0)
                        return -1;
        }
        for (size_t i = 0; i < sbx_view_n_aliases; i++) {
                char source[32];
                snprintf(source, sizeof(source), "/%s", sbx_view_aliases[i]);
                if (mirror_host_entry(source, sbx_view_aliases[i], err) < 0)
                        return -1;
        }
        return 0;
}

/* One /etc entry of the view (sandbox/view.h), mirrored from the host. */
static int mirror_etc_entry(const char *name, void *ctx, struct sbx_error *err)
{
        (void)ctx;
        char source[PATH_MAX];
        char path[PATH_MAX];
        snprintf(source, sizeof(source), "/etc/%s", name);
        snprintf(path, sizeof(path), "etc/%s", name);
        return mirror_host_entry(source, path, err);
}

/* Step: /etc, curated: what the dynamic loader, libc and the interpreters and libraries programs
 * use read from it, taken from the distribution's files; never the host's accounts, secrets
 * (shadow, ssl/private), machine identity (machine-id, hostname, resolv.conf) or daemon
 * configuration. What would describe the host (the clock's zone, the name service switch, the
 * accounts) is generated to describe the sandbox instead. */
static int setup_etc(struct mount_context *context, struct sbx_error *err)
{
        /* The distribution's files: small ones copied, larger ones and directories bound (each
         * bind costs setup time). */
        if (make_directory("etc", 0755, err) < 0)
                return -1;
        if (make_directory("etc/ssl", 0755, err) < 0)
                return -1;
        if (sbx_view_each_etc_entry(mirror_etc_entry, NULL, err) < 0)
                return -1;
        for (size_t i = 0; i < sbx_view_n_etc_generated; i++)
                if (write_new_file(sbx_view_etc_generated[i].path, sbx_view_etc_generated[i].text,
                                   err) < 0)
                        return -1;
        for (size_t i = 0; i < sbx_view_n_etc_links; i++)
                if (make_symlink(sbx_view_etc_links[i].target, sbx_view_etc_links[i].path, err) < 0)
                        return -1;
        return 0;
}

/* Step: /dev. Device nodes cannot be created in a user namespace (mknod is EPERM), so the five
 * harmless ones are bound from the host onto empty files. /dev itself is a directory of the root
 * tmpfs, read-only with it at the end (nothing can be added to it: a link, a FIFO); /dev/pts and
 * /dev/shm are mounts of their own and keep their own flags. */
static int setup_dev(struct mount_context *context, struct sbx_error *err)
{
        static const char *const devices[] = {"null", "zero", "full", "random", "urandom"};
        static const struct {
                const char *path;
                const char *target;
        } links[] = {
                {"dev/fd", "/proc/self/fd"},       {"dev/stdin", "/proc/self/fd/0"},
                {"dev/stdout", "/proc/self/fd/1"}, {"dev/stderr", "/proc/self/fd/2"},
                {"dev/ptmx", "pts/ptmx"}, /* the private devpts instance's multiplexer */
        };

        if (make_directory("dev", 0755, err) < 0)
                return -1;
        for (size_t i = 0; i < SBX_ARRAY_SIZE(devices); i++) {
                char source[32];
                char path[32];
                snprintf(source, sizeof(source), "/dev/%s", devices[i]);
                snprintf(path, sizeof(path), "dev/%s", devices[i]);
                struct stat st;
                if (lstat(source, &st) < 0)
                        return sbx_error_set(err, errno, "lstat %s", source);
                /* The host's /dev is trusted, but a bind of anything but a character device
                 * under these names would not be the device the program expects. */
                if (!S_ISCHR(st.st_mode))
                        return sbx_error_set(err, ENODEV, "%s is not a character device", source);
                if (make_mount_point_file(path, err) < 0)
                        return -1;
                /* A mount of its own, so the root tmpfs's nodev does not apply to it. */
                if (bind_tree(source, path, MOUNT_DEVICE_ATTR, err) < 0)
                        return -1;
        }
        for (size_t i = 0; i < SBX_ARRAY_SIZE(links); i++)
                if (make_symlink(links[i].target, links[i].path, err) < 0)
                        return -1;
        if (make_directory("dev/pts", 0755, err) < 0)
                return -1;
        if (make_directory("dev/shm", 01777, err) < 0)
                return -1;
        /* A new devpts instance, so that the program sees only its own terminals. ptmxmode=0666
         * lets any uid open the multiplexer; mode=0620 for the slaves as usual; no gid= (the tty
         * group is not mapped in the user namespace). nosuid, noexec: terminals only. */
        if (mount("devpts", "dev/pts", "devpts", MS_NOSUID | MS_NOEXEC,
                  /* max: every devpts instance draws from one host-wide pool of ptys
                   * (kernel.pty.max); without a bound one sandbox could take them all. */
                  "newinstance,ptmxmode=0666,mode=0620,max=64") < 0)
                return sbx_error_set(err, errno, "mount devpts on /dev/pts");
        return 0;
}

/* Step: /proc. Mounted before pivot_root: in a user namespace the kernel only allows a new proc
 * while a fully visible one is in the mount namespace (the host's, until the old root goes).
 * hidepid=invisible hides processes the program may not ptrace (the sandbox's pid 1 after it
 * dropped to non-dumpable); subset=pid removes everything that is not a process (kallsyms,
 * sysrq-trigger, sys/, ...). nosuid, nodev, noexec: proc holds none of those. */
static int setup_proc(struct mount_context *context, struct sbx_error *err)
{
        const unsigned long flags = MS_NOSUID | MS_NODEV | MS_NOEXEC;

        if (make_directory("proc", 0555, err) < 0)
                return -1;
        if (mount("proc", "proc", "proc", flags, "hidepid=invisible,subset=pid") == 0)
                return 0;
        if (errno != EINVAL)
                return sbx_error_set(err, errno, "mount proc");
        /* Kernels before 5.8 know neither "invisible" nor subset=pid: still hide other processes,
         * but the sandbox then sees the rest of /proc. */
        sbx_warn("mount: proc refused hidepid=invisible,subset=pid, falling back to hidepid=2");
        if (mount("proc", "proc", "proc", flags, "hidepid=2") < 0)
                return sbx_error_set(err, errno, "mount proc with hidepid=2");
        return 0;
}

/* Step: the scratch space, part one. One tmpfs of disk_bytes behind /workspace, /tmp and /dev/shm,
 * so the three share one budget: the program sees ENOSPC at the bound whichever it fills.
 * nr_inodes is bounded because size= only counts data pages: without it, empty files would each
 * pin an inode and a dentry (about 1 KiB of kernel memory) up to the default of half the RAM's
 * pages; 16384 is plenty for a program's files and caps that at ~16 MiB. nosuid, nodev: files the
 * program writes must never be setuid or devices; exec stays allowed (the program itself lives in
 * /workspace).
 *
 * Mounted first, on the old root's MOUNT_NEW_ROOT, so that the new root covers it: only the three
 * binds (setup_scratch_binds) reach it from the sandbox, and the mount itself leaves with the old
 * root when that is detached. Unmounting it on its own would cost an RCU grace period (~0.1 ms
 * here) of its own: every umount waits for one. */
static int setup_scratch_tmpfs(struct mount_context *context, struct sbx_error *err)
{
        char options[96];
        snprintf(options, sizeof(options), "size=%" PRIu64 ",nr_inodes=16384,mode=0755",
                 context->disk_bytes);
        if (mount("tmpfs", MOUNT_NEW_ROOT, "tmpfs", MS_NOSUID | MS_NODEV, options) < 0)
                return sbx_error_set(err, errno, "mount tmpfs (%s)", options);
        context->scratch_fd = open(MOUNT_NEW_ROOT, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (context->scratch_fd < 0)
                return sbx_error_set(err, errno, "open the scratch tmpfs");
        if (mkdirat(context->scratch_fd, "workspace", 0755) < 0 ||
            mkdirat(context->scratch_fd, "tmp", 01777) < 0 ||
            mkdirat(context->scratch_fd, "shm", 01777) < 0)
                return sbx_error_set(err, errno, "mkdir in the scratch tmpfs");
        return 0;
}

/* Step: the scratch space, part two: its three directories bound to their places. */
static int setup_scratch_binds(struct mount_context *context, struct sbx_error *err)
{
        static const struct {
                const char *source;
                const char *target;
        } binds[] = {
                {"workspace", "workspace"},
                {"tmp", "tmp"},
                {"shm", "dev/shm"},
        };

        if (make_directory("workspace", 0755, err) < 0 || make_directory("tmp", 0755, err) < 0)
                return -1;
        for (size_t i = 0; i < SBX_ARRAY_SIZE(binds); i++) {
                /* No extra flags: the binds keep the tmpfs's nosuid and nodev. */
                _cleanup_close_ int tree = open_tree(context->scratch_fd, binds[i].source,
                                                     OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
                if (tree < 0)
                        return sbx_error_set(err, errno, "open_tree scratch/%s", binds[i].source);
                if (move_mount(tree, "", AT_FDCWD, binds[i].target, MOVE_MOUNT_F_EMPTY_PATH) < 0)
                        return sbx_error_set(err, errno, "move_mount scratch/%s onto %s",
                                             binds[i].source, binds[i].target);
        }
        close(context->scratch_fd);
        context->scratch_fd = -1;
        return 0;
}

/* Step: pivot_root. After every bind of a host path (they resolve through the old root) and after
 * /proc (see setup_proc). pivot_root(".", ".") stacks the old root on top of the new one at "/";
 * detaching it removes every host mount from the namespace in one go. No directory for the old
 * root is needed, so none is left behind. */
static int setup_pivot_root(struct mount_context *context, struct sbx_error *err)
{
        if (syscall(SYS_pivot_root, ".", ".") < 0)
                return sbx_error_set(err, errno, "pivot_root");
        if (umount2(".", MNT_DETACH) < 0)
                return sbx_error_set(err, errno, "detach the old root");
        /* The cwd may still reference the old root's stacking; settle on the new root. */
        if (chdir("/") < 0)
                return sbx_error_set(err, errno, "chdir /");
        return 0;
}

/* Step: the root read-only. Last, because the steps before write into it (mount points, /etc
 * files, the scratch dir's removal). Non-recursive: /workspace, /tmp, /dev/pts ... keep their
 * own flags. */
static int setup_root_readonly(struct mount_context *context, struct sbx_error *err)
{
        return make_mount_readonly("/", err);
}

struct mount_step {
        const char *name; /* what fail_step matches, and the prefix of an error */
        int (*run)(struct mount_context *context, struct sbx_error *err);
};

/* In this order; each step's comment says why it sits where it does. */
static const struct mount_step mount_steps[] = {
        {"mount_propagation", setup_private_propagation},
        {"mount_scratch_tmpfs", setup_scratch_tmpfs},
        {"mount_root", setup_root_tmpfs},
        {"mount_runtime", setup_runtime},
        {"mount_etc", setup_etc},
        {"mount_dev", setup_dev},
        {"mount_proc", setup_proc},
        {"mount_scratch", setup_scratch_binds},
        {"pivot_root", setup_pivot_root},
        {"mount_root_readonly", setup_root_readonly},
};

/* "mount" names the tree building as a whole (the launcher's step list): it fails the first
 * step, before anything is mounted. */
static bool step_forced(size_t index, const char *fail_step)
{
        if (fail_step == NULL)
                return false;
        if (strcmp(fail_step, mount_steps[index].name) == 0)
                return true;
        return index == 0 && strcmp(fail_step, "mount") == 0;
}

int mount_setup_root(uint64_t disk_bytes, const char *fail_step, struct sbx_error *err)
{
        struct mount_context context = {.disk_bytes = disk_bytes, .scratch_fd = -1};

        /* Checked before anything is mounted: tmpfs reads size=0 as "no limit". */
        if (disk_bytes == 0)
                return sbx_error_set(err, EINVAL,
                                     "mount: disk_bytes is 0, the scratch would be "
                                     "unbounded");

        /* Directory modes must be exact (01777 for tmp and shm) without a chmod after every
         * mkdir; the program later gets the usual 022 back. */
        mode_t saved_umask = umask(0);
        int rc = 0;
        for (size_t i = 0; i < SBX_ARRAY_SIZE(mount_steps) && rc == 0; i++) {
                if (step_forced(i, fail_step))
                        rc = sbx_error_set(err, EPERM,
                                           "%s: forced to fail by the test hook (fail_step %s)",
                                           mount_steps[i].name, fail_step);
                else if (mount_steps[i].run(&context, err) < 0)
                        rc = sbx_error_prefix(err, "%s", mount_steps[i].name);
        }
        if (context.scratch_fd >= 0)
                close(context.scratch_fd);
        umask(saved_umask);
        return rc;
}

const char *mount_failed_step(const struct sbx_error *err)
{
        /* Every error of a step starts with that step's name (mount_setup_root prefixes it). */
        static const char pivot[] = "pivot_root:";
        return strncmp(err->message, pivot, sizeof(pivot) - 1) == 0 ? "pivot_root" : "mount";
}

int mount_scratch_usage(struct statfs *st, struct sbx_error *err)
{
        if (statfs("/workspace", st) < 0)
                return sbx_error_set(err, errno, "statfs /workspace");
        return 0;
}
