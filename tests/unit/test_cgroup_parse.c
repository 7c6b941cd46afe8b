/* Unit tests for the pure cgroup parsers (src/sandbox/native/cgroup_parse.c). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "sandbox/native/cgroup_parse.h"

/* The development machine's /proc/self/mountinfo (hybrid: v1 controllers, cgroup2 without). */
static const char hybrid_mountinfo[] =
        "22 27 0:21 / /proc rw,relatime - proc proc rw\n"
        "23 27 0:22 / /sys rw,relatime - sysfs sysfs rw\n"
        "24 27 0:6 / /dev rw,relatime - devtmpfs devtmpfs "
        "rw,size=12334460k,nr_inodes=3083615,mode=755\n"
        "25 24 0:23 / /dev/shm rw,relatime - tmpfs tmpfs rw,size=24684084k\n"
        "26 24 0:24 / /dev/pts rw,relatime - devpts devpts rw,mode=600,ptmxmode=000\n"
        "27 1 254:0 / / rw,relatime - ext4 /dev/vda "
        "rw,discard,resv_strict,resuid=65534,resgid=65534\n"
        "28 27 0:25 / /mnt/sandboxing/model_tools_env/v1/python ro,nosuid,nodev,relatime - tmpfs "
        "model_tools_unavailable ro,size=4k,mode=755\n"
        "29 26 0:26 / /dev/pts rw,relatime - devpts devpts rw,mode=600,ptmxmode=000\n"
        "30 25 0:27 / /dev/shm rw,relatime - tmpfs tmpfs rw,size=24684084k\n"
        "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
        "32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
        "33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct\n"
        "34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset\n"
        "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
        "36 31 0:33 / /sys/fs/cgroup/devices rw,relatime - cgroup cgroup rw,devices\n"
        "37 31 0:34 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer\n"
        "38 31 0:35 / /sys/fs/cgroup/blkio rw,relatime - cgroup cgroup rw,blkio\n"
        "39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids\n"
        "40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd\n"
        "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";

/* A systemd host on pure cgroup v2, with optional fields before the separator. */
static const char unified_mountinfo[] =
        "24 30 0:22 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw\n"
        "30 1 259:2 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p2 rw,errors=remount-ro\n"
        "33 24 0:27 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 "
        "rw,nsdelegate,memory_recursiveprot\n"
        "35 24 0:29 / /sys/fs/bpf rw,nosuid,nodev,noexec,relatime shared:11 - bpf bpf "
        "rw,mode=700\n";

/* An older pure v1 host: cpu and cpuacct co-mounted, a mount point with an escaped space, no
 * cgroup2 at all. */
static const char legacy_mountinfo[] =
        "18 23 0:17 / /sys rw,nosuid,nodev,noexec,relatime shared:6 - sysfs sysfs rw\n"
        "25 18 0:21 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755\n"
        "26 25 0:22 / /sys/fs/cgroup/systemd rw,nosuid,nodev,noexec,relatime shared:10 - cgroup "
        "cgroup rw,xattr,name=systemd\n"
        "29 25 0:25 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid,nodev,noexec,relatime shared:14 - "
        "cgroup cgroup rw,cpu,cpuacct\n"
        "30 25 0:26 / /sys/fs/cgroup/my\\040memory rw,nosuid,nodev,noexec,relatime shared:15 - "
        "cgroup cgroup rw,memory\n"
        "31 25 0:27 / /sys/fs/cgroup/pids rw,nosuid,nodev,noexec,relatime shared:16 - cgroup "
        "cgroup rw,pids\n"
        "32 25 0:28 / /sys/fs/cgroup/freezer rw,nosuid,nodev,noexec,relatime shared:17 - cgroup "
        "cgroup rw,freezer\n"
        "33 25 0:29 / /sys/fs/cgroup/net_cls,net_prio rw,nosuid,nodev,noexec,relatime shared:18 "
        "- cgroup cgroup rw,net_cls,net_prio\n";

