/* The low-level SHA-256 calls pull in only the hash from libcrypto's static archive (the EVP
 * layer would bring its providers and thousands of relocations into every `sandboxd run`). */
#define OPENSSL_SUPPRESS_DEPRECATED
#define _GNU_SOURCE
#include "engine/compile_cache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "util/cleanup.h"
#include "util/file.h"
#include "util/hex.h"
#include "util/log.h"

static const char magic[] = "SBXCACHE1\n";
#define MAGIC_BYTES  (sizeof(magic) - 1)
#define HEADER_BYTES (MAGIC_BYTES + SHA256_DIGEST_LENGTH + 8)

/* ---- the key ---------------------------------------------------------------------------- */

/* SHA256() itself goes through EVP in OpenSSL 3 (and would link it all in): the context calls. */
static void sha256(const void *data, size_t size, uint8_t digest[SHA256_DIGEST_LENGTH])
{
        SHA256_CTX ctx;
        SHA256_Init(&ctx);
        SHA256_Update(&ctx, data, size);
        SHA256_Final(digest, &ctx);
}

/* Length-prefixed, so that no two different inputs hash the same stream. */
static void hash_field(SHA256_CTX *ctx, const void *data, size_t size)
{
        uint64_t length = size;
        SHA256_Update(ctx, &length, sizeof(length));
        if (size > 0)
                SHA256_Update(ctx, data, size);
}

static void hash_string(SHA256_CTX *ctx, const char *text)
{
        hash_field(ctx, text != NULL ? text : "", text != NULL ? strlen(text) : 0);
}

/* The toolchain's identity: where its compiler really is, its size and its modification time. */
static int hash_toolchain(SHA256_CTX *ctx, const struct sbx_language *language,
                          struct sbx_error *err)
{
        const char *compiler = language->compiler != NULL  ? language->compiler
                               : language->version != NULL ? language->version[0]
                                                           : NULL;
        if (compiler == NULL)
                return sbx_error_set(err, EINVAL, "%s: no toolchain to identify", language->name);
        char real[PATH_MAX];
        struct stat st;
        if (realpath(compiler, real) == NULL || stat(real, &st) < 0)
                return sbx_error_set(err, errno, "identify the toolchain %s", compiler);
        hash_string(ctx, real);
        uint64_t identity[3] = {(uint64_t)st.st_size, (uint64_t)st.st_mtim.tv_sec,
                                (uint64_t)st.st_mtim.tv_nsec};
        hash_field(ctx, identity, sizeof(identity));
        return 0;
}

int sbx_compile_cache_key(const char *tenant, const struct sbx_language *language,
                          const char *const *argv, const struct sbx_file *files, size_t n_files,
                          char key[static SBX_COMPILE_CACHE_KEY_HEX + 1], struct sbx_error *err)
{
        if (tenant == NULL || tenant[0] == '\0')
                return sbx_error_set(err, EINVAL, "a compile cache key needs a tenant");
        SHA256_CTX ctx;
        SHA256_Init(&ctx);
        hash_string(&ctx, "sandboxd compile cache 1");
        hash_string(&ctx, tenant);
        hash_string(&ctx, language->name);
        if (hash_toolchain(&ctx, language, err) < 0)
                return -1;
        /* The compile's whole argv: the script and the sources in their order (which one is the
         * entrypoint matters: rustc, TypeScript and java take the first). */
        uint64_t n_argv = 0;
        while (argv[n_argv] != NULL)
                n_argv++;
        SHA256_Update(&ctx, &n_argv, sizeof(n_argv));
        for (size_t i = 0; i < n_argv; i++)
                hash_string(&ctx, argv[i]);
        uint64_t count = n_files;
        SHA256_Update(&ctx, &count, sizeof(count));
        for (size_t i = 0; i < n_files; i++) {
                hash_string(&ctx, files[i].path);
                uint8_t mode = files[i].executable ? 1 : 0;
                SHA256_Update(&ctx, &mode, 1);
                hash_field(&ctx, files[i].data, files[i].size);
        }
        uint8_t digest[SHA256_DIGEST_LENGTH];
        SHA256_Final(digest, &ctx);
        sbx_hex_encode(digest, sizeof(digest), key);
        return 0;
}

