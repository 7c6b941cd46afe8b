/* Theory of operation
 *
 * Three processes take part in a native sandbox:
 *
 *   supervisor  sandboxd itself, real root. Creates the pipes below and clones init.
 *   init        pid 1 of the sandbox's pid namespace, root of its user namespace. Builds the
 *               sandbox (credentials, cgroup namespace, hostname, loopback, filesystem, files),
 *               forks the program, then only reaps and reports. Being pid 1 means that when it
 *               exits the kernel kills everything else in the namespace: nothing the program
 *               started (daemons, double forks) outlives the run.
 *   program     pid 2. Locks itself down (Landlock, no_new_privs, rlimits, capabilities, fds,
 *               seccomp last) and execs the user's program. It is not pid 1 so that signals
 *               behave as they do anywhere else (a program may kill itself with SIGTERM).
 *
 * Pipes (all O_CLOEXEC):
 *   stdin, stdout, stderr  supervisor <-> program
 *   sync                   supervisor -> init: "g" once the uid/gid maps are written, then "l"
 *                          once the cgroup limits are set and the supervisor has left the
 *                          sandbox's v1 cgroups; end of file before either means "give up". The
 *                          supervisor then keeps its end open for the sandbox's life: a hang-up
 *                          afterwards means it died
 *   error                  init and program -> supervisor: "step\terrno\tmessage" when a setup
 *                          step fails. The program's copy closes on a successful execve, init's
 *                          right after the fork, so end of file with no data means "exec'd"
 *   report                 init -> supervisor: struct launch_report once the program has exited
 *   agent (pool mode)      a socket pair: the program (a warm-pool loader waiting on its fd 3,
 *                          guest/python_loader.py) says "R" when ready, then reads its execution
 *
 * Sync points: (1) init blocks on sync until the supervisor has mapped its ids (init is born in
 * its cgroups: see launch_start); (2) init blocks on sync again before it starts the program,
 * until the limits are in place (set while init builds the filesystem, off the critical path);
 * (3) the supervisor blocks on error until the program exec'd or setup failed. Any setup failure
 * ends init and the program before user code runs: fail closed. */
#define _GNU_SOURCE
#include "sandbox/native/launch.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sandbox/agent.h"
#include "sandbox/native/launch_internal.h"
#include "sandbox/native/rlimit.h"
#include "sandbox/native/template.h"
#include "sandbox/native/userns.h"
#include "util/cleanup.h"
#include "util/file.h"
#include "util/time.h"

/* Setup must finish in this time or the sandbox is abandoned; it takes a few ms normally. */
#define SETUP_TIMEOUT_MS 10000

static void pipes_close_all(struct launch_pipes *p)
{
        int *all[] = {&p->stdin_r,  &p->stdin_w,  &p->stdout_r, &p->stdout_w, &p->stderr_r,
                      &p->stderr_w, &p->sync_r,   &p->sync_w,   &p->error_r,  &p->error_w,
                      &p->report_r, &p->report_w, &p->agent_r,  &p->agent_w};
        for (size_t i = 0; i < SBX_ARRAY_SIZE(all); i++)
                sbx_closep(all[i]);
}

static int pipes_open(struct launch_pipes *p, bool agent, struct sbx_error *err)
{
        int *pairs[][2] = {{&p->stdin_r, &p->stdin_w},   {&p->stdout_r, &p->stdout_w},
                           {&p->stderr_r, &p->stderr_w}, {&p->sync_r, &p->sync_w},
                           {&p->error_r, &p->error_w},   {&p->report_r, &p->report_w}};
        for (size_t i = 0; i < SBX_ARRAY_SIZE(pairs); i++) {
                int fds[2];
                if (pipe2(fds, O_CLOEXEC) < 0)
                        return sbx_error_set(err, errno, "pipe2");
                *pairs[i][0] = fds[0];
                *pairs[i][1] = fds[1];
        }
        if (agent) {
                /* Both ways: the loader announces that it is ready, then reads its execution. */
                int fds[2];
                if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) < 0)
                        return sbx_error_set(err, errno, "socketpair");
                p->agent_r = fds[0];
                p->agent_w = fds[1];
        }
        return 0;
}

