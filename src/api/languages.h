/* GET /v1/languages: what a client can name, from the language table (model/language.h). */
#pragma once

#include <jansson.h>

#include "service/config.h"

/* {"languages": [{name, aliases, extensions, entrypoint, compiled, pooled, version, allowed}]}:
 * every language, its toolchain's version as the toolchain prints it (null when it is not
 * installed), whether config keeps a warm pool of it, and whether tier allows it. The versions
 * are asked of the toolchains once, at the first call. */
json_t *sbx_languages_json(const struct sbx_config *config, const struct sbx_tier *tier);

/* The space-separated words of list (a language row's aliases or extensions) as a JSON array. */
json_t *sbx_language_words_json(const char *list);