/* ---- entries ---------------------------------------------------------------------------- */

static bool key_valid(const char *key)
{
        if (strlen(key) != SBX_COMPILE_CACHE_KEY_HEX)
                return false;
        for (size_t i = 0; i < SBX_COMPILE_CACHE_KEY_HEX; i++)
                if (!((key[i] >= '0' && key[i] <= '9') || (key[i] >= 'a' && key[i] <= 'f')))
                        return false;
        return true;
}

/* The entry's name below the cache directory ("ab/ab12..."), or its shard's ("ab"). */
static int entry_path(const char *key, char *path, size_t size, bool parent_only,
                      struct sbx_error *err)
{
        if (!key_valid(key))
                return sbx_error_set(err, EINVAL, "not a compile cache key");
        int n = parent_only ? snprintf(path, size, "%.2s", key)
                            : snprintf(path, size, "%.2s/%s", key, key);
        if (n < 0 || (size_t)n >= size)
                return sbx_error_set(err, ENAMETOOLONG, "compile cache path");
        return 0;
}

/* Only root can have made a directory that is root's with mode 0700 (its parent is the API
 * uid's): what is inside is then the engine's own. Anything else there was planted, and is
 * moved aside (not removed: it may hold links), with a fresh directory made in its place. */
static bool made_by_root(int fd)
{
        struct stat st;
        return fstat(fd, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == 0 &&
               (st.st_mode & 07777) == 0700;
}

int sbx_compile_cache_open(const char *path, uint64_t max_bytes, struct sbx_compile_cache *out,
                           struct sbx_error *err)
{
        *out = (struct sbx_compile_cache){.dir_fd = -1, .max_bytes = max_bytes};
        for (int attempt = 0; attempt < 2; attempt++) {
                if (mkdir(path, 0700) < 0 && errno != EEXIST)
                        return sbx_error_set(err, errno, "mkdir %s", path);
                int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (fd >= 0 && made_by_root(fd)) {
                        out->dir_fd = fd;
                        return 0;
                }
                if (fd >= 0)
                        close(fd);
                if (fd < 0 && errno != ENOTDIR && errno != ELOOP)
                        return sbx_error_set(err, errno, "open %s", path);
                char aside[PATH_MAX];
                struct timespec now;
                clock_gettime(CLOCK_REALTIME, &now);
                if ((size_t)snprintf(aside, sizeof(aside), "%s.untrusted-%lld.%09ld", path,
                                     (long long)now.tv_sec, now.tv_nsec) >= sizeof(aside) ||
                    renameat2(AT_FDCWD, path, AT_FDCWD, aside, RENAME_NOREPLACE) < 0)
                        return sbx_error_set(err, errno, "move %s aside", path);
                sbx_warn("compile cache: %s was not made by sandboxd; moved to %s", path, aside);
        }
        return sbx_error_set(err, EEXIST, "%s: cannot make a directory of root's own", path);
}

int sbx_compile_cache_get(const struct sbx_compile_cache *cache, const char *key, void **data,
                          size_t *size, struct sbx_error *err)
{
        *data = NULL;
        *size = 0;
        char path[PATH_MAX];
        if (entry_path(key, path, sizeof(path), false, err) < 0)
                return -1;
        _cleanup_close_ int fd = openat(cache->dir_fd, path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return errno == ENOENT ? 0 : sbx_error_set(err, errno, "open %s", path);
        _cleanup_free_ char *whole = NULL;
        size_t length = 0;
        struct sbx_error read_err = {0};
        if (sbx_read_all_fd(fd, HEADER_BYTES + cache->max_bytes, &whole, &length, &read_err) < 0 &&
            read_err.code != EFBIG)
                return sbx_error_set(err, read_err.code, "read %s: %s", path, read_err.message);
        uint64_t content_size = 0;
        bool sound =
                whole != NULL && length >= HEADER_BYTES && memcmp(whole, magic, MAGIC_BYTES) == 0;
        if (sound) {
                memcpy(&content_size, whole + MAGIC_BYTES + SHA256_DIGEST_LENGTH, 8);
                sound = content_size == length - HEADER_BYTES;
        }
        if (sound) {
                uint8_t digest[SHA256_DIGEST_LENGTH];
                sha256(whole + HEADER_BYTES, content_size, digest);
                sound = memcmp(digest, whole + MAGIC_BYTES, sizeof(digest)) == 0;
        }
        if (!sound) {
                /* Damaged (a disk error, a hand edit): it must never run; the compile runs. */
                unlinkat(cache->dir_fd, path, 0);
                return 0;
        }
        memmove(whole, whole + HEADER_BYTES, content_size);
        (void)futimens(fd, NULL); /* used now: the last to be evicted */
        *data = steal_pointer(&whole);
        *size = content_size;
        return 1;
}

/* ---- eviction --------------------------------------------------------------------------- */

struct entry {
        char name[2 + 1 + SBX_COMPILE_CACHE_KEY_HEX + 1]; /* "ab/ab12..." */
        uint64_t bytes;
        struct timespec used;
};

/* A directory below the cache's as a stream (not a link). */
static DIR *open_below(int dir_fd, const char *name)
{
        int fd = openat(dir_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return NULL;
        DIR *dir = fdopendir(fd);
        if (dir == NULL)
                close(fd);
        return dir;
}

static int add_entry(struct entry **out, size_t *count, size_t *allocated,
                     const struct entry *entry, struct sbx_error *err)
{
        if (*count == *allocated) {
                *allocated = *allocated ? *allocated * 2 : 64;
                struct entry *grown = realloc(*out, *allocated * sizeof(**out));
                if (grown == NULL) {
                        free(*out);
                        *out = NULL;
                        return sbx_error_set(err, ENOMEM, "list the compile cache");
                }
                *out = grown;
        }
        (*out)[(*count)++] = *entry;
        return 0;
}

/* Every entry, with its content size and last use; temporaries a crash left behind (older than
 * a minute: a writer may be between write and rename) are removed on the way. */
static int list_entries(const struct sbx_compile_cache *cache, struct entry **out, size_t *count,
                        struct sbx_error *err)
{
        *out = NULL;
        *count = 0;
        size_t allocated = 0;
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        _cleanup_(sbx_closedirp) DIR *top = open_below(cache->dir_fd, ".");
        if (top == NULL)
                return sbx_error_set(err, errno, "open the compile cache");
        struct dirent *shard;
        while ((shard = readdir(top)) != NULL) {
                if (strlen(shard->d_name) != 2 || shard->d_name[0] == '.')
                        continue;
                _cleanup_(sbx_closedirp) DIR *dir = open_below(cache->dir_fd, shard->d_name);
                if (dir == NULL)
                        continue;
                struct dirent *file;
                while ((file = readdir(dir)) != NULL) {
                        bool temporary = strncmp(file->d_name, ".tmp-", 5) == 0;
                        if (!temporary && !key_valid(file->d_name))
                                continue;
                        struct stat st;
                        if (fstatat(dirfd(dir), file->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
                            !S_ISREG(st.st_mode))
                                continue;
                        if (temporary) {
                                if (now.tv_sec - st.st_mtim.tv_sec > 60)
                                        unlinkat(dirfd(dir), file->d_name, 0);
                                continue;
                        }
                        struct entry entry = {
                                .bytes = (uint64_t)st.st_size > HEADER_BYTES
                                                 ? (uint64_t)st.st_size - HEADER_BYTES
                                                 : 0,
                                .used = st.st_mtim,
                        };
                        int length = snprintf(entry.name, sizeof(entry.name), "%s/%s",
                                              shard->d_name, file->d_name);
                        if (length < 0 || (size_t)length >= sizeof(entry.name))
                                continue;
                        if (add_entry(out, count, &allocated, &entry, err) < 0)
                                return -1;
                }
        }
        return 0;
}

static int least_recent_first(const void *a, const void *b)
{
        const struct entry *x = a, *y = b;
        if (x->used.tv_sec != y->used.tv_sec)
                return x->used.tv_sec < y->used.tv_sec ? -1 : 1;
        return x->used.tv_nsec < y->used.tv_nsec ? -1 : x->used.tv_nsec > y->used.tv_nsec;
}

/* The cache's lock file, which also keeps the count of evictions (8 bytes). */
static int open_lock(const struct sbx_compile_cache *cache, int flags)
{
        return openat(cache->dir_fd, ".lock", flags | O_NOFOLLOW | O_CLOEXEC, 0600);
}

static int evict(const struct sbx_compile_cache *cache, struct sbx_error *err)
{
        uint64_t evicted = 0;
        _cleanup_close_ int lock = open_lock(cache, O_RDWR | O_CREAT);
        if (lock < 0 || flock(lock, LOCK_EX) < 0)
                return sbx_error_set(err, errno, "lock the compile cache");
        _cleanup_free_ struct entry *entries = NULL;
        size_t count = 0;
        if (list_entries(cache, &entries, &count, err) < 0)
                return -1;
        uint64_t total = 0;
        for (size_t i = 0; i < count; i++)
                total += entries[i].bytes;
        if (total <= cache->max_bytes)
                return 0;
        qsort(entries, count, sizeof(*entries), least_recent_first);
        for (size_t i = 0; i < count && total > cache->max_bytes; i++) {
                if (unlinkat(cache->dir_fd, entries[i].name, 0) < 0 && errno != ENOENT)
                        continue;
                total -= entries[i].bytes;
                evicted++;
        }
        /* The count since the cache was made, for /metrics: kept under the lock, in it. */
        uint64_t so_far = 0;
        if (pread(lock, &so_far, sizeof(so_far), 0) != (ssize_t)sizeof(so_far))
                so_far = 0;
        so_far += evicted;
        if (pwrite(lock, &so_far, sizeof(so_far), 0) != (ssize_t)sizeof(so_far))
                return sbx_error_set(err, errno, "count evictions");
        return 0;
}

int sbx_compile_cache_put(const struct sbx_compile_cache *cache, const char *key, const void *data,
                          size_t size, struct sbx_error *err)
{
        if (size > cache->max_bytes)
                return 0;
        char shard[8], path[PATH_MAX], temp[PATH_MAX];
        if (entry_path(key, shard, sizeof(shard), true, err) < 0 ||
            entry_path(key, path, sizeof(path), false, err) < 0)
                return -1;
        if (mkdirat(cache->dir_fd, shard, 0700) < 0 && errno != EEXIST)
                return sbx_error_set(err, errno, "mkdir %s in the compile cache", shard);
        int n = snprintf(temp, sizeof(temp), "%s/.tmp-%s-%d", shard, key, (int)getpid());
        if (n < 0 || (size_t)n >= sizeof(temp))
                return sbx_error_set(err, ENAMETOOLONG, "compile cache path");

        uint8_t header[HEADER_BYTES];
        memcpy(header, magic, MAGIC_BYTES);
        sha256(data, size, header + MAGIC_BYTES);
        uint64_t size64 = size;
        memcpy(header + MAGIC_BYTES + SHA256_DIGEST_LENGTH, &size64, 8);
        _cleanup_close_ int fd = openat(
                cache->dir_fd, temp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0)
                return sbx_error_set(err, errno, "create %s in the compile cache", temp);
        if (sbx_write_all(fd, header, sizeof(header)) < 0 || sbx_write_all(fd, data, size) < 0 ||
            fdatasync(fd) < 0) {
                int saved = errno;
                unlinkat(cache->dir_fd, temp, 0);
                return sbx_error_set(err, saved, "write %s in the compile cache", temp);
        }
        if (renameat(cache->dir_fd, temp, cache->dir_fd, path) < 0) {
                int saved = errno;
                unlinkat(cache->dir_fd, temp, 0);
                return sbx_error_set(err, saved, "rename %s in the compile cache", temp);
        }
        return evict(cache, err);
}

int sbx_compile_cache_usage(const struct sbx_compile_cache *cache, uint64_t *bytes,
                            uint64_t *entries_out, uint64_t *evictions, struct sbx_error *err)
{
        _cleanup_free_ struct entry *entries = NULL;
        size_t count = 0;
        if (list_entries(cache, &entries, &count, err) < 0)
                return -1;
        *bytes = 0;
        for (size_t i = 0; i < count; i++)
                *bytes += entries[i].bytes;
        *entries_out = count;
        *evictions = 0;
        _cleanup_close_ int lock = open_lock(cache, O_RDONLY);
        if (lock >= 0 && pread(lock, evictions, sizeof(*evictions), 0) != sizeof(*evictions))
                *evictions = 0;
        return 0;
}
