/* The languages a request can name, and how each runs a program file. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

struct sbx_language {
        const char *name;                    /* "python", "bash", "sh" */
        const char *file_name;               /* the program's name in /workspace: "main.py" */
        const char *interpreter;             /* absolute path inside the sandbox */
        const char *const *interpreter_args; /* between the interpreter and the file; NULL-ended */
        bool pooled;                         /* has a warm-pool loader (guest/) */
};

/* The language called name, or NULL. */
const struct sbx_language *sbx_language_find(const char *name);

/* The number of languages, and the index-th of them (index below the count), in the order error
 * messages and the OpenAPI document list them. */
size_t sbx_language_count(void);
const struct sbx_language *sbx_language_at(size_t index);

/* The names of every language, comma separated ("python, bash, sh"), for error messages. */
const char *sbx_language_names(void);
