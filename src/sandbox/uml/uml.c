/* The uml backend: the program runs on a Linux kernel of its own, Debian's user-mode-linux, which
 * is an ordinary host process; and that kernel process runs in a native sandbox (namespaces,
 * Landlock, cgroups, rlimits, a seccomp filter: the program's, less ptrace, with which UML runs
 * its guest's processes; and no capability, sbx_spec.uml_kernel). A payload that escapes the guest
 * kernel lands in a namespaced, filtered, capped, unprivileged process.
 *
 * The native sandbox's program is linux.uml; its /workspace holds the guest's init (the build
 * embeds guest/uml_init.c), the job (limits, argv, environment), the program's stdin and the
 * request's files, all under .sbx-uml/, and the native program's seccomp filter for the guest's
 * program. The guest boots with that sandbox's root as its own (hostfs, read-only); its init
 * copies the files into a tmpfs of the request's disk size, runs the program under the guest
 * kernel's cgroup v2 caps as a native sandbox runs it (guest/uml_init.c: its own namespaces, not
 * the guest's root, the native filter, capabilities and rlimits), and reports on its console 3
 * (the native program's fd 3, a memfd here). Init copies the program's stdout and stderr to
 * consoles 1 and 2 (fds 1 and 2), so the native supervisor drains, caps and streams them as it
 * does any program's.
 *
 * How each limit binds:
 *   memory   the guest cgroup's memory.max (OOM: the guest kernel's oom_kill); the guest has that
 *            plus the disk and UML_GUEST_KERNEL_BYTES of RAM, and the host cgroup that RAM plus
 *            UML_HOST_OVERHEAD_BYTES (UML's RAM is a file of the native sandbox's /tmp)
 *   pids     the guest cgroup's pids.max; the host's is far above (a host process per guest
 *            process, and UML's own threads)
 *   cpu      the guest's RLIMIT_CPU and cpu.max; the host's quota; the host's RLIMIT_CPU has the
 *            boot's allowance on top
 *   wall     init's deadline, from the program's start; the host's adds UML_BOOT_WALL_MS for the
 *            boot and the report (pool mode: UML_REPORT_WALL_MS, the boot is over)
 *   disk     the guest tmpfs behind /workspace, /tmp and /dev/shm
 *   output   the native supervisor's cap on stdout and stderr
 *
 * Evidence: the guest kernel's counters for the program (memory.events, pids.events, memory.peak
 * of its cgroup; an OOM kill of init's thrash guard counts as one), with the host cgroup's events
 * added; CPU is the host cgroup's, the guest kernel's boot included: what the run cost. The
 * guest's own counters also go apart (read_guest_evidence: the result's evidence.guest).
 *
 * Pool mode (spec.agent: a warm entry of a language whose loader takes its execution on stdin,
 * python's): the guest boots, its init starts the loader as it would start a program, and says
 * "R" on console 3, which here is the native sandbox's agent channel (fd 3, a socket): the native
 * start returns once it did. Everything the host sends comes then on console 4, the UML
 * process's stdin, which the native supervisor feeds in wait as it feeds any program's stdin:
 * the take (the request's caps and the size of what follows), the loader's execution
 * (sandbox/agent.h, on its stdin channel: the rlimits in its header) and the program's stdin. The
 * report comes back on the agent channel. The guest's RAM is the entry's (the pool's memory:
 * execution.c), so a request asking for more runs cold, and so does one whose files and stdin
 * would take the console long (UML_POOL_INPUT_MAX_BYTES, execution.c). From acquire on, the
 * host's caps are the request's as a cold run's, but for that RAM and the deadline's allowance:
 * the cgroup's, and the UML process's rlimits (its stubs forked already keep the boot's loose
 * ones: bound by the cgroup); the program's are the guest's, which its loader sets.
 *
 * An exec entry (spec.exec_on_acquire: a language without a loader, sh's and bash's) is the same,
 * but no loader runs in the guest: the program's process waits at its exec from the boot, and
 * init reads the execution itself, writes the files and hands the program its header (argv,
 * environment, rlimits: guest/uml_init.c's exec mode).
 *
 * Not yet: sessions, compile stages, read-only files (create refuses them). */
