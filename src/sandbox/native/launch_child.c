/* The child side of a native launch (theory of operation: launch.c): init, pid 1 of the
 * sandbox's pid namespace, builds the sandbox and starts the program, which locks itself down
 * and execs the user's program. Everything here runs inside the sandbox and ends in _exit or
 * execve, except the program of a launch from a template (template.c), which returns. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sandbox/agent.h"
#include "sandbox/native/caps.h"
#include "sandbox/native/landlock.h"
#include "sandbox/native/launch.h"
#include "sandbox/native/launch_internal.h"
#include "sandbox/native/mount.h"
#include "sandbox/native/netns.h"
#include "sandbox/native/rlimit.h"
#include "sandbox/native/seccomp.h"
#include "sandbox/native/userns.h"
#include "util/cleanup.h"
#include "util/file.h"

static const char *const sandbox_hostname = "sandbox";

/* Reports a failed setup step to the supervisor and ends this process. Only the child may
 * terminate itself, and only after saying why. */
static _Noreturn void fail_or_die(int error_fd, const char *step, const struct sbx_error *err)
{
        char message[SBX_ERROR_MESSAGE_MAX + 64];
        int n = snprintf(message, sizeof(message), "%s\t%d\t%s", step, err->code, err->message);
        if (n > 0)
                (void)sbx_write_all(error_fd, message,
                                    (size_t)n < sizeof(message) ? (size_t)n : sizeof(message) - 1);
        _exit(127);
}

/* Runs one setup step, `fn(args..., &err)`: the test hook first, then the call; on failure
 * reports the step and dies. */
#define STEP_OR_DIE(spec, error_fd, name, fn, ...)                                                 \
        do {                                                                                       \
                struct sbx_error step_err_ = {0};                                                  \
                int step_rc_ = launch_hook_forces((spec), (name))                                  \
                                       ? sbx_error_set(&step_err_, EPERM,                          \
                                                       "forced to fail by the test hook")          \
                                       : fn(__VA_ARGS__ __VA_OPT__(, ) & step_err_);               \
                if (step_rc_ < 0)                                                                  \
                        fail_or_die((error_fd), (name), &step_err_);                               \
        } while (0)

static int set_hostname(struct sbx_error *err)
{
        if (sethostname(sandbox_hostname, strlen(sandbox_hostname)) < 0)
                return sbx_error_set(err, errno, "sethostname");
        return 0;
}

static int enter_cgroup_namespace(struct sbx_error *err)
{
        /* Unshared here rather than at clone3, so that the namespace's root is the sandbox's own
         * cgroup in every hierarchy: /proc/self/cgroup shows "/" and no host cgroup path leaks. */
        if (unshare(CLONE_NEWCGROUP) < 0)
                return sbx_error_set(err, errno, "unshare(CLONE_NEWCGROUP)");
        return 0;
}

static int make_parent_dirs(char *path, struct sbx_error *err)
{
        for (char *slash = strchr(path, '/'); slash != NULL; slash = strchr(slash + 1, '/')) {
                *slash = '\0';
                int rc = mkdir(path, 0755);
                int saved = errno;
                *slash = '/';
                if (rc < 0 && saved != EEXIST)
                        return sbx_error_set(err, saved, "mkdir for %s", path);
        }
        return 0;
}

/* The program keeps the file capabilities of its namespace's root (CAP_DAC_OVERRIDE, CAP_FOWNER:
 * caps.c), so permission bits would not stop it: the file becomes a read-only bind mount of
 * itself, which it cannot write, chmod, unlink or remount (no CAP_SYS_ADMIN). */
static int make_file_read_only(int fd, const char *path, bool executable, struct sbx_error *err)
{
        if (fchmod(fd, executable ? 0555 : 0444) < 0)
                return sbx_error_set(err, errno, "chmod %s", path);
        if (mount(path, path, NULL, MS_BIND, NULL) < 0 ||
            mount(NULL, path, NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL) <
                    0)
                return sbx_error_set(err, errno, "bind %s read-only", path);
        return 0;
}

