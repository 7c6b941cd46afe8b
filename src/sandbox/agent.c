#include "sandbox/agent.h"

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "sandbox/native/rlimit.h"
#include "util/buffer.h"
#include "util/file.h"
#include "util/parse.h"

/* The header never holds file contents, only names and numbers, and every request field in it is
 * bounded (SBX_MAX_* of engine/execution.h): 4 MiB is far beyond any valid one. */
#define AGENT_HEADER_MAX (4u * 1024u * 1024u)

static int put_field(struct sbx_buffer *header, const char *field)
{
        return sbx_buffer_append(header, field, strlen(field) + 1); /* with its NUL */
}

static int put_number(struct sbx_buffer *header, uint64_t value)
{
        char text[24];
        snprintf(text, sizeof(text), "%" PRIu64, value);
        return put_field(header, text);
}

static int build_header(const struct sbx_spec *spec, enum sbx_agent_channel channel,
                        struct sbx_buffer *header)
{
        size_t n_argv = 0, n_env = 0;
        while (spec->argv[n_argv] != NULL)
                n_argv++;
        while (spec->envp[n_env] != NULL)
                n_env++;
        int rc = put_number(header, n_argv);
        for (size_t i = 0; i < n_argv && rc == 0; i++)
                rc = put_field(header, spec->argv[i]);
        rc = rc < 0 ? rc : put_number(header, n_env);
        for (size_t i = 0; i < n_env && rc == 0; i++)
                rc = put_field(header, spec->envp[i]);
        rc = rc < 0 ? rc : put_number(header, spec->n_files);
        for (size_t i = 0; i < spec->n_files && rc == 0; i++) {
                rc = put_field(header, spec->files[i].path);
                rc = rc < 0 ? rc : put_number(header, spec->files[i].size);
                const struct sbx_file *file = &spec->files[i];
                const char *flags = file->executable ? (file->read_only ? "xr" : "x")
                                                     : (file->read_only ? "r" : "");
                rc = rc < 0 ? rc : put_field(header, flags);
        }
        rc = rc < 0 ? rc : put_field(header, spec->argv[1] != NULL ? spec->argv[1] : spec->argv[0]);
        rc = rc < 0 ? rc : put_number(header, SBX_LIMIT_COUNT);
        for (size_t i = 0; i < SBX_LIMIT_COUNT && rc == 0; i++)
                rc = put_number(header, sbx_limit_get(&spec->limits, &sbx_limit_fields[i]));
        if (channel == SBX_AGENT_STDIN) {
                struct rlimit_setting plan[RLIMIT_PLAN_MAX];
                size_t n = rlimit_plan(&spec->limits, plan);
                rc = rc < 0 ? rc : put_number(header, n);
                for (size_t i = 0; i < n && rc == 0; i++) {
                        rc = put_number(header, (uint64_t)plan[i].resource);
                        rc = rc < 0 ? rc : put_number(header, plan[i].value.rlim_cur);
                        rc = rc < 0 ? rc : put_number(header, plan[i].value.rlim_max);
                }
        }
        return rc < 0 || header->overflow ? -1 : 0;
}

/* The header, and its length prefix: the last field's NUL is the loader's split point too, and
 * is not sent. */
static int make_header(const struct sbx_spec *spec, enum sbx_agent_channel channel,
                       struct sbx_buffer *header, uint8_t prefix[4], struct sbx_error *err)
{
        if (spec->argv[0] == NULL)
                return sbx_error_set(err, EINVAL, "agent: no program in argv");
        if (channel == SBX_AGENT_STDIN && spec->artifact_fd > 0)
                return sbx_error_set(err, EINVAL, "agent: no file travels on a stdin channel");
        sbx_buffer_init(header, AGENT_HEADER_MAX);
        if (build_header(spec, channel, header) < 0) {
                sbx_buffer_free(header);
                return sbx_error_set(err, E2BIG, "agent: the execution does not fit a header");
        }
        size_t length = header->len - 1;
        for (int i = 0; i < 4; i++)
                prefix[i] = (uint8_t)(length >> (8 * i));
        return 0;
}

int sbx_agent_encode_execution(const struct sbx_spec *spec, struct sbx_buffer *out,
                               struct sbx_error *err)
{
        struct sbx_buffer header;
        uint8_t prefix[4];
        if (make_header(spec, SBX_AGENT_STDIN, &header, prefix, err) < 0)
                return -1;
        int rc = sbx_buffer_append(out, prefix, sizeof(prefix));
        rc = rc < 0 ? rc : sbx_buffer_append(out, header.data, header.len - 1);
        sbx_buffer_free(&header);
        for (size_t i = 0; rc == 0 && i < spec->n_files; i++)
                rc = sbx_buffer_append(out, spec->files[i].data, spec->files[i].size);
        if (rc < 0)
                return sbx_error_set(err, ENOMEM, "agent: the execution");
        if (out->overflow)
                return sbx_error_set(err, E2BIG, "agent: the execution is larger than %zu bytes",
                                     out->cap);
        return 0;
}