/* The program's stdio pipes belong to its namespace's root, not to the host's (whose uid the
 * sandbox cannot map): a program reopens them by name (/dev/stdin, /dev/stdout, tee /dev/stderr,
 * gcc's #include "/dev/stdin"), and the kernel checks the inode's owner then. */
static int stdio_owned_by(struct launch_pipes *p, unsigned host_id, struct sbx_error *err)
{
        int pipes[] = {p->stdin_r, p->stdout_r, p->stderr_r};
        for (size_t i = 0; i < SBX_ARRAY_SIZE(pipes); i++)
                if (fchown(pipes[i], host_id, host_id) < 0)
                        return sbx_error_set(err, errno, "chown the stdio pipes");
        return 0;
}

void launch_process_init(struct launch_process *proc)
{
        *proc = (struct launch_process){
                .pid = 0,
                .pidfd = -1,
                .stdin_fd = -1,
                .stdout_fd = -1,
                .stderr_fd = -1,
                .report_fd = -1,
                .lifeline_fd = -1,
                .agent_fd = -1,
                .error_fd = -1,
        };
}

/* Parses the child's "step\terrno\tmessage" into err. */
static int setup_failure(const char *text, struct sbx_error *err)
{
        char step[64] = "unknown";
        int code = 0;
        const char *message = text;
        const char *tab1 = strchr(text, '\t');
        if (tab1 != NULL) {
                size_t len = (size_t)(tab1 - text);
                if (len >= sizeof(step))
                        len = sizeof(step) - 1;
                memcpy(step, text, len);
                step[len] = '\0';
                code = atoi(tab1 + 1);
                const char *tab2 = strchr(tab1 + 1, '\t');
                message = tab2 != NULL ? tab2 + 1 : tab1 + 1;
        }
        sbx_error_set(err, 0, "setup step '%s': %s", step, message);
        err->code = code;
        return -1;
}

/* Waits for the error pipe's end of file (the program exec'd) or a failure message. */
static int wait_for_exec(int error_fd, struct sbx_error *err)
{
        char text[SBX_ERROR_MESSAGE_MAX + 64];
        size_t len = 0;
        uint64_t deadline = sbx_now_us() + (uint64_t)SETUP_TIMEOUT_MS * 1000;
        for (;;) {
                uint64_t now = sbx_now_us();
                if (now >= deadline)
                        return sbx_error_set(err, ETIMEDOUT,
                                             "setup step 'exec': no exec after %d ms",
                                             SETUP_TIMEOUT_MS);
                struct pollfd pfd = {.fd = error_fd, .events = POLLIN};
                int ready = poll(&pfd, 1, (int)((deadline - now) / 1000) + 1);
                if (ready < 0 && errno != EINTR)
                        return sbx_error_set(err, errno, "poll on the setup pipe");
                if (ready <= 0)
                        continue;
                ssize_t n = read(error_fd, text + len, sizeof(text) - 1 - len);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        return sbx_error_set(err, errno, "read the setup pipe");
                }
                if (n == 0 || len + (size_t)n >= sizeof(text) - 1) {
                        len += (size_t)(n > 0 ? n : 0);
                        text[len] = '\0';
                        return len == 0 ? 0 : setup_failure(text, err);
                }
                len += (size_t)n;
        }
}

/* The end of a start, cold or exec mode: the program exec'd (or a setup step says why not), the
 * setup pipe closed, stdin made non-blocking for the supervisor. */