#define _GNU_SOURCE
#include "sandbox/uml/uml.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "sandbox/agent.h"
#include "sandbox/native/native.h"
#include "sandbox/native/rlimit.h"
#include "sandbox/native/seccomp.h"
#include "util/buffer.h"
#include "util/cleanup.h"
#include "util/log.h"

/* The kernel, as Debian's user-mode-linux installs it. */
#define UML_KERNEL "/usr/bin/linux.uml"

/* The guest kernel's own RAM on top of the program's memory and disk (boots in ~20 MiB). */
#define UML_GUEST_KERNEL_BYTES (64ull << 20)

/* The UML process's memory beyond the guest's RAM (its image, page tables, stubs). */
#define UML_HOST_OVERHEAD_BYTES (64ull << 20)

/* UML's RAM file is larger than the guest's RAM by the gap between its image and its heap, which
 * it adds to the RAM ("exec-shield gap"): x86-64 randomizes the heap's start over 1 GiB. The
 * file is sparse, so only the host's RLIMIT_FSIZE (the native sandbox's disk size) must leave
 * room for it; the pages the guest touches stay under the host cgroup's memory cap. */
#define UML_RAM_FILE_SLACK_BYTES ((1ull << 30) + (64ull << 20))

/* What the guest's boot and report may take on the host, on top of the program's own wall
 * clock and CPU time: ~0.6 s each on an idle machine, several seconds on a loaded one. */
#define UML_BOOT_WALL_MS 30000
#define UML_BOOT_CPU_MS  30000

/* A pool entry's booted already: its host deadline allows for the report and the power-off. */
#define UML_REPORT_WALL_MS 10000

/* Host processes: one per guest process (its address space's stub) and UML's helper threads. */
#define UML_HOST_PIDS(pids) ((pids)*2 + 256)

/* The guest's init, built from guest/uml_init.c (meson.build). */
extern const unsigned char sbx_uml_init[];
extern const size_t sbx_uml_init_size;

#define STAGING ".sbx-uml/"

/* The guest kernel's fs.nr_open, Linux's default: the most files a process can have open. */
#define UML_GUEST_NR_OPEN (1u << 20)

struct sbx_sandbox {
        /* The created one until acquire, then the request's: a pool entry's spec is freed
         * before its acquire (sbx_pool_entry_execute). */
        const struct sbx_spec *spec;
        bool pool;              /* spec.agent: a warm entry, whose guest waits for its take */
        bool exec;              /* spec.exec_on_acquire: init reads the execution itself */
        struct sbx_spec kernel; /* the native sandbox's: linux.uml */
        struct sbx_sandbox *native;
        const char *argv[20];
        char ram_argument[32];
        uint64_t guest_memory_bytes, guest_disk_bytes; /* what the guest booted with */
        struct sbx_file *files; /* the init, the job, its filter, stdin, the request's files */
        char **paths;           /* the created spec's files' staged paths */
        size_t n_paths;
        char *job;
        size_t job_size;
        struct sbx_buffer input; /* pool mode: the take, the execution, stdin (console 4) */
        /* The guest's console 3: a memfd, or in pool mode the native sandbox's agent channel
         * (the native sandbox's to close). */
        int report_fd;
        bool reported; /* the guest's report was read (the fields below) */
        struct sbx_run report;
        struct sbx_evidence guest;
        uint64_t thrash_kills; /* the guest's init ended a thrashing program (uml_init.c) */
};

