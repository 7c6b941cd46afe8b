/* The languages a request can name: one row each, with everything sandboxd needs to run a
 * program in it (DESIGN.md "Languages and the compile cache"). Adding a language is a row of
 * language.c and its tests. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/limits.h"

struct sbx_language {
        const char *name;       /* "python", "javascript", "cpp" */
        const char *aliases;    /* other names a request may use, space-separated: "js node" */
        const char *extensions; /* file extensions that mean it, space-separated: ".js .mjs .cjs" */
        const char *file_name;  /* the entrypoint's default name in /workspace: "main.js" */
        /* How the program runs: interpreter, its fixed arguments, the program's path, the
         * request's args. interpreter NULL: the program (a compiled artifact) is the executable. */
        const char *interpreter;             /* absolute path inside the sandbox */
        const char *const *interpreter_args; /* NULL-ended */
        /* Compiled languages: a script /bin/sh runs in the compile stage's own sandbox, in
         * /workspace, with the sources as its arguments (the entrypoint first) and the path it
         * must build the artifact at in $SBX_ARTIFACT. NULL: the program runs as written. */
        const char *compile;
        bool compile_all_sources; /* every file with one of extensions; else the entrypoint only */
        const char *artifact;     /* the artifact's name in the run stage's /workspace: "main" */
        const char *const *compile_env; /* "NAME=value" entries the compile adds; NULL-ended */
        /* The compile stage's limits: the run's, with these instead (a compiler needs more than
         * most programs; DESIGN.md). */
        uint64_t compile_wall_ms;
        uint64_t compile_memory_bytes;
        const char *const *version; /* argv that prints the toolchain's version, or NULL */
        /* The file whose identity keys the compile cache (engine/compile_cache.h): the
         * compiler. NULL: version[0]. */
        const char *compiler;
        /* The warm-pool loader (guest/) whose interpreter waits for the program in a pool entry:
         * "python" or "node" (engine/execution.c embeds them); NULL: the language's entries are
         * exec entries, whose init starts the program. */
        const char *loader;
        /* The session agent (guest/session_agent.py) runs it: sessions and session pools. */
        bool sessions;
};

/* The language called name, by its name or one of its aliases, or NULL. */
const struct sbx_language *sbx_language_find(const char *name);

/* The language a file name's extension says ("main.rs": rust), or NULL. */
const struct sbx_language *sbx_language_for_path(const char *path);

/* Whether path's extension is one of language's. */
bool sbx_language_matches_path(const struct sbx_language *language, const char *path);

/* The number of languages, and the index-th of them (index below the count), in the order error
 * messages and the OpenAPI document list them. */
size_t sbx_language_count(void);
const struct sbx_language *sbx_language_at(size_t index);

/* The names of every language, comma separated ("python, bash, sh"), for error messages. */
const char *sbx_language_names(void);

/* Whether language has a compile stage. */
static inline bool sbx_language_compiles(const struct sbx_language *language)
{
        return language->compile != NULL;
}

/* The compile stage's limits for a run with run_limits: those, with the language's wall clock,
 * CPU time and memory, more room for the compiler's processes and files, and never less than
 * the run's own. */
void sbx_language_compile_limits(const struct sbx_language *language,
                                 const struct sbx_limits *run_limits, struct sbx_limits *out);

/* A tier's compile ceilings unless it sets its own (max_compile_NAME): what every language's
 * compile gets with the built-in limits, so that none is lowered by default. */
void sbx_language_compile_ceilings(struct sbx_limits *out);
