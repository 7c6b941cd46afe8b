#define _GNU_SOURCE
#include "api/languages.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "model/backend.h"
#include "model/language.h"
#include "util/cleanup.h"
#include "util/time.h"

/* A toolchain answers its version at once; one that hangs is not waited for. */
#define VERSION_TIMEOUT_MS 5000
#define VERSION_MAX        128

extern char **environ;

static char versions[64][VERSION_MAX];
static bool version_known[64];
static pthread_once_t versions_once = PTHREAD_ONCE_INIT;

/* The first line argv prints (stdout and stderr together), or false when it cannot run, fails
 * or says nothing in time. */
static bool first_line_of(const char *const *argv, char *line, size_t size)
{
        int fds[2];
        if (pipe2(fds, O_CLOEXEC) < 0)
                return false;
        posix_spawn_file_actions_t actions;
        posix_spawn_file_actions_init(&actions);
        posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
        posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
        posix_spawn_file_actions_adddup2(&actions, fds[1], STDERR_FILENO);
        pid_t pid;
        int rc = posix_spawn(&pid, argv[0], &actions, NULL, (char *const *)argv, environ);
        posix_spawn_file_actions_destroy(&actions);
        close(fds[1]);
        if (rc != 0) {
                close(fds[0]);
                return false;
        }
        /* To the end of its output (what does not fit is read and dropped), or the deadline. */
        size_t used = 0;
        char buf[512];
        bool ended = false;
        uint64_t deadline = sbx_now_ms() + VERSION_TIMEOUT_MS;
        while (!ended) {
                uint64_t now = sbx_now_ms();
                struct pollfd pfd = {.fd = fds[0], .events = POLLIN};
                if (now >= deadline || poll(&pfd, 1, (int)(deadline - now)) <= 0)
                        break;
                char rest[512];
                ssize_t n = used < sizeof(buf) - 1
                                    ? read(fds[0], buf + used, sizeof(buf) - 1 - used)
                                    : read(fds[0], rest, sizeof(rest));
                if (n <= 0)
                        ended = true;
                else if (used < sizeof(buf) - 1)
                        used += (size_t)n;
        }
        close(fds[0]);
        if (!ended)
                kill(pid, SIGKILL); /* it hung: its version is not known */
        int status;
        bool exited_zero =
                waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0;
        buf[used] = '\0';
        buf[strcspn(buf, "\n")] = '\0';
        if (!ended || !exited_zero || buf[0] == '\0')
                return false;
        snprintf(line, size, "%.*s", (int)size - 1, buf);
        return true;
}

static void ask_versions(void)
{
        for (size_t i = 0; i < sbx_language_count() && i < SBX_ARRAY_SIZE(versions); i++) {
                const struct sbx_language *language = sbx_language_at(i);
                if (language->version != NULL)
                        version_known[i] =
                                first_line_of(language->version, versions[i], VERSION_MAX);
        }
}

const char *sbx_language_version_line(const struct sbx_language *language)
{
        pthread_once(&versions_once, ask_versions);
        for (size_t i = 0; i < sbx_language_count() && i < SBX_ARRAY_SIZE(versions); i++)
                if (sbx_language_at(i) == language)
                        return version_known[i] ? versions[i] : NULL;
        return NULL;
}

json_t *sbx_language_words_json(const char *list)
{
        json_t *array = json_array();
        for (const char *p = list; array != NULL && *p != '\0';) {
                size_t len = strcspn(p, " ");
                if (len > 0)
                        json_array_append_new(array, json_stringn(p, len));
                p += len + (p[len] == ' ');
        }
        return array;
}

static bool pooled(const struct sbx_config *config, const struct sbx_language *language)
{
        for (size_t i = 0; i < config->n_pools; i++)
                if (strcmp(config->pools[i].language, language->name) == 0 &&
                    config->pools[i].min_idle > 0)
                        return true;
        return false;
}

json_t *sbx_languages_json(const struct sbx_config *config, const struct sbx_tier *tier)
{
        pthread_once(&versions_once, ask_versions);
        json_t *list = json_array();
        for (size_t i = 0; list != NULL && i < sbx_language_count(); i++) {
                const struct sbx_language *language = sbx_language_at(i);
                bool known = i < SBX_ARRAY_SIZE(versions) && version_known[i];
                json_t *entry = json_pack(
                        "{s:s, s:o, s:o, s:s, s:b, s:b, s:o, s:b}", "name", language->name,
                        "aliases", sbx_language_words_json(language->aliases), "extensions",
                        sbx_language_words_json(language->extensions), "entrypoint",
                        language->file_name, "compiled", sbx_language_compiles(language), "pooled",
                        pooled(config, language), "version",
                        known ? json_string(versions[i]) : json_null(), "allowed",
                        sbx_tier_allows_language(tier, language->name));
                json_t *backends = json_array();
                for (size_t b = 0; entry != NULL && backends != NULL && b < sbx_backend_count();
                     b++)
                        if (sbx_backend_runs_language(sbx_backend_name_at(b), language))
                                json_array_append_new(backends,
                                                      json_string(sbx_backend_name_at(b)));
                if (entry != NULL && json_object_set_new(entry, "backends", backends) < 0)
                        json_decref(steal_pointer(&entry));
                if (entry == NULL || json_array_append_new(list, entry) < 0) {
                        json_decref(list);
                        return NULL;
                }
        }
        return list != NULL ? json_pack("{s:o}", "languages", list) : NULL;
}