/* The job's text (guest/uml_init.c documents it). */
__attribute__((format(printf, 4, 5))) static int
job_add(char **job, size_t *size, struct sbx_error *err, const char *format, ...)
{
        va_list args;
        va_start(args, format);
        char *item = NULL;
        int n = vasprintf(&item, format, args);
        va_end(args);
        if (n < 0)
                return sbx_error_set(err, ENOMEM, "uml: the job");
        char *grown = realloc(*job, *size + (size_t)n + 1);
        if (grown == NULL) {
                free(item);
                return sbx_error_set(err, ENOMEM, "uml: the job");
        }
        memcpy(grown + *size, item, (size_t)n + 1);
        *job = grown;
        *size += (size_t)n + 1;
        free(item);
        return 0;
}

/* The guest cgroup's caps and the program's wall clock, in the job and in a take. */
static int job_add_caps(char **job, size_t *size, const struct sbx_limits *limits,
                        struct sbx_error *err)
{
        uint64_t period_us = 100000;
        uint64_t quota_us = (uint64_t)limits->cpu_millicores * period_us / 1000;
        if (job_add(job, size, err, "memory %" PRIu64, limits->memory_bytes) < 0 ||
            job_add(job, size, err, "pids %" PRIu64, limits->pids) < 0 ||
            job_add(job, size, err, "cpu_quota_us %" PRIu64, quota_us) < 0 ||
            job_add(job, size, err, "cpu_period_us %" PRIu64, period_us) < 0 ||
            job_add(job, size, err, "wall_ms %" PRIu64, limits->wall_ms) < 0)
                return -1;
        return 0;
}

static int make_job(struct sbx_sandbox *sandbox, struct sbx_error *err)
{
        const struct sbx_spec *spec = sandbox->spec;
        const struct sbx_limits *limits = &spec->limits;
        char **job = &sandbox->job;
        size_t *size = &sandbox->job_size;
        if (job_add(job, size, err, "sandboxd-uml-job 1") < 0 ||
            job_add_caps(job, size, limits, err) < 0 ||
            job_add(job, size, err, "disk %" PRIu64, limits->disk_bytes) < 0 ||
            job_add(job, size, err, "stdin %d", spec->stdin_size > 0) < 0 ||
            job_add(job, size, err, "pool %d", sandbox->pool) < 0 ||
            job_add(job, size, err, "exec %d", sandbox->exec) < 0)
                return -1;
        /* The native plan's rlimits, which the guest's init sets for the program. */
        struct rlimit_setting rlimits[RLIMIT_PLAN_MAX];
        size_t n_rlimits = rlimit_plan(limits, rlimits);
        for (size_t i = 0; i < n_rlimits; i++) {
                /* A pool entry's loose limit: no kernel takes an unlimited RLIMIT_NOFILE, and the
                 * loader lowers it to the request's; the guest kernel's fs.nr_open is this. */
                if (rlimits[i].resource == RLIMIT_NOFILE &&
                    rlimits[i].value.rlim_max == RLIM_INFINITY)
                        rlimits[i].value = (struct rlimit){UML_GUEST_NR_OPEN, UML_GUEST_NR_OPEN};
                if (job_add(job, size, err, "rlimit %d %llu %llu", rlimits[i].resource,
                            (unsigned long long)rlimits[i].value.rlim_cur,
                            (unsigned long long)rlimits[i].value.rlim_max) < 0)
                        return -1;
        }
        size_t argc = 0, envc = 0;
        while (spec->argv[argc] != NULL)
                argc++;
        while (spec->envp[envc] != NULL)
                envc++;
        /* A loader takes its execution on stdin (sandbox/agent.h, guest/python_loader.py). An
         * exec entry's argv is the execution's: init only preloads this one's program. */
        bool loader = sandbox->pool && !sandbox->exec;
        if (job_add(job, size, err, "argv %zu", argc + loader) < 0)
                return -1;
        for (size_t i = 0; i < argc; i++)
                if (job_add(job, size, err, "%s", spec->argv[i]) < 0)
                        return -1;
        if (loader && job_add(job, size, err, "stdio") < 0)
                return -1;
        if (job_add(job, size, err, "env %zu", envc) < 0)
                return -1;
        for (size_t i = 0; i < envc; i++)
                if (job_add(job, size, err, "%s", spec->envp[i]) < 0)
                        return -1;
        return 0;
}

