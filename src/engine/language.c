#include "engine/language.h"

#include <string.h>

#include "util/cleanup.h"

static const char *const no_args[] = {NULL};

static const struct sbx_language languages[] = {
        {"python", "main.py", "/usr/bin/python3", no_args},
        {"bash", "main.sh", "/bin/bash", no_args},
        {"sh", "main.sh", "/bin/sh", no_args},
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

const char *sbx_language_names(void)
{
        return "python, bash, sh";
}
