/* RFC 9457 problem details: the body of every error response of the HTTP API.
 *
 *   {"type": "https://sandboxd.dev/problems/invalid-request", "title": "Invalid request",
 *    "status": 400, "detail": "unknown field 'colour'",
 *    "errors": [{"field": "colour", "message": "unknown field"}]}
 *
 * "type" is a stable URI per error class (a slug under SBX_PROBLEM_TYPE_BASE) that clients can
 * switch on; "title" is the fixed human summary of that class; "detail" explains this occurrence;
 * "errors" names every offending request field (an empty array when no field is to blame, so the
 * shape never varies). */
#pragma once

#include <stddef.h>

#include <jansson.h>

/* The media type of a problem body (RFC 9457 section 3). */
#define SBX_PROBLEM_CONTENT_TYPE "application/problem+json"

/* Prefix of every "type" URI; the slug follows it. */
#define SBX_PROBLEM_TYPE_BASE "https://sandboxd.dev/problems/"

/* The 503 classes beside the default "engine-unavailable" (the engine is gone or stuck). */
#define SBX_PROBLEM_AT_CAPACITY   "at-capacity"   /* max_sandboxes executions are running */
#define SBX_PROBLEM_SHUTTING_DOWN "shutting-down" /* SIGTERM: running executions may finish */

/* One offending request field: its JSON path ("limits.memory_mb", "files[2].path") and why. */
struct sbx_problem_field {
        const char *field;
        const char *message;
};

/* A new problem object (caller owns the reference), or NULL when memory runs out or an argument
 * is unusable (slug NULL, or a string that is not valid UTF-8).
 * status: the HTTP status code, also written into the body.
 * slug: the error class, e.g. "invalid-request"; "type" becomes SBX_PROBLEM_TYPE_BASE + slug.
 * title: NULL for the title of the slug's class (sbx_problem_title).
 * detail: this occurrence; NULL for the title.
 * errors/n_errors: the offending fields (errors may be NULL when n_errors is 0); copied. */
json_t *sbx_problem_new(unsigned status, const char *slug, const char *title, const char *detail,
                        const struct sbx_problem_field *errors, size_t n_errors);

/* The slug the API assigns to a status code ("invalid-request" for 400, "quota-exceeded" for
 * 429, ...); "internal" for any status without one of its own. Never NULL. */
const char *sbx_problem_default_slug(unsigned status);

/* A short fixed title for a status code ("Invalid request", "Quota exceeded", ...); "Internal
 * error" for any status without one of its own. Never NULL. */
const char *sbx_problem_default_title(unsigned status);

/* The title of the class called slug ("At capacity"); "Internal error" for an unknown slug. */
const char *sbx_problem_title(const char *slug);