static int finish_exec(struct launch_process *proc, int *error_fd, struct sbx_error *err)
{
        int rc = wait_for_exec(*error_fd, err);
        sbx_closep(error_fd);
        if (rc == 0 && fcntl(proc->stdin_fd, F_SETFL, O_NONBLOCK) < 0)
                rc = sbx_error_set(err, errno, "setup step 'exec': stdin non-blocking");
        return rc;
}

/* The cgroup limits of spec (test hook: step "cgroup"). */
static int set_limits(const struct sbx_spec *spec, struct cgroup *cgroup, struct sbx_error *err)
{
        if (launch_hook_forces(spec, "cgroup"))
                return sbx_error_set(err, EPERM, "forced to fail by the test hook");
        /* A session's memory cap kills its interpreter only: the agent starts a new one. */
        return cgroup_set_limits(cgroup, &spec->limits, !spec->session, err);
}

/* Clones init here, into the sandbox's cgroups. The caller leaves the v1 cgroups afterwards
 * (cgroup_leave_self), while init builds the sandbox. */
static int clone_init(const struct sbx_spec *spec, struct cgroup *cgroup, struct launch_pipes *p,
                      pid_t *pid, int *pidfd, struct sbx_error *err)
{
        struct launch_clone_args args = {
                .flags = launch_clone_flags(spec) | CLONE_PIDFD,
                .pidfd = (uint64_t)(uintptr_t)pidfd,
                .exit_signal = SIGCHLD,
        };
        int unified_fd = cgroup_unified_fd(cgroup);
        if (unified_fd >= 0) {
                /* Born inside the sandbox's cgroup: there is no moment at which a process of the
                 * sandbox could fork outside it. */
                args.flags |= CLONE_INTO_CGROUP;
                args.cgroup = (uint64_t)unified_fd;
        }

        /* The v1 cgroups: this thread steps into them so that init is born there too (see
         * cgroup_enter_self for why not attach it afterwards), and steps out before init may
         * fork. */
        if (cgroup_enter_self(cgroup, err) < 0)
                return sbx_error_prefix(err, "setup step 'cgroup'");
        struct rlimit_saved saved_rlimits = {.n = 0};
        if (launch_layer_on(spec, SBX_LAYER_RLIMITS) &&
            rlimit_namespace_ceilings(&saved_rlimits, err) < 0) {
                struct sbx_error ignored = {0};
                (void)cgroup_leave_self(cgroup, &ignored);
                return sbx_error_prefix(err, "setup step 'userns'");
        }
        *pid = (pid_t)syscall(SYS_clone3, &args, sizeof(args));
        int clone_errno = errno;
        if (*pid == 0)
                launch_child_main(&(struct launch_child){.spec = spec, .pipes = p});
        rlimit_restore(&saved_rlimits);
        if (*pid < 0) {
                struct sbx_error ignored = {0};
                (void)cgroup_leave_self(cgroup, &ignored);
                return sbx_error_set(err, clone_errno, "setup step 'userns': clone3");
        }
        return 0;
}

/* Sends fds and the request on the template's socket (template.h). */
static int send_to_template(int template_fd, const struct template_request *request, const int *fds,
                            size_t n, struct sbx_error *err)
{
        struct iovec iov = {.iov_base = (void *)request, .iov_len = sizeof(*request)};
        union {
                char buf[CMSG_SPACE(sizeof(int) * TEMPLATE_MAX_FDS)];
                struct cmsghdr align;
        } control = {0};
        struct msghdr msg = {.msg_iov = &iov,
                             .msg_iovlen = 1,
                             .msg_control = control.buf,
                             .msg_controllen = CMSG_SPACE(sizeof(int) * n)};
        struct cmsghdr *cmsg = CMSG_FIRSTHDR(&msg);
        if (cmsg == NULL)
                return sbx_error_set(err, EINVAL, "send to the template: no room for fds");
        cmsg->cmsg_level = SOL_SOCKET;
        cmsg->cmsg_type = SCM_RIGHTS;
        cmsg->cmsg_len = CMSG_LEN(sizeof(int) * n);
        memcpy(CMSG_DATA(cmsg), fds, sizeof(int) * n);
        if (sendmsg(template_fd, &msg, MSG_NOSIGNAL) < 0)
                return sbx_error_set(err, errno, "send to the template");
        return 0;
}

