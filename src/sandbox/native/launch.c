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
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sandbox/agent.h"
#include "sandbox/native/caps.h"
#include "sandbox/native/landlock.h"
#include "sandbox/native/mount.h"
#include "sandbox/native/netns.h"
#include "sandbox/native/rlimit.h"
#include "sandbox/native/seccomp.h"
#include "sandbox/native/userns.h"
#include "util/cleanup.h"
#include "util/file.h"
#include "util/time.h"

/* The kernel's clone3 arguments (linux/sched.h), declared here because that header clashes with
 * glibc's <sched.h>. Fields up to `cgroup` exist since Linux 5.7. */
struct launch_clone_args {
        uint64_t flags;
        uint64_t pidfd;
        uint64_t child_tid;
        uint64_t parent_tid;
        uint64_t exit_signal;
        uint64_t stack;
        uint64_t stack_size;
        uint64_t tls;
        uint64_t set_tid;
        uint64_t set_tid_size;
        uint64_t cgroup;
};

#ifndef CLONE_PIDFD
#define CLONE_PIDFD 0x00001000
#endif
#ifndef CLONE_INTO_CGROUP
#define CLONE_INTO_CGROUP 0x200000000ULL
#endif
#ifndef P_PIDFD
#define P_PIDFD 3
#endif

/* Setup must finish in this time or the sandbox is abandoned; it takes a few ms normally. */
#define SETUP_TIMEOUT_MS 10000

/* The fd numbers in the program: the agent channel (pool mode) or the artifact file (a compile
 * stage) for the program to keep, and the error pipe between setup and execve (close-on-exec). */
#define PROGRAM_AGENT_FD 3
#define PROGRAM_ERROR_FD 4

static const char *const sandbox_hostname = "sandbox";

struct launch_pipes {
        int stdin_r, stdin_w;
        int stdout_r, stdout_w;
        int stderr_r, stderr_w;
        int sync_r, sync_w;
        int error_r, error_w;
        int report_r, report_w;
        int agent_r, agent_w; /* pool mode only, else -1 */
};

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

/* ---- child side: everything below runs inside the sandbox and ends in _exit or execve ---- */

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

static bool hook_forces(const struct sbx_spec *spec, const char *step)
{
        return spec->test.fail_step != NULL && strcmp(spec->test.fail_step, step) == 0;
}

static bool layer_on(const struct sbx_spec *spec, enum sbx_layer layer)
{
        return (spec->test.disabled_layers & layer) == 0;
}

/* Runs one setup step, `fn(args..., &err)`: the test hook first, then the call; on failure
 * reports the step and dies. */
