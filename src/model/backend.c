#include "model/backend.h"

#include <string.h>

#include "model/language.h"
#include "util/cleanup.h"

/* One name per backend of sandbox/backend.c; a unit test checks the two lists agree. */
#define NATIVE "native"
#define GVISOR "gvisor"
#define UML    "uml"
static const char *const backend_names[] = {NATIVE, GVISOR, UML};
_Static_assert(SBX_ARRAY_SIZE(backend_names) == SBX_BACKEND_COUNT, "SBX_BACKEND_COUNT");

const char *sbx_backend_name_find(const char *name)
{
        if (name == NULL)
                return NULL;
        for (size_t i = 0; i < SBX_ARRAY_SIZE(backend_names); i++)
                if (strcmp(backend_names[i], name) == 0)
                        return backend_names[i];
        return NULL;
}

size_t sbx_backend_count(void)
{
        return SBX_ARRAY_SIZE(backend_names);
}

const char *sbx_backend_name_at(size_t index)
{
        return index < SBX_ARRAY_SIZE(backend_names) ? backend_names[index] : NULL;
}

const char *sbx_backend_names(void)
{
        _Static_assert(SBX_ARRAY_SIZE(backend_names) == 3, "join every backend name");
        return NATIVE ", " GVISOR ", " UML;
}

bool sbx_backend_runs_language(const char *name, const struct sbx_language *language)
{
        return strcmp(name, UML) != 0 || !sbx_language_compiles(language);
}

bool sbx_backend_pools_language(const char *name, const struct sbx_language *language)
{
        if (strcmp(name, NATIVE) == 0)
                return true;
        bool python = language->loader != NULL && strcmp(language->loader, "python") == 0;
        /* Exec entries: a language without a loader that compiles nothing (sh, bash). */
        bool exec = language->loader == NULL && !sbx_language_compiles(language);
        return python || exec;
}
