#include "model/language.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "util/cleanup.h"

static const char *const no_args[] = {NULL};

static const struct sbx_language languages[] = {
        {"python", "main.py", "/usr/bin/python3", no_args, .pooled = true},
        {"bash", "main.sh", "/bin/bash", no_args, .pooled = false},
        {"sh", "main.sh", "/bin/sh", no_args, .pooled = false},
};

const struct sbx_language *sbx_language_find(const char *name)
{
        if (name == NULL)
                return NULL;
        for (size_t i = 0; i < SBX_ARRAY_SIZE(languages); i++)
                if (strcmp(languages[i].name, name) == 0)
                        return &languages[i];
        return NULL;
}

size_t sbx_language_count(void)
{
        return SBX_ARRAY_SIZE(languages);
}

const struct sbx_language *sbx_language_at(size_t index)
{
        return index < SBX_ARRAY_SIZE(languages) ? &languages[index] : NULL;
}

/* Each name and its ", " fit: names are short words. */
static char language_names[SBX_ARRAY_SIZE(languages) * 16];
static pthread_once_t language_names_once = PTHREAD_ONCE_INIT;

static void join_language_names(void)
{
        size_t used = 0;
        for (size_t i = 0; i < SBX_ARRAY_SIZE(languages) && used < sizeof(language_names); i++)
                used += (size_t)snprintf(language_names + used, sizeof(language_names) - used,
                                         "%s%s", i > 0 ? ", " : "", languages[i].name);
}

const char *sbx_language_names(void)
{
        /* API threads ask at once; the text is made once. */
        pthread_once(&language_names_once, join_language_names);
        return language_names;
}