/* The RAM the guest boots with: the program's memory and disk (its tmpfs), and the kernel's. */
static uint64_t guest_memory(const struct sbx_limits *limits)
{
        return limits->memory_bytes + limits->disk_bytes + UML_GUEST_KERNEL_BYTES;
}

static int make_files(struct sbx_sandbox *sandbox, struct sbx_error *err)
{
        const struct sbx_spec *spec = sandbox->spec;
        sandbox->files = calloc(spec->n_files + 4, sizeof(*sandbox->files));
        sandbox->paths = calloc(spec->n_files + 1, sizeof(*sandbox->paths));
        if (sandbox->files == NULL || sandbox->paths == NULL)
                return sbx_error_set(err, ENOMEM, "uml: the staged files");
        size_t n = 0;
        sandbox->files[n++] = (struct sbx_file){.path = STAGING "init",
                                                .data = sbx_uml_init,
                                                .size = sbx_uml_init_size,
                                                .executable = true};
        sandbox->files[n++] = (struct sbx_file){
                .path = STAGING "job", .data = sandbox->job, .size = sandbox->job_size};
        /* The native program's filter, which the guest's init loads for the program too: the
         * guest kernel's surface is the host kernel's, less what the filter refuses. */
        sandbox->files[n++] = (struct sbx_file){.path = STAGING "seccomp",
                                                .data = seccomp_compiled_filter,
                                                .size = seccomp_compiled_length *
                                                        sizeof(seccomp_compiled_filter[0])};
        if (spec->stdin_size > 0)
                sandbox->files[n++] = (struct sbx_file){.path = STAGING "stdin",
                                                        .data = spec->stdin_data,
                                                        .size = spec->stdin_size};
        for (size_t i = 0; i < spec->n_files; i++) {
                if (asprintf(&sandbox->paths[i], STAGING "files/%s", spec->files[i].path) < 0)
                        return sbx_error_set(err, ENOMEM, "uml: the staged files");
                sandbox->n_paths++;
                sandbox->files[n] = spec->files[i];
                sandbox->files[n++].path = sandbox->paths[i];
        }
        sandbox->kernel.files = sandbox->files;
        sandbox->kernel.n_files = n;
        return 0;
}

/* The native sandbox's limits: the guest's RAM is a file in its /tmp, the boot takes time. A
 * pool entry's are its loose ones until acquire, then the request's, but for the memory and disk
 * its guest booted with and the deadline's allowance (uml_acquire). */
static struct sbx_limits kernel_limits(const struct sbx_spec *spec)
{
        const struct sbx_limits *limits = &spec->limits;
        struct sbx_limits host = *limits;
        uint64_t staged = sbx_uml_init_size + spec->stdin_size + (1u << 20);
        for (size_t i = 0; i < spec->n_files; i++)
                staged += spec->files[i].size;
        host.memory_bytes = guest_memory(limits) + staged + UML_HOST_OVERHEAD_BYTES;
        host.disk_bytes = guest_memory(limits) + UML_RAM_FILE_SLACK_BYTES + staged;
        host.pids = limits->pids > 0 ? UML_HOST_PIDS(limits->pids) : 0;
        host.wall_ms = limits->wall_ms + UML_BOOT_WALL_MS;
        host.cpu_ms = limits->cpu_ms > 0 ? limits->cpu_ms + UML_BOOT_CPU_MS : 0;
        if (host.open_files < 1024)
                host.open_files = 1024;
        return host;
}

