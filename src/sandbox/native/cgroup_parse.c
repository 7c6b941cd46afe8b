/* Pure parsers for cgroup text: /proc/self/mountinfo and the flat files the kernel exposes in a
 * cgroup directory. No system calls here, so tests/unit/test_cgroup_parse.c can feed them any
 * text, including hostile or truncated text. */
#include "sandbox/native/cgroup_parse.h"

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <string.h>

/* mountinfo(5): "36 35 98:0 /root /mnt opts [optional...] - fstype source super-opts". */
enum {
        MOUNTINFO_MOUNT_POINT = 4, /* index of the mount point field */
        MOUNTINFO_MAX_FIELDS = 64, /* optional fields are few; a line with more is malformed */
};

/* Splits the line [begin, end) at single spaces (the kernel escapes spaces inside fields), and
 * returns the number of fields, or -1 when there are more than max. */
static int split_fields(const char *begin, const char *end, const char **starts, size_t *lengths,
                        int max)
{
        int count = 0;
        const char *p = begin;
        while (p < end) {
                const char *field_end = memchr(p, ' ', (size_t)(end - p));
                if (field_end == NULL)
                        field_end = end;
                if (count == max)
                        return -1;
                starts[count] = p;
                lengths[count] = (size_t)(field_end - p);
                count++;
                p = field_end + 1;
        }
        return count;
}

static bool field_equals(const char *start, size_t length, const char *word)
{
        return strlen(word) == length && memcmp(start, word, length) == 0;
}

static bool is_octal_digit(char c)
{
        return c >= '0' && c <= '7';
}

/* Decodes the kernel's octal escapes (\040 for space, \011, \012, \134) into out. Fails when the
 * result does not fit, is empty, or would contain a NUL. */
static bool decode_mount_point(const char *start, size_t length, char *out, size_t size)
{
        size_t j = 0;
        for (size_t i = 0; i < length; i++) {
                char c = start[i];
                if (c == '\\' && i + 3 < length && is_octal_digit(start[i + 1]) &&
                    is_octal_digit(start[i + 2]) && is_octal_digit(start[i + 3])) {
                        unsigned value = (unsigned)(start[i + 1] - '0') * 64u +
                                         (unsigned)(start[i + 2] - '0') * 8u +
                                         (unsigned)(start[i + 3] - '0');
                        if (value == 0 || value > 255)
                                return false;
                        c = (char)value;
                        i += 3;
                }
                if (j + 1 >= size)
                        return false;
                out[j++] = c;
        }
        if (j == 0)
                return false;
        out[j] = '\0';
        return true;
}

/* Records mount point as the hierarchy of every controller sandboxd uses that the v1 mount's
 * super options list ("rw,cpu,cpuacct" names two). The first mount of a controller wins. */
static void note_v1_controllers(struct cgroup_mounts *out, const char *options, size_t length,
                                const char *mount_point)
{
        static const struct {
                const char *name;
                size_t offset;
        } controllers[] = {
                {"memory", offsetof(struct cgroup_mounts, memory)},
                {"pids", offsetof(struct cgroup_mounts, pids)},
                {"cpu", offsetof(struct cgroup_mounts, cpu)},
                {"cpuacct", offsetof(struct cgroup_mounts, cpuacct)},
                {"freezer", offsetof(struct cgroup_mounts, freezer)},
        };
        const char *p = options;
        const char *end = options + length;
        while (p < end) {
                const char *comma = memchr(p, ',', (size_t)(end - p));
                if (comma == NULL)
                        comma = end;
                for (size_t i = 0; i < sizeof(controllers) / sizeof(controllers[0]); i++) {
                        if (!field_equals(p, (size_t)(comma - p), controllers[i].name))
                                continue;
                        char *slot = (char *)out + controllers[i].offset;
                        if (slot[0] == '\0')
                                memcpy(slot, mount_point, strlen(mount_point) + 1);
                }
                p = comma + 1;
        }
}

