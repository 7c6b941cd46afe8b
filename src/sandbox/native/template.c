/* The template's side of a launch (template.h): receive a launch's fds, clone its init. Linked
 * into the shared module sandboxd-template.so only, with the child side of a launch
 * (launch_child.c), which init runs from here exactly as it would from a supervisor's clone. */
#define _GNU_SOURCE
#include "sandbox/native/template.h"

#include <errno.h>
#include <grp.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "sandbox/native/launch_internal.h"
#include "sandbox/native/rlimit.h"
#include "util/cleanup.h"
#include "util/file.h"

static void close_all(int *fds, size_t n)
{
        for (size_t i = 0; i < n; i++)
                sbx_closep(&fds[i]);
}

static void reply(int fd, int error, pid_t pid, int pidfd)
{
        struct template_reply answer = {.error = error, .pid = (int32_t)pid};
        /* A supervisor that gave up meanwhile: its init finds the sync pipe closed and ends. */
        struct sbx_error ignored = {0};
        (void)sbx_send_record(fd, &answer, sizeof(answer), pidfd, 0, &ignored);
}

/* Receives one request and its fds (*n of them); 0 at end of file. */
static ssize_t receive(int fd, struct template_request *request, int *fds, size_t *n)
{
        struct iovec iov = {.iov_base = request, .iov_len = sizeof(*request)};
        union {
                char buf[CMSG_SPACE(sizeof(int) * TEMPLATE_MAX_FDS)];
                struct cmsghdr align;
        } control;
        struct msghdr msg = {.msg_iov = &iov,
                             .msg_iovlen = 1,
                             .msg_control = control.buf,
                             .msg_controllen = sizeof(control.buf)};
        ssize_t got = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
        *n = 0;
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); got > 0 && c != NULL;
             c = CMSG_NXTHDR(&msg, c)) {
                if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
                        continue;
                size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
                for (size_t i = 0; i < count && *n < TEMPLATE_MAX_FDS; i++)
                        memcpy(&fds[(*n)++], CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        }
        if (got > 0 && (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0)
                got = -2; /* not one of ours: refused below */
        return got;
}

static bool request_valid(const struct template_request *request, ssize_t got, size_t n_fds)
{
        return got == (ssize_t)sizeof(*request) && request->version == TEMPLATE_VERSION &&
               request->size == sizeof(*request) && request->has_cgroup_fd <= 1 &&
               request->n_v1_tasks <= TEMPLATE_MAX_V1 &&
               n_fds == TEMPLATE_FIXED_FDS + request->has_cgroup_fd + request->n_v1_tasks &&
               memchr(request->fail_step, '\0', sizeof(request->fail_step)) != NULL;
}

/* Clones init for request. Returns in the parent (the template) with init's pid, or -errno; in
 * the sandbox's program with 0 (init itself never returns). */
static pid_t launch(const struct template_request *request, int *fds, int *pidfd)
{
        struct launch_pipes p = {
                .stdin_r = fds[TEMPLATE_FD_STDIN],
                .stdin_w = -1,
                .stdout_r = -1,
                .stdout_w = fds[TEMPLATE_FD_STDOUT],
                .stderr_r = -1,
                .stderr_w = fds[TEMPLATE_FD_STDERR],
                .sync_r = fds[TEMPLATE_FD_SYNC],
                .sync_w = -1,
                .error_r = -1,
                .error_w = fds[TEMPLATE_FD_ERROR],
                .report_r = -1,
                .report_w = fds[TEMPLATE_FD_REPORT],
                .agent_r = fds[TEMPLATE_FD_AGENT],
                .agent_w = -1,
        };
        struct sbx_spec spec = {
                .limits = request->limits,
                .network = (enum sbx_network)request->network,
                .test = {.fail_step = request->fail_step[0] != '\0' ? request->fail_step : NULL,
                         .disabled_layers = request->disabled_layers},
                .agent = true,
                .cancel_fd = -1,
                .artifact_fd = -1,
        };
        /* CLONE_PARENT: init is the engine's child (the template's parent), so its parent-death
         * signal is the engine's death and the engine reaps it; the template itself has no
         * children to wait for. clone3 wants exit_signal 0 then: init's is the template's. */
        struct launch_clone_args args = {
                .flags = launch_clone_flags(&spec) | CLONE_PIDFD | CLONE_PARENT,
                .pidfd = (uint64_t)(uintptr_t)pidfd,
        };
        size_t next = TEMPLATE_FIXED_FDS;
        if (request->has_cgroup_fd) {
                args.flags |= CLONE_INTO_CGROUP;
                args.cgroup = (uint64_t)fds[next++];
        }
        struct launch_child child = {
                .spec = &spec,
                .pipes = &p,
                .from_template = true,
                .v1_tasks = &fds[next],
                .n_v1_tasks = request->n_v1_tasks,
        };
        struct rlimit_saved saved = {.n = 0};
        struct sbx_error err = {0};
        if (launch_layer_on(&spec, SBX_LAYER_RLIMITS) &&
            rlimit_namespace_ceilings(&saved, &err) < 0)
                return -(err.code != 0 ? err.code : EPERM);
        pid_t pid = (pid_t)syscall(SYS_clone3, &args, sizeof(args));
        int clone_errno = errno;
        if (pid == 0) {
                launch_child_main(&child);
                return 0; /* the program */
        }
        rlimit_restore(&saved);
        return pid < 0 ? -clone_errno : pid;
}

int sbx_template_serve(int fd) __attribute__((visibility("default")));

int sbx_template_serve(int fd)
{
        /* As a supervisor does (native.c): a child could never drop them (setgroups is denied in
         * its user namespace), and root's group would grant host files inside. */
        if (setgroups(0, NULL) < 0)
                _exit(1);
        for (;;) {
                struct template_request request;
                int fds[TEMPLATE_MAX_FDS];
                size_t n = 0;
                ssize_t got = receive(fd, &request, fds, &n);
                if (got == 0)
                        _exit(0); /* the engine closed its end: nothing more to launch */
                if (got == -1 && errno == EINTR)
                        continue;
                if (got == -1)
                        _exit(1);
                if (!request_valid(&request, got, n)) {
                        if (n > TEMPLATE_FD_REPLY)
                                reply(fds[TEMPLATE_FD_REPLY], EPROTO, 0, -1);
                        close_all(fds, n);
                        continue;
                }
                int pidfd = -1;
                pid_t pid = launch(&request, fds, &pidfd);
                if (pid == 0)
                        return 0;
                reply(fds[TEMPLATE_FD_REPLY], pid < 0 ? -pid : 0, pid > 0 ? pid : 0, pidfd);
                sbx_closep(&pidfd);
                close_all(fds, n);
        }
}