static void test_mountinfo_hybrid(void **state)
{
        (void)state;
        struct cgroup_mounts mounts;
        struct sbx_error err;
        assert_int_equal(cgroup_parse_mountinfo(hybrid_mountinfo, &mounts, &err), 0);
        assert_int_equal(mounts.layout, CGROUP_LAYOUT_HYBRID);
        assert_string_equal(mounts.unified, "/sys/fs/cgroup/unified");
        assert_string_equal(mounts.memory, "/sys/fs/cgroup/memory");
        assert_string_equal(mounts.pids, "/sys/fs/cgroup/pids");
        assert_string_equal(mounts.cpu, "/sys/fs/cgroup/cpu");
        assert_string_equal(mounts.cpuacct, "/sys/fs/cgroup/cpuacct");
        /* cgroup.kill in the unified hierarchy replaces the freezer on this layout. */
        assert_string_equal(mounts.freezer, "");
}

static void test_mountinfo_unified(void **state)
{
        (void)state;
        struct cgroup_mounts mounts;
        struct sbx_error err;
        assert_int_equal(cgroup_parse_mountinfo(unified_mountinfo, &mounts, &err), 0);
        assert_int_equal(mounts.layout, CGROUP_LAYOUT_UNIFIED);
        assert_string_equal(mounts.unified, "/sys/fs/cgroup");
        assert_string_equal(mounts.memory, "");
        assert_string_equal(mounts.pids, "");
        assert_string_equal(mounts.cpu, "");
        assert_string_equal(mounts.cpuacct, "");
        assert_string_equal(mounts.freezer, "");
}

static void test_mountinfo_unified_ignores_stray_v1(void **state)
{
        (void)state;
        static const char text[] = "33 24 0:27 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n"
                                   "34 33 0:28 / /mnt/pids rw - cgroup cgroup rw,pids\n";
        struct cgroup_mounts mounts;
        struct sbx_error err;
        assert_int_equal(cgroup_parse_mountinfo(text, &mounts, &err), 0);
        assert_int_equal(mounts.layout, CGROUP_LAYOUT_UNIFIED);
        assert_string_equal(mounts.pids, "");
}

static void test_mountinfo_legacy_comounted(void **state)
{
        (void)state;
        struct cgroup_mounts mounts;
        struct sbx_error err;
        assert_int_equal(cgroup_parse_mountinfo(legacy_mountinfo, &mounts, &err), 0);
        assert_int_equal(mounts.layout, CGROUP_LAYOUT_LEGACY);
        assert_string_equal(mounts.unified, "");
        assert_string_equal(mounts.memory, "/sys/fs/cgroup/my memory");
        assert_string_equal(mounts.pids, "/sys/fs/cgroup/pids");
        assert_string_equal(mounts.cpu, "/sys/fs/cgroup/cpu,cpuacct");
        assert_string_equal(mounts.cpuacct, "/sys/fs/cgroup/cpu,cpuacct");
        assert_string_equal(mounts.freezer, "/sys/fs/cgroup/freezer");
}

static void test_mountinfo_legacy_needs_freezer(void **state)
{
        (void)state;
        static const char text[] = "30 25 0:26 / /cg/memory rw - cgroup cgroup rw,memory\n"
                                   "31 25 0:27 / /cg/pids rw - cgroup cgroup rw,pids\n";
        struct cgroup_mounts mounts;
        struct sbx_error err;
        assert_int_equal(cgroup_parse_mountinfo(text, &mounts, &err), -1);
        assert_int_equal(err.code, ENOTSUP);
}

static void test_mountinfo_memory_without_pids(void **state)
{
        (void)state;
        static const char text[] = "41 31 0:38 / /cg/unified rw - cgroup2 cgroup2 rw\n"
                                   "30 25 0:26 / /cg/memory rw - cgroup cgroup rw,memory\n";
        struct cgroup_mounts mounts;
        struct sbx_error err;
        assert_int_equal(cgroup_parse_mountinfo(text, &mounts, &err), -1);
        assert_int_equal(err.code, ENOTSUP);
}

static void test_mountinfo_controller_names_are_whole_words(void **state)
{
        (void)state;
        /* "memory_recursiveprot", "cpuset" and "name=pids" are not the controllers. */
        static const char text[] =
                "41 31 0:38 / /cg/unified rw - cgroup2 cgroup2 rw,memory_recursiveprot\n"
                "34 31 0:31 / /cg/cpuset rw - cgroup cgroup rw,cpuset\n"
                "35 31 0:31 / /cg/named rw - cgroup cgroup rw,name=pids\n";
        struct cgroup_mounts mounts;
        struct sbx_error err;
        assert_int_equal(cgroup_parse_mountinfo(text, &mounts, &err), 0);
        assert_int_equal(mounts.layout, CGROUP_LAYOUT_UNIFIED);
        assert_string_equal(mounts.cpu, "");
}

