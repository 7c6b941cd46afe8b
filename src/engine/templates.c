/* The Python template process (templates.h), and the engine's: one, its child, which python
 * pool entries of the native backend have fork their sandboxes' inits; started again when it
 * ends. It reads only the engine's socket, never a tenant's code. */
#define _GNU_SOURCE
#include "engine/templates.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine/server_state.h"
#include "model/request.h"
#include "util/log.h"
#include "util/time.h"

extern const char sbx_python_loader_source[];

#define TEMPLATE_MODULE_NAME "sandboxd-template.so"
/* The fd the template reads launches on. */
#define TEMPLATE_SOCKET_FD 3
/* A template that fails is started again after this long, doubling up to the maximum; one that
 * ran this long before it ended counts as a fresh start. */
#define TEMPLATE_RETRY_FIRST_MS 1000
#define TEMPLATE_RETRY_MAX_MS   60000
#define TEMPLATE_HEALTHY_MS     10000

/* Where the module is: next to this program (the build directory), else where `meson install`
 * put it. */
static int module_path(char *path, size_t size)
{
        ssize_t n = readlink("/proc/self/exe", path, size - 1);
        if (n > 0) {
                path[n] = '\0';
                char *slash = strrchr(path, '/');
                if (slash != NULL &&
                    (size_t)(slash - path) + sizeof("/" TEMPLATE_MODULE_NAME) <= size) {
                        strcpy(slash, "/" TEMPLATE_MODULE_NAME);
                        if (access(path, R_OK) == 0)
                                return 0;
                }
        }
        if ((size_t)snprintf(path, size, "%s/%s", SBX_MODULE_DIR, TEMPLATE_MODULE_NAME) >= size)
                return -1;
        return access(path, R_OK);
}

/* The child, between fork and exec: the template's fds, signals and parent-death signal. */
static _Noreturn void exec_template(int socket_fd, const char *module, pid_t engine)
{
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        for (int sig = 1; sig < NSIG; sig++)
                if (sig != SIGKILL && sig != SIGSTOP)
                        signal(sig, SIG_DFL);
        /* It dies with the engine; its inits (the engine's children) die with the engine too. */
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != engine)
                _exit(127);
        int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
        if (devnull < 0 || dup2(devnull, STDIN_FILENO) < 0 || dup2(devnull, STDOUT_FILENO) < 0 ||
            dup2(socket_fd, TEMPLATE_SOCKET_FD) != TEMPLATE_SOCKET_FD ||
            close_range(TEMPLATE_SOCKET_FD + 1, ~0U, 0) < 0 || chdir("/") < 0)
                _exit(127);
        char fd_text[16];
        snprintf(fd_text, sizeof(fd_text), "%d", TEMPLATE_SOCKET_FD);
        const char *argv[] = {"/usr/bin/python3",
                              "-c",
                              sbx_python_loader_source,
                              "template",
                              module,
                              fd_text,
                              NULL};
        execve(argv[0], (char *const *)argv, (char *const *)sbx_request_base_environment);
        _exit(127);
}

int sbx_template_start(pid_t *pid, int *fd, struct sbx_error *err)
{
        char module[4096];
        if (module_path(module, sizeof(module)) < 0)
                return sbx_error_set(err, ENOENT, "no %s (next to sandboxd, or in %s)",
                                     TEMPLATE_MODULE_NAME, SBX_MODULE_DIR);
        int pair[2];
        if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) < 0)
                return sbx_error_set(err, errno, "the template's socket");
        pid_t parent = getpid();
        pid_t child = fork();
        if (child == 0)
                exec_template(pair[1], module, parent);
        close(pair[1]);
        if (child < 0) {
                close(pair[0]);
                return sbx_error_set(err, errno, "fork the template");
        }
        *pid = child;
        *fd = pair[0];
        return 0;
}

void sbx_template_stop(pid_t pid, int fd)
{
        if (fd >= 0)
                close(fd);
        if (pid <= 0)
                return;
        kill(pid, SIGKILL);
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
                ;
}

static void start(struct engine *e)
{
        struct sbx_error err = {0};
        if (sbx_template_start(&e->template.pid, &e->template.fd, &err) < 0) {
                e->template.pid = 0;
                e->template.fd = -1;
                if (e->template.failures++ == 0)
                        sbx_warn("engine: the python template: %s; python pool entries start "
                                 "their own interpreters",
                                 err.message);
                e->template.retry_us = sbx_now_us() + (uint64_t)TEMPLATE_RETRY_MAX_MS * 1000;
                return;
        }
        e->template.started_us = sbx_now_us();
        sbx_debug("engine: python template started (pid %d)", (int)e->template.pid);
}

void templates_maintain(struct engine *e)
{
        if (e->template.wanted && !e->stopping && e->template.pid <= 0 &&
            sbx_now_us() >= e->template.retry_us)
                start(e);
}

bool templates_reaped(struct engine *e, pid_t pid)
{
        if (e->template.pid <= 0 || pid != e->template.pid)
                return false;
        e->template.pid = 0;
        if (e->template.fd >= 0)
                close(e->template.fd);
        e->template.fd = -1;
        if (e->stopping)
                return true;
        uint64_t now = sbx_now_us();
        if (now - e->template.started_us >= (uint64_t)TEMPLATE_HEALTHY_MS * 1000)
                e->template.failures = 0;
        unsigned failures = e->template.failures++;
        uint64_t backoff = (uint64_t)TEMPLATE_RETRY_FIRST_MS << (failures < 6 ? failures : 6);
        if (backoff > TEMPLATE_RETRY_MAX_MS)
                backoff = TEMPLATE_RETRY_MAX_MS;
        e->template.retry_us = now + backoff * 1000;
        sbx_warn("engine: the python template (pid %d) ended; started again in %llu ms", (int)pid,
                 (unsigned long long)backoff);
        return true;
}

void templates_stop(struct engine *e)
{
        sbx_template_stop(e->template.pid, e->template.fd);
        e->template.pid = 0;
        e->template.fd = -1;
}
