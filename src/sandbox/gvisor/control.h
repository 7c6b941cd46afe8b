/* runsc's control server, asked by the gVisor backend for the one thing it needs early: the
 * program's exit status. runsc run creates the server's socket (an abstract Unix socket named for
 * the sandbox's id, in the network namespace runsc runs in: the engine's) and hands it to the
 * sentry, which answers urpc calls there: JSON objects on a stream socket, one call and then its
 * result, from root or runsc's own uid only.
 *
 * containerManager.Wait answers once the container's init has exited and released what it held,
 * with its wait status, about 20 ms before runsc run exits: runsc first waits for the sentry to
 * stop and then removes the sandbox. containerManager.WaitPID answers once one process of the
 * container has exited; a pool entry's is its loader's, sooner than init's exit by the ~4 ms init
 * takes to notice, and by the ~7 ms the last process of the container takes to exit when it
 * unmounts the container's filesystems. The status is the sentry's, the program's own kernel:
 * nothing the program writes can forge it, as nothing it writes can forge runsc's exit status.
 *
 * This is runsc's internal protocol (pkg/urpc, runsc/boot/controller.go in gVisor 2022-12): a
 * release that changes it fails the call or its answer, and the caller then waits for runsc's
 * exit instead. */
#pragma once

#include <stdbool.h>
#include <sys/types.h>

/* Connects to the control server of the sandbox with id and sends the Wait call for its root
 * container (of the same id): for its init, or with pid > 0 for the process of that pid in the
 * container's pid namespace (WaitPID, which fails at once when there is none). is_server(pid, ctx)
 * must accept the listening process (the sentry), by the credentials the kernel gives for it: an
 * abstract socket's name has no owner, and anyone on the host could have bound a name runsc does
 * not use. Returns the connection (readable once the answer is there, or at end of file when the
 * sentry is gone without one), or -1 with errno (EPERM: a server is_server refused). */
int gvisor_control_send_wait(const char *id, pid_t pid, bool (*is_server)(pid_t pid, void *ctx),
                             void *ctx);

/* Reads the Wait call's answer from fd (blocking, at most timeout_ms). Returns 0 with the
 * process's wait status in *status, or -1 when there is none (end of file, an error
 * answer, one that does not parse, a timeout). */
int gvisor_control_read_wait(int fd, int timeout_ms, int *status);