#define STEP_OR_DIE(spec, error_fd, name, fn, ...)                                                 \
        do {                                                                                       \
                struct sbx_error step_err_ = {0};                                                  \
                int step_rc_ = hook_forces((spec), (name))                                         \
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

/* Keeps fds 0-2, `keep` (moved to PROGRAM_ERROR_FD, close-on-exec) and, in pool mode, `agent`
 * (moved to PROGRAM_AGENT_FD, kept across execve), and closes every other fd, so that nothing of
 * the supervisor's (other sandboxes' pipes, cgroup dirs) leaks into the sandbox. */
static int close_other_fds(int keep, int agent, struct sbx_error *err)
{
        /* Out of the way first: keep or agent may sit on the other's target number. */
        int keep_high = fcntl(keep, F_DUPFD_CLOEXEC, PROGRAM_ERROR_FD + 1);
        int agent_high = agent >= 0 ? fcntl(agent, F_DUPFD, PROGRAM_ERROR_FD + 1) : -1;
        if (keep_high < 0 || (agent >= 0 && agent_high < 0))
                return sbx_error_set(err, errno, "fcntl F_DUPFD");
        if (dup3(keep_high, PROGRAM_ERROR_FD, O_CLOEXEC) < 0)
                return sbx_error_set(err, errno, "dup3");
        if (agent_high >= 0 && dup2(agent_high, PROGRAM_AGENT_FD) < 0)
                return sbx_error_set(err, errno, "dup2 agent");
        if (agent_high < 0)
                close(PROGRAM_AGENT_FD); /* nothing in a cold run; EBADF is fine */
        if (close_range(PROGRAM_ERROR_FD + 1, ~0U, 0) < 0)
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

/* The program (pid 2): lock down, in the order of DESIGN.md, and exec. */
static _Noreturn void program_exec_or_die(const struct sbx_spec *spec, int error_fd, int agent_fd)
{
        STEP_OR_DIE(spec, error_fd, "exec", new_session);
        STEP_OR_DIE(spec, error_fd, "exec", reset_signals);
        if (layer_on(spec, SBX_LAYER_LANDLOCK))
                STEP_OR_DIE(spec, error_fd, "landlock", landlock_step);
        if (layer_on(spec, SBX_LAYER_NO_NEW_PRIVS))
                STEP_OR_DIE(spec, error_fd, "no_new_privs", set_no_new_privs);
        if (layer_on(spec, SBX_LAYER_RLIMITS))
                STEP_OR_DIE(spec, error_fd, "rlimits", rlimit_apply, &spec->limits);
        if (layer_on(spec, SBX_LAYER_CAPS))
                STEP_OR_DIE(spec, error_fd, "caps", caps_limit_to_root_set);
        STEP_OR_DIE(spec, error_fd, "exec", close_other_fds, error_fd, agent_fd);
        error_fd = PROGRAM_ERROR_FD;
        /* seccomp last: it refuses calls the steps above make. */
        if (layer_on(spec, SBX_LAYER_SECCOMP))
                STEP_OR_DIE(spec, error_fd, "seccomp", seccomp_apply);
        struct sbx_error err = {0};
        if (hook_forces(spec, "exec")) {
                sbx_error_set(&err, EPERM, "forced to fail by the test hook");
                fail_or_die(error_fd, "exec", &err);
        }
        execve(spec->argv[0], (char *const *)spec->argv, (char *const *)spec->envp);
        sbx_error_set(&err, errno, "execve %s", spec->argv[0]);
        fail_or_die(error_fd, "exec", &err);
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

static _Noreturn void start_and_reap(const struct sbx_spec *program_spec, struct launch_pipes *p,
                                     int error_fd);

/* Init (pid 1): build the sandbox, start the program, reap until it exits, report. */
static _Noreturn void init_main(const struct sbx_spec *spec, struct launch_pipes *p)
{
        sbx_closep(&p->stdin_w);
        sbx_closep(&p->stdout_r);
        sbx_closep(&p->stderr_r);
        sbx_closep(&p->sync_w);
        sbx_closep(&p->error_r);
        sbx_closep(&p->report_r);
        sbx_closep(&p->agent_w);
        int error_fd = p->error_w;

        /* If the supervisor dies, so does the sandbox (and with init, its whole pid namespace). */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        char go;
        if (read(p->sync_r, &go, 1) != 1)
                _exit(1); /* the supervisor gave up before mapping us */

        STEP_OR_DIE(spec, error_fd, "userns", userns_apply);
        /* Changing credentials cleared the parent-death signal: set it again, then make sure
         * the supervisor did not die in between (its end of the sync pipe stays open for the
         * sandbox's life, so a hang-up means it is gone). */
        struct pollfd lifeline = {.fd = p->sync_r, .events = POLLIN};
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || poll(&lifeline, 1, 0) < 0 ||
            (lifeline.revents & (POLLHUP | POLLERR)) != 0)
                _exit(1); /* POLLIN alone is the second byte, already sent */
        STEP_OR_DIE(spec, error_fd, "cgroup", enter_cgroup_namespace);
        STEP_OR_DIE(spec, error_fd, "hostname", set_hostname);
        if (layer_on(spec, SBX_LAYER_NETNS))
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
         * sandboxd's own code. */
        if (read(p->sync_r, &go, 1) != 1 || go != 'l')
                _exit(1); /* the supervisor gave up: it reports why */
        sbx_closep(&p->sync_r);

        if (spec->exec_on_acquire && layer_on(spec, SBX_LAYER_LANDLOCK))
                STEP_OR_DIE(spec, error_fd, "landlock", landlock_prepare, &prepared_ruleset);
        start_and_reap(spec->exec_on_acquire ? receive_execution_or_die(spec, p, error_fd) : spec,
                       p, error_fd);
}

/* Init, last: start the program of spec, then only reap until it exits, and report. */
static _Noreturn void start_and_reap(const struct sbx_spec *program_spec, struct launch_pipes *p,
                                     int error_fd)
{

        /* vfork, as posix_spawn does: the program shares init's memory until it execs or fails
         * and exits, and init sleeps until then, so no page table is copied and nothing of init
         * is copied on write (fork() cost ~0.2 ms more per sandbox here). Every step the program
         * takes before execve acts on its own task (credentials, seccomp, Landlock, session,
         * rlimits, its fd table), none on init; it never returns from this frame. */
        pid_t program = vfork();
        if (program == 0)
                program_exec_or_die(program_spec, error_fd,
                                    program_spec->artifact_fd > 0 ? program_spec->artifact_fd
                                                                  : p->agent_r);
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
        if (close_other_fds(p->report_w, -1, &ignored) == 0)
                p->report_w = PROGRAM_ERROR_FD;
        prctl(PR_SET_DUMPABLE, 0);
        (void)caps_drop_all(&ignored);

        for (;;) {
                int status;
                pid_t pid = waitpid(-1, &status, 0);
                if (pid == program)
                        init_report_and_exit(p->report_w, status);
                if (pid < 0 && errno == ECHILD)
                        init_report_and_exit(p->report_w, W_EXITCODE(127, 0));
        }
}

/* ---- supervisor side ---- */

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
        if (hook_forces(spec, "cgroup"))
                return sbx_error_set(err, EPERM, "forced to fail by the test hook");
        /* A session's memory cap kills its interpreter only: the agent starts a new one. */
        return cgroup_set_limits(cgroup, &spec->limits, !spec->session, err);
}

int launch_start(const struct sbx_spec *spec, struct cgroup *cgroup, unsigned host_id,
                 struct launch_process *proc, struct sbx_error *err)
{
        struct launch_pipes p = {-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1};
        if (pipes_open(&p, spec->agent, err) < 0 || stdio_owned_by(&p, host_id, err) < 0) {
                pipes_close_all(&p);
                return sbx_error_prefix(err, "setup step 'exec'");
        }

        int pidfd = -1;
        struct launch_clone_args args = {
                .flags = CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS |
                         CLONE_PIDFD,
                .pidfd = (uint64_t)(uintptr_t)&pidfd,
                .exit_signal = SIGCHLD,
        };
        if (layer_on(spec, SBX_LAYER_NETNS))
                args.flags |= CLONE_NEWNET;
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
        if (cgroup_enter_self(cgroup, err) < 0) {
                pipes_close_all(&p);
                return sbx_error_prefix(err, "setup step 'cgroup'");
        }
        struct rlimit_saved saved_rlimits = {.n = 0};
        if (layer_on(spec, SBX_LAYER_RLIMITS) &&
            rlimit_namespace_ceilings(&saved_rlimits, err) < 0) {
                struct sbx_error ignored = {0};
                (void)cgroup_leave_self(cgroup, &ignored);
                pipes_close_all(&p);
                return sbx_error_prefix(err, "setup step 'userns'");
        }
        pid_t pid = (pid_t)syscall(SYS_clone3, &args, sizeof(args));
        int clone_errno = errno;
        if (pid == 0)
                init_main(spec, &p);
        rlimit_restore(&saved_rlimits);
        if (pid < 0) {
                struct sbx_error ignored = {0};
                (void)cgroup_leave_self(cgroup, &ignored);
                pipes_close_all(&p);
                return sbx_error_set(err, clone_errno, "setup step 'userns': clone3");
        }

        proc->pid = pid;
        proc->pidfd = pidfd;
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
        if (hook_forces(spec, "userns"))
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

int launch_reap(struct launch_process *proc, int *status, struct sbx_error *err)
{
        if (proc->pid <= 0)
                return sbx_error_set(err, ECHILD, "reap: no process");
        siginfo_t info;
        memset(&info, 0, sizeof(info));
        for (;;) {
                if (waitid((idtype_t)P_PIDFD, (id_t)proc->pidfd, &info, WEXITED) == 0)
                        break;
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