int sbx_agent_send_execution(int fd, enum sbx_agent_channel channel, const struct sbx_spec *spec,
                             struct sbx_error *err)
{
        struct sbx_buffer header;
        uint8_t prefix[4];
        if (make_header(spec, channel, &header, prefix, err) < 0)
                return -1;
        size_t length = header.len - 1;
        int rc = 0;
        /* A compile's artifact file goes attached to the prefix (exec mode's init reads it with
         * the prefix and hands it to the program as its fd 3). */
        if (channel == SBX_AGENT_STDIN) {
                if (sbx_write_all(fd, prefix, sizeof(prefix)) < 0)
                        rc = sbx_error_set(err, errno, "agent: send the execution");
        } else if (sbx_send_record(fd, prefix, sizeof(prefix),
                                   spec->artifact_fd > 0 ? spec->artifact_fd : -1, 0, err) < 0) {
                rc = sbx_error_prefix(err, "agent: send the execution");
        }
        if (rc == 0 && sbx_write_all(fd, header.data, length) < 0)
                rc = sbx_error_set(err, errno, "agent: send the execution");
        sbx_buffer_free(&header);
        for (size_t i = 0; rc == 0 && i < spec->n_files; i++)
                if (sbx_write_all(fd, spec->files[i].data, spec->files[i].size) < 0)
                        rc = sbx_error_set(err, errno, "agent: send %s", spec->files[i].path);
        return rc;
}

/* ---- receiving (exec mode's init) ----------------------------------------------------------- */

/* 1 with n bytes read, 0 at end of file before the first byte, -1 (errno) otherwise. */
static int read_exactly(int fd, void *buf, size_t n)
{
        size_t got = 0;
        while (got < n) {
                ssize_t r = read(fd, (char *)buf + got, n - got);
                if (r < 0 && errno == EINTR)
                        continue;
                if (r <= 0) {
                        if (r == 0 && got == 0)
                                return 0;
                        if (r == 0)
                                errno = EPROTO;
                        return -1;
                }
                got += (size_t)r;
        }
        return 1;
}

/* The length prefix, and the file attached to it if any (*attached, else -1): the one recvmsg
 * that reads the prefix's first byte carries it. As read_exactly otherwise. Any other attached
 * file (more than one, or truncated ones) is closed and fails the read. */
static int receive_prefix(int fd, uint8_t prefix[4], int *attached)
{
        *attached = -1;
        union {
                struct cmsghdr header;
                char space[CMSG_SPACE(4 * sizeof(int))]; /* room to see what is too many */
        } control;
        struct iovec iov = {.iov_base = prefix, .iov_len = 4};
        struct msghdr msg = {.msg_iov = &iov,
                             .msg_iovlen = 1,
                             .msg_control = control.space,
                             .msg_controllen = sizeof(control.space)};
        ssize_t n;
        do
                n = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
        while (n < 0 && errno == EINTR);
        if (n < 0)
                return -1;
        size_t received = 0;
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c != NULL; c = CMSG_NXTHDR(&msg, c)) {
                if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
                        continue;
                size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
                for (size_t i = 0; i < count; i++, received++) {
                        int one;
                        memcpy(&one, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
                        if (received == 0)
                                *attached = one;
                        else
                                close(one);
                }
        }
        bool whole = received <= 1 && (msg.msg_flags & MSG_CTRUNC) == 0;
        if (n == 0 || !whole ||
            ((size_t)n < 4 && read_exactly(fd, prefix + n, 4 - (size_t)n) != 1)) {
                if (*attached >= 0)
                        close(*attached);
                *attached = -1;
                if (n == 0 && whole)
                        return 0;
                errno = EPROTO;
                return -1;
        }
        return 1;
}

/* The fields of the header, one after the other. */
struct fields {
        char *next;
        char *end;
};

static const char *take_field(struct fields *f)
{
        if (f->next >= f->end)
                return NULL;
        char *field = f->next;
        f->next += strlen(field) + 1;
        return field;
}

static bool take_count(struct fields *f, size_t max, size_t *count)
{
        const char *text = take_field(f);
        uint64_t value;
        struct sbx_error ignored = {0};
        if (text == NULL || sbx_parse_u64(text, max, &value, &ignored) < 0)
                return false;
        *count = (size_t)value;
        return true;
}

/* A NULL-terminated array of the next count fields. */
static const char **take_strings(struct fields *f, size_t count)
{
        const char **strings = calloc(count + 1, sizeof(*strings));
        for (size_t i = 0; strings != NULL && i < count; i++)
                if ((strings[i] = take_field(f)) == NULL) {
                        free(strings);
                        return NULL;
                }
        return strings;
}

void sbx_agent_free_files(struct sbx_agent_received *received)
{
        for (size_t i = 0; received->files != NULL && i < received->spec.n_files; i++) {
                free((void *)received->files[i].data);
                received->files[i].data = NULL;
                received->files[i].size = 0;
        }
}

void sbx_agent_received_free(struct sbx_agent_received *received)
{
        sbx_agent_free_files(received);
        free(received->files);
        free(received->argv);
        free(received->envp);
        free(received->header);
        *received = (struct sbx_agent_received){0};
}

