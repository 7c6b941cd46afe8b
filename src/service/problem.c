#include "service/problem.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/cleanup.h"

struct problem_class {
        unsigned status;
        const char *slug;
        const char *title;
};

/* The classes of error the API emits (README, "sandboxd serve"); the first of a status is its
 * default. Titles stay the same for every occurrence of a class, as RFC 9457 section 3.1.3 asks;
 * what varies goes into "detail". */
static const struct problem_class problem_classes[] = {
        {400, "invalid-request", "Invalid request"},
        {401, "unauthorized", "Unauthorized"},
        {403, "forbidden", "Forbidden"},
        {404, "not-found", "Not found"},
        /* A fleet's session or episode whose node died (service/placement_pg.h). */
        {404, "node-gone", "Node gone"},
        {405, "method-not-allowed", "Method not allowed"},
        {409, "conflict", "Conflict"},
        {413, "payload-too-large", "Payload too large"},
        {415, "unsupported-media-type", "Unsupported media type"},
        /* A fleet's session or episode that lives on another node, alive: the load balancer's
         * routing missed it (service/placement_pg.h). */
        {421, "misdirected", "Misdirected request"},
        /* The request was sound but the tenant's code could not do what it asked (an RL
         * environment whose first reset raised): the problem carries its error. */
        {422, "environment-failed", "Environment failed"},
        {429, "quota-exceeded", "Quota exceeded"},
        {503, "engine-unavailable", "Engine unavailable"},
        {503, SBX_PROBLEM_AT_CAPACITY, "At capacity"},
        {503, SBX_PROBLEM_SHUTTING_DOWN, "Shutting down"},
        {503, SBX_PROBLEM_STORE_UNAVAILABLE, "Store unavailable"},
};

static const struct problem_class internal_class = {500, "internal", "Internal error"};

static const struct problem_class *problem_class_find(unsigned status)
{
        for (size_t i = 0; i < SBX_ARRAY_SIZE(problem_classes); i++)
                if (problem_classes[i].status == status)
                        return &problem_classes[i];
        return &internal_class;
}

const char *sbx_problem_default_slug(unsigned status)
{
        return problem_class_find(status)->slug;
}

const char *sbx_problem_default_title(unsigned status)
{
        return problem_class_find(status)->title;
}

const char *sbx_problem_title(const char *slug)
{
        for (size_t i = 0; i < SBX_ARRAY_SIZE(problem_classes); i++)
                if (strcmp(problem_classes[i].slug, slug) == 0)
                        return problem_classes[i].title;
        return internal_class.title;
}

static json_t *problem_errors_new(const struct sbx_problem_field *errors, size_t n_errors)
{
        json_t *array = json_array();
        if (array == NULL)
                return NULL;
        for (size_t i = 0; i < n_errors; i++) {
                const char *field = errors[i].field ? errors[i].field : "";
                const char *message = errors[i].message ? errors[i].message : "";
                /* json_pack fails (NULL) on invalid UTF-8, and so does the whole problem. */
                if (json_array_append_new(array, json_pack("{s:s, s:s}", "field", field, "message",
                                                           message)) < 0) {
                        json_decref(array);
                        return NULL;
                }
        }
        return array;
}

json_t *sbx_problem_new(unsigned status, const char *slug, const char *detail,
                        const struct sbx_problem_field *errors, size_t n_errors)
{
        if (slug == NULL || (errors == NULL && n_errors > 0))
                return NULL;
        const char *title = sbx_problem_title(slug);
        if (detail == NULL)
                detail = title;
        size_t base_length = strlen(SBX_PROBLEM_TYPE_BASE), slug_length = strlen(slug);
        _cleanup_free_ char *type = malloc(base_length + slug_length + 1);
        if (type == NULL)
                return NULL;
        memcpy(type, SBX_PROBLEM_TYPE_BASE, base_length);
        memcpy(type + base_length, slug, slug_length + 1);
        /* "o" steals the array reference, also when json_pack fails. */
        return json_pack("{s:s, s:s, s:i, s:s, s:o}", "type", type, "title", title, "status",
                         (int)status, "detail", detail, "errors",
                         problem_errors_new(errors, n_errors));
}

/* Cuts text at its end so it does not stop inside a UTF-8 sequence: snprintf truncates by
 * bytes, and a half character would make the problem body invalid JSON. */
static void cut_to_utf8_boundary(char *text)
{
        size_t length = strlen(text);
        size_t start = length;
        while (start > 0 && ((unsigned char)text[start - 1] & 0xC0) == 0x80)
                start--;
        if (start == 0 || ((unsigned char)text[start - 1] & 0x80) == 0)
                return; /* ASCII last, or nothing but continuation bytes (not produced here) */
        unsigned char lead = (unsigned char)text[start - 1];
        size_t expected = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : 2;
        if (length - (start - 1) < expected)
                text[start - 1] = '\0';
}

void sbx_problem_set(struct sbx_problem *problem, unsigned status, const char *fmt, ...)
{
        problem->status = status;
        problem->slug = sbx_problem_default_slug(status);
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(problem->detail, sizeof(problem->detail), fmt, ap);
        va_end(ap);
        cut_to_utf8_boundary(problem->detail);
}

void sbx_problem_add_error(struct sbx_problem *problem, const char *field, const char *fmt, ...)
{
        if (problem->n_errors == SBX_PROBLEM_MAX_ERRORS)
                return;
        size_t i = problem->n_errors++;
        snprintf(problem->errors[i].field, sizeof(problem->errors[i].field), "%s", field);
        cut_to_utf8_boundary(problem->errors[i].field);
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(problem->errors[i].message, sizeof(problem->errors[i].message), fmt, ap);
        va_end(ap);
        cut_to_utf8_boundary(problem->errors[i].message);
}

json_t *sbx_problem_to_json(const struct sbx_problem *problem)
{
        struct sbx_problem_field fields[SBX_PROBLEM_MAX_ERRORS];
        for (size_t i = 0; i < problem->n_errors; i++)
                fields[i] = (struct sbx_problem_field){problem->errors[i].field,
                                                       problem->errors[i].message};
        return sbx_problem_new(problem->status, problem->slug, problem->detail, fields,
                               problem->n_errors);
}
