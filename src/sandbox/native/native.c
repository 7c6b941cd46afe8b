/* The native backend's operations: a slot and cgroups at create, launch.c's process at start,
 * the shared supervisor loop at wait, cgroup.kill at kill, cgroup counters as evidence. */
#define _GNU_SOURCE
#include "sandbox/native/native.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sandbox/agent.h"
#include "sandbox/native/cgroup.h"
#include "sandbox/native/landlock.h"
#include "sandbox/native/launch.h"
#include "sandbox/native/rlimit.h"
#include "sandbox/native/userns.h"
#include "sandbox/supervise.h"
#include "util/cleanup.h"
#include "util/file.h"
#include "util/log.h"
#include "util/time.h"

/* Live sandboxes per machine; each slot is one range of host uids and one cgroup name. Four
 * times the engine's largest max_sandboxes: a compiled language's execution or warm pool entry
 * holds two (the run's and its compile's), and idle pool entries and sandboxes still being
 * removed after their answer (engine/execution.c) come on top of the running ones. */
#define NATIVE_MAX_SLOTS 4096

_Static_assert((unsigned long long)SBX_HOST_ID_BASE +
                               (unsigned long long)NATIVE_MAX_SLOTS * SBX_HOST_IDS_PER_SLOT <
                       0xffffffffULL,
               "every slot's id range must stay below the kernel's invalid id");

struct sbx_sandbox {
        /* What it runs: the spec it was created with, then (pooled) the one acquire handed it;
         * the creator's may be gone by then, so nothing of it is read after acquire. */
        const struct sbx_spec *spec;
        bool exec_on_acquire; /* the created spec's, kept */
        struct cgroup *cgroup;
        struct launch_process proc;
        /* native_wait saw init's report (or its end): the program is gone, init is exiting. */
        bool run_over;
};

static int drop_supplementary_groups(struct sbx_error *err)
{
        /* A child inherits the supervisor's supplementary groups (root's gid 0 among them) and,
         * with setgroups denied in its user namespace, could never drop them: files readable by
         * the host's root group would be readable inside. So the supervisor holds none. */
        static bool done;
        if (done)
                return 0;
        if (setgroups(0, NULL) < 0)
                return sbx_error_set(err, errno, "setgroups(0)");
        done = true;
        return 0;
}

/* Landlock is a layer behind the mount layout, so a kernel without it still runs sandboxes, but
 * the operator must know: said once per process. */
static void warn_if_no_landlock(void)
{
        static bool checked;
        if (checked)
                return;
        checked = true;
        if (landlock_abi_version() == 0)
                sbx_warn("landlock: this kernel has no Landlock; sandboxes run without that layer");
}

static int native_create(const struct sbx_spec *spec, struct sbx_sandbox **out,
                         struct sbx_error *err)
{
        warn_if_no_landlock();
        if (drop_supplementary_groups(err) < 0)
                return sbx_error_prefix(err, "setup step 'userns'");
        struct sbx_sandbox *sandbox = calloc(1, sizeof(*sandbox));
        if (sandbox == NULL)
                return sbx_error_set(err, ENOMEM, "allocate sandbox");
        sandbox->spec = spec;
        sandbox->exec_on_acquire = spec->exec_on_acquire;
        launch_process_init(&sandbox->proc);

        /* The limits are set by launch_start, while init builds the sandbox. */
        if (cgroup_create(NATIVE_MAX_SLOTS, &sandbox->cgroup, err) < 0) {
                free(sandbox);
                return sbx_error_prefix(err, "setup step 'cgroup'");
        }
        *out = sandbox;
        return 0;
}

/* How long a pool entry's loader may take to be ready (an interpreter start-up: ~10 ms), and a
 * UML kernel's guest (its boot and then the guest's loader: ~1 s alone, several seconds on a
 * loaded machine). */
#define LOADER_READY_TIMEOUT_MS    10000
#define UML_GUEST_READY_TIMEOUT_MS 60000

/* Pool mode: waits for the loader's "R" on the agent channel. */
static int wait_for_loader(int agent_fd, bool uml_kernel, struct sbx_error *err)
{
        struct pollfd pfd = {.fd = agent_fd, .events = POLLIN};
        int ready;
        do
                ready = poll(&pfd, 1,
                             uml_kernel ? UML_GUEST_READY_TIMEOUT_MS : LOADER_READY_TIMEOUT_MS);
        while (ready < 0 && errno == EINTR);
        char byte = 0;
        if (ready > 0 && read(agent_fd, &byte, 1) == 1 && byte == 'R')
                return 0;
        /* What it said instead (a UML guest's init says why it failed): the line, printable. */
        char said[160] = {byte};
        ssize_t n = byte != 0 ? recv(agent_fd, said + 1, sizeof(said) - 2, MSG_DONTWAIT) : -1;
        size_t len = n > 0 ? (size_t)n + 1 : (byte != 0);
        for (size_t i = 0; i < len; i++)
                if (said[i] < 0x20 || said[i] > 0x7e)
                        said[i] = ' ';
        said[len] = '\0';
        return sbx_error_set(err, ready < 0 ? errno : EPROTO,
                             "setup step 'exec': the pool loader did not become ready%s%s",
                             len > 0 ? ": " : "", said);
}