/* Reads the message's body into out after its header (read already): -1 with err, or 1. */
static int receive_body(int fd, const struct sbx_spec *base, struct sbx_agent_received *out,
                        size_t length, struct sbx_error *err)
{
        if (read_exactly(fd, out->header, length) != 1)
                return sbx_error_set(err, EPROTO, "agent: a truncated header");
        out->header[length] = '\0';
        struct fields f = {.next = out->header, .end = out->header + length + 1};

        out->spec = *base;
        size_t n_argv, n_env, n_files;
        if (!take_count(&f, SBX_MAX_ARGS + 8, &n_argv) || n_argv == 0 ||
            (out->argv = take_strings(&f, n_argv)) == NULL ||
            !take_count(&f, SBX_MAX_ENV + 16, &n_env) ||
            (out->envp = take_strings(&f, n_env)) == NULL ||
            !take_count(&f, SBX_MAX_FILES + 1, &n_files))
                return sbx_error_set(err, EPROTO, "agent: a malformed header");
        out->files = calloc(n_files + 1, sizeof(*out->files));
        if (out->files == NULL)
                return sbx_error_set(err, ENOMEM, "agent: allocate the files");
        uint64_t total = 0;
        for (size_t i = 0; i < n_files; i++) {
                const char *path = take_field(&f);
                size_t size;
                bool sized = take_count(&f, base->limits.disk_bytes, &size);
                const char *flags = sized ? take_field(&f) : NULL;
                if (path == NULL || flags == NULL || !sbx_request_path_valid(path) ||
                    strspn(flags, "xr") != strlen(flags))
                        return sbx_error_set(err, EPROTO, "agent: a malformed file entry");
                total += size;
                out->files[i] = (struct sbx_file){.path = path,
                                                  .size = size,
                                                  .executable = strchr(flags, 'x') != NULL,
                                                  .read_only = strchr(flags, 'r') != NULL};
        }
        out->spec.n_files = n_files; /* so that a failure below frees what was read */
        size_t n_limits;
        if (take_field(&f) == NULL || !take_count(&f, SBX_LIMIT_COUNT, &n_limits) ||
            n_limits != SBX_LIMIT_COUNT)
                return sbx_error_set(err, EPROTO, "agent: a malformed header end");
        for (size_t i = 0; i < SBX_LIMIT_COUNT; i++) {
                size_t value;
                if (!take_count(&f, SIZE_MAX, &value))
                        return sbx_error_set(err, EPROTO, "agent: a malformed limit");
                sbx_limit_set(&out->spec.limits, &sbx_limit_fields[i], value);
        }
        const char *bad_limit = NULL;
        if (f.next != f.end || !sbx_limits_valid(&out->spec.limits, &bad_limit))
                return sbx_error_set(err, EPROTO, "agent: the limits (%s)",
                                     bad_limit != NULL ? bad_limit : "trailing bytes");
        if (total > base->limits.disk_bytes)
                return sbx_error_set(err, EFBIG, "agent: %llu bytes of files for a %llu-byte disk",
                                     (unsigned long long)total,
                                     (unsigned long long)base->limits.disk_bytes);
        for (size_t i = 0; i < n_files; i++) {
                void *data = malloc(out->files[i].size ? out->files[i].size : 1);
                if (data == NULL)
                        return sbx_error_set(err, ENOMEM, "agent: allocate %s", out->files[i].path);
                out->files[i].data = data;
                if (out->files[i].size > 0 && read_exactly(fd, data, out->files[i].size) != 1)
                        return sbx_error_set(err, EPROTO, "agent: %s truncated",
                                             out->files[i].path);
        }
        out->spec.argv = out->argv;
        out->spec.envp = out->envp;
        out->spec.files = out->files;
        return 1;
}

int sbx_agent_receive_execution(int fd, const struct sbx_spec *base, struct sbx_agent_received *out,
                                struct sbx_error *err)
{
        *out = (struct sbx_agent_received){.spec.artifact_fd = -1};
        uint8_t prefix[4];
        int attached = -1;
        int got = receive_prefix(fd, prefix, &attached);
        if (got <= 0)
                return got == 0 ? 0 : sbx_error_set(err, errno, "agent: read the execution");
        size_t length = prefix[0] | (size_t)prefix[1] << 8 | (size_t)prefix[2] << 16 |
                        (size_t)prefix[3] << 24;
        int rc = 1;
        if (length == 0 || length > AGENT_HEADER_MAX)
                rc = sbx_error_set(err, EPROTO, "agent: a header of %zu bytes", length);
        else if ((out->header = malloc(length + 1)) == NULL)
                rc = sbx_error_set(err, ENOMEM, "agent: allocate the header");
        else
                rc = receive_body(fd, base, out, length, err);
        if (rc < 0) {
                if (attached >= 0)
                        close(attached);
                sbx_agent_received_free(out);
                return -1;
        }
        out->spec.artifact_fd = attached;
        return 1;
}
