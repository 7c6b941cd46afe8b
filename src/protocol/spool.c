/* The engine's spool (spool.h). */
#define _GNU_SOURCE
#include "protocol/spool.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include "protocol/protocol.h"
#include "util/cleanup.h"
#include "util/file.h"

int sbx_spool_write(const char *dir, uid_t owner, const char *execution_id, const void *message,
                    size_t len, struct sbx_error *err)
{
        if (!sbx_execution_id_valid(execution_id))
                return sbx_error_set(err, EINVAL, "spool: not an execution id");
        _cleanup_close_ int dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (dirfd < 0)
                return sbx_error_set(err, errno, "spool: open %s", dir);
        char name[SBX_EXECUTION_ID_CHARS + sizeof(SBX_SPOOL_FILE_SUFFIX)];
        char temporary[SBX_EXECUTION_ID_CHARS + sizeof(".tmp") + 1];
        snprintf(name, sizeof(name), "%s%s", execution_id, SBX_SPOOL_FILE_SUFFIX);
        snprintf(temporary, sizeof(temporary), ".%s.tmp", execution_id);

        int flags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
        _cleanup_close_ int fd = openat(dirfd, temporary, flags, 0600);
        if (fd < 0 && errno == EEXIST) {
                /* A leftover of a worker that died mid-write; its execution id is this one. */
                unlinkat(dirfd, temporary, 0);
                fd = openat(dirfd, temporary, flags, 0600);
        }
        if (fd < 0)
                return sbx_error_set(err, errno, "spool: create %s/%s", dir, temporary);
        if (sbx_write_all(fd, message, len) < 0 || fchown(fd, owner, owner) < 0) {
                int saved = errno;
                unlinkat(dirfd, temporary, 0);
                return sbx_error_set(err, saved, "spool: write %s/%s", dir, temporary);
        }
        if (renameat(dirfd, temporary, dirfd, name) < 0) {
                int saved = errno;
                unlinkat(dirfd, temporary, 0);
                return sbx_error_set(err, saved, "spool: rename to %s/%s", dir, name);
        }
        return 0;
}
