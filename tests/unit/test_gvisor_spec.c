/* The gVisor backend's OCI bundle (sandbox/gvisor/spec.c): what the sandbox may write, what of
 * the host it sees, the process it runs and the limits it carries, checked on the JSON runsc
 * gets and on the root directory made for it. */
#include <fcntl.h>
#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <sys/capability.h>

#include "sandbox/gvisor/spec.h"
#include "sandbox/native/caps.h"
#include "util/file.h"

#define MIB (1024ull * 1024ull)

struct fixture {
        char dir[64];
        char files_dir[80];
        int rootfs_fd, files_fd;
        json_t *bundle;
};

static int setup(void **state)
{
        struct fixture *f = calloc(1, sizeof(*f));
        assert_non_null(f);
        snprintf(f->dir, sizeof(f->dir), "/tmp/test-gvisor-spec-XXXXXX");
        assert_non_null(mkdtemp(f->dir));
        char rootfs[80];
        snprintf(rootfs, sizeof(rootfs), "%s/rootfs", f->dir);
        snprintf(f->files_dir, sizeof(f->files_dir), "%s/files", f->dir);
        assert_int_equal(mkdir(rootfs, 0755), 0);
        assert_int_equal(mkdir(f->files_dir, 0755), 0);
        f->rootfs_fd = open(rootfs, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        f->files_fd = open(f->files_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        assert_true(f->rootfs_fd >= 0 && f->files_fd >= 0);
        static const char *const argv[] = {"/usr/bin/python3", "main.py", "an arg", NULL};
        static const char *const envp[] = {"PATH=/usr/bin:/bin", "HOME=/workspace", NULL};
        static const struct sbx_file files[] = {
                {.path = "main.py", .data = "print(1)", .size = 8},
                {.path = "bin/tool", .data = "", .size = 0, .executable = true},
                {.path = "app/main",
                 .data = "\x7f"
                         "ELF",
                 .size = 4,
                 .executable = true,
                 .read_only = true},
        };
        struct sbx_spec spec = {
                .argv = argv,
                .envp = envp,
                .files = files,
                .n_files = 3,
                .limits = {.wall_ms = 1000,
                           .cpu_ms = 2500,
                           .memory_bytes = 64 * MIB,
                           .pids = 16,
                           .disk_bytes = 8 * MIB,
                           .output_bytes = 1024,
                           .open_files = 64},
        };
        struct sbx_error err = {0};
        f->bundle = gvisor_bundle(&spec, f->rootfs_fd,
                                  &(struct gvisor_files){f->files_fd, f->files_dir}, &err);
        if (f->bundle == NULL)
                fail_msg("gvisor_bundle: %s", err.message);
        *state = f;
        return 0;
}

static int teardown(void **state)
{
        struct fixture *f = *state;
        json_decref(f->bundle);
        close(f->rootfs_fd);
        close(f->files_fd);
        struct sbx_error err = {0};
        assert_int_equal(sbx_remove_tree_at(AT_FDCWD, f->dir, &err), 0);
        free(f);
        return 0;
}

static const json_t *mount_at(const json_t *bundle, const char *destination)
{
        size_t i;
        const json_t *mount;
        json_array_foreach(
                json_object_get(bundle, "mounts"), i,
                mount) if (strcmp(json_string_value(json_object_get(mount, "destination")),
                                  destination) == 0) return mount;
        return NULL;
}

static bool has_option(const json_t *mount, const char *option)
{
        size_t i;
        const json_t *value;
        json_array_foreach(json_object_get(mount, "options"), i,
                           value) if (strcmp(json_string_value(value), option) == 0) return true;
        return false;
}

static void test_the_process(void **state)
{
        const json_t *process = json_object_get(((struct fixture *)*state)->bundle, "process");
        const json_t *args = json_object_get(process, "args");
        /* The files by path, size and flag, which the stage script reads from stdin (not the
         * read-only one: a mount), then the program's environment, which it exports, and the
         * stage's mode. */
        const char *const want[] = {"/bin/sh",
                                    "-c",
                                    GVISOR_STAGE_SCRIPT,
                                    "sandboxd-stage",
                                    "2",
                                    "main.py",
                                    "8",
                                    "-",
                                    "bin/tool",
                                    "0",
                                    "x",
                                    "2",
                                    "PATH=/usr/bin:/bin",
                                    "HOME=/workspace",
                                    "-",
                                    "/usr/bin/python3",
                                    "main.py",
                                    "an arg"};
        assert_int_equal(json_array_size(args), sizeof(want) / sizeof(want[0]));
        for (size_t i = 0; i < json_array_size(args); i++)
                assert_string_equal(json_string_value(json_array_get(args, i)), want[i]);
        /* The stage's own environment: nothing of the request's reaches its helpers. */
        const json_t *env = json_object_get(process, "env");
        assert_int_equal(json_array_size(env), 1);
        assert_string_equal(json_string_value(json_array_get(env, 0)), GVISOR_STAGE_ENVIRONMENT);
        assert_string_equal(json_string_value(json_object_get(process, "cwd")), "/workspace");
        assert_true(json_is_true(json_object_get(process, "noNewPrivileges")));
        assert_false(json_is_true(json_object_get(process, "terminal")));
        /* The native root's capabilities, nothing inheritable or ambient. */
        const json_t *caps = json_object_get(process, "capabilities");
        assert_int_equal(json_object_size(caps), 5);
        const char *const root_sets[] = {"bounding", "effective", "permitted"};
        for (size_t i = 0; i < 3; i++) {
                uint64_t mask = 0;
                size_t index;
                const json_t *name;
                json_array_foreach(json_object_get(caps, root_sets[i]), index, name)
                {
                        cap_value_t cap;
                        assert_int_equal(cap_from_name(json_string_value(name), &cap), 0);
                        mask |= 1ULL << cap;
                }
                assert_int_equal(mask, CAPS_ROOT_SET_MASK);
        }
        assert_int_equal(json_array_size(json_object_get(caps, "inheritable")), 0);
        assert_int_equal(json_array_size(json_object_get(caps, "ambient")), 0);
}

static void test_rlimits_are_the_native_plan(void **state)
{
        const json_t *process = json_object_get(((struct fixture *)*state)->bundle, "process");
        size_t i;
        const json_t *rlimit;
        bool nproc = false, cpu = false, fsize = false;
        json_array_foreach(json_object_get(process, "rlimits"), i, rlimit)
        {
                const char *type = json_string_value(json_object_get(rlimit, "type"));
                json_int_t soft = json_integer_value(json_object_get(rlimit, "soft"));
                json_int_t hard = json_integer_value(json_object_get(rlimit, "hard"));
                assert_true(soft >= 0 && soft <= hard);
                if (strcmp(type, "RLIMIT_NPROC") == 0) { /* pids + the plan's margin of 8 */
                        nproc = true;
                        assert_int_equal(hard, 16 + 8);
                } else if (strcmp(type, "RLIMIT_CPU") == 0) { /* 2.5 s rounded up */
                        cpu = true;
                        assert_int_equal(soft, 3);
                } else if (strcmp(type, "RLIMIT_FSIZE") == 0) {
                        fsize = true;
                        assert_int_equal(hard, 8 * MIB);
                }
        }
        assert_true(nproc && cpu && fsize);
}

static void test_what_it_may_write(void **state)
{
        const struct fixture *f = *state;
        const json_t *bundle = f->bundle;
        const json_t *root = json_object_get(bundle, "root");
        assert_true(json_is_true(json_object_get(root, "readonly")));
        const char *const scratch[] = {"/workspace", "/tmp", "/dev/shm"};
        for (size_t i = 0; i < 3; i++) {
                const json_t *mount = mount_at(bundle, scratch[i]);
                assert_non_null(mount);
                assert_string_equal(json_string_value(json_object_get(mount, "type")), "tmpfs");
                /* /workspace holds the read-only file's page outside its tmpfs. */
                assert_true(has_option(mount, i == 0 ? "size=8384512" : "size=8388608"));
                assert_true(has_option(mount, "nosuid") && has_option(mount, "nodev"));
        }
        /* Every host path is bound read-only, nosuid, nodev, and none is a secret's. */
        size_t i;
        const json_t *mount;
        size_t binds = 0;
        json_array_foreach(json_object_get(bundle, "mounts"), i, mount)
        {
                if (strcmp(json_string_value(json_object_get(mount, "type")), "bind") != 0)
                        continue;
                binds++;
                const char *source = json_string_value(json_object_get(mount, "source"));
                assert_true(has_option(mount, "ro") && has_option(mount, "nosuid") &&
                            has_option(mount, "nodev"));
                if (strncmp(source, f->files_dir, strlen(f->files_dir)) == 0) {
                        /* The read-only file, by its index, at its path. */
                        assert_string_equal(source + strlen(f->files_dir), "/2");
                        assert_string_equal(
                                json_string_value(json_object_get(mount, "destination")),
                                "/workspace/app/main");
                        continue;
                }
                assert_true(strncmp(source, "/usr/", 5) == 0 || strncmp(source, "/etc/", 5) == 0 ||
                            strcmp(source, "/bin") == 0 || strcmp(source, "/lib") == 0 ||
                            strcmp(source, "/lib64") == 0 || strcmp(source, "/sbin") == 0);
                assert_true(strcmp(source, "/etc/shadow") != 0 &&
                            strncmp(source, "/usr/local", 10) != 0 &&
                            strncmp(source, "/etc/ssl/private", 16) != 0);
        }
        assert_true(binds >= 2); /* /usr/bin and /usr/lib at least; no host directory of files */
        const json_t *sys = mount_at(bundle, "/sys");
        assert_non_null(sys);
        assert_true(has_option(sys, "ro"));
        assert_non_null(mount_at(bundle, "/usr/bin"));
        assert_null(mount_at(bundle, "/.sandboxd/input"));
        /* The read-only file's bytes, read-only and executable as asked. */
        struct stat st;
        assert_int_equal(fstatat(f->files_fd, "2", &st, AT_SYMLINK_NOFOLLOW), 0);
        assert_int_equal(st.st_mode & 07777, 0555);
        assert_int_equal(st.st_size, 4);
        assert_int_equal(fstatat(f->files_fd, "0", &st, AT_SYMLINK_NOFOLLOW), -1);
}

static void test_namespaces_and_no_cgroups(void **state)
{
        const json_t *linux_ = json_object_get(((struct fixture *)*state)->bundle, "linux");
        const char *const want[] = {"pid", "network", "ipc", "uts", "mount"};
        const json_t *namespaces = json_object_get(linux_, "namespaces");
        assert_int_equal(json_array_size(namespaces), 5);
        for (size_t i = 0; i < 5; i++)
                assert_string_equal(
                        json_string_value(json_object_get(json_array_get(namespaces, i), "type")),
                        want[i]);
        /* runsc runs inside the slot's cgroups: it is given none to make. */
        assert_null(json_object_get(linux_, "cgroupsPath"));
        assert_null(json_object_get(linux_, "resources"));
}

static void test_the_root_directory(void **state)
{
        struct fixture *f = *state;
        char text[512];
        struct sbx_error err = {0};
        assert_true(sbx_read_file_at(f->rootfs_fd, "etc/passwd", text, sizeof(text), &err) > 0);
        assert_non_null(strstr(text, "root:x:0:0:root:/workspace:/bin/sh\n"));
        struct stat st;
        const char *const mount_points[] = {"proc", "sys", "dev", "tmp", "workspace", "usr/bin"};
        for (size_t i = 0; i < sizeof(mount_points) / sizeof(mount_points[0]); i++) {
                assert_int_equal(fstatat(f->rootfs_fd, mount_points[i], &st, AT_SYMLINK_NOFOLLOW),
                                 0);
                assert_true(S_ISDIR(st.st_mode));
        }
        /* The host's top-level alias as the host has it (merged /usr: a link). */
        struct stat host;
        assert_int_equal(lstat("/bin", &host), 0);
        assert_int_equal(fstatat(f->rootfs_fd, "bin", &st, AT_SYMLINK_NOFOLLOW), 0);
        assert_int_equal(S_ISLNK(st.st_mode), S_ISLNK(host.st_mode));
        assert_int_equal(fstatat(f->rootfs_fd, "etc/shadow", &st, AT_SYMLINK_NOFOLLOW), -1);
}

/* The trailer as the stage shell prints it: /bin/sh's printf of GVISOR_ARTIFACT_TRAILER_FORMAT
 * with size, appended to out at n. Returns the new length. */
static int shell_trailer(char *out, int n, size_t room, int size)
{
        char command[128];
        snprintf(command, sizeof(command), "printf '%s' %d", GVISOR_ARTIFACT_TRAILER_FORMAT, size);
        FILE *shell = popen(command, "r");
        assert_non_null(shell);
        size_t got = fread(out + n, 1, room - (size_t)n, shell);
        assert_int_equal(pclose(shell), 0);
        return n + (int)got;
}

/* A compile's stdout of program output, artifact and trailer, split back (gvisor.c). */
static void test_the_artifact_comes_off_the_end_of_stdout(void **state)
{
        (void)state;
        char out[256];
        size_t program = 0, size = 0;
        /* Output that looks like a trailer, then the artifact, then the stage's trailer. */
        int n = snprintf(out, sizeof(out), "\n" GVISOR_ARTIFACT_MARKER "%020d\nARTIFACT", 999);
        n = shell_trailer(out, n, sizeof(out), 8);
        assert_int_equal(gvisor_artifact_split(out, (size_t)n, &program, &size), 0);
        assert_int_equal(size, 8);
        assert_int_equal(program, GVISOR_ARTIFACT_TRAILER_BYTES);
        assert_memory_equal(out + program, "ARTIFACT", 8);
        /* An empty artifact and no output at all. */
        n = shell_trailer(out, 0, sizeof(out), 0);
        assert_int_equal(n, GVISOR_ARTIFACT_TRAILER_BYTES);
        assert_int_equal(gvisor_artifact_split(out, (size_t)n, &program, &size), 0);
        assert_true(program == 0 && size == 0);
        /* A size past what came, no trailer, a cut one, and one that is not digits. */
        n = shell_trailer(out, snprintf(out, sizeof(out), "ab"), sizeof(out), 3);
        assert_int_equal(gvisor_artifact_split(out, (size_t)n, &program, &size), -1);
        assert_int_equal(gvisor_artifact_split("plain output\n", 13, &program, &size), -1);
        assert_int_equal(gvisor_artifact_split(out, (size_t)n - 1, &program, &size), -1);
        n = snprintf(out, sizeof(out), "\n" GVISOR_ARTIFACT_MARKER "-0000000000000000001\n");
        assert_int_equal(gvisor_artifact_split(out, (size_t)n, &program, &size), -1);
        n = snprintf(out, sizeof(out), "\n" GVISOR_ARTIFACT_MARKER "99999999999999999999\n");
        assert_int_equal(gvisor_artifact_split(out, (size_t)n, &program, &size), -1);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup_teardown(test_the_process, setup, teardown),
                cmocka_unit_test_setup_teardown(test_rlimits_are_the_native_plan, setup, teardown),
                cmocka_unit_test_setup_teardown(test_what_it_may_write, setup, teardown),
                cmocka_unit_test_setup_teardown(test_namespaces_and_no_cgroups, setup, teardown),
                cmocka_unit_test_setup_teardown(test_the_root_directory, setup, teardown),
                cmocka_unit_test(test_the_artifact_comes_off_the_end_of_stdout),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
