/* Small-file helpers for kernel interfaces (cgroup files, /proc maps). Paths are opened relative
 * to a directory fd (or AT_FDCWD for /proc and /sys paths) with O_NOFOLLOW|O_CLOEXEC: the last
 * component is never a link the supervisor would follow. */
#pragma once

#include <stddef.h>

#include "util/error.h"

/* Writes the whole string to dirfd/name (O_WRONLY, no create, no truncation semantics beyond what
 * the kernel file does). dirfd may be AT_FDCWD. */
int sbx_write_file_at(int dirfd, const char *name, const char *text, struct sbx_error *err);

/* Reads at most size-1 bytes of dirfd/name into buf and NUL-terminates it. Returns the length. */
int sbx_read_file_at(int dirfd, const char *name, char *buf, size_t size, struct sbx_error *err);

/* Closes every fd from 3 up except the n in keep (a -1, a 0-2 or a repeat among them is
 * ignored): what a forked process inherited but has no business with. 0, or -1 with errno. */
int sbx_close_fds_except(const int *keep, size_t n);

/* Writes all of len bytes to fd, retrying on EINTR and short writes. Returns 0 or -1 (errno). */
int sbx_write_all(int fd, const void *data, size_t len);

/* Sends buf[0..len) with one sendmsg (MSG_NOSIGNAL | flags) on a socket, with attached_fd
 * attached (SCM_RIGHTS; -1 for none): all of it or -1 with err ("send message"). */
int sbx_send_record(int fd, const void *buf, size_t len, int attached_fd, int flags,
                    struct sbx_error *err);

/* Reads fd to its end (at most max bytes, else EFBIG) into a new malloc'd buffer *data, NUL-
 * terminated after its *length bytes (length may be NULL). */
int sbx_read_all_fd(int fd, size_t max, char **data, size_t *length, struct sbx_error *err);

/* Reads the whole of dirfd/name, a kernel text file of unknown size (mountinfo, cgroup.procs),
 * into a new malloc'd NUL-terminated buffer *out. */
int sbx_read_text_at(int dirfd, const char *name, char **out, struct sbx_error *err);

/* Removes parent_fd/name and, when it is a directory, everything below it, never following a link
 * (a link is removed, not its target). An absent name is not an error. For directories sandboxd
 * made and owns (a gVisor sandbox's bundle and state). */
int sbx_remove_tree_at(int parent_fd, const char *name, struct sbx_error *err);
