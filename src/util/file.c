#define _GNU_SOURCE
#include "util/file.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "util/cleanup.h"

int sbx_write_all(int fd, const void *data, size_t len)
{
        const char *p = data;
        while (len > 0) {
                ssize_t n = write(fd, p, len);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        return -1;
                }
                p += n;
                len -= (size_t)n;
        }
        return 0;
}

int sbx_write_file_at(int dirfd, const char *name, const char *text, struct sbx_error *err)
{
        _cleanup_close_ int fd = openat(dirfd, name, O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0)
                return sbx_error_set(err, errno, "open %s", name);
        /* One write() per value: cgroup and /proc control files parse each write as a whole. */
        size_t len = strlen(text);
        ssize_t n;
        do
                n = write(fd, text, len);
        while (n < 0 && errno == EINTR);
        if (n < 0)
                return sbx_error_set(err, errno, "write '%s' to %s", text, name);
        if ((size_t)n != len)
                return sbx_error_set(err, EIO, "short write to %s", name);
        return 0;
}

/* Reads from fd into buf until end of file or until buf (size bytes, one kept for the NUL) is
 * full; *length counts what is in buf, also on return from a full buffer. */
static int read_until_full(int fd, char *buf, size_t size, size_t *length)
{
        while (*length + 1 < size) {
                ssize_t n = read(fd, buf + *length, size - 1 - *length);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        return -1;
                }
                if (n == 0)
                        return 0;
                *length += (size_t)n;
        }
        return 0;
}

int sbx_read_file_at(int dirfd, const char *name, char *buf, size_t size, struct sbx_error *err)
{
        _cleanup_close_ int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0)
                return sbx_error_set(err, errno, "open %s", name);
        size_t len = 0;
        if (read_until_full(fd, buf, size, &len) < 0)
                return sbx_error_set(err, errno, "read %s", name);
        buf[len] = '\0';
        return (int)len;
}

int sbx_read_all_fd(int fd, size_t max, char **data, size_t *length, struct sbx_error *err)
{
        size_t alloc = max < 4096 ? max : 4096, used = 0;
        _cleanup_free_ char *buf = malloc(alloc + 1);
        if (buf == NULL)
                return sbx_error_set(err, ENOMEM, "allocate");
        for (;;) {
                if (used == alloc && alloc >= max) {
                        /* Full at the bound: exactly max bytes is fine if nothing follows. The
                         * probe byte lands where the NUL goes. */
                        ssize_t more;
                        do
                                more = read(fd, buf + used, 1);
                        while (more < 0 && errno == EINTR);
                        if (more < 0)
                                return sbx_error_set(err, errno, "read");
                        if (more > 0)
                                return sbx_error_set(err, EFBIG, "larger than %zu bytes", max);
                        break;
                }
                if (used == alloc) {
                        alloc = alloc * 2 > max ? max : alloc * 2;
                        char *grown = realloc(buf, alloc + 1);
                        if (grown == NULL)
                                return sbx_error_set(err, ENOMEM, "allocate");
                        buf = grown;
                }
                ssize_t n = read(fd, buf + used, alloc - used);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        return sbx_error_set(err, errno, "read");
                }
                if (n == 0)
                        break;
                used += (size_t)n;
        }
        buf[used] = '\0';
        *data = steal_pointer(&buf);
        if (length != NULL)
                *length = used;
        return 0;
}

/* Far above any kernel text file sandboxd reads (a mountinfo of thousands of mounts is a few
 * hundred KiB), and a bound all the same. */
#define TEXT_FILE_MAX (64u * 1024u * 1024u)

int sbx_read_text_at(int dirfd, const char *name, char **out, struct sbx_error *err)
{
        _cleanup_close_ int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0)
                return sbx_error_set(err, errno, "open %s", name);
        if (sbx_read_all_fd(fd, TEXT_FILE_MAX, out, NULL, err) < 0)
                return sbx_error_prefix(err, "%s", name);
        return 0;
}

int sbx_close_fds_except(const int *keep, size_t n)
{
        unsigned next = 3; /* the lowest fd not yet decided */
        for (;;) {
                /* The smallest kept fd at or above next. */
                int lowest = -1;
                for (size_t i = 0; i < n; i++)
                        if (keep[i] >= (int)next && (lowest < 0 || keep[i] < lowest))
                                lowest = keep[i];
                if (lowest < 0)
                        return close_range(next, ~0U, 0);
                if (lowest > (int)next && close_range(next, (unsigned)lowest - 1, 0) < 0)
                        return -1;
                next = (unsigned)lowest + 1;
        }
}

int sbx_send_record(int fd, const void *buf, size_t len, int attached_fd, int flags,
                    struct sbx_error *err)
{
        struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
        union {
                struct cmsghdr header;
                char space[CMSG_SPACE(sizeof(int))];
        } control;
        struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
        if (attached_fd >= 0) {
                memset(&control, 0, sizeof(control));
                msg.msg_control = control.space;
                msg.msg_controllen = sizeof(control.space);
                struct cmsghdr *cmsg = CMSG_FIRSTHDR(&msg);
                cmsg->cmsg_level = SOL_SOCKET;
                cmsg->cmsg_type = SCM_RIGHTS;
                cmsg->cmsg_len = CMSG_LEN(sizeof(int));
                memcpy(CMSG_DATA(cmsg), &attached_fd, sizeof(int));
        }
        ssize_t n;
        do
                n = sendmsg(fd, &msg, MSG_NOSIGNAL | flags);
        while (n < 0 && errno == EINTR);
        if (n < 0)
                return sbx_error_set(err, errno, "send message");
        if ((size_t)n != len)
                return sbx_error_set(err, EIO, "send message: %zd of %zu bytes sent", n, len);
        return 0;
}

int sbx_remove_tree_at(int parent_fd, const char *name, struct sbx_error *err)
{
        if (unlinkat(parent_fd, name, 0) == 0 || errno == ENOENT)
                return 0;
        if (errno != EISDIR && errno != EPERM)
                return sbx_error_set(err, errno, "remove %s", name);
        int fd = openat(parent_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return sbx_error_set(err, errno, "open %s", name);
        DIR *dir = fdopendir(fd);
        if (dir == NULL) {
                close(fd);
                return sbx_error_set(err, errno, "opendir %s", name);
        }
        int rc = 0;
        struct dirent *entry;
        while (rc == 0 && (errno = 0, entry = readdir(dir)) != NULL) {
                if (strcmp(entry->d_name, ".") == 0 || strcmp(entry->d_name, "..") == 0)
                        continue;
                rc = sbx_remove_tree_at(fd, entry->d_name, err);
        }
        if (rc == 0 && errno != 0)
                rc = sbx_error_set(err, errno, "readdir %s", name);
        closedir(dir);
        if (rc == 0 && unlinkat(parent_fd, name, AT_REMOVEDIR) < 0 && errno != ENOENT)
                rc = sbx_error_set(err, errno, "rmdir %s", name);
        return rc;
}
