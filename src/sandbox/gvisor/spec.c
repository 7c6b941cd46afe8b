/* The OCI bundle of a gVisor sandbox (spec.h). The mount points and links are made in the bundle's
 * root directory on the host, which runsc mounts read-only; everything the program may write is a
 * tmpfs inside the sandbox (gVisor's own, in the sentry's memory, so it counts toward the memory
 * cap as well as its size). */
#define _GNU_SOURCE
#include "sandbox/gvisor/spec.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model/language.h"
#include "sandbox/agent.h"
#include "sandbox/native/rlimit.h"
#include "sandbox/view.h"
#include "util/cleanup.h"
#include "util/file.h"

/* Host trees in the sandbox: read-only (what other sandboxes run), nosuid and nodev, as the native
 * backend's binds. */
static json_t *bind_options(void)
{
        return json_pack("[s,s,s,s]", "rbind", "ro", "nosuid", "nodev");
}

static int add_mount(json_t *mounts, const char *destination, const char *type, const char *source,
                     json_t *options, struct sbx_error *err)
{
        json_t *mount = json_pack("{s:s,s:s,s:s,s:o}", "destination", destination, "type", type,
                                  "source", source, "options", options);
        if (mount == NULL || json_array_append_new(mounts, mount) < 0)
                return sbx_error_set(err, ENOMEM, "gvisor spec: a mount");
        return 0;
}

/* A tmpfs of size bytes: the program sees ENOSPC past it. */
static int add_tmpfs(json_t *mounts, const char *destination, uint64_t size, const char *mode,
                     struct sbx_error *err)
{
        char size_option[48];
        snprintf(size_option, sizeof(size_option), "size=%llu", (unsigned long long)size);
        char mode_option[16];
        snprintf(mode_option, sizeof(mode_option), "mode=%s", mode);
        return add_mount(mounts, destination, "tmpfs", "tmpfs",
                         json_pack("[s,s,s,s]", size_option, mode_option, "nosuid", "nodev"), err);
}

static int make_directory_at(int dirfd, const char *path, struct sbx_error *err)
{
        if (mkdirat(dirfd, path, 0755) < 0 && errno != EEXIST)
                return sbx_error_set(err, errno, "gvisor rootfs: mkdir %s", path);
        return 0;
}

/* A host file up to this size is copied into the root rather than bound (mirror_host_entry): each
 * bind is a mount the gofer serves, ~3 ms of every sandbox's start (/etc's seven files: 288 ms
 * against 312 for `runsc run` of /bin/true, medians of 10), and a copy made for each sandbox is
 * as current as a bind made for it (a bind holds the inode the host had then, too). */
#define MIRROR_COPY_MAX_BYTES (1 << 20)

/* Copies the host file source into fd (its copy in the root), opened without following a link
 * swapped in since the caller's lstat. */
