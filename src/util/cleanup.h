/* Ownership with cleanup attributes: a variable declared with one of these is released when it
 * goes out of scope, so no early return leaks. Hand ownership on with steal_pointer()/take_fd(). */
#pragma once

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static inline void sbx_freep(void *p)
{
        free(*(void **)p);
}

/* Closes *fd if open and marks it closed (-1); the cleanup of _cleanup_close_, and for fds that
 * are closed before their scope ends. */
static inline void sbx_closep(int *fd)
{
        if (*fd >= 0) {
                int saved = errno; /* close() must not clobber the errno being reported */
                close(*fd);
                errno = saved;
                *fd = -1;
        }
}

static inline void sbx_closedirp(DIR **d)
{
        if (*d != NULL)
                closedir(*d);
}

#define _cleanup_(fn)      __attribute__((cleanup(fn)))
#define _cleanup_free_     _cleanup_(sbx_freep)
#define _cleanup_close_    _cleanup_(sbx_closep)
#define _cleanup_closedir_ _cleanup_(sbx_closedirp)

/* Returns *pp and sets it to NULL, so the cleanup attribute no longer frees it. */
#define steal_pointer(pp)                                                                          \
        ({                                                                                         \
                __typeof__(*(pp)) stolen_ = *(pp);                                                 \
                *(pp) = NULL;                                                                      \
                stolen_;                                                                           \
        })

/* Returns *fdp and sets it to -1, so the cleanup attribute no longer closes it. */
static inline int take_fd(int *fdp)
{
        int fd = *fdp;
        *fdp = -1;
        return fd;
}

#define SBX_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
