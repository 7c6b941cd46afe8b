/* The gVisor backend's operations. create: a slot and cgroups (the native backend's, under the
 * same sandboxd parents: one slot space for both), and the sandbox's directory under
 * GVISOR_RUN_DIR with its OCI bundle (spec.c) and runsc's state; start: `runsc run`, forked
 * into the slot's cgroups; wait: the shared supervisor loop, which feeds the files' bytes and
 * then the program's stdin to the stage script (spec.h), until runsc exits; kill: the
 * whole cgroup (runsc, its sentry, gofer and the ptrace platform's stubs); evidence: the cgroup's
 * counters; destroy: the cgroup and the directory.
 *
 * runsc (Debian's, 2022-12) runs with --platform=ptrace: this release has no systrap, and its kvm
 * platform hangs on these machines' nested hypervisor (MACHINE.md); --network=none (loopback
 * only). The limits that bind, measured on this release:
 *   memory   the cgroup's cap is the request's plus GVISOR_MEMORY_OVERHEAD_BYTES (the sentry and
 *            gofer themselves); past it the kernel's OOM killer ends the whole sandbox
 *   pids     RLIMIT_NPROC inside (spec.c): gVisor refuses the program's fork with EAGAIN. The
 *            host's pids cgroup cannot be the bound: it counts the sentry's threads (~40 at rest)
 *            and one ptrace stub per guest process, so it is set far above (GVISOR_HOST_PIDS) and
 *            only stops a runaway sentry
 *   disk     each tmpfs's size (spec.c): ENOSPC inside
 *   cpu      the cgroup's quota and RLIMIT_CPU inside; usage is the cgroup's, as a delta (what the
 *            sentry spends for the program is the program's). runsc's own start-up (runsc, gofer
 *            and sentry: ~0.45 s of CPU on up to ~1.4 CPUs here) runs under the quota plus
 *            GVISOR_START_MILLICORES, lowered to the request's before the program can run: a cold
 *            run's stage shell waits for the last byte of its files (start_cold), a pool
 *            entry's loader for its execution (acquire). Under a 1-CPU quota the start-up took
 *            0.47 s of wall time against 0.34 s without the bound. Like a warm entry's, a cold
 *            run's counters start there: the start-up is the sandbox's, not the program's
 *
 * Pool mode (spec.agent): the loader's execution comes on its stdin and it says "R" and its pid on
 * its stdout first (sandbox/agent.h: runsc passes no other fd into its sandbox); start returns
 * once it did. acquire sets the request's limits on the cgroup, and the loader sets the rlimits it
 * is sent. A pool entry's run ends at the sentry's answer to a Wait call for the loader's pid
 * (control.h), made once it is ready (or, when the sentry took that call too late to find the
 * loader, at its answer for the container's init): the program's exit status then, its output
 * what the pipes hold; the stage shell's exit, runsc's ~25 ms later, and the sandbox's removal
 * come after the answer (destroy). A cold run ends at runsc's exit: its control server is not
 * there to call when runsc starts.
 * An exec entry (spec.exec_on_acquire: sh's, bash's) is a pool entry whose loader, Python's, execs
 * the execution's program in its own place (spec.h): the same start, acquire and end.
 * A compile stage (spec.artifact_fd) runs cold: its artifact comes back at the end of its stdout
 * (spec.h, take_artifact). Read-only files (the run stage's artifact) are bound from the bundle
 * (spec.c), so a pool entry, whose mounts are made before its request, takes none.
 * Not yet: sessions (create refuses them). */
#define _GNU_SOURCE
#include "sandbox/gvisor/gvisor.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sandbox/agent.h"
#include "sandbox/gvisor/control.h"
#include "sandbox/gvisor/spec.h"
#include "sandbox/native/cgroup.h"
#include "sandbox/native/native.h"
#include "sandbox/supervise.h"
#include "util/cleanup.h"
#include "util/file.h"
#include "util/log.h"
#include "util/time.h"

/* The runsc this backend drives, as Debian installs it. */
#define GVISOR_RUNSC "/usr/bin/runsc"

/* Every gVisor sandbox's directory, <slot>/ each: root's alone (runsc's state holds its control
 * sockets). */
#define GVISOR_RUN_DIR "/run/sandboxd-gvisor"

/* runsc's --platform (sbx_gvisor_set_platform). */
static const char *runsc_platform = "ptrace";

void sbx_gvisor_set_platform(const char *platform)
{
        runsc_platform = platform;
}

/* The slot space shared with the native backend (native.c's NATIVE_MAX_SLOTS). */
#define GVISOR_MAX_SLOTS 4096

/* The CPU runsc's start-up may use on top of the program's quota (see the header): runsc, its
 * gofer and its sentry start in parallel. */
#define GVISOR_START_MILLICORES 1000

/* The sentry's and gofer's own memory on top of the program's cap: python3 -c 'print(1)' peaks
 * at 26-28 MiB in the sandbox's cgroup, of which the interpreter is 4-5 MiB natively. */