/* The kernel's command line after its RAM size. */
static const char *const kernel_arguments[] = {
        "root=/dev/root",
        "rootfstype=hostfs",
        "rootflags=/",
        "ro",
        "init=/workspace/" STAGING "init",
        /* No kernel messages on any console, and the program's channels only (see above). */
        "quiet",
        "loglevel=0",
        "con=null",
        "ssl=null",
        "con1=null,fd:1",
        "con2=null,fd:2",
        "con3=null,fd:3",
        "uml_dir=/tmp",
        /* Boot time (2.4 s to 0.6 s here): no legacy BSD ptys (the kernel makes 256 pairs,
         * 0.6 s), no RAID-6 benchmark (0.85 s: five algorithms timed over 16 ticks each at
         * HZ=100), and no btrfs, its one user here. The guest has no block device and its program
         * no capability to mount one: a file system it cannot reach is code it cannot attack. */
        "pty.legacy_count=0",
        "initcall_blacklist=raid6_select_algo,init_btrfs_fs",
};

static void make_argv(struct sbx_sandbox *sandbox)
{
        /* The kernel, its RAM, the arguments, pool mode's console 4 and the NULL. */
        _Static_assert(SBX_ARRAY_SIZE(kernel_arguments) + 4 <=
                               SBX_ARRAY_SIZE(((struct sbx_sandbox *)NULL)->argv),
                       "sbx_sandbox.argv holds the kernel's command line");
        snprintf(sandbox->ram_argument, sizeof(sandbox->ram_argument), "mem=%" PRIu64 "M",
                 guest_memory(&sandbox->spec->limits) >> 20);
        size_t n = 0;
        sandbox->argv[n++] = UML_KERNEL;
        sandbox->argv[n++] = sandbox->ram_argument;
        for (size_t i = 0; i < SBX_ARRAY_SIZE(kernel_arguments); i++)
                sandbox->argv[n++] = kernel_arguments[i];
        /* Pool mode: what the host sends after the boot, on the UML process's stdin. */
        if (sandbox->pool)
                sandbox->argv[n++] = "con4=fd:0,null";
        sandbox->argv[n] = NULL;
}

static const char *const kernel_environment[] = {"PATH=/usr/bin:/bin", "TMPDIR=/tmp", NULL};

static int check_supported(const struct sbx_spec *spec, struct sbx_error *err)
{
        if (spec->session || (spec->exec_on_acquire && !spec->agent) || spec->artifact_fd > 0 ||
            spec->template_fd > 0)
                return sbx_error_set(err, EOPNOTSUPP,
                                     "the uml backend has no sessions or compile stage yet");
        for (size_t i = 0; i < spec->n_files; i++)
                if (spec->files[i].read_only)
                        return sbx_error_set(err, EOPNOTSUPP,
                                             "the uml backend has no read-only files yet");
        if (access(UML_KERNEL, X_OK) < 0)
                return sbx_error_set(err, errno,
                                     "%s: user-mode-linux is not installed (Debian's "
                                     "user-mode-linux)",
                                     UML_KERNEL);
        return 0;
}

static void uml_destroy(struct sbx_sandbox *sandbox)
{
        if (sandbox == NULL)
                return;
        sbx_native_backend.destroy(sandbox->native);
        for (size_t i = 0; i < sandbox->n_paths; i++)
                free(sandbox->paths[i]);
        free(sandbox->paths);
        free(sandbox->files);
        free(sandbox->job);
        sbx_buffer_free(&sandbox->input);
        if (!sandbox->pool)
                sbx_closep(&sandbox->report_fd);
        free(sandbox);
}

