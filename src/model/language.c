#include "model/language.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "util/cleanup.h"

static const char *const no_args[] = {NULL};
static const char *const jar_args[] = {"-jar", NULL};

/* The JDK of Debian's default-jdk-headless, by its stable name (/usr/bin/java goes through
 * /etc/alternatives, which a host may point at another JDK). */
#define JDK "/usr/lib/jvm/default-java/bin/"

/* TypeScript is transpiled, not type-checked (what Deno, Bun and ts-node's transpile-only mode
 * do): a program that runs is not refused for a missing type declaration, and a syntax error is
 * a compile error with TypeScript's own diagnostic. Every .ts source is transpiled; the
 * entrypoint's JavaScript is the artifact, and when there are others it starts (on its first
 * line: line numbers stay the entrypoint's) by handing node their JavaScript for the .ts files
 * it loads (`import "./util"` or "./util.js", as TypeScript writes them), so that one artifact
 * holds the whole program. (The script is in single quotes for the shell: it has none.) */
#define TYPESCRIPT_TRANSPILE                                                                       \
        "/usr/bin/node -e '\n"                                                                     \
        "const ts = require(\"/usr/share/nodejs/typescript\");\n"                                  \
        "const fs = require(\"fs\");\n"                                                            \
        "const path = require(\"path\");\n"                                                        \
        "/* Run first in the artifact of a program of several sources: node takes their "          \
        "JavaScript from\n"                                                                        \
        "   js for the .ts files it loads, and \"./util.js\" finds util.ts as TypeScript writes "  \
        "it. */\n"                                                                                 \
        "function hook(js) {\n"                                                                    \
        "  const M = require(\"module\"), resolve = M._resolveFilename;\n"                         \
        "  M._extensions[\".ts\"] = (m, f) => {\n"                                                 \
        "    if (!(f in js)) throw new Error(f + \": not one of the compiled sources\");\n"        \
        "    m._compile(js[f], f);\n"                                                              \
        "  };\n"                                                                                   \
        "  M._resolveFilename = function (r, ...a) {\n"                                            \
        "    try { return resolve.call(this, r, ...a); } catch (e) {\n"                            \
        "      if (!/\\.js$/.test(r)) throw e;\n"                                                  \
        "      return resolve.call(this, r.slice(0, -3) + \".ts\", ...a);\n"                       \
        "    }\n"                                                                                  \
        "  };\n"                                                                                   \
        "}\n"                                                                                      \
        "let failed = false;\n"                                                                    \
        "const outputs = process.argv.slice(1).map(file => {\n"                                    \
        "  const out = ts.transpileModule(fs.readFileSync(file, \"utf8\"), {\n"                    \
        "    fileName: file, reportDiagnostics: true,\n"                                           \
        "    compilerOptions: {module: ts.ModuleKind.CommonJS, target: ts.ScriptTarget.ES2022,\n"  \
        "                      esModuleInterop: true}});\n"                                        \
        "  for (const d of out.diagnostics) {\n"                                                   \
        "    if (d.category !== ts.DiagnosticCategory.Error) continue;\n"                          \
        "    const at = d.file ? d.file.getLineAndCharacterOfPosition(d.start) : {line: 0, "       \
        "character: 0};\n"                                                                         \
        "    console.error(`${file}(${at.line + 1},${at.character + 1}): error TS${d.code}: ` +\n" \
        "                  ts.flattenDiagnosticMessageText(d.messageText, \"\\n\"));\n"            \
        "    failed = true;\n"                                                                     \
        "  }\n"                                                                                    \
        "  return [path.resolve(file), out.outputText];\n"                                         \
        "});\n"                                                                                    \
        "if (failed) process.exit(1);\n"                                                           \
        "let [[, main], ...others] = outputs;\n"                                                   \
        "if (others.length > 0) {\n"                                                               \
        "  /* On the first line of the entrypoint, after its \"use strict\" (a directive only "    \
        "there). */\n"                                                                             \
        "  const strict = main.startsWith(\"\\\"use strict\\\";\") ? \"\\\"use strict\\\";\" : "   \
        "\"\";\n"                                                                                  \
        "  const line = hook.toString().replace(/\\/\\*[^]*?\\*\\//g, \"\").replace(/\\n\\s*/g, "  \
        "\" \");\n"                                                                                \
        "  main = `${strict}(${line})(${JSON.stringify(Object.fromEntries(others))});` +\n"        \
        "         main.slice(strict.length);\n"                                                    \
        "}\n"                                                                                      \
        "fs.writeFileSync(process.env.SBX_ARTIFACT, main);\n"                                      \
        "' \"$@\""

