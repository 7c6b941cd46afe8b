/* The languages a request can name, and how each runs a program file. */
#pragma once

#include <stddef.h>

struct sbx_language {
        const char *name;                    /* "python", "bash", "sh" */
        const char *file_name;               /* the program's name in /workspace: "main.py" */
        const char *interpreter;             /* absolute path inside the sandbox */
        const char *const *interpreter_args; /* between the interpreter and the file; NULL-ended */
};

/* The language called name, or NULL. */
const struct sbx_language *sbx_language_find(const char *name);

/* The names of every language, comma separated, for error messages. */
const char *sbx_language_names(void);