static int native_start(struct sbx_sandbox *sandbox, struct sbx_error *err)
{
        unsigned host_id = SBX_HOST_ID_BASE + cgroup_slot(sandbox->cgroup) * SBX_HOST_IDS_PER_SLOT;
        if (launch_start(sandbox->spec, sandbox->cgroup, host_id, &sandbox->proc, err) < 0)
                return -1;
        if (!sandbox->spec->agent || sandbox->spec->session)
                return 0;
        return wait_for_loader(sandbox->proc.agent_fd, sandbox->spec->uml_kernel, err);
}

/* The host pid of init's one child, the program (pool mode: the loader). Init's pidfd says that
 * init still lived after its children were read, so the pid read was init's: a template's init
 * is not ours to keep as a zombie (the engine reaps it), and its pid could be another process's
 * once it is gone. */
static int program_pid(const struct launch_process *proc, pid_t *program, struct sbx_error *err)
{
        char path[64];
        snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int)proc->pid, (int)proc->pid);
        char text[64];
        if (sbx_read_file_at(AT_FDCWD, path, text, sizeof(text), err) < 0)
                return -1;
        if (syscall(SYS_pidfd_send_signal, proc->pidfd, 0, NULL, 0) < 0)
                return sbx_error_set(err, ESRCH, "the sandbox's init is gone");
        char *end;
        long pid = strtol(text, &end, 10);
        if (end == text || pid <= 0)
                return sbx_error_set(err, ESRCH, "the sandbox's program is gone");
        *program = (pid_t)pid;
        return 0;
}

static int native_acquire(struct sbx_sandbox *sandbox, const struct sbx_spec *request,
                          struct sbx_error *err)
{
        if (sandbox->proc.agent_fd < 0 || sandbox->proc.pid <= 0)
                return sbx_error_set(err, EINVAL, "acquire: not a started pool sandbox");
        bool exec_mode = sandbox->exec_on_acquire;
        sandbox->spec = request;
        /* A loader is the program already: its rlimits by prlimit. In exec mode the program is
         * yet to start, and sets its own from the execution's limits, as a cold one does. */
        pid_t program = 0;
        if (cgroup_set_limits(sandbox->cgroup, &request->limits, true, err) < 0 ||
            (!exec_mode && (program_pid(&sandbox->proc, &program, err) < 0 ||
                            rlimit_apply_to(program, &request->limits, err) < 0)) ||
            cgroup_reset_baseline(sandbox->cgroup, err) < 0)
                return sbx_error_prefix(err, "acquire");
        if (exec_mode)
                return launch_exec(&sandbox->proc, request, err);
        int rc = sbx_agent_send_execution(sandbox->proc.agent_fd, SBX_AGENT_SOCKET, request, err);
        /* End of file after the execution: the loader reads no further. */
        close(sandbox->proc.agent_fd);
        sandbox->proc.agent_fd = -1;
        return rc < 0 ? sbx_error_prefix(err, "acquire") : 0;
}

int sbx_native_take(struct sbx_sandbox *sandbox, const struct sbx_spec *request, int *agent_fd,
                    struct sbx_error *err)
{
        if (sandbox->proc.agent_fd < 0 || sandbox->proc.pid <= 0 || sandbox->exec_on_acquire)
                return sbx_error_set(err, EINVAL, "acquire: not a started pool sandbox");
        sandbox->spec = request;
        pid_t program = 0;
        if (cgroup_set_limits(sandbox->cgroup, &request->limits, true, err) < 0 ||
            program_pid(&sandbox->proc, &program, err) < 0 ||
            rlimit_apply_to(program, &request->limits, err) < 0 ||
            cgroup_reset_baseline(sandbox->cgroup, err) < 0)
                return sbx_error_prefix(err, "acquire");
        *agent_fd = sandbox->proc.agent_fd;
        return 0;
}

static int native_kill(struct sbx_sandbox *sandbox, struct sbx_error *err)
{
        /* After the run, init is on its way out, taking its whole pid namespace with it (every
         * process of the sandbox is in it). Make sure of that without waiting: the evidence is
         * read meanwhile, and native_destroy reaps init and checks that the cgroup is empty. */
        if (sandbox->run_over && sandbox->proc.pid > 0)
                return launch_kill(&sandbox->proc, err);
        return cgroup_kill_all(sandbox->cgroup, err);
}

