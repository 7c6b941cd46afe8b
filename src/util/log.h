/* Structured logging to stderr, one logfmt line per event:
 *   sandboxd level=warn msg="cgroup: reclaimed orphan" slot=3
 * The level threshold comes from SANDBOXD_LOG (debug, info, warn, error); without it, `sandboxd
 * serve` logs from info (where it listens, when it stops) and `sandboxd run` from warn, so that it
 * stays quiet unless asked. */
#pragma once

enum sbx_log_level { SBX_LOG_DEBUG, SBX_LOG_INFO, SBX_LOG_WARN, SBX_LOG_ERROR };

/* Sets the threshold: SANDBOXD_LOG when it names a level, else default_level. */
void sbx_log_init(enum sbx_log_level default_level);

/* Logs msg (printf-style) at level. */
void sbx_log(enum sbx_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define sbx_debug(...) sbx_log(SBX_LOG_DEBUG, __VA_ARGS__)
#define sbx_info(...)  sbx_log(SBX_LOG_INFO, __VA_ARGS__)
#define sbx_warn(...)  sbx_log(SBX_LOG_WARN, __VA_ARGS__)
