/* GET /v1/languages: what a client can name, from the language table (model/language.h). */
#pragma once

#include <jansson.h>

#include "model/language.h"
#include "service/config.h"

/* {"languages": [{name, aliases, extensions, entrypoint, compiled, pooled, version, allowed}]}:
 * every language, its toolchain's version as the toolchain prints it (null when it is not
 * installed), whether config keeps a warm pool of it, and whether tier allows it. The versions
 * are asked of the toolchains once, at the first call. */
json_t *sbx_languages_json(const struct sbx_config *config, const struct sbx_tier *tier);

/* The first line language's toolchain prints of its version (as in sbx_languages_json), or NULL
 * when it has none or it is not installed. */
const char *sbx_language_version_line(const struct sbx_language *language);

/* The space-separated words of list (a language row's aliases or extensions) as a JSON array. */
json_t *sbx_language_words_json(const char *list);
