/* libFuzzer harness for the cgroup text parsers (sandbox/native/cgroup_parse.h), which read what
 * the kernel writes in /proc/self/mountinfo, /proc/<pid>/cgroup and the flat cgroup files. That
 * text is the kernel's, but a mount point or cgroup path holds names a user chose, so the parsers
 * must stay within their buffers whatever they read.
 *
 * The whole input goes to each parser; the keyed-file parser and the /proc/<pid>/cgroup parser
 * are also given the input's first line as the key or controller to look for, and output
 * buffers from 1 byte up, so that the truncation checks are exercised. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sandbox/native/cgroup_parse.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *what)
{
        fprintf(stderr, "fuzz_mountinfo: %s\n", what);
        abort();
}

/* Every hierarchy path the mountinfo parser fills must be a C string within its array. */
static void check_mounts(const struct cgroup_mounts *mounts)
{
        const char *const fields[] = {mounts->unified, mounts->memory,  mounts->pids,
                                      mounts->cpu,     mounts->cpuacct, mounts->freezer};
        for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++)
                if (strnlen(fields[i], sizeof(mounts->unified)) == sizeof(mounts->unified))
                        fail("a hierarchy path is not terminated");
        if (mounts->layout != CGROUP_LAYOUT_UNIFIED && mounts->layout != CGROUP_LAYOUT_HYBRID &&
            mounts->layout != CGROUP_LAYOUT_LEGACY)
                fail("no layout decided");
}

static void parse_proc_path(const char *text, const char *controller)
{
        static const size_t sizes[] = {1, 2, 16, 4096};
        for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
                /* Exact-size heap buffers: ASan reports a write one past the end. */
                char *path = malloc(sizes[i]);
                if (path == NULL)
                        return;
                struct sbx_error err = {0};
                if (cgroup_parse_proc_path(text, controller, path, sizes[i], &err) == 0 &&
                    (strnlen(path, sizes[i]) == sizes[i] || path[0] == '\0'))
                        fail("a cgroup path is empty or not terminated");
                free(path);
        }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        /* The parsers take C strings: a NUL in the input ends the text there. */
        char *text = malloc(size + 1);
        if (text == NULL)
                return 0;
        memcpy(text, data, size);
        text[size] = '\0';
        size_t first_line_length = strcspn(text, "\n");
        char *first_line = strndup(text, first_line_length);
        if (first_line == NULL) {
                free(text);
                return 0;
        }

        struct sbx_error err = {0};
        struct cgroup_mounts mounts;
        if (cgroup_parse_mountinfo(text, &mounts, &err) == 0)
                check_mounts(&mounts);

        static const char *const keys[] = {"oom_kill", "max", "usage_usec", "throttled_usec",
                                           "nr_throttled"};
        uint64_t value;
        for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
                cgroup_parse_keyed(text, keys[i], &value, &err);
        cgroup_parse_keyed(text, first_line, &value, &err);
        cgroup_parse_value(text, &value, &err);

        static const char *const controllers[] = {"memory",  "pids",    "cpu",
                                                  "cpuacct", "freezer", ""};
        for (size_t i = 0; i < sizeof(controllers) / sizeof(controllers[0]); i++)
                parse_proc_path(text, controllers[i]);
        parse_proc_path(text, first_line);

        free(first_line);
        free(text);
        return 0;
}