/* Java: the main class is the entrypoint's public class (`public class Hello` in Main.java is
 * copied to Hello.java first, which javac requires), else the class named as the file, in the
 * entrypoint's package; java's single-file launcher is as lenient. */
#define JAVA_COMPILE                                                                               \
        "set -e\n"                                                                                 \
        "main=$(basename \"$1\" .java)\n"                                                          \
        "class=$(sed -n "                                                                          \
        "'s/^public[[:space:]]\\{1,\\}\\(final[[:space:]]\\{1,\\}\\|abstract[[:space:]]"           \
        "\\{1,\\}\\)\\{0,1\\}class[[:space:]]\\{1,\\}\\([A-Za-z_$][A-Za-z0-9_$]*\\).*/\\2/p' "     \
        "\"$1\" "                                                                                  \
        "| head -n 1)\n"                                                                           \
        "package=$(sed -n "                                                                        \
        "'s/^package[[:space:]]\\{1,\\}\\([A-Za-z0-9_$.]*\\)[[:space:]]*;.*/\\1./p' "              \
        "\"$1\" | head -n 1)\n"                                                                    \
        "if [ -n \"$class\" ] && [ \"$class\" != \"$main\" ]; then\n"                              \
        "  mkdir -p /tmp/src && cp \"$1\" \"/tmp/src/$class.java\"\n"                              \
        "  shift && set -- \"/tmp/src/$class.java\" \"$@\" && main=$class\n"                       \
        "fi\n" JDK "javac -encoding UTF-8 -d /tmp/classes \"$@\"\n" JDK                            \
        "jar --create --file \"$SBX_ARTIFACT\" --main-class \"$package$main\" -C /tmp/classes ."

static const char *const go_env[] = {"GOCACHE=/tmp/go-cache", "GOPATH=/tmp/go", "GO111MODULE=off",
                                     "CGO_ENABLED=0", NULL};

#define SECONDS(n) ((n)*1000ull)
#define MIB(n)     ((n)*SBX_LIMIT_MIB)

static const struct sbx_language languages[] = {
        {"python", "py python3", ".py", "main.py", "/usr/bin/python3", no_args,
         .version = (const char *const[]){"/usr/bin/python3", "--version", NULL},
         .loader = "python", .sessions = true},
        {"bash", "", ".sh .bash", "main.sh", "/bin/bash", no_args,
         .version = (const char *const[]){"/bin/bash", "--version", NULL}, .sessions = true},
        {"sh", "", "", "main.sh", "/bin/sh", no_args, .version = NULL},
        {"javascript", "js node nodejs", ".js .mjs .cjs", "main.js", "/usr/bin/node", no_args,
         .version = (const char *const[]){"/usr/bin/node", "--version", NULL}, .loader = "node"},
        {"typescript", "ts", ".ts", "main.ts", "/usr/bin/node", no_args,
         .compile = TYPESCRIPT_TRANSPILE, .compile_all_sources = true, .artifact = "main.js",
         .compile_wall_ms = SECONDS(10),
         .compiler = "/usr/share/nodejs/typescript/lib/typescript.js",
         .compile_memory_bytes = MIB(512),
         .version =
                 (const char *const[]){"/usr/bin/node", "-p",
                                       "require(\"/usr/share/nodejs/typescript\").version", NULL},
         .loader = "node"},
        {"c", "", ".c", "main.c", NULL, no_args,
         .compile = "/usr/bin/gcc -O2 -std=gnu17 -o \"$SBX_ARTIFACT\" \"$@\" -lm",
         .compile_all_sources = true, .artifact = "main", .compile_wall_ms = SECONDS(10),
         .compile_memory_bytes = MIB(512),
         .version = (const char *const[]){"/usr/bin/gcc", "-dumpfullversion", NULL}},
        {"cpp", "c++ cxx", ".cpp .cc .cxx .c++", "main.cpp", NULL, no_args,
         .compile = "/usr/bin/g++ -O2 -std=gnu++20 -o \"$SBX_ARTIFACT\" \"$@\" -lm",
         .compile_all_sources = true, .artifact = "main", .compile_wall_ms = SECONDS(20),
         .compile_memory_bytes = MIB(1024),
         .version = (const char *const[]){"/usr/bin/g++", "-dumpfullversion", NULL}},
        {"go", "golang", ".go", "main.go", NULL, no_args,
         .compile = "/usr/bin/go build -o \"$SBX_ARTIFACT\" \"$@\"", .compile_all_sources = true,
         .artifact = "main", .compile_env = go_env, .compile_wall_ms = SECONDS(30),
         .compile_memory_bytes = MIB(1024),
         .version = (const char *const[]){"/usr/bin/go", "version", NULL}},
        {"rust", "rs", ".rs", "main.rs", NULL, no_args,
         /* Without the standard library's debug information: 0.4 MB instead of 11.6 MB for
          * hello world, which every run writes into its tmpfs; panics keep their symbols. */
         .compile = "/usr/bin/rustc -O --edition 2021 -C strip=debuginfo -o \"$SBX_ARTIFACT\" "
                    "\"$1\"",
         .artifact = "main", .compile_wall_ms = SECONDS(30), .compile_memory_bytes = MIB(1024),
         .version = (const char *const[]){"/usr/bin/rustc", "--version", NULL}},
        {"java", "", ".java", "Main.java", JDK "java", jar_args, .compile = JAVA_COMPILE,
         .compile_all_sources = true, .artifact = "main.jar", .compile_wall_ms = SECONDS(30),
         .compile_memory_bytes = MIB(1024),
         .version = (const char *const[]){JDK "java", "--version", NULL}},
};