/* A pool entry's writable fd to its loader_writes file (write_files), for the program to keep as
 * PROGRAM_LOADER_WRITE_FD; -1 for none. Init's own copy goes with the rest of its fds
 * (init_keep_only) once the program runs. */
static int loader_write_fd = -1;

static int write_files(const struct sbx_spec *spec, struct sbx_error *err)
{
        if (chdir("/workspace") < 0)
                return sbx_error_set(err, errno, "chdir /workspace");
        for (size_t i = 0; i < spec->n_files; i++) {
                const struct sbx_file *file = &spec->files[i];
                _cleanup_free_ char *path = strdup(file->path);
                if (path == NULL)
                        return sbx_error_set(err, ENOMEM, "strdup");
                if (make_parent_dirs(path, err) < 0)
                        return -1;
                /* O_EXCL|O_NOFOLLOW: a fresh tmpfs holds nothing to follow, and never will. */
                _cleanup_close_ int fd =
                        open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                             file->executable ? 0755 : 0644);
                if (fd < 0)
                        return sbx_error_set(err, errno, "create %s", file->path);
                if (sbx_write_all(fd, file->data, file->size) < 0)
                        return sbx_error_set(err, errno, "write %s", file->path);
                /* Opened before the mount: through the tmpfs's own, writable, as no path is. */
                if (file->read_only && file->loader_writes && loader_write_fd < 0 &&
                    (loader_write_fd = fcntl(fd, F_DUPFD_CLOEXEC, PROGRAM_LOADER_WRITE_FD + 1)) < 0)
                        return sbx_error_set(err, errno, "keep %s for the loader", file->path);
                if (file->read_only && make_file_read_only(fd, path, file->executable, err) < 0)
                        return -1;
        }
        return 0;
}

static int connect_stdio(struct launch_pipes *p, struct sbx_error *err)
{
        if (dup2(p->stdin_r, STDIN_FILENO) < 0 || dup2(p->stdout_w, STDOUT_FILENO) < 0 ||
            dup2(p->stderr_w, STDERR_FILENO) < 0)
                return sbx_error_set(err, errno, "dup2 stdio");
        sbx_closep(&p->stdin_r);
        sbx_closep(&p->stdout_w);
        sbx_closep(&p->stderr_w);
        return 0;
}

/* Keeps fds 0-2, `keep` (moved to PROGRAM_ERROR_FD, close-on-exec), in pool mode `agent` (moved
 * to PROGRAM_AGENT_FD, kept across execve) and loader_write_fd (PROGRAM_LOADER_WRITE_FD, kept),
 * and closes every other fd, so that nothing of the supervisor's (other sandboxes' pipes, cgroup
 * dirs) leaks into the sandbox. */
static int close_other_fds(int keep, int agent, struct sbx_error *err)
{
        /* Out of the way first: keep or agent may sit on the other's target number. */
        int keep_high = fcntl(keep, F_DUPFD_CLOEXEC, PROGRAM_LOADER_WRITE_FD + 1);
        int agent_high = agent >= 0 ? fcntl(agent, F_DUPFD, PROGRAM_LOADER_WRITE_FD + 1) : -1;
        if (keep_high < 0 || (agent >= 0 && agent_high < 0))
                return sbx_error_set(err, errno, "fcntl F_DUPFD");
        if (dup3(keep_high, PROGRAM_ERROR_FD, O_CLOEXEC) < 0)
                return sbx_error_set(err, errno, "dup3");
        if (agent_high >= 0 && dup2(agent_high, PROGRAM_AGENT_FD) < 0)
                return sbx_error_set(err, errno, "dup2 agent");
        if (agent_high < 0)
                close(PROGRAM_AGENT_FD); /* nothing in a cold run; EBADF is fine */
        if (loader_write_fd >= 0 && dup2(loader_write_fd, PROGRAM_LOADER_WRITE_FD) < 0)
                return sbx_error_set(err, errno, "dup2 the loader's file");
        if (loader_write_fd < 0)
                close(PROGRAM_LOADER_WRITE_FD);
        if (close_range(PROGRAM_LOADER_WRITE_FD + 1, ~0U, 0) < 0)
                return sbx_error_set(err, errno, "close_range");
        return 0;
}