static int uml_create(const struct sbx_spec *spec, struct sbx_sandbox **out, struct sbx_error *err)
{
        if (check_supported(spec, err) < 0)
                return -1;
        struct sbx_sandbox *sandbox = calloc(1, sizeof(*sandbox));
        if (sandbox == NULL)
                return sbx_error_set(err, ENOMEM, "allocate sandbox");
        sandbox->spec = spec;
        sandbox->pool = spec->agent;
        sandbox->exec = spec->agent && spec->exec_on_acquire;
        sandbox->guest_memory_bytes = spec->limits.memory_bytes;
        sandbox->guest_disk_bytes = spec->limits.disk_bytes;
        sandbox->report_fd = sandbox->pool ? -1 : memfd_create("sandboxd-uml-report", MFD_CLOEXEC);
        if (!sandbox->pool && sandbox->report_fd < 0) {
                sbx_error_set(err, errno, "uml: memfd_create");
                uml_destroy(sandbox);
                return -1;
        }
        make_argv(sandbox);
        sandbox->kernel = (struct sbx_spec){
                .argv = sandbox->argv,
                .envp = kernel_environment,
                .limits = kernel_limits(spec),
                .network = spec->network,
                .test = spec->test,
                .cancel_fd = spec->cancel_fd,
                .artifact_fd = sandbox->report_fd,
                .agent = sandbox->pool,
                .uml_kernel = true,
                .on_output = spec->on_output,
                .output_ctx = spec->output_ctx,
        };
        if (make_job(sandbox, err) < 0 || make_files(sandbox, err) < 0 ||
            sbx_native_backend.create(&sandbox->kernel, &sandbox->native, err) < 0) {
                uml_destroy(sandbox);
                return -1;
        }
        *out = sandbox;
        return 0;
}

static int uml_start(struct sbx_sandbox *sandbox, struct sbx_error *err)
{
        return sbx_native_backend.start(sandbox->native, err);
}

/* What console 4 carries (guest/uml_init.c documents it): the take, whose header says the
 * request's caps and how many bytes follow it, the execution (the loader's, or an exec entry's
 * init's), and the program's stdin. */
static int make_input(struct sbx_sandbox *sandbox, const struct sbx_spec *request,
                      struct sbx_error *err)
{
        size_t files = 0;
        for (size_t i = 0; i < request->n_files; i++)
                files += request->files[i].size;
        struct sbx_buffer execution;
        sbx_buffer_init(&execution, (4u << 20) + files);
        if (sbx_agent_encode_execution(request, &execution, err) < 0) {
                sbx_buffer_free(&execution);
                return sbx_error_prefix(err, "acquire");
        }
        _cleanup_free_ char *take = NULL;
        size_t take_size = 0;
        if (job_add(&take, &take_size, err, "sandboxd-uml-take 1") < 0 ||
            job_add_caps(&take, &take_size, &request->limits, err) < 0 ||
            job_add(&take, &take_size, err, "input %zu", execution.len + request->stdin_size) < 0) {
                sbx_buffer_free(&execution);
                return -1;
        }
        uint8_t prefix[4];
        for (int i = 0; i < 4; i++)
                prefix[i] = (uint8_t)(take_size >> (8 * i));
        sbx_buffer_init(&sandbox->input,
                        sizeof(prefix) + take_size + execution.len + request->stdin_size);
        int rc = sbx_buffer_append(&sandbox->input, prefix, sizeof(prefix));
        rc = rc < 0 ? rc : sbx_buffer_append(&sandbox->input, take, take_size);
        rc = rc < 0 ? rc : sbx_buffer_append(&sandbox->input, execution.data, execution.len);
        if (rc == 0 && request->stdin_size > 0)
                rc = sbx_buffer_append(&sandbox->input, request->stdin_data, request->stdin_size);
        sbx_buffer_free(&execution);
        return rc < 0 ? sbx_error_set(err, ENOMEM, "acquire: the guest's input") : 0;
}