/* Whether word is one of the space-separated words of list. */
static bool listed(const char *list, const char *word)
{
        size_t len = strlen(word);
        for (const char *p = list; len > 0 && (p = strstr(p, word)) != NULL; p += len)
                if ((p == list || p[-1] == ' ') && (p[len] == ' ' || p[len] == '\0'))
                        return true;
        return false;
}

const struct sbx_language *sbx_language_find(const char *name)
{
        if (name == NULL)
                return NULL;
        for (size_t i = 0; i < SBX_ARRAY_SIZE(languages); i++)
                if (strcmp(languages[i].name, name) == 0)
                        return &languages[i];
        for (size_t i = 0; i < SBX_ARRAY_SIZE(languages); i++)
                if (name[0] != '\0' && strchr(name, ' ') == NULL &&
                    listed(languages[i].aliases, name))
                        return &languages[i];
        return NULL;
}

bool sbx_language_matches_path(const struct sbx_language *language, const char *path)
{
        const char *slash = strrchr(path, '/');
        const char *base = slash != NULL ? slash + 1 : path;
        const char *dot = strrchr(base, '.');
        /* ".c" alone is a hidden file's name, not an extension. */
        return dot != NULL && dot > base && dot[1] != '\0' && listed(language->extensions, dot);
}

const struct sbx_language *sbx_language_for_path(const char *path)
{
        for (size_t i = 0; i < SBX_ARRAY_SIZE(languages); i++)
                if (sbx_language_matches_path(&languages[i], path))
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

/* What every compile gets at least: a compiler and its driver, assembler and linker are several
 * processes with threads (go build runs one compile per package at once), and object files and
 * caches need room. */
#define COMPILE_MIN_PIDS       128
#define COMPILE_MIN_DISK_BYTES MIB(256)

static uint64_t at_least(uint64_t value, uint64_t floor)
{
        return value > floor ? value : floor;
}

void sbx_language_compile_limits(const struct sbx_language *language,
                                 const struct sbx_limits *run_limits, struct sbx_limits *out)
{
        *out = *run_limits;
        out->wall_ms = at_least(run_limits->wall_ms, language->compile_wall_ms);
        out->cpu_ms = at_least(run_limits->cpu_ms, language->compile_wall_ms);
        out->memory_bytes = at_least(run_limits->memory_bytes, language->compile_memory_bytes);
        out->pids = at_least(run_limits->pids, COMPILE_MIN_PIDS);
        out->disk_bytes = at_least(run_limits->disk_bytes, COMPILE_MIN_DISK_BYTES);
}

void sbx_language_compile_ceilings(struct sbx_limits *out)
{
        struct sbx_limits run;
        sbx_limits_default(&run);
        *out = run;
        for (size_t i = 0; i < SBX_ARRAY_SIZE(languages); i++) {
                if (!sbx_language_compiles(&languages[i]))
                        continue;
                struct sbx_limits compile;
                sbx_language_compile_limits(&languages[i], &run, &compile);
                for (size_t f = 0; f < SBX_LIMIT_COUNT; f++) {
                        const struct sbx_limit_field *field = &sbx_limit_fields[f];
                        if (sbx_limit_get(&compile, field) > sbx_limit_get(out, field))
                                sbx_limit_set(out, field, sbx_limit_get(&compile, field));
                }
        }
        out->cpu_millicores = 0;
}