static int reset_signals(struct sbx_error *err)
{
        /* The supervisor ignores SIGPIPE; ignored dispositions survive execve, and a program
         * must see the defaults (`yes | head` relies on SIGPIPE). */
        sigset_t none;
        sigemptyset(&none);
        if (sigprocmask(SIG_SETMASK, &none, NULL) < 0)
                return sbx_error_set(err, errno, "sigprocmask");
        for (int sig = 1; sig < NSIG; sig++) {
                if (sig == SIGKILL || sig == SIGSTOP)
                        continue;
                signal(sig, SIG_DFL); /* EINVAL for the realtime signals glibc reserves */
        }
        return 0;
}

static int new_session(struct sbx_error *err)
{
        /* No controlling terminal to inject keystrokes into, and a process group of its own. */
        if (setsid() < 0)
                return sbx_error_set(err, errno, "setsid");
        return 0;
}

static int set_no_new_privs(struct sbx_error *err)
{
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
                return sbx_error_set(err, errno, "PR_SET_NO_NEW_PRIVS");
        return 0;
}

/* An exec entry's Landlock ruleset, built by its init before it waits (init's memory, which the
 * vforked program shares): the program then only restricts itself. NOT_PREPARED in a cold
 * sandbox, whose program builds its own. */
#define NOT_PREPARED (-2)
static int prepared_ruleset = NOT_PREPARED;

static int landlock_step(struct sbx_error *err)
{
        return prepared_ruleset != NOT_PREPARED ? landlock_restrict(prepared_ruleset, err)
                                                : landlock_apply(err);
}

/* Forked from a template, the program keeps the signal dispositions of the interpreter it is
 * a copy of, as that interpreter set them at its start-up (SIGINT raises KeyboardInterrupt,
 * SIGPIPE ignored: what a fresh one would set again); only init's mask goes: SIGCHLD, blocked
 * for its signalfd. */
static int unblock_signals(struct sbx_error *err)
{
        sigset_t none;
        sigemptyset(&none);
        if (sigprocmask(SIG_SETMASK, &none, NULL) < 0)
                return sbx_error_set(err, errno, "sigprocmask");
        return 0;
}

/* A program forked from a template is what an exec'd one is: dumpable. Init's change of
 * credentials made it not (userns.c), and an execve would have made it so again; it holds
 * nothing more than its own memory, which it can read anyway: the template's interpreter, its
 * own copy. Otherwise its /proc/self would belong to host root (its memory's user namespace is
 * the template's), which a cold program's does not. */
static int set_dumpable(struct sbx_error *err)
{
        if (prctl(PR_SET_DUMPABLE, 1) < 0)
                return sbx_error_set(err, errno, "PR_SET_DUMPABLE");
        return 0;
}

/* The program (pid 2): lock down, in the order of DESIGN.md. Every step acts on its own task. */
static void program_lock_down_or_die(const struct sbx_spec *spec, int error_fd, int agent_fd,
                                     bool from_template)
{
        STEP_OR_DIE(spec, error_fd, "exec", new_session);
        if (from_template)
                STEP_OR_DIE(spec, error_fd, "exec", unblock_signals);
        else
                STEP_OR_DIE(spec, error_fd, "exec", reset_signals);
        if (launch_layer_on(spec, SBX_LAYER_LANDLOCK))
                STEP_OR_DIE(spec, error_fd, "landlock", landlock_step);
        if (launch_layer_on(spec, SBX_LAYER_NO_NEW_PRIVS))
                STEP_OR_DIE(spec, error_fd, "no_new_privs", set_no_new_privs);
        if (launch_layer_on(spec, SBX_LAYER_RLIMITS))
                STEP_OR_DIE(spec, error_fd, "rlimits", rlimit_apply, &spec->limits);
        /* A uml backend's kernel needs none of the root set: its files are its own, and it
         * traces and signals its own processes. Escaping its guest lands in no capability. */
        if (launch_layer_on(spec, SBX_LAYER_CAPS) && spec->uml_kernel)
                STEP_OR_DIE(spec, error_fd, "caps", caps_drop_all);
        else if (launch_layer_on(spec, SBX_LAYER_CAPS))
                STEP_OR_DIE(spec, error_fd, "caps", caps_limit_to_root_set);
        if (from_template)
                STEP_OR_DIE(spec, error_fd, "exec", set_dumpable);
        STEP_OR_DIE(spec, error_fd, "exec", close_other_fds, error_fd, agent_fd);
        error_fd = PROGRAM_ERROR_FD;
        /* seccomp last: it refuses calls the steps above make. */
        if (launch_layer_on(spec, SBX_LAYER_SECCOMP))
                STEP_OR_DIE(spec, error_fd, "seccomp", seccomp_apply,
                            spec->uml_kernel ? SECCOMP_PROFILE_UML_KERNEL
                                             : SECCOMP_PROFILE_PROGRAM);
}