/* Waits for the template's answer on reply_fd: init's pid and pidfd. */
static int template_answer(int reply_fd, pid_t *pid, int *pidfd, struct sbx_error *err)
{
        struct pollfd pfd = {.fd = reply_fd, .events = POLLIN};
        int ready;
        do
                ready = poll(&pfd, 1, SETUP_TIMEOUT_MS);
        while (ready < 0 && errno == EINTR);
        if (ready <= 0)
                return sbx_error_set(err, ready < 0 ? errno : ETIMEDOUT, "the template's answer");
        struct template_reply answer;
        struct iovec iov = {.iov_base = &answer, .iov_len = sizeof(answer)};
        union {
                char buf[CMSG_SPACE(sizeof(int))];
                struct cmsghdr align;
        } control;
        struct msghdr msg = {.msg_iov = &iov,
                             .msg_iovlen = 1,
                             .msg_control = control.buf,
                             .msg_controllen = sizeof(control.buf)};
        ssize_t got = recvmsg(reply_fd, &msg, MSG_CMSG_CLOEXEC);
        struct cmsghdr *cmsg = got > 0 ? CMSG_FIRSTHDR(&msg) : NULL;
        if (cmsg != NULL && cmsg->cmsg_level == SOL_SOCKET && cmsg->cmsg_type == SCM_RIGHTS &&
            cmsg->cmsg_len == CMSG_LEN(sizeof(int)))
                memcpy(pidfd, CMSG_DATA(cmsg), sizeof(int));
        if (got != (ssize_t)sizeof(answer))
                return sbx_error_set(err, got < 0 ? errno : EPROTO, "the template's answer");
        if (answer.error != 0)
                return sbx_error_set(err, answer.error, "the template's clone3");
        if (answer.pid <= 0 || *pidfd < 0)
                return sbx_error_set(err, EPROTO, "the template's answer");
        *pid = answer.pid;
        return 0;
}

/* Has the template at spec->template_fd clone init (template.h) with the child's ends of p, into
 * the sandbox's cgroups. */
static int clone_init_from_template(const struct sbx_spec *spec, struct cgroup *cgroup,
                                    struct launch_pipes *p, pid_t *pid, int *pidfd,
                                    struct sbx_error *err)
{
        if (!spec->agent || p->agent_r < 0)
                return sbx_error_set(err, EINVAL, "setup step 'exec': a template needs an agent");
        struct template_request request = {
                .version = TEMPLATE_VERSION,
                .size = sizeof(request),
                .limits = spec->limits,
                .network = spec->network,
                .disabled_layers = spec->test.disabled_layers,
        };
        if (spec->test.fail_step != NULL)
                snprintf(request.fail_step, sizeof(request.fail_step), "%s", spec->test.fail_step);
        _cleanup_close_ int reply_local = -1, reply_remote = -1;
        int pair[2];
        if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) < 0)
                return sbx_error_set(err, errno, "setup step 'userns': socketpair");
        reply_local = pair[0];
        reply_remote = pair[1];
        int fds[TEMPLATE_MAX_FDS] = {
                [TEMPLATE_FD_REPLY] = reply_remote, [TEMPLATE_FD_STDIN] = p->stdin_r,
                [TEMPLATE_FD_STDOUT] = p->stdout_w, [TEMPLATE_FD_STDERR] = p->stderr_w,
                [TEMPLATE_FD_SYNC] = p->sync_r,     [TEMPLATE_FD_ERROR] = p->error_w,
                [TEMPLATE_FD_REPORT] = p->report_w, [TEMPLATE_FD_AGENT] = p->agent_r,
        };
        size_t n = TEMPLATE_FIXED_FDS;
        int unified_fd = cgroup_unified_fd(cgroup);
        if (unified_fd >= 0) {
                request.has_cgroup_fd = 1;
                fds[n++] = unified_fd;
        }
        size_t n_v1 = 0;
        if (cgroup_open_v1_tasks(cgroup, &fds[n], TEMPLATE_MAX_V1, &n_v1, err) < 0)
                return sbx_error_prefix(err, "setup step 'cgroup'");
        request.n_v1_tasks = (uint32_t)n_v1;
        int rc = send_to_template(spec->template_fd, &request, fds, n + n_v1, err);
        for (size_t i = n; i < n + n_v1; i++)
                close(fds[i]);
        sbx_closep(&reply_remote);
        if (rc == 0)
                rc = template_answer(reply_local, pid, pidfd, err);
        return rc < 0 ? sbx_error_prefix(err, "setup step 'userns'") : 0;
}

