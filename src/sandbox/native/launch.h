/* Starting the sandboxed process: clone3 into fresh namespaces, the parent/child handshake, and
 * the child's setup list ending in execve. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "sandbox/native/cgroup.h"
#include "sandbox/sandbox.h"
#include "util/error.h"

/* What the sandbox's init (pid 1 of its pid namespace) reports when the program has exited. */
struct launch_report {
        int32_t wait_status; /* of the program (pid 2), as from waitpid() */
        int32_t disk_known;  /* 1 when the statfs fields below are valid */
        uint64_t disk_total_bytes;
        uint64_t disk_free_bytes;
        uint64_t inodes_free;
};

/* The supervisor's handles on a started sandbox. */
struct launch_process {
        pid_t pid;     /* the sandbox's init, in the supervisor's pid namespace */
        int pidfd;     /* of init: readable when it has exited, i.e. when every process is gone */
        int stdin_fd;  /* write end of the program's stdin, non-blocking */
        int stdout_fd; /* read ends of the program's stdout and stderr */
        int stderr_fd;
        int report_fd;   /* read end of init's report (struct launch_report) */
        int agent_fd;    /* pool mode: write end of the agent channel (the program's fd 3) */
        int lifeline_fd; /* write end of the sync pipe, held open while the sandbox lives: init
                          * sees POLLHUP on its end when the supervisor is gone */
        int error_fd;    /* exec mode: the setup pipe until the program exec'd (launch_exec) */
        /* Launched by a template: init is the engine's child, not the supervisor's. Its end is
         * its pidfd becoming readable (launch_reap), and it watches the lifeline for ours. */
        bool foreign_parent;
};

/* Clones the sandbox's init (or has spec->template_fd's template clone it: template.h) into new
 * user, pid, mount, network, IPC and UTS namespaces and into the cgroup (CLONE_INTO_CGROUP where
 * there is a unified hierarchy, born in the v1 ones), maps its root to host_id and lets it run the
 * setup list; sets the cgroup's limits from spec meanwhile, before init may start the program.
 * Returns 0 once the program has exec'd. On failure the program never ran: err names the setup
 * step, and *proc holds whatever must still be killed, reaped and closed (see launch_release). */
int launch_start(const struct sbx_spec *spec, struct cgroup *cgroup, unsigned host_id,
                 struct launch_process *proc, struct sbx_error *err);

/* Exec mode: sends request's execution to init on the agent channel and waits until the program
 * exec'd (0) or a setup step failed (-1, err names it). */
int launch_exec(struct launch_process *proc, const struct sbx_spec *request, struct sbx_error *err);

/* Reaps init (blocking until it exits: kill the cgroup first) if not yet reaped and returns its
 * wait status through *status. */
int launch_reap(struct launch_process *proc, int *status, struct sbx_error *err);

/* Sends SIGKILL to init (and with it its whole pid namespace) without waiting; an init that is
 * already dead is not an error. */
int launch_kill(struct launch_process *proc, struct sbx_error *err);

/* Closes every fd of proc; kills and reaps init if it is still there. Safe on a zeroed or
 * half-filled proc (fds -1, pid 0). */
void launch_release(struct launch_process *proc);

/* Sets every field to "nothing held". */
void launch_process_init(struct launch_process *proc);