/* The program of a cloned launch: lock down and exec. */
static _Noreturn void program_exec_or_die(const struct sbx_spec *spec, int error_fd, int agent_fd)
{
        program_lock_down_or_die(spec, error_fd, agent_fd, false);
        struct sbx_error err = {0};
        if (launch_hook_forces(spec, "exec")) {
                sbx_error_set(&err, EPERM, "forced to fail by the test hook");
                fail_or_die(PROGRAM_ERROR_FD, "exec", &err);
        }
        execve(spec->argv[0], (char *const *)spec->argv, (char *const *)spec->envp);
        sbx_error_set(&err, errno, "execve %s", spec->argv[0]);
        fail_or_die(PROGRAM_ERROR_FD, "exec", &err);
}

static void init_report_and_exit(int report_fd, int wait_status)
{
        struct launch_report report = {.wait_status = wait_status};
        struct statfs st;
        struct sbx_error err = {0};
        if (mount_scratch_usage(&st, &err) == 0) {
                report.disk_known = 1;
                report.disk_total_bytes = (uint64_t)st.f_blocks * (uint64_t)st.f_bsize;
                report.disk_free_bytes = (uint64_t)st.f_bfree * (uint64_t)st.f_bsize;
                report.inodes_free = (uint64_t)st.f_ffree;
        }
        (void)sbx_write_all(report_fd, &report, sizeof(report));
        _exit(0);
}

/* Exec mode: init says it is ready, waits for the execution a request brings, and writes its
 * files; the program then starts as in a cold sandbox. What was received is kept (static) until
 * the program execs: vfork shares this memory. */
static struct sbx_agent_received received;

static const struct sbx_spec *receive_execution_or_die(const struct sbx_spec *spec,
                                                       struct launch_pipes *p, int error_fd)
{
        if (sbx_write_all(p->agent_r, "R", 1) < 0)
                _exit(1);
        struct sbx_error err = {0};
        int got = sbx_agent_receive_execution(p->agent_r, spec, &received, &err);
        if (got == 0)
                _exit(0); /* retired unused: the supervisor hung up */
        if (got < 0)
                fail_or_die(error_fd, "exec", &err);
        sbx_closep(&p->agent_r);
        STEP_OR_DIE(&received.spec, error_fd, "files", write_files, &received.spec);
        sbx_agent_free_files(&received);
        return &received.spec;
}

/* Launched by a template, init is born in the template's v1 cgroups (CLONE_INTO_CGROUP reaches
 * the unified hierarchy only) and moves itself into the sandbox's, the way cgroup_enter_self
 * moves a supervisor's thread: "0" into each "tasks" file, before it forks anything. */
static int enter_v1_cgroups(const struct launch_child *child, struct sbx_error *err)
{
        for (size_t i = 0; i < child->n_v1_tasks; i++) {
                if (write(child->v1_tasks[i], "0", 1) != 1)
                        return sbx_error_set(err, errno, "move init into its v1 cgroups");
                close(child->v1_tasks[i]);
        }
        return 0;
}

/* Init keeps, once the program runs, its report pipe, the supervisor's lifeline and its
 * SIGCHLD signalfd, as fds 3 to 5 (close-on-exec), and nothing else. */