int launch_start(const struct sbx_spec *spec, struct cgroup *cgroup, unsigned host_id,
                 struct launch_process *proc, struct sbx_error *err)
{
        struct launch_pipes p = {-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1};
        if (pipes_open(&p, spec->agent, err) < 0 || stdio_owned_by(&p, host_id, err) < 0) {
                pipes_close_all(&p);
                return sbx_error_prefix(err, "setup step 'exec'");
        }

        pid_t pid = 0;
        int pidfd = -1;
        bool from_template = spec->template_fd > 0;
        if ((from_template ? clone_init_from_template(spec, cgroup, &p, &pid, &pidfd, err)
                           : clone_init(spec, cgroup, &p, &pid, &pidfd, err)) < 0) {
                sbx_closep(&pidfd);
                pipes_close_all(&p);
                return -1;
        }

        proc->pid = pid;
        proc->pidfd = pidfd;
        proc->foreign_parent = from_template;
        proc->stdin_fd = take_fd(&p.stdin_w);
        proc->stdout_fd = take_fd(&p.stdout_r);
        proc->stderr_fd = take_fd(&p.stderr_r);
        proc->report_fd = take_fd(&p.report_r);
        proc->agent_fd = take_fd(&p.agent_w);
        sbx_closep(&p.stdin_r);
        sbx_closep(&p.stdout_w);
        sbx_closep(&p.stderr_w);
        sbx_closep(&p.sync_r);
        sbx_closep(&p.error_w);
        sbx_closep(&p.report_w);
        sbx_closep(&p.agent_r);

        /* Init is released as soon as its ids are mapped; leaving the v1 cgroups and setting the
         * limits happen while it builds the sandbox, and it waits for them before it starts the
         * program (so the supervisor never counts in the sandbox's pids meanwhile). */
        int rc = 0;
        if (launch_hook_forces(spec, "userns"))
                rc = sbx_error_set(err, EPERM,
                                   "setup step 'userns': forced to fail by the test hook");
        else if (userns_prepare(pid, host_id, err) < 0)
                rc = sbx_error_prefix(err, "setup step 'userns'");
        else if (sbx_write_all(p.sync_w, "g", 1) < 0)
                rc = sbx_error_set(err, errno, "setup step 'userns': release init");
        struct sbx_error leave_err = {0};
        if (cgroup_leave_self(cgroup, &leave_err) < 0 && rc == 0)
                rc = sbx_error_set(err, leave_err.code, "setup step 'cgroup': %s",
                                   leave_err.message);
        if (rc == 0 && set_limits(spec, cgroup, err) < 0)
                rc = sbx_error_prefix(err, "setup step 'cgroup'");
        /* EPIPE: init is gone already, a setup step of its own failed; the error pipe says
         * which. */
        if (rc == 0 && sbx_write_all(p.sync_w, "l", 1) < 0 && errno != EPIPE)
                rc = sbx_error_set(err, errno, "setup step 'cgroup': release init");
        if (rc == 0)
                proc->lifeline_fd = take_fd(&p.sync_w);
        sbx_closep(&p.sync_w); /* on failure, end of file tells init to give up */