#define GVISOR_MEMORY_OVERHEAD_BYTES (48ull << 20)

/* The host's pids cap: the program's pids (bound inside by RLIMIT_NPROC), each with its ptrace
 * stubs and threads, and the sentry's and gofer's threads (pids.peak is 130 for print(1), and a
 * shell script of 16 pids reached 4 x 16 + 256 and was refused a stub: a sentry refused a thread
 * may die). */
#define GVISOR_HOST_PIDS(pids) ((pids)*16 + 512)

/* runsc's exit status for a program killed by signal N is 128 + N, the shell's convention: a cold
 * run's program that exits with such a code itself reads the same (a difference from the native
 * backend and from a pool entry's run, which have the program's own wait status). */
#define GVISOR_SIGNAL_EXIT_BASE 128

/* How long a pool entry's loader may take to say "R": runsc's start-up and an interpreter's
 * under ptrace, ~0.3 s alone, several seconds on a loaded machine. */
#define GVISOR_LOADER_READY_TIMEOUT_MS 30000

/* How long the Wait call's answer may take to arrive whole once its first byte is there: one
 * write of the sentry's, so at once; the bound only keeps a broken one from holding the run. */
#define GVISOR_WAIT_ANSWER_TIMEOUT_MS 1000

struct sbx_sandbox {
        /* The created one until acquire, then the request's: a pool entry's spec is freed
         * before its acquire (sbx_pool_entry_execute), so nothing of it is read after start. */
        const struct sbx_spec *spec;
        bool agent; /* a warm pool entry: its loader waits on stdin */
        struct cgroup *cgroup;
        char dir[64]; /* GVISOR_RUN_DIR/<slot> */
        pid_t pid;    /* runsc run; 0 before start and once reaped */
        int pidfd;
        pid_t loader_pid; /* a pool entry's loader's, in the container's pid namespace */
        /* A pool entry's Wait calls (control.h): WaitPID for its loader, and Wait for the
         * container's init, whose answer stands in for the first's when the sentry takes that
         * call only after the loader is gone and reaped (it answers then: no such process).
         * Both -1: the run ends at runsc's exit. */
        int wait_fd, init_wait_fd;
        bool ended;         /* a Wait call's answer came: the program has exited */
        bool ended_at_init; /* that answer was the init's (the stage shell's status) */
        int wait_status;    /* that answer's */
        int stdin_fd, stdout_fd, stderr_fd; /* the supervisor's ends */
        /* A cold run's stdin: the files' bytes for the stage script (spec.h), then the
         * program's; NULL without files. */
        char *stdin_data;
        size_t stdin_size;
        size_t stdin_sent; /* of stdin_data, by start_cold */
};

/* The bytes of spec's files: what a cold run's stage shell reads from stdin before the
 * program's. */
static size_t files_size(const struct sbx_spec *spec)
{
        size_t size = 0;
        for (size_t i = 0; i < spec->n_files; i++)
                size += spec->files[i].read_only ? 0 : spec->files[i].size;
        return size;
}

/* Whether runsc starts under the start-up's CPU quota (GVISOR_START_MILLICORES more), which
 * start_cold or acquire lowers to the request's before the program can run. A cold run without a
 * file byte has nothing its stage shell waits for: its program may start as soon as runsc does. */
static bool start_quota_raised(const struct sbx_spec *spec)
{
        return spec->agent || files_size(spec) > 0;
}

/* Puts the files' bytes before the program's stdin (spec.h's stage script writes them). */
static int make_stdin(struct sbx_sandbox *sandbox, struct sbx_error *err)
{
        const struct sbx_spec *spec = sandbox->spec;
        size_t size = spec->stdin_size + files_size(spec);
        if (spec->n_files == 0 || size == 0)
                return 0;
        sandbox->stdin_data = malloc(size);
        if (sandbox->stdin_data == NULL)
                return sbx_error_set(err, ENOMEM, "the files for stdin (%zu bytes)", size);
        char *at = sandbox->stdin_data;
        for (size_t i = 0; i < spec->n_files; i++)
                if (!spec->files[i].read_only) /* mounts: spec.c */
                        at = (char *)memcpy(at, spec->files[i].data, spec->files[i].size) +
                             spec->files[i].size;
        if (spec->stdin_size > 0)
                memcpy(at, spec->stdin_data, spec->stdin_size);
        sandbox->stdin_size = size;
        return 0;
}

static int check_supported(const struct sbx_spec *spec, struct sbx_error *err)
{
        if (spec->session)
                return sbx_error_set(err, EOPNOTSUPP, "the gvisor backend has no session yet");
        if (spec->agent && spec->artifact_fd > 0)
                return sbx_error_set(err, EOPNOTSUPP,
                                     "the gvisor backend compiles in a fresh sandbox only");
        if (access(GVISOR_RUNSC, X_OK) < 0)
                return sbx_error_set(err, errno,
                                     "%s: gVisor's runsc is not installed (Debian's runsc)",
                                     GVISOR_RUNSC);
        return 0;
}