static void test_mountinfo_escapes(void **state)
{
        (void)state;
        static const char text[] = "41 31 0:38 / /a\\040b\\011c\\134d rw - cgroup2 cgroup2 rw";
        struct cgroup_mounts mounts;
        struct sbx_error err;
        assert_int_equal(cgroup_parse_mountinfo(text, &mounts, &err), 0);
        assert_string_equal(mounts.unified, "/a b\tc\\d");
}

static void test_mountinfo_garbage(void **state)
{
        (void)state;
        static const char *const texts[] = {
                "",
                "\n\n\n",
                "garbage",
                "- cgroup2 cgroup2 rw\n",
                "1 2 3 4 - cgroup2\n",                       /* separator before the mount point */
                "1 2 3 4 /x 6\n",                            /* no separator */
                "1 2 3 4 /x 6 -\n",                          /* nothing after it */
                "1 2 3 4 /x\\000y 6 - cgroup2 cgroup2 rw\n", /* a NUL in the path */
                "1 2 3 4 /x 6 - cgroup cgroup\n",            /* v1 without options */
                "1 2 3 4  6 - cgroup2 cgroup2 rw\n",         /* empty mount point */
                "\\\\\\\\ - - - - - - - - - cgroup2\n",
        };
        for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++) {
                struct cgroup_mounts mounts;
                struct sbx_error err;
                assert_int_equal(cgroup_parse_mountinfo(texts[i], &mounts, &err), -1);
                assert_int_equal(err.code, ENOTSUP);
        }
}

static void test_mountinfo_long_mount_point_skipped(void **state)
{
        (void)state;
        char text[1024];
        char long_path[400];
        memset(long_path, 'a', sizeof(long_path) - 1);
        long_path[0] = '/';
        long_path[sizeof(long_path) - 1] = '\0';
        snprintf(text, sizeof(text),
                 "1 2 3 4 %s rw - cgroup2 cgroup2 rw\n"
                 "5 2 3 4 /short rw - cgroup2 cgroup2 rw\n",
                 long_path);
        struct cgroup_mounts mounts;
        struct sbx_error err;
        assert_int_equal(cgroup_parse_mountinfo(text, &mounts, &err), 0);
        assert_string_equal(mounts.unified, "/short");
}

static void test_keyed(void **state)
{
        (void)state;
        uint64_t value = 42;
        struct sbx_error err;
        assert_int_equal(cgroup_parse_keyed("max 3\n", "max", &value, &err), 0);
        assert_int_equal(value, 3);

        static const char oom_control[] = "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n";
        assert_int_equal(cgroup_parse_keyed(oom_control, "oom_kill", &value, &err), 0);
        assert_int_equal(value, 1);
        assert_int_equal(cgroup_parse_keyed(oom_control, "oom_kill_disable", &value, &err), 0);
        assert_int_equal(value, 0);

        static const char cpu_stat[] = "usage_usec 26930004\nuser_usec 13624653\n"
                                       "system_usec 13305350\nnr_periods 120\n"
                                       "nr_throttled 17\nthrottled_usec 501234\n";
        assert_int_equal(cgroup_parse_keyed(cpu_stat, "usage_usec", &value, &err), 0);
        assert_int_equal(value, 26930004);
        assert_int_equal(cgroup_parse_keyed(cpu_stat, "nr_throttled", &value, &err), 0);
        assert_int_equal(value, 17);
        assert_int_equal(cgroup_parse_keyed(cpu_stat, "throttled_usec", &value, &err), 0);
        assert_int_equal(value, 501234);

        /* The last line may lack its newline. */
        assert_int_equal(cgroup_parse_keyed("a 1\nb 2", "b", &value, &err), 0);
        assert_int_equal(value, 2);
}