        /* Exec mode: the program starts at launch_exec, which waits for its exec then. */
        if (rc == 0 && spec->exec_on_acquire) {
                proc->error_fd = take_fd(&p.error_r);
                return 0;
        }
        if (rc == 0)
                rc = finish_exec(proc, &p.error_r, err);
        sbx_closep(&p.error_r);
        return rc;
}

/* A template's init that is not our child (the engine's, whose worker we are): its end is its
 * pidfd becoming readable, its status unknown to us; only a run whose init died before its
 * report asks (native.c): killed. (`sandboxd run --template` is its parent, and reaps it.) */
static int wait_for_foreign_init(struct launch_process *proc, int *status, struct sbx_error *err)
{
        struct pollfd pfd = {.fd = proc->pidfd, .events = POLLIN};
        while (poll(&pfd, 1, -1) < 0)
                if (errno != EINTR)
                        return sbx_error_set(err, errno, "poll on init's pidfd");
        proc->pid = 0;
        *status = SIGKILL;
        return 0;
}

int launch_reap(struct launch_process *proc, int *status, struct sbx_error *err)
{
        if (proc->pid <= 0)
                return sbx_error_set(err, ECHILD, "reap: no process");
        siginfo_t info;
        memset(&info, 0, sizeof(info));
        for (;;) {
                if (waitid((idtype_t)P_PIDFD, (id_t)proc->pidfd, &info, WEXITED) == 0)
                        break;
                if (errno == ECHILD && proc->foreign_parent)
                        return wait_for_foreign_init(proc, status, err);
                if (errno != EINTR)
                        return sbx_error_set(err, errno, "waitid on init's pidfd");
        }
        proc->pid = 0;
        if (info.si_code == CLD_EXITED)
                *status = W_EXITCODE(info.si_status, 0);
        else
                *status = info.si_status | (info.si_code == CLD_DUMPED ? 0x80 : 0); /* signaled */
        return 0;
}

int launch_kill(struct launch_process *proc, struct sbx_error *err)
{
        if (proc->pid <= 0 || proc->pidfd < 0)
                return 0;
        /* ESRCH: init has exited already (a zombie until reaped). */
        if (syscall(SYS_pidfd_send_signal, proc->pidfd, SIGKILL, NULL, 0) < 0 && errno != ESRCH)
                return sbx_error_set(err, errno, "kill init through its pidfd");
        return 0;
}

void launch_release(struct launch_process *proc)
{
        if (proc->pid > 0 && proc->pidfd >= 0) {
                /* Killing init kills its whole pid namespace. */
                struct sbx_error ignored = {0};
                int status;
                (void)launch_kill(proc, &ignored);
                (void)launch_reap(proc, &status, &ignored);
        }
        sbx_closep(&proc->pidfd);
        sbx_closep(&proc->stdin_fd);
        sbx_closep(&proc->stdout_fd);
        sbx_closep(&proc->stderr_fd);
        sbx_closep(&proc->report_fd);
        sbx_closep(&proc->lifeline_fd);
        sbx_closep(&proc->agent_fd);
        sbx_closep(&proc->error_fd);
        proc->pid = 0;
}

int launch_exec(struct launch_process *proc, const struct sbx_spec *request, struct sbx_error *err)
{
        if (proc->agent_fd < 0 || proc->error_fd < 0)
                return sbx_error_set(err, EINVAL, "not a sandbox waiting for its execution");
        int rc = sbx_agent_send_execution(proc->agent_fd, SBX_AGENT_SOCKET, request, err);
        sbx_closep(&proc->agent_fd);
        if (rc == 0)
                rc = finish_exec(proc, &proc->error_fd, err);
        sbx_closep(&proc->error_fd);
        return rc;
}