static int init_keep_only(int *fds[3], struct sbx_error *err)
{
        int high[3];
        for (int i = 0; i < 3; i++) {
                high[i] = fcntl(*fds[i], F_DUPFD_CLOEXEC, 6);
                if (high[i] < 0)
                        return sbx_error_set(err, errno, "fcntl F_DUPFD");
        }
        for (int i = 0; i < 3; i++) {
                if (dup3(high[i], 3 + i, O_CLOEXEC) < 0)
                        return sbx_error_set(err, errno, "dup3");
                *fds[i] = 3 + i;
        }
        if (close_range(6, ~0U, 0) < 0)
                return sbx_error_set(err, errno, "close_range");
        return 0;
}

/* Init, last: start the program of spec, then only reap until it exits, and report. Returns
 * only in the program of a launch from a template. */
static void start_and_reap(const struct launch_child *child, const struct sbx_spec *program_spec,
                           int error_fd)
{
        struct launch_pipes *p = child->pipes;
        /* Init waits for its children and for its supervisor's hang-up at once: SIGCHLD through
         * a signalfd, blocked before the fork (the program unblocks it for itself). */
        sigset_t chld;
        sigemptyset(&chld);
        sigaddset(&chld, SIGCHLD);
        int events = -1;
        if (sigprocmask(SIG_BLOCK, &chld, NULL) < 0 ||
            (events = signalfd(-1, &chld, SFD_CLOEXEC)) < 0) {
                struct sbx_error err = {0};
                sbx_error_set(&err, errno, "signalfd");
                fail_or_die(error_fd, "exec", &err);
        }
        int agent = program_spec->artifact_fd > 0 ? program_spec->artifact_fd : p->agent_r;
        pid_t program;
        if (child->from_template) {
                /* fork, not vfork: the program returns, to run in the interpreter it is a copy
                 * of; end of file on the error pipe then tells the supervisor it is ready. */
                program = fork();
                if (program == 0) {
                        program_lock_down_or_die(program_spec, error_fd, agent, true);
                        close(PROGRAM_ERROR_FD);
                        return;
                }
        } else {
                /* vfork, as posix_spawn does: the program shares init's memory until it execs
                 * or fails and exits, and init sleeps until then, so no page table is copied
                 * and nothing of init is copied on write (fork() cost ~0.2 ms more per sandbox
                 * here). Every step the program takes before execve acts on its own task
                 * (credentials, seccomp, Landlock, session, rlimits, its fd table), none on
                 * init; it never returns from this frame. */
                program = vfork();
                if (program == 0)
                        program_exec_or_die(program_spec, error_fd, agent);
        }
        if (program < 0) {
                struct sbx_error err = {0};
                sbx_error_set(&err, errno, "fork");
                fail_or_die(error_fd, "exec", &err);
        }

        /* From here init only reaps. It keeps nothing the program could use: no stdio, no
         * error pipe, no capabilities, and it is not dumpable, so the program (same uid) cannot
         * open /proc/1/mem or ptrace it to forge the report. */
        sbx_closep(&p->error_w);
        sbx_closep(&p->agent_r);
        int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
        if (devnull >= 0) {
                dup2(devnull, STDIN_FILENO);
                dup2(devnull, STDOUT_FILENO);
                dup2(devnull, STDERR_FILENO);
                close(devnull);
        }
        struct sbx_error ignored = {0};
        int lifeline = p->sync_r;
        if (init_keep_only((int *[]){&p->report_w, &lifeline, &events}, &ignored) < 0)
                _exit(1); /* init's end kills the program too: nothing ran unwatched */
        prctl(PR_SET_DUMPABLE, 0);
        (void)caps_drop_all(&ignored);

        for (;;) {
                /* The supervisor never writes on the lifeline after "l": anything there is its
                 * end of file. It is gone (not necessarily init's parent, who would have sent
                 * the parent-death signal: a template's init is the engine's child), and with
                 * init goes every process of the sandbox. */
                struct pollfd fds[2] = {{.fd = events, .events = POLLIN},
                                        {.fd = lifeline, .events = POLLIN}};
                if (poll(fds, 2, -1) < 0 && errno != EINTR)
                        _exit(1);
                if (fds[1].revents != 0)
                        _exit(1);
                if (fds[0].revents == 0)
                        continue;
                struct signalfd_siginfo info;
                (void)!read(events, &info, sizeof(info));
                for (;;) {
                        int status;
                        pid_t pid = waitpid(-1, &status, WNOHANG);
                        if (pid == program)
                                init_report_and_exit(p->report_w, status);
                        if (pid < 0 && errno == ECHILD)
                                init_report_and_exit(p->report_w, W_EXITCODE(127, 0));
                        if (pid <= 0)
                                break;
                }
        }
}