static int copy_host_file(const char *source, int fd, struct sbx_error *err)
{
        _cleanup_close_ int source_fd = open(source, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        struct stat st;
        if (source_fd < 0 || fstat(source_fd, &st) < 0 || !S_ISREG(st.st_mode))
                return sbx_error_set(err, source_fd < 0 ? errno : EINVAL, "gvisor rootfs: open %s",
                                     source);
        off_t offset = 0;
        while (offset < st.st_size) {
                ssize_t n = sendfile(fd, source_fd, &offset, (size_t)(st.st_size - offset));
                if (n == 0)
                        break; /* the file shrank while copied: what was read is kept */
                if (n < 0 && errno != EINTR)
                        return sbx_error_set(err, errno, "gvisor rootfs: copy %s", source);
        }
        return 0;
}

/* Recreates the host entry source at path (relative to the root) as the native backend's tree
 * does: a link as the same link (resolved inside the sandbox), a small file as a read-only copy
 * (MIRROR_COPY_MAX_BYTES), a directory or a larger file as a read-only bind onto a mount point
 * made here; an absent entry is skipped (hosts differ), anything else (a socket, a device)
 * refused. */
static int mirror_host_entry(json_t *mounts, int rootfs_fd, const char *source, const char *path,
                             struct sbx_error *err)
{
        struct stat st;
        if (lstat(source, &st) < 0) {
                if (errno == ENOENT)
                        return 0;
                return sbx_error_set(err, errno, "gvisor rootfs: lstat %s", source);
        }
        if (S_ISLNK(st.st_mode)) {
                char target[PATH_MAX];
                ssize_t n = readlink(source, target, sizeof(target));
                if (n < 0 || (size_t)n >= sizeof(target))
                        return sbx_error_set(err, n < 0 ? errno : ENAMETOOLONG,
                                             "gvisor rootfs: readlink %s", source);
                target[n] = '\0';
                if (symlinkat(target, rootfs_fd, path) < 0)
                        return sbx_error_set(err, errno, "gvisor rootfs: symlink %s", path);
                return 0;
        }
        if (S_ISDIR(st.st_mode)) {
                if (make_directory_at(rootfs_fd, path, err) < 0)
                        return -1;
        } else if (S_ISREG(st.st_mode)) {
                _cleanup_close_ int fd =
                        openat(rootfs_fd, path,
                               O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0444);
                if (fd < 0)
                        return sbx_error_set(err, errno, "gvisor rootfs: create %s", path);
                if (st.st_size <= MIRROR_COPY_MAX_BYTES)
                        return copy_host_file(source, fd, err);
        } else {
                return sbx_error_set(err, EINVAL, "%s is neither a file, a directory nor a link",
                                     source);
        }
        char destination[PATH_MAX];
        snprintf(destination, sizeof(destination), "/%s", path);
        return add_mount(mounts, destination, "bind", source, bind_options(), err);
}

static int add_runtime(json_t *mounts, int rootfs_fd, struct sbx_error *err)
{
        for (size_t i = 0; i < sbx_view_n_usr_required; i++) {
                struct stat st;
                if (lstat(sbx_view_usr_required[i], &st) < 0 || !S_ISDIR(st.st_mode))
                        return sbx_error_set(err, ENOTDIR, "%s is not a directory",
                                             sbx_view_usr_required[i]);
        }
        if (make_directory_at(rootfs_fd, "usr", err) < 0)
                return -1;
        for (size_t i = 0; i < sbx_view_n_usr_parts; i++) {
                char source[32];
                char path[32];
                snprintf(source, sizeof(source), "/usr/%s", sbx_view_usr_parts[i]);
                snprintf(path, sizeof(path), "usr/%s", sbx_view_usr_parts[i]);
                if (mirror_host_entry(mounts, rootfs_fd, source, path, err) < 0)
                        return -1;
        }
        for (size_t i = 0; i < sbx_view_n_aliases; i++) {
                char source[32];
                snprintf(source, sizeof(source), "/%s", sbx_view_aliases[i]);
                if (mirror_host_entry(mounts, rootfs_fd, source, sbx_view_aliases[i], err) < 0)
                        return -1;
        }
        return 0;
}

static int write_generated(int rootfs_fd, const struct sbx_view_file *file, struct sbx_error *err)
{
        _cleanup_close_ int fd = openat(rootfs_fd, file->path,
                                        O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (fd < 0 || sbx_write_all(fd, file->text, strlen(file->text)) < 0)
                return sbx_error_set(err, errno, "gvisor rootfs: write %s", file->path);
        return 0;
}

struct etc_context {
        json_t *mounts;
        int rootfs_fd;
};

/* One /etc entry of the view (sandbox/view.h), mirrored from the host. */
static int mirror_etc_entry(const char *name, void *ctx, struct sbx_error *err)
{
        const struct etc_context *etc = ctx;
        char source[PATH_MAX];
        char path[PATH_MAX];
        snprintf(source, sizeof(source), "/etc/%s", name);
        snprintf(path, sizeof(path), "etc/%s", name);
        return mirror_host_entry(etc->mounts, etc->rootfs_fd, source, path, err);
}

static int add_etc(json_t *mounts, int rootfs_fd, struct sbx_error *err)
{
        if (make_directory_at(rootfs_fd, "etc", err) < 0 ||
            make_directory_at(rootfs_fd, "etc/ssl", err) < 0)
                return -1;
        struct etc_context etc = {mounts, rootfs_fd};
        if (sbx_view_each_etc_entry(mirror_etc_entry, &etc, err) < 0)
                return -1;
        for (size_t i = 0; i < sbx_view_n_etc_generated; i++)
                if (write_generated(rootfs_fd, &sbx_view_etc_generated[i], err) < 0)
                        return -1;
        for (size_t i = 0; i < sbx_view_n_etc_links; i++)
                if (symlinkat(sbx_view_etc_links[i].target, rootfs_fd, sbx_view_etc_links[i].path) <
                    0)
                        return sbx_error_set(err, errno, "gvisor rootfs: symlink %s",
                                             sbx_view_etc_links[i].path);
        return 0;
}

/* The read-only files (the run stage's artifact among them): each written by sandboxd into the
 * bundle's files directory as "<index>", 0444 (0555 executable), and bound read-only onto its
 * path under /workspace, which runsc makes in the sandbox's tmpfs. The program, its sandbox's
 * root, can neither write nor remove it: a mount (no CAP_SYS_ADMIN to undo it), served by the
 * gofer read-only, as the native backend's read-only bind. The files' bytes are held on the
 * host's /run until the sandbox is destroyed; the tmpfs is smaller by them (read_only_bytes), as
 * the native one holds them. */
static int add_read_only_files(json_t *mounts, const struct sbx_spec *spec,
                               const struct gvisor_files *files, struct sbx_error *err)
{
        for (size_t i = 0; i < spec->n_files; i++) {
                const struct sbx_file *file = &spec->files[i];
                if (!file->read_only)
                        continue;
                char name[24];
                snprintf(name, sizeof(name), "%zu", i);
                _cleanup_close_ int fd = openat(
                        files->fd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                        file->executable ? 0555 : 0444);
                if (fd < 0 || sbx_write_all(fd, file->data, file->size) < 0)
                        return sbx_error_set(err, errno, "gvisor bundle: write %s", file->path);
                char source[PATH_MAX];
                char destination[PATH_MAX];
                if ((size_t)snprintf(source, sizeof(source), "%s/%s", files->path, name) >=
                            sizeof(source) ||
                    (size_t)snprintf(destination, sizeof(destination), "/workspace/%s",
                                     file->path) >= sizeof(destination))
                        return sbx_error_set(err, ENAMETOOLONG, "gvisor bundle: %s", file->path);
                if (add_mount(mounts, destination, "bind", source,
                              json_pack("[s,s,s,s]", "bind", "ro", "nosuid", "nodev"), err) < 0)
                        return -1;
        }
        return 0;
}

/* The bytes /workspace's tmpfs gives the read-only files (add_read_only_files): a page each at
 * least, as a tmpfs counts them. */
static uint64_t read_only_bytes(const struct sbx_spec *spec)
{
        uint64_t bytes = 0;
        for (size_t i = 0; i < spec->n_files; i++)
                if (spec->files[i].read_only)
                        bytes += (spec->files[i].size + 4095) / 4096 * 4096;
        return bytes;
}

static json_t *mounts_json(const struct sbx_spec *spec, int rootfs_fd,
                           const struct gvisor_files *files, struct sbx_error *err)
{
        json_t *mounts = json_array();
        if (mounts == NULL) {
                sbx_error_set(err, ENOMEM, "gvisor spec: mounts");
                return NULL;
        }
        static const char *const mount_points[] = {"proc", "sys", "dev", "tmp", "workspace"};
        int rc = 0;
        for (size_t i = 0; i < SBX_ARRAY_SIZE(mount_points) && rc == 0; i++)
                rc = make_directory_at(rootfs_fd, mount_points[i], err);
        uint64_t disk = spec->limits.disk_bytes;
        /* The read-only files' room taken off (a disk of 0 stays unbounded); size=0 would be no
         * bound at all: a page is the least left. */
        uint64_t ro_bytes = read_only_bytes(spec);
        uint64_t workspace = disk == 0 ? 0 : disk > ro_bytes + 4096 ? disk - ro_bytes : 4096;
        /* /proc read-only: gVisor's procfs has no subset=pid, and no Landlock keeps the program
         * from opening its knobs (/proc/sys, /proc/self/oom_score_adj, uid_map, comm) for writing,
         * as the native backend's does: the hostile payload proc_sys_write. */
        if (rc < 0 ||
            add_mount(mounts, "/proc", "proc", "proc",
                      json_pack("[s,s,s,s]", "ro", "nosuid", "nodev", "noexec"), err) < 0 ||
            /* No /sys, as under the native backend: an empty read-only tmpfs over runsc's. */
            add_mount(mounts, "/sys", "tmpfs", "tmpfs",
                      json_pack("[s,s,s,s,s]", "ro", "size=4096", "nosuid", "nodev", "noexec"),
                      err) < 0 ||
            add_runtime(mounts, rootfs_fd, err) < 0 || add_etc(mounts, rootfs_fd, err) < 0 ||
            add_tmpfs(mounts, "/workspace", workspace, "0755", err) < 0 ||
            add_read_only_files(mounts, spec, files, err) < 0 ||
            add_tmpfs(mounts, "/tmp", disk, "1777", err) < 0 ||
            add_tmpfs(mounts, "/dev/shm", disk, "1777", err) < 0) {
                json_decref(mounts);
                return NULL;
        }
        return mounts;
}

/* The native backend's rlimits (native/rlimit.h), by their OCI names. gVisor enforces them for
 * the sandbox's tasks itself: RLIMIT_NPROC is what stops a fork bomb there (the host's pids cgroup
 * counts the sentry's threads and the ptrace platform's stub processes, not the program's). */
static json_t *rlimits_json(const struct sbx_limits *limits)
{
        struct rlimit_setting plan[RLIMIT_PLAN_MAX];
        size_t n = rlimit_plan(limits, plan);
        json_t *rlimits = json_array();
        for (size_t i = 0; rlimits != NULL && i < n; i++) {
                /* No cap (a zero limit): gVisor's default, as JSON cannot say RLIM_INFINITY in
                 * jansson's signed integers. */
                if (plan[i].value.rlim_max == RLIM_INFINITY)
                        continue;
                json_t *one = json_pack("{s:s,s:I,s:I}", "type", plan[i].name, "soft",
                                        (json_int_t)plan[i].value.rlim_cur, "hard",
                                        (json_int_t)plan[i].value.rlim_max);
                if (one == NULL || json_array_append_new(rlimits, one) < 0) {
                        json_decref(rlimits);
                        return NULL;
                }
        }
        return rlimits;
}

const char *const gvisor_root_capabilities[GVISOR_ROOT_CAPABILITIES] = {
        "CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_KILL", "CAP_SETGID", "CAP_SETUID",
};

static json_t *process_json(const struct sbx_spec *spec, struct sbx_error *err)
{
        char number[24];
        size_t n_written = 0; /* the files the stage writes: the read-only ones are mounts */
        for (size_t i = 0; i < spec->n_files; i++)
                n_written += !spec->files[i].read_only;
        snprintf(number, sizeof(number), "%zu", n_written);
        json_t *args = json_pack("[s,s,s,s,s]", "/bin/sh", "-c", GVISOR_STAGE_SCRIPT,
                                 "sandboxd-stage", number);
        for (size_t i = 0; args != NULL && i < spec->n_files; i++) {
                if (spec->files[i].read_only)
                        continue;
                snprintf(number, sizeof(number), "%zu", spec->files[i].size);
                if (json_array_append_new(args, json_string(spec->files[i].path)) < 0 ||
                    json_array_append_new(args, json_string(number)) < 0 ||
                    json_array_append_new(args,
                                          json_string(spec->files[i].executable ? "x" : "-")) < 0)
                        json_decref(steal_pointer(&args));
        }
        /* The program's environment, which the stage exports last (spec.h); its own is
         * GVISOR_STAGE_ENVIRONMENT. */
        size_t n_env = 0;
        while (spec->envp[n_env] != NULL)
                n_env++;
        snprintf(number, sizeof(number), "%zu", n_env);
        if (args != NULL && json_array_append_new(args, json_string(number)) < 0)
                json_decref(steal_pointer(&args));
        for (size_t i = 0; args != NULL && i < n_env; i++)
                if (json_array_append_new(args, json_string(spec->envp[i])) < 0)
                        json_decref(steal_pointer(&args));
        if (args != NULL &&
            json_array_append_new(
                    args, json_string(spec->artifact_fd > 0 ? spec->artifact_path : "-")) < 0)
                json_decref(steal_pointer(&args));
        json_t *env = json_pack("[s]", GVISOR_STAGE_ENVIRONMENT);
        json_t *rlimits = rlimits_json(&spec->limits);
        /* A pool entry's loader takes its execution on stdin (sandbox/agent.h) and follows its
         * "R" with its pid, which the Wait call is for (gvisor.c); an exec entry's program is its
         * execution's, and Python's loader waits for it, told "exec" (spec.h). */
        const char *const exec_entry_loader[] = {sbx_language_find("python")->interpreter, "-c",
                                                 sbx_python_loader_source, NULL};
        const char *const *argv = spec->exec_on_acquire ? exec_entry_loader : spec->argv;
        for (size_t i = 0; args != NULL && argv[i] != NULL; i++)
                if (json_array_append_new(args, json_string(argv[i])) < 0)
                        json_decref(steal_pointer(&args));
        const char *const pool_arguments[] = {"stdio", "pid", spec->exec_on_acquire ? "exec" : NULL,
                                              NULL};
        for (size_t i = 0; args != NULL && spec->agent && pool_arguments[i] != NULL; i++)
                if (json_array_append_new(args, json_string(pool_arguments[i])) < 0)
                        json_decref(steal_pointer(&args));
        json_t *none = json_array();
        json_t *root_set = json_array();
        for (size_t i = 0; root_set != NULL && i < GVISOR_ROOT_CAPABILITIES; i++)
                json_array_append_new(root_set, json_string(gvisor_root_capabilities[i]));
        json_t *process = NULL;
        if (args != NULL && env != NULL && rlimits != NULL && none != NULL && root_set != NULL)
                process = json_pack("{s:b,s:{s:i,s:i},s:O,s:O,s:s,s:O,s:b,s:{s:O,s:O,s:O,s:O,s:O}}",
                                    "terminal", 0, "user", "uid", 0, "gid", 0, "args", args, "env",
                                    env, "cwd", "/workspace", "rlimits", rlimits, "noNewPrivileges",
                                    1, "capabilities", "bounding", root_set, "effective", root_set,
                                    "inheritable", none, "permitted", root_set, "ambient", none);
        json_decref(args);
        json_decref(env);
        json_decref(rlimits);
        json_decref(none);
        json_decref(root_set);
        if (process == NULL)
                sbx_error_set(err, ENOMEM, "gvisor spec: the process (arguments not UTF-8?)");
        return process;
}

int gvisor_artifact_split(const void *out, size_t len, size_t *program, size_t *size)
{
        const size_t trailer = GVISOR_ARTIFACT_TRAILER_BYTES;
        const size_t marker = strlen(GVISOR_ARTIFACT_MARKER);
        if (len < trailer)
                return -1;
        const char *at = (const char *)out + len - trailer;
        if (at[0] != '\n' || memcmp(at + 1, GVISOR_ARTIFACT_MARKER, marker) != 0 ||
            at[trailer - 1] != '\n')
                return -1;
        uint64_t value = 0;
        for (const char *digit = at + 1 + marker; digit < at + trailer - 1; digit++) {
                if (*digit < '0' || *digit > '9' || value > (UINT64_MAX - 9) / 10)
                        return -1;
                value = value * 10 + (uint64_t)(*digit - '0');
        }
        if (value > len - trailer)
                return -1;
        *size = (size_t)value;
        *program = len - trailer - *size;
        return 0;
}

json_t *gvisor_bundle(const struct sbx_spec *spec, int rootfs_fd, const struct gvisor_files *files,
                      struct sbx_error *err)
{
        json_t *process = process_json(spec, err);
        if (process == NULL)
                return NULL;
        json_t *mounts = mounts_json(spec, rootfs_fd, files, err);
        if (mounts == NULL) {
                json_decref(process);
                return NULL;
        }
        json_t *bundle = json_pack(
                "{s:s,s:o,s:{s:s,s:b},s:s,s:o,s:{s:[{s:s},{s:s},{s:s},{s:s},{s:s}]}}", "ociVersion",
                "1.0.2", "process", process, "root", "path", "rootfs", "readonly", 1, "hostname",
                "sandbox", "mounts", mounts, "linux", "namespaces", "type", "pid", "type",
                "network", "type", "ipc", "type", "uts", "type", "mount");
        if (bundle == NULL)
                sbx_error_set(err, ENOMEM, "gvisor spec");
        return bundle;
}