static void test_keyed_missing_and_prefixes(void **state)
{
        (void)state;
        uint64_t value = 42;
        struct sbx_error err;
        assert_int_equal(cgroup_parse_keyed("max_usage 5\n", "max", &value, &err), -1);
        assert_int_equal(err.code, ENOENT);
        assert_int_equal(cgroup_parse_keyed("low 0\nhigh 0\nmax 7\n", "max", &value, &err), 0);
        assert_int_equal(value, 7);
        assert_int_equal(cgroup_parse_keyed("max_usage 5\nmax 9\n", "max", &value, &err), 0);
        assert_int_equal(value, 9);
        /* A key must not match the tail of another one either. */
        assert_int_equal(cgroup_parse_keyed("oom_kill 4\n", "kill", &value, &err), -1);
        assert_int_equal(err.code, ENOENT);
        assert_int_equal(cgroup_parse_keyed("", "max", &value, &err), -1);
        assert_int_equal(err.code, ENOENT);
        assert_int_equal(cgroup_parse_keyed("max\n", "max", &value, &err), -1);
        assert_int_equal(err.code, ENOENT);
}

static void test_keyed_bad_values(void **state)
{
        (void)state;
        uint64_t value = 42;
        struct sbx_error err;
        assert_int_equal(cgroup_parse_keyed("max 18446744073709551615\n", "max", &value, &err), 0);
        assert_true(value == UINT64_MAX);
        assert_int_equal(cgroup_parse_keyed("max 18446744073709551616\n", "max", &value, &err), -1);
        assert_int_equal(err.code, ERANGE);
        assert_int_equal(cgroup_parse_keyed("max 99999999999999999999999\n", "max", &value, &err),
                         -1);
        assert_int_equal(err.code, ERANGE);
        assert_int_equal(cgroup_parse_keyed("max -1\n", "max", &value, &err), -1);
        assert_int_equal(err.code, EINVAL);
        assert_int_equal(cgroup_parse_keyed("max 12x\n", "max", &value, &err), -1);
        assert_int_equal(err.code, EINVAL);
        assert_int_equal(cgroup_parse_keyed("max \n", "max", &value, &err), -1);
        assert_int_equal(err.code, EINVAL);
        assert_int_equal(cgroup_parse_keyed("max  1\n", "max", &value, &err), -1);
        assert_int_equal(err.code, EINVAL);
}

static void test_value(void **state)
{
        (void)state;
        uint64_t value = 42;
        struct sbx_error err;
        assert_int_equal(cgroup_parse_value("123\n", &value, &err), 0);
        assert_int_equal(value, 123);
        assert_int_equal(cgroup_parse_value("0", &value, &err), 0);
        assert_int_equal(value, 0);
        assert_int_equal(cgroup_parse_value("max\n", &value, &err), 0);
        assert_true(value == UINT64_MAX);
        /* v1's "unlimited" memory.limit_in_bytes is a plain number. */
        assert_int_equal(cgroup_parse_value("9223372036854771712\n", &value, &err), 0);
        assert_true(value == 9223372036854771712u);
        assert_int_equal(cgroup_parse_value("18446744073709551615\n", &value, &err), 0);
        assert_true(value == UINT64_MAX);
}

static void test_value_bad(void **state)
{
        (void)state;
        static const char *const bad[] = {"",      "\n",     "-1\n", "maxi\n", "ma\n",
                                          "1 2\n", "12\n\n", " 1\n", "0x10\n", "max 100000\n"};
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                uint64_t value;
                struct sbx_error err;
                assert_int_equal(cgroup_parse_value(bad[i], &value, &err), -1);
                assert_int_equal(err.code, EINVAL);
        }
        uint64_t value;
        struct sbx_error err;
        assert_int_equal(cgroup_parse_value("18446744073709551616\n", &value, &err), -1);
        assert_int_equal(err.code, ERANGE);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_mountinfo_hybrid),
                cmocka_unit_test(test_mountinfo_unified),
                cmocka_unit_test(test_mountinfo_unified_ignores_stray_v1),
                cmocka_unit_test(test_mountinfo_legacy_comounted),
                cmocka_unit_test(test_mountinfo_legacy_needs_freezer),
                cmocka_unit_test(test_mountinfo_memory_without_pids),
                cmocka_unit_test(test_mountinfo_controller_names_are_whole_words),
                cmocka_unit_test(test_mountinfo_escapes),
                cmocka_unit_test(test_mountinfo_garbage),
                cmocka_unit_test(test_mountinfo_long_mount_point_skipped),
                cmocka_unit_test(test_keyed),
                cmocka_unit_test(test_keyed_missing_and_prefixes),
                cmocka_unit_test(test_keyed_bad_values),
                cmocka_unit_test(test_value),
                cmocka_unit_test(test_value_bad),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
