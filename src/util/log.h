/* Structured logging to stderr, one logfmt line per event:
 *   sandboxd level=warn msg="cgroup: reclaimed orphan" slot=3
 * The level threshold comes from SANDBOXD_LOG (debug, info, warn, error; default warn) so that
 * `sandboxd run` stays quiet unless asked. */
#pragma once

enum sbx_log_level { SBX_LOG_DEBUG, SBX_LOG_INFO, SBX_LOG_WARN, SBX_LOG_ERROR };

/* Reads SANDBOXD_LOG once; safe to call more than once. */
void sbx_log_init(void);

/* Logs msg (printf-style) at level. */
void sbx_log(enum sbx_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define sbx_debug(...) sbx_log(SBX_LOG_DEBUG, __VA_ARGS__)
#define sbx_info(...)  sbx_log(SBX_LOG_INFO, __VA_ARGS__)
#define sbx_warn(...)  sbx_log(SBX_LOG_WARN, __VA_ARGS__)
