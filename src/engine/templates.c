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
#include "util/cleanup.h"
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

/* The template's stdio: pipes, as a sandboxed program's are, because the interpreter records
 * what its streams are when it makes them (a pipe is not seekable, /dev/null is), and its forks
 * keep those objects. Stdin reads end of file; nothing reads stdout (the template writes
 * nothing there); the caller keeps stderr's read end, to log what a template that ended said. */
struct template_stdio {
        int in[2], out[2], err[2];
};

static void stdio_close(struct template_stdio *stdio)
{
        int *all[] = {&stdio->in[0],  &stdio->in[1],  &stdio->out[0],
                      &stdio->out[1], &stdio->err[0], &stdio->err[1]};
        for (size_t i = 0; i < SBX_ARRAY_SIZE(all); i++)
                sbx_closep(all[i]);
}

static int stdio_open(struct template_stdio *stdio)
{
        *stdio = (struct template_stdio){{-1, -1}, {-1, -1}, {-1, -1}};
        if (pipe2(stdio->in, O_CLOEXEC) < 0 || pipe2(stdio->out, O_CLOEXEC) < 0 ||
            pipe2(stdio->err, O_CLOEXEC | O_NONBLOCK) < 0) {
                int saved = errno;
                stdio_close(stdio);
                errno = saved;
                return -1;
        }
        return 0;
}

/* The child, between fork and exec: the template's fds, signals and parent-death signal. */
static _Noreturn void exec_template(int socket_fd, const struct template_stdio *stdio,
                                    const char *module, pid_t engine)
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
        int flags = fcntl(stdio->err[1], F_GETFL);
        if (flags < 0 || fcntl(stdio->err[1], F_SETFL, flags & ~O_NONBLOCK) < 0 ||
            dup2(stdio->in[0], STDIN_FILENO) < 0 || dup2(stdio->out[1], STDOUT_FILENO) < 0 ||
            dup2(stdio->err[1], STDERR_FILENO) < 0 ||
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

int sbx_template_start(struct sbx_template *template, struct sbx_error *err)
{
        *template = (struct sbx_template){.pid = 0, .fd = -1, .stderr_fd = -1};
        char module[4096];
        if (module_path(module, sizeof(module)) < 0)
                return sbx_error_set(err, ENOENT, "no %s (next to sandboxd, or in %s)",
                                     TEMPLATE_MODULE_NAME, SBX_MODULE_DIR);
        int pair[2];
        if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) < 0)
                return sbx_error_set(err, errno, "the template's socket");
        struct template_stdio stdio;
        if (stdio_open(&stdio) < 0) {
                close(pair[0]);
                close(pair[1]);
                return sbx_error_set(err, errno, "the template's stdio");
        }
        pid_t parent = getpid();
        pid_t child = fork();
        if (child == 0)
                exec_template(pair[1], &stdio, module, parent);
        int fork_errno = errno;
        close(pair[1]);
        template->stderr_fd = take_fd(&stdio.err[0]);
        stdio_close(&stdio);
        if (child < 0) {
                close(pair[0]);
                sbx_closep(&template->stderr_fd);
                return sbx_error_set(err, fork_errno, "fork the template");
        }
        template->pid = child;
        template->fd = pair[0];
        return 0;
}

void sbx_template_ended(struct sbx_template *template)
{
        char text[2048];
        ssize_t n =
                template->stderr_fd >= 0 ? read(template->stderr_fd, text, sizeof(text) - 1) : -1;
        if (n > 0) {
                /* A traceback's end says most: its last 400 bytes. */
                text[n] = '\0';
                sbx_warn("the python template said: %s", n > 400 ? text + n - 400 : text);
        }
        sbx_closep(&template->stderr_fd);
        sbx_closep(&template->fd);
        template->pid = 0;
}

void sbx_template_stop(struct sbx_template *template)
{
        sbx_closep(&template->fd);
        if (template->pid > 0) {
                kill(template->pid, SIGKILL);
                while (waitpid(template->pid, NULL, 0) < 0 && errno == EINTR)
                        ;
        }
        sbx_template_ended(template);
}

static void start(struct engine *e)
{
        struct sbx_error err = {0};
        if (sbx_template_start(&e->template.process, &err) < 0) {
                if (e->template.failures++ == 0)
                        sbx_warn("engine: the python template: %s; python pool entries start "
                                 "their own interpreters",
                                 err.message);
                e->template.retry_us = sbx_now_us() + (uint64_t)TEMPLATE_RETRY_MAX_MS * 1000;
                return;
        }
        e->template.started_us = sbx_now_us();
        sbx_debug("engine: python template started (pid %d)", (int)e->template.process.pid);
}

void templates_maintain(struct engine *e)
{
        if (e->template.wanted && !e->stopping && e->template.process.pid <= 0 &&
            sbx_now_us() >= e->template.retry_us)
                start(e);
}

bool templates_reaped(struct engine *e, pid_t pid)
{
        if (e->template.process.pid <= 0 || pid != e->template.process.pid)
                return false;
        sbx_template_ended(&e->template.process);
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
        sbx_template_stop(&e->template.process);
}
