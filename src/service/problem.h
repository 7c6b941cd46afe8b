/* RFC 9457 problem details: the body of every error response of the HTTP API, and the one
 * description of the error classes (slug, status, title) that the settings pipeline and the HTTP
 * layer both use.
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

/* Errors a problem names at most: enough to fix a request; bounds the reply to a bad one. */
#define SBX_PROBLEM_MAX_ERRORS 16

/* The media type of a problem body (RFC 9457 section 3). */
#define SBX_PROBLEM_CONTENT_TYPE "application/problem+json"

/* Prefix of every "type" URI; the slug follows it. */
#define SBX_PROBLEM_TYPE_BASE "https://sandboxd.dev/problems/"

/* The 503 classes beside the default "engine-unavailable" (the engine is gone or stuck). */
#define SBX_PROBLEM_AT_CAPACITY   "at-capacity"   /* max_sandboxes executions are running */
#define SBX_PROBLEM_SHUTTING_DOWN "shutting-down" /* SIGTERM: running executions may finish */
#define SBX_PROBLEM_STORE_UNAVAILABLE                                                              \
        "store-unavailable" /* the fleet's PostgreSQL cannot be reached: nothing was run */

/* One offending request field: its JSON path ("limits.memory_mb", "files[2].path") and why. */
struct sbx_problem_field {
        const char *field;
        const char *message;
};

/* A problem as it is built up (the settings pipeline reports into one): its class and this
 * occurrence. Strings are valid UTF-8, cut at a character boundary when long. */
struct sbx_problem {
        unsigned status;  /* the HTTP status */
        const char *slug; /* its class: a static string of the class table */
        char detail[512]; /* one sentence for humans */
        struct {
                char field[128]; /* JSON path: "limits.memory_mb", "files[2].path" */
                char message[256];
        } errors[SBX_PROBLEM_MAX_ERRORS];
        size_t n_errors; /* errors past SBX_PROBLEM_MAX_ERRORS are dropped */
};

/* Makes problem the default class of status, with detail (printf-style); the errors added so far
 * stay. Start from a zeroed struct. */
void sbx_problem_set(struct sbx_problem *problem, unsigned status, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));

/* Adds an offending field (dropped past SBX_PROBLEM_MAX_ERRORS); message is printf-style. */
void sbx_problem_add_error(struct sbx_problem *problem, const char *field, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));

/* The problem as its JSON body (caller owns the reference), or NULL when memory runs out. */
json_t *sbx_problem_to_json(const struct sbx_problem *problem);

/* A new problem object (caller owns the reference), or NULL when memory runs out or an argument
 * is unusable (slug NULL, or a string that is not valid UTF-8).
 * status: the HTTP status code, also written into the body.
 * slug: the error class, e.g. "invalid-request"; "type" becomes SBX_PROBLEM_TYPE_BASE + slug and
 * "title" the class's title (sbx_problem_title).
 * detail: this occurrence; NULL for the title.
 * errors/n_errors: the offending fields (errors may be NULL when n_errors is 0); copied. */
json_t *sbx_problem_new(unsigned status, const char *slug, const char *detail,
                        const struct sbx_problem_field *errors, size_t n_errors);

/* The slug the API assigns to a status code ("invalid-request" for 400, "quota-exceeded" for
 * 429, ...); "internal" for any status without one of its own. Never NULL. */
const char *sbx_problem_default_slug(unsigned status);

/* A short fixed title for a status code ("Invalid request", "Quota exceeded", ...); "Internal
 * error" for any status without one of its own. Never NULL. */
const char *sbx_problem_default_title(unsigned status);

/* The title of the class called slug ("At capacity"); "Internal error" for an unknown slug. */
const char *sbx_problem_title(const char *slug);