/* The supervisor's kill (deadline, output cap, cancel): everything in the cgroup, now, and wait
 * until it is empty. A cgroup still emptying when that wait ends is not a failure of the run:
 * every process in it has SIGKILL pending (cgroup.kill, or the v1 freezer sweep, reaches forks
 * too), so none runs a user instruction again; a loaded or emulated machine can just take longer
 * to finish their exits (seen under qemu's emulation). The verdict (timeout, output_limit,
 * canceled) stands; teardown kills and checks the cgroup again before its slot is reused. */
static int kill_callback(void *ctx, struct sbx_error *err)
{
        struct sbx_sandbox *sandbox = ctx;
        struct sbx_error slow = {0};
        if (cgroup_kill_all(sandbox->cgroup, &slow) == 0)
                return 0;
        if (slow.code == ETIMEDOUT) {
                sbx_warn("%s; the run's verdict stands, teardown checks again", slow.message);
                return 0;
        }
        *err = slow;
        return -1;
}

/* Fills run's exit status from init's report; without one, reaps init for its own status (the
 * only failure). */
static int read_report(struct sbx_sandbox *sandbox, struct sbx_run *run, struct sbx_error *err)
{
        struct launch_report report;
        ssize_t n = read(sandbox->proc.report_fd, &report, sizeof(report));
        if (n == (ssize_t)sizeof(report)) {
                int status = report.wait_status;
                run->exited = WIFEXITED(status);
                run->exit_code = run->exited ? WEXITSTATUS(status) : -1;
                run->signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
                if (report.disk_known) {
                        run->disk_known = true;
                        run->disk_total_bytes = report.disk_total_bytes;
                        run->disk_used_bytes = report.disk_total_bytes - report.disk_free_bytes;
                        run->inodes_free = report.inodes_free;
                }
                return 0;
        }
        /* No report: init itself was killed (deadline, output cap, OOM) before the program
         * ended, so the program died with it. */
        int init_status = 0;
        int rc = launch_reap(&sandbox->proc, &init_status, err);
        run->exited = false;
        run->exit_code = -1;
        run->signal = WIFSIGNALED(init_status) ? WTERMSIG(init_status) : SIGKILL;
        return rc;
}

static int native_wait(struct sbx_sandbox *sandbox, struct sbx_run *run, struct sbx_error *err)
{
        uint64_t started = sbx_now_us();
        struct sbx_supervise params = {
                .stdin_fd = sandbox->proc.stdin_fd,
                .stdin_data = sandbox->spec->stdin_data,
                .stdin_size = sandbox->spec->stdin_size,
                .stdin_held = sandbox->spec->uml_kernel, /* its guest's console 4 (uml.c) */
                .stdout_fd = sandbox->proc.stdout_fd,
                .stderr_fd = sandbox->proc.stderr_fd,
                /* The run ends with init's report (written once the program has exited) or, if
                 * init died first, the report pipe's end of file; not with init's own exit, which
                 * tears down the namespaces (~0.25 ms) while the evidence is read. */
                .end_fd = sandbox->proc.report_fd,
                .deadline_us = started + sandbox->spec->limits.wall_ms * 1000,
                .output_cap = sandbox->spec->limits.output_bytes,
                .kill = kill_callback,
                .kill_ctx = sandbox,
                .cancel_fd = sandbox->spec->cancel_fd,
                .on_output = sandbox->spec->on_output,
                .output_ctx = sandbox->spec->output_ctx,
        };
        /* sbx_supervise closes these three. */
        sandbox->proc.stdin_fd = -1;
        sandbox->proc.stdout_fd = -1;
        sandbox->proc.stderr_fd = -1;
        int rc = sbx_supervise(&params, run, err);
        run->wall_us = sbx_now_us() - started;
        sandbox->run_over = true;
        if (read_report(sandbox, run, rc == 0 ? err : &(struct sbx_error){0}) < 0)
                rc = -1;
        return rc;
}

static int native_session_fds(struct sbx_sandbox *sandbox, int fds[3], struct sbx_error *err)
{
        if (!sandbox->spec->session || sandbox->proc.agent_fd < 0 || sandbox->proc.pid <= 0)
                return sbx_error_set(err, EINVAL, "session: not a started session sandbox");
        /* The agent reads nothing on its stdin (a run's stdin comes in its frame): end of file
         * for it, and for whatever its cells start. */
        sbx_closep(&sandbox->proc.stdin_fd);
        fds[0] = sandbox->proc.agent_fd;
        fds[1] = sandbox->proc.stdout_fd;
        fds[2] = sandbox->proc.stderr_fd;
        for (int i = 0; i < 3; i++) {
                int flags = fcntl(fds[i], F_GETFL);
                if (flags < 0 || fcntl(fds[i], F_SETFL, flags | O_NONBLOCK) < 0)
                        return sbx_error_set(err, errno, "session: non-blocking fds");
        }
        return 0;
}

