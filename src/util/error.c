#include "util/error.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int sbx_error_set(struct sbx_error *err, int errnum, const char *fmt, ...)
{
        if (err == NULL)
                return -1;
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(err->message, sizeof(err->message), fmt, ap);
        va_end(ap);
        if (n < 0)
                err->message[0] = '\0';
        size_t len = strnlen(err->message, sizeof(err->message));
        if (errnum != 0 && len < sizeof(err->message))
                snprintf(err->message + len, sizeof(err->message) - len, ": %s", strerror(errnum));
        err->code = errnum;
        return -1;
}

int sbx_error_plain(struct sbx_error *err, int errnum, const char *fmt, ...)
{
        if (err == NULL)
                return -1;
        va_list ap;
        va_start(ap, fmt);
        if (vsnprintf(err->message, sizeof(err->message), fmt, ap) < 0)
                err->message[0] = '\0';
        va_end(ap);
        err->code = errnum;
        return -1;
}

int sbx_error_prefix(struct sbx_error *err, const char *fmt, ...)
{
        if (err == NULL)
                return -1;
        char prefix[SBX_ERROR_MESSAGE_MAX];
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(prefix, sizeof(prefix), fmt, ap);
        va_end(ap);
        if (n < 0)
                return -1;
        /* Joined by hand: a message that no longer fits is cut at the end, on purpose. */
        char joined[SBX_ERROR_MESSAGE_MAX];
        size_t used = 0;
        const char *parts[] = {prefix, ": ", err->message};
        for (size_t i = 0; i < sizeof(parts) / sizeof(parts[0]); i++) {
                size_t len = strnlen(parts[i], sizeof(joined));
                if (len > sizeof(joined) - 1 - used)
                        len = sizeof(joined) - 1 - used;
                memcpy(joined + used, parts[i], len);
                used += len;
        }
        joined[used] = '\0';
        memcpy(err->message, joined, used + 1);
        return -1;
}

void sbx_error_clear(struct sbx_error *err)
{
        if (err == NULL)
                return;
        err->code = 0;
        err->message[0] = '\0';
}