static int uml_acquire(struct sbx_sandbox *sandbox, const struct sbx_spec *request,
                       struct sbx_error *err)
{
        if (!sandbox->pool || sandbox->report_fd >= 0)
                return sbx_error_set(err, EINVAL, "acquire: not a started pool sandbox");
        for (size_t i = 0; i < request->n_files; i++)
                if (request->files[i].read_only)
                        return sbx_error_set(err, EOPNOTSUPP,
                                             "the uml backend has no read-only files yet");
        /* The guest's RAM and scratch were sized at its boot (execution.c sends only requests
         * that fit). */
        const struct sbx_limits *limits = &request->limits;
        if (limits->memory_bytes == 0 || limits->memory_bytes > sandbox->guest_memory_bytes ||
            limits->disk_bytes != sandbox->guest_disk_bytes)
                return sbx_error_set(err, EINVAL,
                                     "acquire: the request's memory or disk does not fit the "
                                     "warm guest's");
        sandbox->spec = request;
        if (make_input(sandbox, request, err) < 0)
                return -1;
        struct sbx_limits host = kernel_limits(request);
        host.memory_bytes = sandbox->kernel.limits.memory_bytes;
        host.disk_bytes = sandbox->kernel.limits.disk_bytes;
        host.wall_ms = limits->wall_ms + UML_REPORT_WALL_MS;
        sandbox->kernel.limits = host;
        sandbox->kernel.stdin_data = sandbox->input.data;
        sandbox->kernel.stdin_size = sandbox->input.len;
        sandbox->kernel.cancel_fd = request->cancel_fd;
        sandbox->kernel.on_output = request->on_output;
        sandbox->kernel.output_ctx = request->output_ctx;
        return sbx_native_take(sandbox->native, &sandbox->kernel, &sandbox->report_fd, err);
}

/* Reads "key=value" of the report line into *value; false when it is not there. */
static bool report_value(const char *line, const char *key, uint64_t *value)
{
        size_t len = strlen(key);
        for (const char *at = strstr(line, key); at != NULL; at = strstr(at + 1, key))
                if ((at == line || at[-1] == ' ') && at[len] == '=') {
                        char *end;
                        errno = 0;
                        unsigned long long parsed = strtoull(at + len + 1, &end, 10);
                        if (errno != 0 || (*end != ' ' && *end != '\n' && *end != '\0'))
                                return false;
                        *value = parsed;
                        return true;
                }
        return false;
}

/* What the guest wrote on its console 3 after its "R": once, as the kernel is gone. A socket
 * whose other end is gone reads its end of file; nothing blocks. */
static ssize_t read_console3(struct sbx_sandbox *sandbox, char *text, size_t size)
{
        if (!sandbox->pool)
                return pread(sandbox->report_fd, text, size, 0);
        size_t got = 0;
        while (got < size) {
                ssize_t n = recv(sandbox->report_fd, text + got, size - got, MSG_DONTWAIT);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 && errno == EAGAIN)
                        break;
                if (n < 0)
                        return -1;
                if (n == 0)
                        break;
                got += (size_t)n;
        }
        return (ssize_t)got;
}

