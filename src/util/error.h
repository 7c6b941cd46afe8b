/* Errors are values: every function that can fail takes `struct sbx_error *err` last, fills it
 * and returns -1. Callers add context on the way up with sbx_error_prefix(). Nothing below main()
 * exits the process. */
#pragma once

#include <stddef.h>

#define SBX_ERROR_MESSAGE_MAX 512

struct sbx_error {
        int code;                            /* errno of the failure, or 0 when none applies */
        char message[SBX_ERROR_MESSAGE_MAX]; /* human readable, context first: "cgroup: mkdir x:
                                                ..." */
};

/* Fills err with errnum and a formatted message; appends strerror(errnum) when errnum != 0.
 * Always returns -1 so that callers can write `return sbx_error_set(err, errno, "...")`.
 * err may be NULL. */
int sbx_error_set(struct sbx_error *err, int errnum, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));

/* Like sbx_error_set, without the strerror text: for a refusal whose message says it all
 * (errnum is still the code). */
int sbx_error_plain(struct sbx_error *err, int errnum, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));

/* Prepends "<context>: " to the message already in err. Returns -1. err may be NULL. */
int sbx_error_prefix(struct sbx_error *err, const char *fmt, ...)
        __attribute__((format(printf, 2, 3)));

/* Resets err to "no error". */
void sbx_error_clear(struct sbx_error *err);
