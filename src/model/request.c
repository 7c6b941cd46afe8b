#define _GNU_SOURCE
#include "model/request.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

#include "util/cleanup.h"
#include "util/hex.h"

const char *const sbx_request_base_environment[] = {
        "PATH=/usr/local/bin:/usr/bin:/bin",
        "HOME=/workspace",
        "TMPDIR=/tmp",
        "LANG=C.UTF-8",
        NULL, /* also an envp as it is: a pool entry's loader starts with just these */
};
_Static_assert(SBX_ARRAY_SIZE(sbx_request_base_environment) ==
                       SBX_REQUEST_BASE_ENVIRONMENT_SIZE + 1,
               "SBX_REQUEST_BASE_ENVIRONMENT_SIZE counts the base environment");

bool sbx_request_path_valid(const char *path)
{
        size_t len = strnlen(path, SBX_MAX_FILE_PATH + 1);
        if (len == 0 || len > SBX_MAX_FILE_PATH || path[0] == '/')
                return false;
        const char *component = path;
        for (size_t i = 0; i <= len; i++) {
                char c = path[i];
                if (c == '/' || c == '\0') {
                        size_t n = (size_t)(path + i - component);
                        if (n == 0 || (n == 1 && component[0] == '.') ||
                            (n == 2 && component[0] == '.' && component[1] == '.'))
                                return false;
                        component = path + i + 1;
                        continue;
                }
                if (c < 0x20 || c > 0x7e || c == '\\')
                        return false;
        }
        return true;
}

bool sbx_request_env_valid(const char *entry)
{
        size_t len = strnlen(entry, SBX_MAX_ENV_BYTES + 1);
        if (len > SBX_MAX_ENV_BYTES)
                return false;
        const char *equals = strchr(entry, '=');
        if (equals == NULL)
                return false;
        size_t name_len = (size_t)(equals - entry);
        if (name_len == 0 || name_len > 64)
                return false;
        for (size_t i = 0; i < name_len; i++) {
                char c = entry[i];
                bool ok = c == '_' || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
                          (i > 0 && c >= '0' && c <= '9');
                if (!ok)
                        return false;
        }
        if (name_len >= 3 && strncmp(entry, "LD_", 3) == 0)
                return false;
        for (size_t i = 0; i < SBX_REQUEST_BASE_ENVIRONMENT_SIZE; i++) {
                const char *fixed = sbx_request_base_environment[i];
                size_t fixed_len = (size_t)(strchr(fixed, '=') - fixed);
                if (fixed_len == name_len && strncmp(fixed, entry, name_len) == 0)
                        return false;
        }
        return true;
}

/* Every refusal of sbx_request_check: EINVAL, and no strerror text (the message says it all). */
#define refuse(err, ...) sbx_error_plain((err), EINVAL, __VA_ARGS__)

/* Code xor files, and files only with an entrypoint that is one of them. */
static int check_program(const struct sbx_request *request, struct sbx_error *err)
{
        if (request->code != NULL) {
                if (request->n_files > 0 || request->entrypoint != NULL)
                        return refuse(err, "code together with files or an entrypoint");
                return 0;
        }
        if (request->n_files == 0 || request->entrypoint == NULL)
                return refuse(err, "neither code nor files with an entrypoint");
        for (size_t i = 0; i < request->n_files; i++)
                if (strcmp(request->files[i].path, request->entrypoint) == 0)
                        return 0;
        return refuse(err, "entrypoint: not one of the files");
}

int sbx_request_check(const struct sbx_request *request, struct sbx_error *err)
{
        /* Counts first: the loops below read that many elements of the caller's arrays. */
        if (request->n_files > SBX_MAX_FILES)
                return refuse(err, "n_files: %zu, more than the %d allowed", request->n_files,
                              SBX_MAX_FILES);
        if (request->n_args > SBX_MAX_ARGS)
                return refuse(err, "args: %zu, more than the %d allowed", request->n_args,
                              SBX_MAX_ARGS);
        if (request->n_env > SBX_MAX_ENV)
                return refuse(err, "env: %zu, more than the %d allowed", request->n_env,
                              SBX_MAX_ENV);
        for (size_t i = 0; i < request->n_files; i++)
                if (!sbx_request_path_valid(request->files[i].path))
                        return refuse(err, "files[%zu].path: not a valid workspace path", i);
        for (size_t i = 0; i < request->n_env; i++)
                if (!sbx_request_env_valid(request->env[i]))
                        return refuse(err, "env[%zu]: not an allowed NAME=value entry", i);
        if (check_program(request, err) < 0)
                return -1;
        /* No limit may be missing ("none"): whoever built the request is not trusted to have
         * checked. The wall deadline among them is what guarantees that a run ends. */
        const char *bad_limit = NULL;
        if (!sbx_limits_valid(&request->limits, &bad_limit))
                return refuse(err, "limits.%s: out of range", bad_limit);
        /* All zero: the engine derives them; else each in range like the run's. */
        if (request->compile_limits.wall_ms != 0 &&
            !sbx_limits_valid(&request->compile_limits, &bad_limit))
                return refuse(err, "compile_limits.%s: out of range", bad_limit);
        return 0;
}

int sbx_execution_id_new(char id[static SBX_EXECUTION_ID_CHARS + 1], struct sbx_error *err)
{
        uint8_t bytes[SBX_EXECUTION_ID_CHARS / 2];
        /* 16 bytes never come back short from an initialised pool (random(7)). */
        if (getrandom(bytes, sizeof(bytes), 0) != (ssize_t)sizeof(bytes))
                return sbx_error_set(err, errno, "no random bytes for an execution id");
        sbx_hex_encode(bytes, sizeof(bytes), id);
        return 0;
}

bool sbx_execution_id_valid(const char *id)
{
        for (size_t i = 0; i < SBX_EXECUTION_ID_CHARS; i++) {
                char c = id[i];
                if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
                        return false; /* also stops at a NUL before the end */
        }
        return id[SBX_EXECUTION_ID_CHARS] == '\0';
}