void launch_child_main(const struct launch_child *child)
{
        const struct sbx_spec *spec = child->spec;
        struct launch_pipes *p = child->pipes;
        sbx_closep(&p->stdin_w);
        sbx_closep(&p->stdout_r);
        sbx_closep(&p->stderr_r);
        sbx_closep(&p->sync_w);
        sbx_closep(&p->error_r);
        sbx_closep(&p->report_r);
        sbx_closep(&p->agent_w);
        int error_fd = p->error_w;

        /* If the supervisor dies, so does the sandbox (and with init, its whole pid namespace).
         * A template's init is the engine's child: the lifeline stands for the supervisor, and
         * no parent-death signal is set, so that the engine's death reaches the sandbox through
         * its worker (which cancels the run and answers it) as a cloned init's does. */
        if (!child->from_template)
                prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (child->from_template)
                STEP_OR_DIE(spec, error_fd, "cgroup", enter_v1_cgroups, child);
        char go;
        if (read(p->sync_r, &go, 1) != 1)
                _exit(1); /* the supervisor gave up before mapping us */

        STEP_OR_DIE(spec, error_fd, "userns", userns_apply);
        /* Changing credentials cleared the parent-death signal: set it again, then make sure
         * the supervisor did not die in between (its end of the sync pipe stays open for the
         * sandbox's life, so a hang-up means it is gone). */
        struct pollfd lifeline = {.fd = p->sync_r, .events = POLLIN};
        if ((!child->from_template && prctl(PR_SET_PDEATHSIG, SIGKILL) < 0) ||
            poll(&lifeline, 1, 0) < 0 || (lifeline.revents & (POLLHUP | POLLERR)) != 0)
                _exit(1); /* POLLIN alone is the second byte, already sent */
        STEP_OR_DIE(spec, error_fd, "cgroup", enter_cgroup_namespace);
        STEP_OR_DIE(spec, error_fd, "hostname", set_hostname);
        if (launch_layer_on(spec, SBX_LAYER_NETNS))
                STEP_OR_DIE(spec, error_fd, "netns", netns_apply, spec->network);
        /* mount_setup_root honours the "mount" and "pivot_root" hooks itself. */
        {
                /* Not STEP_OR_DIE: the failure names its own step (mount or pivot_root). */
                struct sbx_error err = {0};
                if (mount_setup_root(spec->limits.disk_bytes, spec->test.fail_step, &err) < 0)
                        fail_or_die(error_fd, mount_failed_step(&err), &err);
        }
        STEP_OR_DIE(spec, error_fd, "files", write_files, spec);
        STEP_OR_DIE(spec, error_fd, "exec", connect_stdio, p);

        /* Not before the limits are set: the program is the first process here that is not
         * sandboxd's own code. The sync pipe stays open: the lifeline init watches. */
        if (read(p->sync_r, &go, 1) != 1 || go != 'l')
                _exit(1); /* the supervisor gave up: it reports why */

        if (spec->exec_on_acquire && launch_layer_on(spec, SBX_LAYER_LANDLOCK))
                STEP_OR_DIE(spec, error_fd, "landlock", landlock_prepare, &prepared_ruleset);
        start_and_reap(child,
                       spec->exec_on_acquire ? receive_execution_or_die(spec, p, error_fd) : spec,
                       error_fd);
}