/* The guest's report (guest/uml_init.c), or why there is none, into err. */
static int read_guest_report(struct sbx_sandbox *sandbox, struct sbx_error *err)
{
        char text[1024];
        ssize_t n = sandbox->report_fd >= 0 ? read_console3(sandbox, text, sizeof(text) - 1) : 0;
        if (n < 0)
                return sbx_error_set(err, errno, "uml: read the guest's report");
        text[n] = '\0';
        const char *failed = strstr(text, "sandboxd-uml-failed ");
        if (failed != NULL)
                return sbx_error_set(err, EPROTO, "uml: the guest's init failed: %.*s",
                                     (int)strcspn(failed + 20, "\n"), failed + 20);
        const char *line = strstr(text, "sandboxd-uml-report 1 ");
        if (line == NULL)
                return sbx_error_set(err, EPROTO, "uml: the guest kernel ended without a report");
        struct sbx_run *report = &sandbox->report;
        struct sbx_evidence *guest = &sandbox->guest;
        uint64_t exited = 0, code = 0, signal = 0, wall_timeout = 0;
        bool whole = report_value(line, "exited", &exited) && report_value(line, "code", &code) &&
                     report_value(line, "signal", &signal) &&
                     report_value(line, "wall_timeout", &wall_timeout) &&
                     report_value(line, "thrash_kills", &sandbox->thrash_kills) &&
                     report_value(line, "wall_us", &report->wall_us) &&
                     report_value(line, "disk_used_bytes", &report->disk_used_bytes) &&
                     report_value(line, "disk_total_bytes", &report->disk_total_bytes) &&
                     report_value(line, "inodes_free", &report->inodes_free);
#define SBX_EVIDENCE_READ(member, json)                                                            \
        whole = whole && report_value(line, #member, &guest->member);
        SBX_EVIDENCE(SBX_EVIDENCE_READ)
#undef SBX_EVIDENCE_READ
        if (!whole || code > 255 || signal >= 65)
                return sbx_error_set(err, EPROTO, "uml: the guest's report is malformed");
        report->exited = exited != 0;
        report->exit_code = report->exited ? (int)code : -1;
        report->signal = (int)signal;
        report->wall_timeout = wall_timeout != 0;
        report->disk_known = true;
        sandbox->reported = true;
        return 0;
}

static int uml_wait(struct sbx_sandbox *sandbox, struct sbx_run *run, struct sbx_error *err)
{
        int rc = sbx_native_backend.wait(sandbox->native, run, err);
        if (rc < 0)
                return rc;
        struct sbx_error why = {0};
        if (read_guest_report(sandbox, &why) < 0) {
                /* The host ended the kernel (its deadline, an output cap, a cancel, its memory
                 * cap): the host's account stands, and its evidence says which. Otherwise the
                 * guest died or said nothing: sandboxd's failure, not the program's end. */
                struct sbx_evidence host = {0};
                struct sbx_error unread = {0};
                if (run->wall_timeout || run->output_limit || run->canceled ||
                    (sbx_native_backend.read_evidence(sandbox->native, &host, &unread) == 0 &&
                     host.oom_kills > 0))
                        return 0;
                *err = why;
                return -1;
        }
        const struct sbx_run *report = &sandbox->report;
        run->exited = report->exited;
        run->exit_code = report->exit_code;
        run->signal = report->signal;
        run->wall_timeout = run->wall_timeout || report->wall_timeout;
        run->wall_us = report->wall_us;
        run->disk_known = true;
        run->disk_used_bytes = report->disk_used_bytes;
        run->disk_total_bytes = report->disk_total_bytes;
        run->inodes_free = report->inodes_free;
        return 0;
}

static int uml_kill(struct sbx_sandbox *sandbox, struct sbx_error *err)
{
        return sbx_native_backend.kill(sandbox->native, err);
}

static int uml_read_evidence(struct sbx_sandbox *sandbox, struct sbx_evidence *evidence,
                             struct sbx_error *err)
{
        if (sbx_native_backend.read_evidence(sandbox->native, evidence, err) < 0)
                return -1;
        if (!sandbox->reported)
                return 0;
        const struct sbx_evidence *guest = &sandbox->guest;
        /* The guest's OOM killer's, its init's thrash guard's (the OOM kill the kernel would not
         * make: uml_init.c), and the host's around the whole kernel. */
        evidence->oom_kills += guest->oom_kills + sandbox->thrash_kills;
        evidence->memory_max_events += guest->memory_max_events;
        evidence->pids_max_events += guest->pids_max_events;
        evidence->memory_peak_bytes = guest->memory_peak_bytes;
        evidence->pids_peak = guest->pids_peak;
        return 0;
}

static void uml_read_guest_evidence(struct sbx_sandbox *sandbox, struct sbx_guest_evidence *guest)
{
        if (!sandbox->reported)
                return;
        *guest = (struct sbx_guest_evidence){
                .known = true, .counters = sandbox->guest, .thrash_kills = sandbox->thrash_kills};
}

/* Its sandboxes are the native backend's: so are their leftovers. */
static int uml_reconcile(struct sbx_error *err)
{
        return sbx_native_backend.reconcile(err);
}

const struct sbx_backend sbx_uml_backend = {
        .name = "uml",
        .create = uml_create,
        .start = uml_start,
        .acquire = uml_acquire,
        .wait = uml_wait,
        .kill = uml_kill,
        .read_evidence = uml_read_evidence,
        .read_guest_evidence = uml_read_guest_evidence,
        .destroy = uml_destroy,
        .reconcile = uml_reconcile,
};
