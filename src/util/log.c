#include "util/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static enum sbx_log_level threshold = SBX_LOG_WARN;

static const char *const level_names[] = {"debug", "info", "warn", "error"};

void sbx_log_init(enum sbx_log_level default_level)
{
        threshold = default_level;
        const char *value = getenv("SANDBOXD_LOG");
        if (value == NULL)
                return;
        for (size_t i = 0; i < sizeof(level_names) / sizeof(level_names[0]); i++)
                if (strcmp(value, level_names[i]) == 0)
                        threshold = (enum sbx_log_level)i;
}

void sbx_log(enum sbx_log_level level, const char *fmt, ...)
{
        if (level < threshold)
                return;
        char message[1024];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(message, sizeof(message), fmt, ap);
        va_end(ap);
        /* Quote the message so that a line stays one logfmt record whatever it contains. */
        char quoted[2 * sizeof(message) + 1];
        size_t j = 0;
        for (size_t i = 0; message[i] != '\0' && j + 2 < sizeof(quoted); i++) {
                char c = message[i];
                if (c == '"' || c == '\\')
                        quoted[j++] = '\\';
                quoted[j++] = (c == '\n') ? ' ' : c;
        }
        quoted[j] = '\0';
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        struct tm tm;
        gmtime_r(&ts.tv_sec, &tm);
        fprintf(stderr, "sandboxd ts=%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ level=%s msg=\"%s\"\n",
                tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                ts.tv_nsec / 1000000, level_names[level], quoted);
}