/* The sandbox's directory: bundle/ (config.json, rootfs/) and state/ (runsc's --root). A directory
 * left by a crash in this slot (now ours) is removed first. */
static int make_directory(struct sbx_sandbox *sandbox, struct sbx_error *err)
{
        if (mkdir(GVISOR_RUN_DIR, 0700) < 0 && errno != EEXIST)
                return sbx_error_set(err, errno, "mkdir %s", GVISOR_RUN_DIR);
        _cleanup_close_ int run_fd =
                open(GVISOR_RUN_DIR, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (run_fd < 0)
                return sbx_error_set(err, errno, "open %s", GVISOR_RUN_DIR);
        char slot[16];
        snprintf(slot, sizeof(slot), "%u", cgroup_slot(sandbox->cgroup));
        if (sbx_remove_tree_at(run_fd, slot, err) < 0)
                return -1;
        if (mkdirat(run_fd, slot, 0700) < 0)
                return sbx_error_set(err, errno, "mkdir %s/%s", GVISOR_RUN_DIR, slot);
        snprintf(sandbox->dir, sizeof(sandbox->dir), "%s/%s", GVISOR_RUN_DIR, slot);
        _cleanup_close_ int dir_fd =
                openat(run_fd, slot, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (dir_fd < 0 || mkdirat(dir_fd, "bundle", 0755) < 0 ||
            mkdirat(dir_fd, "bundle/rootfs", 0755) < 0 ||
            mkdirat(dir_fd, "bundle/files", 0755) < 0 || mkdirat(dir_fd, "state", 0700) < 0)
                return sbx_error_set(err, errno, "make %s", sandbox->dir);
        _cleanup_close_ int rootfs_fd =
                openat(dir_fd, "bundle/rootfs", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        _cleanup_close_ int files_fd =
                openat(dir_fd, "bundle/files", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (rootfs_fd < 0 || files_fd < 0)
                return sbx_error_set(err, errno, "open %s", sandbox->dir);
        char files_path[sizeof(sandbox->dir) + 16];
        snprintf(files_path, sizeof(files_path), "%s/bundle/files", sandbox->dir);
        json_t *bundle = gvisor_bundle(sandbox->spec, rootfs_fd,
                                       &(struct gvisor_files){files_fd, files_path}, err);
        if (bundle == NULL)
                return -1;
        _cleanup_free_ char *text = json_dumps(bundle, JSON_COMPACT);
        json_decref(bundle);
        _cleanup_close_ int config_fd =
                openat(dir_fd, "bundle/config.json",
                       O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (text == NULL || config_fd < 0 || sbx_write_all(config_fd, text, strlen(text)) < 0)
                return sbx_error_set(err, text == NULL ? ENOMEM : errno, "write %s/config.json",
                                     sandbox->dir);
        return 0;
}

static void remove_directory(struct sbx_sandbox *sandbox)
{
        if (sandbox->dir[0] == '\0')
                return;
        struct sbx_error err = {0};
        if (sbx_remove_tree_at(AT_FDCWD, sandbox->dir, &err) < 0)
                sbx_warn("gvisor: remove %s: %s", sandbox->dir, err.message);
        sandbox->dir[0] = '\0';
}

/* The sandbox cgroup's limits for the program's: room for the sentry and gofer on top, and for
 * runsc's start-up while starting. */
static struct sbx_limits host_limits(const struct sbx_limits *limits, bool starting)
{
        struct sbx_limits host = *limits;
        if (starting && host.cpu_millicores != 0)
                host.cpu_millicores += GVISOR_START_MILLICORES;
        if (host.memory_bytes != 0)
                host.memory_bytes += GVISOR_MEMORY_OVERHEAD_BYTES;
        if (host.pids != 0)
                host.pids = GVISOR_HOST_PIDS(host.pids);
        return host;
}

static int gvisor_create(const struct sbx_spec *spec, struct sbx_sandbox **out,
                         struct sbx_error *err)
{
        if (check_supported(spec, err) < 0)
                return -1;
        struct sbx_sandbox *sandbox = calloc(1, sizeof(*sandbox));
        if (sandbox == NULL)
                return sbx_error_set(err, ENOMEM, "allocate sandbox");
        sandbox->spec = spec;
        sandbox->agent = spec->agent;
        sandbox->pidfd = sandbox->wait_fd = sandbox->init_wait_fd = -1;
        sandbox->stdin_fd = sandbox->stdout_fd = sandbox->stderr_fd = -1;
        if (make_stdin(sandbox, err) < 0) {
                free(sandbox);
                return sbx_error_prefix(err, "setup step 'bundle'");
        }
        struct sbx_limits host = host_limits(&spec->limits, start_quota_raised(spec));
        if (cgroup_create(GVISOR_MAX_SLOTS, &sandbox->cgroup, err) < 0 ||
            cgroup_set_limits(sandbox->cgroup, &host, true, err) < 0) {
                cgroup_destroy(sandbox->cgroup);
                free(sandbox->stdin_data);
                free(sandbox);
                return sbx_error_prefix(err, "setup step 'cgroup'");
        }
        if (make_directory(sandbox, err) < 0) {
                remove_directory(sandbox);
                cgroup_destroy(sandbox->cgroup);
                free(sandbox->stdin_data);
                free(sandbox);
                return sbx_error_prefix(err, "setup step 'bundle'");
        }
        *out = sandbox;
        return 0;
}

/* The child, between fork and exec: only system calls (the engine has threads). Reports errno on
 * report_fd when it cannot exec. */
static _Noreturn void exec_runsc(const struct sbx_sandbox *sandbox, const int pipes[3],
                                 int report_fd, char *const argv[])
{
        static char *const envp[] = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", NULL};
        int code = 0;
        sigset_t none;
        sigemptyset(&none);
        for (int fd = 0; fd < 3; fd++)
                if (dup2(pipes[fd], fd) < 0)
                        code = errno;
        int joined = code == 0 ? cgroup_join_child(sandbox->cgroup) : 0;
        if (joined < 0)
                code = -joined;
        if (code == 0) {
                const int keep[] = {report_fd};
                signal(SIGPIPE, SIG_DFL);
                sigprocmask(SIG_SETMASK, &none, NULL);
                sbx_close_fds_except(keep, 1);
                execve(GVISOR_RUNSC, argv, envp);
                code = errno;
        }
        (void)!write(report_fd, &code, sizeof(code));
        _exit(127);
}

static int set_blocking(int fd, bool blocking)
{
        int flags = fcntl(fd, F_GETFL);
        if (flags < 0)
                return -1;
        return fcntl(fd, F_SETFL, blocking ? flags & ~O_NONBLOCK : flags | O_NONBLOCK);
}

/* Pool mode: the loader's "R" and its pid in the container's pid namespace, "R<pid>\n", the
 * first bytes of its stdout, read a byte at a time: what follows is the program's. Said before
 * any of the program's code is in the sandbox, the pid is the loader's word, and the loader is
 * sandboxd's own. */
static int wait_for_loader(int stdout_fd, pid_t *loader_pid, struct sbx_error *err)
{
        uint64_t until = sbx_now_us() + (uint64_t)GVISOR_LOADER_READY_TIMEOUT_MS * 1000;
        char line[16];
        size_t len = 0;
        while (len < sizeof(line)) {
                uint64_t now = sbx_now_us();
                if (now >= until)
                        return sbx_error_set(err, ETIMEDOUT,
                                             "setup step 'exec': the pool loader was not ready "
                                             "within %d ms",
                                             GVISOR_LOADER_READY_TIMEOUT_MS);
                struct pollfd pfd = {.fd = stdout_fd, .events = POLLIN};
                int ready = poll(&pfd, 1, (int)((until - now + 999) / 1000));
                if (ready < 0 && errno == EINTR)
                        continue;
                if (ready == 0)
                        continue; /* the deadline, judged above */
                ssize_t n = ready > 0 ? read(stdout_fd, &line[len], 1) : -1;
                if (n < 0 && errno == EINTR)
                        continue;
                if (n != 1)
                        break;
                if (line[len++] != '\n')
                        continue;
                line[len - 1] = '\0';
                char *end = NULL;
                long pid = line[0] == 'R' ? strtol(line + 1, &end, 10) : 0;
                if (pid <= 0 || pid > INT32_MAX || end == line + 1 || *end != '\0')
                        break;
                *loader_pid = (pid_t)pid;
                return 0;
        }
        return sbx_error_set(err, EPROTO,
                             "setup step 'exec': the pool loader ended or did not say it was "
                             "ready");
}

/* The id runsc knows the sandbox and its one container by. */
static void container_id(const struct sbx_sandbox *sandbox, char *id, size_t size)
{
        snprintf(id, size, "sandboxd-%u", cgroup_slot(sandbox->cgroup));
}

/* The Wait call's server check (control.h): the listener is a process of this sandbox's cgroup
 * (the sentry), which nobody but sandboxd can put there. */
static bool is_sandbox_process(pid_t pid, void *ctx)
{
        const struct sbx_sandbox *sandbox = ctx;
        enum { MAX_LISTED = 1024 }; /* a sandbox just started: runsc, gofer, sentry, stubs */
        _cleanup_free_ pid_t *pids = calloc(MAX_LISTED, sizeof(*pids));
        size_t n = 0;
        struct sbx_error err = {0};
        if (pids == NULL || cgroup_processes(sandbox->cgroup, pids, MAX_LISTED, &n, &err) < 0)
                return false;
        for (size_t i = 0; i < n; i++)
                if (pids[i] == pid)
                        return true;
        return false;
}

/* A ready pool entry's Wait calls: for its loader (the process that becomes the program), and for
 * the container's init (see struct sbx_sandbox). Without them (another runsc's protocol), the run
 * ends at runsc's exit, as a cold run's: slower, and as right. */
static void send_wait_calls(struct sbx_sandbox *sandbox)
{
        char id[32];
        container_id(sandbox, id, sizeof(id));
        sandbox->wait_fd =
                gvisor_control_send_wait(id, sandbox->loader_pid, is_sandbox_process, sandbox);
        sandbox->init_wait_fd = gvisor_control_send_wait(id, 0, is_sandbox_process, sandbox);
        if (sandbox->wait_fd < 0 && sandbox->init_wait_fd < 0)
                sbx_debug("gvisor: %s: no Wait call (%s): the run ends at runsc's exit", id,
                          strerror(errno));
}

/* A cold run's start-up, under the start-up quota: writes its stage shell all the files' bytes but
 * the last, waits until the stage has read them (the pipe is empty: runsc, its gofer and its
 * sentry are up, and the stage waits for that last byte), then sets the request's quota; the
 * supervisor writes the rest, and the evidence counts from there. The program cannot run before:
 * its stage waits for every byte of the files. Bounded by GVISOR_LOADER_READY_TIMEOUT_MS and by
 * runsc's exit; the quota is the request's when this returns 0. */
static int start_cold(struct sbx_sandbox *sandbox, struct sbx_error *err)
{
        size_t ahead = files_size(sandbox->spec) - 1;
        uint64_t until = sbx_now_us() + (uint64_t)GVISOR_LOADER_READY_TIMEOUT_MS * 1000;
        bool up = false; /* the stage has read every byte written */
        for (uint64_t now = sbx_now_us(); now < until; now = sbx_now_us()) {
                int unread = 0;
                if (sandbox->stdin_sent == ahead &&
                    ioctl(sandbox->stdin_fd, FIONREAD, &unread) == 0 && unread == 0) {
                        up = true;
                        break;
                }
                /* The pipe, when there is more to write; else a millisecond's wait for the stage
                 * to read. runsc's exit, or a cancel, ends the wait either way. */
                int cancel_fd = sandbox->spec->cancel_fd > 0 ? sandbox->spec->cancel_fd : -1;
                struct pollfd fds[3] = {{.fd = sandbox->pidfd, .events = POLLIN},
                                        {.fd = cancel_fd, .events = POLLIN},
                                        {.fd = sandbox->stdin_fd, .events = POLLOUT}};
                bool writing = sandbox->stdin_sent < ahead;
                int ready = poll(fds, writing ? 3 : 2, writing ? (int)((until - now) / 1000) : 1);
                if (ready < 0 && errno != EINTR)
                        return sbx_error_set(err, errno, "setup step 'exec': poll");
                if (ready > 0 && (fds[0].revents != 0 || fds[1].revents != 0))
                        break; /* runsc is gone, or the run canceled: the supervisor sees it */
                if (writing && ready > 0 && fds[2].revents != 0) {
                        ssize_t n =
                                write(sandbox->stdin_fd, sandbox->stdin_data + sandbox->stdin_sent,
                                      ahead - sandbox->stdin_sent);
                        if (n > 0)
                                sandbox->stdin_sent += (size_t)n;
                        else if (n < 0 && errno != EAGAIN && errno != EINTR)
                                break; /* EPIPE: the stage is gone; the supervisor sees why */
                }
        }
        /* From here the counters are the program's, as a warm entry's are from its acquire:
         * runsc's start-up is the sandbox's, not the program's. Not when the start-up did not
         * end as it should: what happened then (an OOM kill writing the files, say) is kept. */
        struct sbx_limits host = host_limits(&sandbox->spec->limits, false);
        if (cgroup_set_limits(sandbox->cgroup, &host, true, err) < 0 ||
            (up && cgroup_reset_baseline(sandbox->cgroup, err) < 0))
                return sbx_error_prefix(err, "setup step 'cgroup'");
        return 0;
}

static int gvisor_start(struct sbx_sandbox *sandbox, struct sbx_error *err)
{
        char root[sizeof(sandbox->dir) + 16];
        char bundle[sizeof(sandbox->dir) + 16];
        char id[32];
        char platform[32];
        snprintf(platform, sizeof(platform), "--platform=%s", runsc_platform);
        snprintf(root, sizeof(root), "--root=%s/state", sandbox->dir);
        snprintf(bundle, sizeof(bundle), "--bundle=%s/bundle", sandbox->dir);
        container_id(sandbox, id, sizeof(id));
        /* --ignore-cgroups: without it runsc moves its sentry and gofer out of the slot's
         * cgroups into /<id> of every v1 hierarchy, and leaves those behind. */
        char *const argv[] = {"runsc", root, platform, "--network=none", "--ignore-cgroups", "run",
                              bundle,  id,   NULL};

        int in[2] = {-1, -1}, out[2] = {-1, -1}, errs[2] = {-1, -1}, report[2] = {-1, -1};
        int rc = -1;
        if (pipe2(in, O_CLOEXEC) < 0 || pipe2(out, O_CLOEXEC) < 0 || pipe2(errs, O_CLOEXEC) < 0 ||
            pipe2(report, O_CLOEXEC) < 0) {
                sbx_error_set(err, errno, "setup step 'exec': pipes");
                goto out;
        }
        pid_t pid = fork();
        if (pid < 0) {
                sbx_error_set(err, errno, "setup step 'exec': fork");
                goto out;
        }
        if (pid == 0)
                exec_runsc(sandbox, (const int[3]){in[0], out[1], errs[1]}, report[1], argv);
        sandbox->pid = pid;
        sandbox->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
        sbx_closep(&report[1]);
        int code = 0;
        ssize_t n;
        do
                n = read(report[0], &code, sizeof(code));
        while (n < 0 && errno == EINTR);
        if (n == (ssize_t)sizeof(code)) {
                sbx_error_set(err, code, "setup step '%s': %s",
                              code == ENOENT || code == EACCES ? "exec" : "cgroup",
                              "could not start runsc in the sandbox's cgroups");
                goto out;
        }
        if (sandbox->pidfd < 0) {
                sbx_error_set(err, errno, "setup step 'exec': pidfd_open");
                goto out;
        }
        if (set_blocking(in[1], false) < 0) {
                sbx_error_set(err, errno, "setup step 'exec': stdin");
                goto out;
        }
        sandbox->stdin_fd = take_fd(&in[1]);
        sandbox->stdout_fd = take_fd(&out[0]);
        sandbox->stderr_fd = take_fd(&errs[0]);
        if (sandbox->agent)
                rc = wait_for_loader(sandbox->stdout_fd, &sandbox->loader_pid, err);
        else
                rc = start_quota_raised(sandbox->spec) ? start_cold(sandbox, err) : 0;
        if (rc == 0 && sandbox->agent)
                send_wait_calls(sandbox);
out:
        for (int i = 0; i < 2; i++) {
                sbx_closep(&in[i]);
                sbx_closep(&out[i]);
                sbx_closep(&errs[i]);
                sbx_closep(&report[i]);
        }
        return rc;
}

static int gvisor_acquire(struct sbx_sandbox *sandbox, const struct sbx_spec *request,
                          struct sbx_error *err)
{
        if (!sandbox->agent || sandbox->pid <= 0 || sandbox->stdin_fd < 0)
                return sbx_error_set(err, EINVAL, "acquire: not a started pool sandbox");
        for (size_t i = 0; i < request->n_files; i++)
                if (request->files[i].read_only)
                        return sbx_error_set(err, EOPNOTSUPP,
                                             "the gvisor backend has no read-only files yet");
        sandbox->spec = request;
        struct sbx_limits host = host_limits(&request->limits, false);
        if (cgroup_set_limits(sandbox->cgroup, &host, true, err) < 0 ||
            cgroup_reset_baseline(sandbox->cgroup, err) < 0)
                return sbx_error_prefix(err, "acquire");
        /* Blocking while the loader reads (the files may be larger than a pipe); then the
         * supervisor's non-blocking stdin again. */
        if (set_blocking(sandbox->stdin_fd, true) < 0)
                return sbx_error_set(err, errno, "acquire: stdin");
        int rc = sbx_agent_send_execution(sandbox->stdin_fd, SBX_AGENT_STDIN, request, err);
        if (set_blocking(sandbox->stdin_fd, false) < 0 && rc == 0)
                rc = sbx_error_set(err, errno, "acquire: stdin");
        return rc;
}

/* Once the sentry has answered a Wait call, the program has exited: the run is over, as a native
 * run is at its program's exit. The container's init (the stage shell) then exits with its status
 * within milliseconds, and the sentry sends SIGKILL to every other process in its pid namespace,
 * as Linux does; runsc winds down, and destroy, after the answer, kills and reaps whatever is
 * left. Killing it here would only wait, before the answer, for the cgroup to empty (~8 ms). */
static int gvisor_kill(struct sbx_sandbox *sandbox, struct sbx_error *err)
{
        if (sandbox->ended)
                return 0;
        return cgroup_kill_all(sandbox->cgroup, err);
}

static int kill_callback(void *ctx, struct sbx_error *err)
{
        return gvisor_kill(ctx, err);
}

/* The program's exit from a wait status: runsc's or the stage shell's (shell_convention: 128 + N
 * is a program killed by signal N), or the sentry's for the program's own process. */
static void read_status(int status, bool shell_convention, struct sbx_run *run)
{
        if (WIFSIGNALED(status)) { /* by a signal; runsc's: with its sandbox (deadline, cap) */
                run->exited = false;
                run->exit_code = -1;
                run->signal = WTERMSIG(status);
                return;
        }
        int code = WEXITSTATUS(status);
        if (shell_convention && code > GVISOR_SIGNAL_EXIT_BASE &&
            code < GVISOR_SIGNAL_EXIT_BASE + 65) {
                run->exited = false;
                run->exit_code = -1;
                run->signal = code - GVISOR_SIGNAL_EXIT_BASE;
                return;
        }
        run->exited = true;
        run->exit_code = code;
        run->signal = 0;
}

/* Reaps runsc and reads the program's exit from its status. */
static int reap(struct sbx_sandbox *sandbox, struct sbx_run *run, struct sbx_error *err)
{
        int status = 0;
        pid_t got;
        do
                got = waitpid(sandbox->pid, &status, __WALL);
        while (got < 0 && errno == EINTR);
        if (got < 0)
                return sbx_error_set(err, errno, "wait for runsc");
        sandbox->pid = 0;
        read_status(status, true, run);
        return 0;
}

/* An OOM kill in the sandbox's cgroup is of one of runsc's processes (the program is the
 * sentry's), and whichever the kernel picked ends the sandbox: the sentry reads as SIGKILL (128 +
 * 9), but the gofer or runsc itself leaves runsc an error exit of its own (2 was seen, the
 * hostile suite's memory_hog_py). The program did not end on its own: it reads as killed, as
 * natively. */
static void oom_ended_sandbox(struct sbx_sandbox *sandbox, struct sbx_run *run)
{
        struct sbx_evidence evidence = {0};
        struct sbx_error ignored = {0};
        if (cgroup_read_evidence(sandbox->cgroup, &evidence, &ignored) < 0 ||
            evidence.oom_kills == 0)
                return;
        run->exited = false;
        run->exit_code = -1;
        run->signal = SIGKILL;
}

/* The supervisor's end_next: the run's end is the first usable answer of the WaitPID call, then
 * of the Wait call for init, then runsc's exit (the sentry is gone without one: killed, OOM;
 * another runsc's protocol). An answered call's connection is closed at once: the sentry's
 * control server, stopping, waits up to seconds for its clients to hang up. */
static int next_end(void *ctx, bool *final)
{
        struct sbx_sandbox *sandbox = ctx;
        /* The end being asked about: WaitPID's while its connection is open, then init's. */
        bool at_init = sandbox->wait_fd < 0;
        int *fd = at_init ? &sandbox->init_wait_fd : &sandbox->wait_fd;
        sandbox->ended = gvisor_control_read_wait(*fd, GVISOR_WAIT_ANSWER_TIMEOUT_MS,
                                                  &sandbox->wait_status) == 0;
        sandbox->ended_at_init = at_init;
        sbx_closep(fd);
        if (sandbox->ended)
                return -1;
        *final = sandbox->init_wait_fd >= 0;
        if (*final)
                return sandbox->init_wait_fd;
        sbx_debug("gvisor: sandboxd-%u: no answer to the Wait calls: the run ends at runsc's exit",
                  cgroup_slot(sandbox->cgroup));
        return sandbox->pidfd;
}

/* A compile stage's run (MODE the artifact's path, spec.h): the artifact is the bytes before the
 * trailer that ends stdout when the program exited 0; they go to the spec's artifact fd, and stdout
 * is the program's alone again, under the output cap (past it: output_limit, as natively, where the
 * program is stopped at the cap itself). */
static int take_artifact(const struct sbx_spec *spec, struct sbx_run *run, struct sbx_error *err)
{
        struct sbx_buffer *out = &run->out;
        if (run->exited && run->exit_code == 0 && !out->overflow) {
                size_t program = 0;
                size_t size = 0;
                if (gvisor_artifact_split(out->data, out->len, &program, &size) < 0)
                        return sbx_error_set(err, EPROTO,
                                             "the compile's artifact did not come back whole");
                if (sbx_write_all(spec->artifact_fd, out->data + program, size) < 0)
                        return sbx_error_set(err, errno, "write the artifact");
                out->len = program;
        }
        if (out->len > spec->limits.output_bytes) {
                out->len = spec->limits.output_bytes;
                out->overflow = true;
                run->output_limit = true;
        }
        if (out->data != NULL)
                out->data[out->len] = '\0';
        return 0;
}

static int gvisor_wait(struct sbx_sandbox *sandbox, struct sbx_run *run, struct sbx_error *err)
{
        uint64_t started = sbx_now_us();
        struct sbx_supervise params = {
                .stdin_fd = sandbox->stdin_fd,
                .stdin_data = sandbox->stdin_data != NULL
                                      ? sandbox->stdin_data + sandbox->stdin_sent
                                      : sandbox->spec->stdin_data,
                .stdin_size = sandbox->stdin_data != NULL
                                      ? sandbox->stdin_size - sandbox->stdin_sent
                                      : sandbox->spec->stdin_size,
                .stdout_fd = sandbox->stdout_fd,
                .stderr_fd = sandbox->stderr_fd,
                /* A Wait call's answer (next_end), else runsc's exit (readable once it has
                 * exited). */
                .end_fd = sandbox->wait_fd >= 0        ? sandbox->wait_fd
                          : sandbox->init_wait_fd >= 0 ? sandbox->init_wait_fd
                                                       : sandbox->pidfd,
                .end_is_final = sandbox->wait_fd >= 0 || sandbox->init_wait_fd >= 0,
                .end_next = next_end,
                .end_ctx = sandbox,
                .deadline_us = started + sandbox->spec->limits.wall_ms * 1000,
                .output_cap = sandbox->spec->limits.output_bytes,
                /* A compile's artifact: at most its own disk's worth (spec->artifact_path is in
                 * /tmp, a tmpfs of the compile's disk size). */
                .stdout_extra =
                        sandbox->spec->artifact_fd > 0
                                ? sandbox->spec->limits.disk_bytes + GVISOR_ARTIFACT_TRAILER_BYTES
                                : 0,
                .kill = kill_callback,
                .kill_ctx = sandbox,
                .cancel_fd = sandbox->spec->cancel_fd,
                .on_output = sandbox->spec->on_output,
                .output_ctx = sandbox->spec->output_ctx,
        };
        /* sbx_supervise closes these three. */
        sandbox->stdin_fd = sandbox->stdout_fd = sandbox->stderr_fd = -1;
        int rc = sbx_supervise(&params, run, err);
        run->wall_us = sbx_now_us() - started;
        struct sbx_error ignored = {0};
        if (sandbox->ended) {
                /* The sentry's answer: the program has exited (see gvisor_kill for the rest). */
                read_status(sandbox->wait_status, sandbox->ended_at_init, run);
                sbx_debug("gvisor: sandboxd-%u: the run ended at the sentry's answer for %s "
                          "(status %#x)",
                          cgroup_slot(sandbox->cgroup),
                          sandbox->ended_at_init ? "the init" : "the loader",
                          (unsigned)sandbox->wait_status);
        } else {
                /* runsc is gone when it ends the run; what it started too, unless killed
                 * half-way. Without a Wait call's answer (killed, OOM, another runsc's
                 * protocol), the status is runsc's exit's. */
                if (rc < 0 || run->wall_timeout || run->output_limit || run->canceled)
                        (void)cgroup_kill_all(sandbox->cgroup, &ignored);
                if (reap(sandbox, run, rc == 0 ? err : &ignored) < 0)
                        rc = -1;
        }
        sbx_closep(&sandbox->wait_fd);
        sbx_closep(&sandbox->init_wait_fd);
        if (rc == 0 && run->exited && run->exit_code != 0)
                oom_ended_sandbox(sandbox, run);
        if (rc == 0 && sandbox->spec->artifact_fd > 0)
                rc = take_artifact(sandbox->spec, run, err);
        return rc;
}

static int gvisor_read_evidence(struct sbx_sandbox *sandbox, struct sbx_evidence *evidence,
                                struct sbx_error *err)
{
        return cgroup_read_evidence(sandbox->cgroup, evidence, err);
}

/* The orphan cleaner of the slot space (native/cgroup.h): an orphan slot's directory here. */
static void remove_slot_directory(unsigned slot)
{
        char path[64];
        snprintf(path, sizeof(path), "%s/%u", GVISOR_RUN_DIR, slot);
        struct sbx_error err = {0};
        if (sbx_remove_tree_at(AT_FDCWD, path, &err) < 0)
                sbx_warn("gvisor: remove %s: %s", path, err.message);
}

/* Registered when the process starts, whichever backend it then uses: a crashed gVisor
 * sandbox's slot may be reclaimed by any sandbox's create or by any reconcile. */
__attribute__((constructor)) static void register_orphan_cleaner(void)
{
        cgroup_set_orphan_cleaner(remove_slot_directory);
}

static void gvisor_destroy(struct sbx_sandbox *sandbox)
{
        if (sandbox == NULL)
                return;
        struct sbx_error err = {0};
        if (sandbox->pid > 0) {
                if (cgroup_kill_all(sandbox->cgroup, &err) < 0)
                        sbx_warn("destroy: %s", err.message);
                while (waitpid(sandbox->pid, NULL, __WALL) < 0 && errno == EINTR)
                        ;
        }
        sbx_closep(&sandbox->pidfd);
        sbx_closep(&sandbox->wait_fd);
        sbx_closep(&sandbox->init_wait_fd);
        sbx_closep(&sandbox->stdin_fd);
        sbx_closep(&sandbox->stdout_fd);
        sbx_closep(&sandbox->stderr_fd);
        /* Nothing of runsc's may be alive while its state goes. */
        if (cgroup_kill_all(sandbox->cgroup, &err) < 0)
                sbx_warn("destroy: %s", err.message);
        remove_directory(sandbox);
        cgroup_destroy(sandbox->cgroup);
        free(sandbox->stdin_data);
        free(sandbox);
}

/* A crash's orphans are cgroups of the one slot space (runsc and everything it started is in
 * them): the native backend's reconcile removes every one, and with it (the cleaner below) the
 * slot's directory here; a slot that was next used first had its directory replaced. */
static int gvisor_reconcile(struct sbx_error *err)
{
        return sbx_native_backend.reconcile(err);
}

const struct sbx_backend sbx_gvisor_backend = {
        .name = "gvisor",
        .create = gvisor_create,
        .start = gvisor_start,
        .acquire = gvisor_acquire,
        .wait = gvisor_wait,
        .kill = gvisor_kill,
        .read_evidence = gvisor_read_evidence,
        .destroy = gvisor_destroy,
        .reconcile = gvisor_reconcile,
};
