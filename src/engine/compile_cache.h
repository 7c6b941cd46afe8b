/* The compile cache (DESIGN.md "Languages and the compile cache"): a compiled language's artifact
 * kept on disk by the SHA-256 of everything that made it, so that the same program's next run
 * costs only the run.
 *
 * The key covers the tenant, the language, its compile script and the toolchain's identity (the
 * compiler's resolved path, size and modification time: a package upgrade changes it), and every
 * file the compile got (path, mode and content): entries are never shared between tenants, and a
 * tenant can only ever make entries under its own keys. An entry is written to a temporary file
 * and renamed into place (a crash never leaves a half artifact under a key), carries the SHA-256
 * of its content, which a load verifies, and the cache stays within max_bytes by evicting the
 * least recently used entries (a hit refreshes an entry's modification time).
 *
 * Layout: DIR/<2 hex>/<64 hex key>; an entry is the magic "SBXCACHE1\n", the content's SHA-256
 * (32 bytes), its size (8 bytes, little endian) and the content. The engine's workers (separate
 * processes) share the directory; eviction runs under an flock of DIR/.lock.
 *
 * Everything goes through dir_fd, opened once (sbx_compile_cache_open): DIR's parent, the data
 * directory, belongs to the unprivileged API process, which could otherwise swap DIR for a link
 * and have root write where it points. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/language.h"
#include "model/request.h"
#include "util/error.h"

#define SBX_COMPILE_CACHE_KEY_HEX 64

struct sbx_compile_cache {
        int dir_fd;         /* the cache directory: root's, mode 0700 */
        uint64_t max_bytes; /* the entries' content together stays within it */
};

/* Makes (if need be) and opens path as the cache directory: a directory, not a link, root's
 * with mode 0700. Anything else found there (the parent is the API uid's) is moved aside to
 * path.untrusted-SECONDS.NANOSECONDS and a fresh directory made. */
int sbx_compile_cache_open(const char *path, uint64_t max_bytes, struct sbx_compile_cache *out,
                           struct sbx_error *err);

/* The key of compiling files (n of them) as language for tenant with the compile's argv (NULL-
 * ended), as 64 lowercase hex digits. */
int sbx_compile_cache_key(const char *tenant, const struct sbx_language *language,
                          const char *const *argv, const struct sbx_file *files, size_t n_files,
                          char key[static SBX_COMPILE_CACHE_KEY_HEX + 1], struct sbx_error *err);

/* The artifact under key: 1 with *data (malloc'd, the caller frees) and *size when a verified
 * entry is there (its use time refreshed), 0 when none is (an entry that fails verification is
 * removed and counts as none), -1 with err on an I/O error. */
int sbx_compile_cache_get(const struct sbx_compile_cache *cache, const char *key, void **data,
                          size_t *size, struct sbx_error *err);

/* Stores data under key (atomically: a reader sees the whole entry or none), then evicts the
 * least recently used entries while the cache is over max_bytes (counted for
 * sbx_compile_cache_usage). An artifact larger than max_bytes is not stored. */
int sbx_compile_cache_put(const struct sbx_compile_cache *cache, const char *key, const void *data,
                          size_t size, struct sbx_error *err);

/* The entries' content together, in bytes, their number, and the evictions since the cache
 * directory was made (counted in DIR/.lock, under its flock). */
int sbx_compile_cache_usage(const struct sbx_compile_cache *cache, uint64_t *bytes,
                            uint64_t *entries, uint64_t *evictions, struct sbx_error *err);
