/* The names of the isolation backends a request or a tier can name. This is all the API process
 * knows of backends: the operations behind each name (struct sbx_backend, sbx_backend_find) are
 * the engine's, in sandbox/, and the API binary links none of them. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

/* How many backends there are (a unit test and a static assertion check the list). */
#define SBX_BACKEND_COUNT 3

/* The backend a request that names none runs on. */
#define SBX_BACKEND_DEFAULT "native"

/* The static name equal to name ("native"), or NULL when no backend is called that. */
const char *sbx_backend_name_find(const char *name);

/* The number of backends, and the index-th name (index below the count). */
size_t sbx_backend_count(void);
const char *sbx_backend_name_at(size_t index);

/* Every name, comma separated ("native, gvisor, uml"), for error messages. */
const char *sbx_backend_names(void);

struct sbx_language;

/* Whether the backend called name (a name of this list) runs language: the uml backend has no
 * compile stage, so it runs the interpreted languages only; native and gvisor run every one. */
bool sbx_backend_runs_language(const char *name, const struct sbx_language *language);

/* Whether the backend called name (a name of this list) has warm-pool entries for language: the
 * native backend for every language; the gvisor and uml backends for the languages whose loader
 * takes its execution on stdin (sandbox/agent.h), Python's, and, as exec entries, for the
 * languages without a loader that compile nothing (sh, bash). */
bool sbx_backend_pools_language(const char *name, const struct sbx_language *language);