/* By pidfd, so that a program that died meanwhile (init reaps it, and its pid may go to any
 * host process) is never mistaken for another: the pidfd is taken first, then the pid is seen
 * still to be init's child, so the pidfd is the program's; signalling a pidfd whose process
 * died fails with ESRCH. */
static int native_signal_program(struct sbx_sandbox *sandbox, int sig, struct sbx_error *err)
{
        pid_t program = 0, again = 0;
        if (sandbox->proc.pid <= 0 || program_pid(&sandbox->proc, &program, err) < 0)
                return -1;
        _cleanup_close_ int pidfd = (int)syscall(SYS_pidfd_open, program, 0);
        if (pidfd < 0)
                return sbx_error_set(err, errno, "signal the sandbox's program: pidfd_open");
        if (program_pid(&sandbox->proc, &again, err) < 0)
                return -1;
        if (again != program)
                return sbx_error_set(err, ESRCH, "the sandbox's program is gone");
        if (syscall(SYS_pidfd_send_signal, pidfd, sig, NULL, 0) < 0)
                return sbx_error_set(err, errno, "signal the sandbox's program");
        return 0;
}

/* A waiting session's processes: init, the agent's keeper and interpreter, bash's shell. */
#define SESSION_MAX_WAITING_PROCESSES 64

static int native_session_limits(struct sbx_sandbox *sandbox, const struct sbx_limits *limits,
                                 struct sbx_error *err)
{
        if (!sandbox->spec->session || sandbox->proc.pid <= 0)
                return sbx_error_set(err, EINVAL, "session: not a started session sandbox");
        /* A session's memory cap kills its interpreter only: the agent starts a new one. */
        if (cgroup_set_limits(sandbox->cgroup, limits, false, err) < 0)
                return sbx_error_prefix(err, "session limits");
        /* Every process of the sandbox but init (sandboxd's own, with nothing to limit): the
         * agent's keeper, its interpreter and what they started, whoever their parent is.
         * Nothing of a tenant's runs yet, so none comes or goes meanwhile but the agent's. */
        pid_t pids[SESSION_MAX_WAITING_PROCESSES];
        size_t n = 0;
        if (cgroup_processes(sandbox->cgroup, pids, SBX_ARRAY_SIZE(pids), &n, err) < 0)
                return sbx_error_prefix(err, "session limits");
        for (size_t i = 0; i < n; i++)
                if (pids[i] != sandbox->proc.pid && rlimit_apply_to(pids[i], limits, err) < 0)
                        return sbx_error_prefix(err, "session limits");
        if (cgroup_reset_baseline(sandbox->cgroup, err) < 0)
                return sbx_error_prefix(err, "session limits");
        return 0;
}

static int native_read_evidence(struct sbx_sandbox *sandbox, struct sbx_evidence *evidence,
                                struct sbx_error *err)
{
        return cgroup_read_evidence(sandbox->cgroup, evidence, err);
}

static void native_destroy(struct sbx_sandbox *sandbox)
{
        if (sandbox == NULL)
                return;
        struct sbx_error err = {0};
        bool running = sandbox->proc.pid > 0;
        /* Init first (killing it ends its pid namespace, and reaping it waits for that), then
         * anything the cgroup still holds, which by construction is nothing. */
        launch_release(&sandbox->proc);
        if (running && cgroup_kill_all(sandbox->cgroup, &err) < 0)
                sbx_warn("destroy: %s", err.message);
        cgroup_destroy(sandbox->cgroup);
        free(sandbox);
}

static int native_reconcile(struct sbx_error *err)
{
        int removed = cgroup_reconcile(err);
        if (removed < 0)
                return -1;
        if (removed > 0)
                sbx_warn("reconcile: removed %d orphaned sandbox(es) left by an earlier crash",
                         removed);
        return 0;
}

const struct sbx_backend sbx_native_backend = {
        .name = "native",
        .create = native_create,
        .start = native_start,
        .acquire = native_acquire,
        .wait = native_wait,
        .kill = native_kill,
        .read_evidence = native_read_evidence,
        .destroy = native_destroy,
        .reconcile = native_reconcile,
        .session_fds = native_session_fds,
        .signal_program = native_signal_program,
        .session_limits = native_session_limits,
};