int cgroup_parse_mountinfo(const char *mountinfo, struct cgroup_mounts *out, struct sbx_error *err)
{
        memset(out, 0, sizeof(*out));
        const char *line = mountinfo;
        while (line != NULL && *line != '\0') {
                const char *line_end = strchr(line, '\n');
                const char *next = line_end ? line_end + 1 : NULL;
                if (line_end == NULL)
                        line_end = line + strlen(line);

                const char *starts[MOUNTINFO_MAX_FIELDS];
                size_t lengths[MOUNTINFO_MAX_FIELDS];
                int count = split_fields(line, line_end, starts, lengths, MOUNTINFO_MAX_FIELDS);
                line = next;
                /* Malformed lines are skipped: what matters is whether the cgroup mounts
                 * sandboxd needs are found, and the layout decision below fails closed. */
                int separator = -1;
                for (int i = MOUNTINFO_MOUNT_POINT + 2; i < count; i++) {
                        if (field_equals(starts[i], lengths[i], "-")) {
                                separator = i;
                                break;
                        }
                }
                if (separator < 0 || separator + 1 >= count)
                        continue;
                const char *fstype = starts[separator + 1];
                size_t fstype_length = lengths[separator + 1];
                bool is_v2 = field_equals(fstype, fstype_length, "cgroup2");
                bool is_v1 = field_equals(fstype, fstype_length, "cgroup");
                if (!is_v2 && !is_v1)
                        continue;

                /* A mount point too long for struct cgroup_mounts is skipped like a malformed
                 * line: if it was the only one, the layout decision below fails. */
                char mount_point[sizeof(out->unified)];
                if (!decode_mount_point(starts[MOUNTINFO_MOUNT_POINT],
                                        lengths[MOUNTINFO_MOUNT_POINT], mount_point,
                                        sizeof(mount_point)))
                        continue;
                if (is_v2) {
                        if (out->unified[0] == '\0')
                                memcpy(out->unified, mount_point, strlen(mount_point) + 1);
                        continue;
                }
                if (separator + 3 >= count)
                        continue; /* a v1 mount without super options names no controller */
                note_v1_controllers(out, starts[separator + 3], lengths[separator + 3],
                                    mount_point);
        }

        bool has_unified = out->unified[0] != '\0';
        bool has_memory = out->memory[0] != '\0';
        bool has_pids = out->pids[0] != '\0';
        if (has_unified && !has_memory) {
                /* The controllers live in the cgroup2 hierarchy; a stray v1 mount (pids on a
                 * half-migrated host) is not used, so that every limit comes from one place. */
                out->layout = CGROUP_LAYOUT_UNIFIED;
                out->memory[0] = out->pids[0] = out->cpu[0] = out->cpuacct[0] = '\0';
                out->freezer[0] = '\0';
                return 0;
        }
        if (!has_memory || !has_pids)
                return sbx_error_set(err, ENOTSUP,
                                     "no usable cgroup hierarchy: need cgroup2, or v1 memory and "
                                     "pids controllers");
        if (has_unified) {
                out->layout = CGROUP_LAYOUT_HYBRID;
                out->freezer[0] = '\0'; /* cgroup.kill in the unified hierarchy replaces it */
                return 0;
        }
        if (out->freezer[0] == '\0')
                /* Fail closed: without the freezer a fork loop can outrun a SIGKILL sweep. */
                return sbx_error_set(err, ENOTSUP,
                                     "cgroup v1 without cgroup2 needs the freezer controller");
        out->layout = CGROUP_LAYOUT_LEGACY;
        return 0;
}

/* Parses a decimal u64 in [start, end). */
static int parse_decimal(const char *start, const char *end, uint64_t *value, struct sbx_error *err)
{
        if (start == end)
                return sbx_error_set(err, EINVAL, "empty number");
        uint64_t v = 0;
        for (const char *p = start; p < end; p++) {
                if (*p < '0' || *p > '9')
                        return sbx_error_set(err, EINVAL, "'%.*s' is not a number",
                                             (int)(end - start), start);
                unsigned digit = (unsigned)(*p - '0');
                if (v > (UINT64_MAX - digit) / 10)
                        return sbx_error_set(err, ERANGE, "'%.*s' is too large", (int)(end - start),
                                             start);
                v = v * 10 + digit;
        }
        *value = v;
        return 0;
}

int cgroup_parse_keyed(const char *text, const char *key, uint64_t *value, struct sbx_error *err)
{
        size_t key_length = strlen(key);
        const char *line = text;
        while (line != NULL && *line != '\0') {
                const char *line_end = strchr(line, '\n');
                const char *next = line_end ? line_end + 1 : NULL;
                if (line_end == NULL)
                        line_end = line + strlen(line);
                /* The key must be the whole first word: "max" must not match "max_usage". */
                if ((size_t)(line_end - line) > key_length && memcmp(line, key, key_length) == 0 &&
                    line[key_length] == ' ') {
                        if (parse_decimal(line + key_length + 1, line_end, value, err) < 0)
                                return sbx_error_prefix(err, "key %s", key);
                        return 0;
                }
                line = next;
        }
        return sbx_error_set(err, ENOENT, "key %s not found", key);
}

int cgroup_parse_value(const char *text, uint64_t *value, struct sbx_error *err)
{
        size_t length = strlen(text);
        if (length > 0 && text[length - 1] == '\n')
                length--;
        if (length == 3 && memcmp(text, "max", 3) == 0) {
                *value = UINT64_MAX;
                return 0;
        }
        return parse_decimal(text, text + length, value, err);
}

int cgroup_parse_proc_path(const char *proc_cgroup, const char *controller, char *path, size_t size,
                           struct sbx_error *err)
{
        size_t want = strlen(controller);
        for (const char *line = proc_cgroup; *line != '\0';) {
                const char *end = strchr(line, '\n');
                if (end == NULL)
                        end = line + strlen(line);
                /* "<id>:<controllers>:<path>"; the path may itself contain ':'. */
                const char *first = memchr(line, ':', (size_t)(end - line));
                const char *second =
                        first ? memchr(first + 1, ':', (size_t)(end - first - 1)) : NULL;
                if (second != NULL) {
                        for (const char *c = first + 1; c < second;) {
                                const char *comma = memchr(c, ',', (size_t)(second - c));
                                const char *stop = comma ? comma : second;
                                if ((size_t)(stop - c) == want &&
                                    memcmp(c, controller, want) == 0) {
                                        size_t length = (size_t)(end - second - 1);
                                        if (length == 0 || length >= size)
                                                return sbx_error_set(err, ERANGE,
                                                                     "cgroup: bad path for %s",
                                                                     controller);
                                        memcpy(path, second + 1, length);
                                        path[length] = '\0';
                                        return 0;
                                }
                                c = stop + 1;
                        }
                }
                line = *end == '\0' ? end : end + 1;
        }
        return sbx_error_set(err, ENOENT, "cgroup: no %s hierarchy in /proc/self/cgroup",
                             controller);
}
