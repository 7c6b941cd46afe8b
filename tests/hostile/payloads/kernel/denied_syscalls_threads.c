/* Hostile payload (kernel): every system call the seccomp policy denies
 * (src/sandbox/native/seccomp_policy.c), called with bad arguments from five threads at once.
 *
 * The arguments are chosen so that an unfiltered kernel answers EFAULT, EBADF or EINVAL (or the
 * call is harmless, e.g. personality): only the filter answers with the policy's errno, so the
 * reported errno tells who refused. Each thread then reports its own seccomp mode, and the main
 * thread reports the mode of every task in /proc/self/task while all threads are alive.
 *
 * One JSON line per attempt: {"op": NAME, "thread": T, "ret": R, "errno": "EPERM"} ("OK" when the
 * call succeeded). Seccomp mode lines use op "seccomp_mode" and put the mode's name in "errno"
 * ("FILTER" for Seccomp: 2, "STRICT", "DISABLED", or "UNKNOWN") so that the declaration's errno
 * lists can check them. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/personality.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#define WORKER_THREADS 4
#define BAD            ((long)1) /* an unmapped user address: the kernel answers EFAULT when it reads it */
#define ALL            ((long)0xffffffffL)

struct attempt {
        const char *op;
        long nr;
        long a[6];
};

/* The seccomp policy, row by row (socket rows: a family from each refusal row). */
static const struct attempt attempts[] = {
        {"unshare", SYS_unshare, {CLONE_NEWUSER | 0x1}},
        {"setns", SYS_setns, {-1, CLONE_NEWUSER}},
        {"clone3", SYS_clone3, {0, 0}},
        {"clone_NEWUSER", SYS_clone, {CLONE_NEWUSER | CLONE_THREAD}},
        {"clone_NEWNS", SYS_clone, {CLONE_NEWNS | CLONE_THREAD}},
        {"clone_NEWPID", SYS_clone, {CLONE_NEWPID | CLONE_THREAD}},
        {"clone_NEWNET", SYS_clone, {CLONE_NEWNET | CLONE_THREAD}},
        {"clone_NEWIPC", SYS_clone, {CLONE_NEWIPC | CLONE_THREAD}},
        {"clone_NEWUTS", SYS_clone, {CLONE_NEWUTS | CLONE_THREAD}},
        {"clone_NEWCGROUP", SYS_clone, {CLONE_NEWCGROUP | CLONE_THREAD}},
        {"clone_NEWTIME", SYS_clone, {0x80 | CLONE_THREAD}},
        {"clone_NEWUSER_highbits", SYS_clone, {(long)(CLONE_NEWUSER | CLONE_THREAD) | (1L << 40)}},
        {"mount", SYS_mount, {BAD, BAD, BAD, 0, 0}},
        {"umount2", SYS_umount2, {BAD, ALL}},
        {"pivot_root", SYS_pivot_root, {BAD, BAD}},
        {"chroot", SYS_chroot, {BAD}},
        {"open_tree", SYS_open_tree, {-1, BAD, ALL}},
        {"move_mount", SYS_move_mount, {-1, BAD, -1, BAD, ALL}},
        {"fsopen", SYS_fsopen, {BAD, ALL}},
        {"fsconfig", SYS_fsconfig, {-1, ALL, 0, 0, 0}},
        {"fsmount", SYS_fsmount, {-1, ALL, 0}},
        {"fspick", SYS_fspick, {-1, BAD, ALL}},
        {"mount_setattr", SYS_mount_setattr, {-1, BAD, ALL, 0, 0}},
        {"open_by_handle_at", SYS_open_by_handle_at, {-1, BAD, 0}},
        {"name_to_handle_at", SYS_name_to_handle_at, {-1, BAD, BAD, BAD, ALL}},
        {"quotactl", SYS_quotactl, {ALL, BAD, 0, 0}},
        {"quotactl_fd", SYS_quotactl_fd, {-1, 0, 0, 0}},
        {"swapon", SYS_swapon, {BAD, 0}},
        {"swapoff", SYS_swapoff, {BAD}},
        {"acct", SYS_acct, {BAD}},
        {"fanotify_init", SYS_fanotify_init, {ALL, ALL}},
        {"io_uring_setup", SYS_io_uring_setup, {0, BAD}},
        {"io_uring_enter", SYS_io_uring_enter, {-1, 0, 0, 0, 0, 0}},
        {"io_uring_register", SYS_io_uring_register, {-1, 0, 0, 0}},
        {"bpf", SYS_bpf, {-1, BAD, 0}},
        {"perf_event_open", SYS_perf_event_open, {BAD, 0, -1, -1, 0}},
        {"userfaultfd", SYS_userfaultfd, {ALL}},
        {"keyctl", SYS_keyctl, {-1, 0, 0, 0, 0}},
        {"add_key", SYS_add_key, {BAD, BAD, BAD, 0, 0}},
        {"request_key", SYS_request_key, {BAD, BAD, BAD, 0}},
        {"lookup_dcookie", SYS_lookup_dcookie, {0, BAD, 0}},
        {"ptrace", SYS_ptrace, {ALL, -1, 0, 0}},
        {"process_vm_readv", SYS_process_vm_readv, {-1, BAD, 1, BAD, 1, 0}},
        {"process_vm_writev", SYS_process_vm_writev, {-1, BAD, 1, BAD, 1, 0}},
        {"pidfd_getfd", SYS_pidfd_getfd, {-1, -1, 0}},
        {"kcmp", SYS_kcmp, {0, 0, ALL, 0, 0}},
        {"settimeofday", SYS_settimeofday, {BAD, 0}},
        {"clock_settime", SYS_clock_settime, {ALL, BAD}},
        {"clock_adjtime", SYS_clock_adjtime, {ALL, BAD}},
        {"adjtimex", SYS_adjtimex, {BAD}},
        {"kexec_load", SYS_kexec_load, {0, ALL, BAD, ALL}},
        {"kexec_file_load", SYS_kexec_file_load, {-1, -1, 0, BAD, ALL}},
        {"init_module", SYS_init_module, {BAD, 0, BAD}},
        {"finit_module", SYS_finit_module, {-1, BAD, ALL}},
        {"delete_module", SYS_delete_module, {BAD, 0}},
        {"reboot", SYS_reboot, {0, 0, 0, 0}}, /* bad magic numbers: EINVAL at most */
        {"syslog", SYS_syslog, {ALL, 0, 0}},
        {"vhangup", SYS_vhangup, {0}},
        {"iopl", SYS_iopl, {99}},
        {"ioperm", SYS_ioperm, {ALL, 1, 1}},
        {"ioctl_TIOCSTI", SYS_ioctl, {-1, TIOCSTI, BAD}},
        {"ioctl_TIOCSTI_highbit", SYS_ioctl, {-1, (long)TIOCSTI | (1L << 32), BAD}},
        {"ioctl_TIOCLINUX", SYS_ioctl, {-1, TIOCLINUX, BAD}},
        {"ioctl_TIOCSETD", SYS_ioctl, {-1, TIOCSETD, BAD}},
        {"personality_LINUX32", SYS_personality, {PER_LINUX32}},
        {"personality_ADDR_NO_RANDOMIZE", SYS_personality, {ADDR_NO_RANDOMIZE}},
        {"personality_READ_IMPLIES_EXEC", SYS_personality, {READ_IMPLIES_EXEC}},
        {"personality_0xfffffffe", SYS_personality, {0xfffffffeL}},
        {"personality_highbits_LINUX32", SYS_personality, {(1L << 32) | PER_LINUX32}},
        {"socket_AF_UNSPEC", SYS_socket, {AF_UNSPEC, SOCK_DGRAM, 0}},
        {"socket_AF_AX25", SYS_socket, {AF_AX25, SOCK_DGRAM, 0}},
        {"socket_AF_IPX", SYS_socket, {AF_IPX, SOCK_DGRAM, 0}},
        {"socket_AF_APPLETALK", SYS_socket, {AF_APPLETALK, SOCK_DGRAM, 0}},
        {"socket_AF_NETROM", SYS_socket, {AF_NETROM, SOCK_DGRAM, 0}},
        {"socket_AF_BRIDGE", SYS_socket, {AF_BRIDGE, SOCK_DGRAM, 0}},
        {"socket_AF_ATMPVC", SYS_socket, {AF_ATMPVC, SOCK_DGRAM, 0}},
        {"socket_AF_X25", SYS_socket, {AF_X25, SOCK_SEQPACKET, 0}},
        {"socket_AF_NETLINK", SYS_socket, {AF_NETLINK, SOCK_RAW, 0}},
        {"socket_family_highbits_INET", SYS_socket, {(1L << 32) | AF_INET, SOCK_DGRAM, 0}},
        {"socket_SOCK_PACKET", SYS_socket, {AF_INET, SOCK_PACKET, 0}},
        {"socket_SOCK_RAW", SYS_socket, {AF_INET, SOCK_RAW, 1 /* ICMP */}},
        {"socketpair_AF_UNSPEC", SYS_socketpair, {AF_UNSPEC, SOCK_STREAM, 0, BAD}},
        {"socketpair_AF_NETLINK", SYS_socketpair, {AF_NETLINK, SOCK_RAW, 0, BAD}},
};
#define N_ATTEMPTS (sizeof(attempts) / sizeof(attempts[0]))

static pthread_mutex_t out_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_barrier_t calls_done, status_read;

static const char *errno_name(int e)
{
        const char *name = strerrorname_np(e);
        return name != NULL ? name : "UNKNOWN";
}

static void report(const char *op, int thread, long ret, const char *err, const char *extra)
{
        pthread_mutex_lock(&out_lock);
        printf("{\"op\": \"%s\", \"thread\": %d, \"ret\": %ld, \"errno\": \"%s\"%s}\n", op, thread,
               ret, err, extra != NULL ? extra : "");
        fflush(stdout);
        pthread_mutex_unlock(&out_lock);
}

/* "FILTER" for the Seccomp: line's value 2, etc., read from a /proc status file. */
static const char *seccomp_mode(const char *status_path)
{
        FILE *f = fopen(status_path, "re");
        if (f == NULL)
                return "UNKNOWN";
        char line[256];
        const char *mode = "UNKNOWN";
        while (fgets(line, sizeof(line), f) != NULL) {
                int value;
                if (sscanf(line, "Seccomp: %d", &value) == 1) {
                        mode = value == 2 ? "FILTER" : value == 1 ? "STRICT" : "DISABLED";
                        break;
                }
        }
        fclose(f);
        return mode;
}

static void call_everything(int thread)
{
        for (size_t i = 0; i < N_ATTEMPTS; i++) {
                const struct attempt *t = &attempts[i];
                errno = 0;
                long ret = syscall(t->nr, t->a[0], t->a[1], t->a[2], t->a[3], t->a[4], t->a[5]);
                int saved = errno;
                if (ret >= 0) {
                        /* Not refused. Undo what an unfiltered kernel did (control runs). */
                        if (t->nr == SYS_personality)
                                syscall(SYS_personality, 0L);
                        else if (t->nr == SYS_socket)
                                close((int)ret);
                }
                report(t->op, thread, ret, ret < 0 ? errno_name(saved) : "OK", NULL);
        }
        char extra[64];
        snprintf(extra, sizeof(extra), ", \"tid\": %ld", (long)gettid());
        report("seccomp_mode", thread, 0, seccomp_mode("/proc/thread-self/status"), extra);
}

static void *worker(void *arg)
{
        int thread = (int)(long)arg;
        call_everything(thread);
        pthread_barrier_wait(&calls_done);
        pthread_barrier_wait(&status_read); /* stay alive while main reads every task */
        return NULL;
}

int main(void)
{
        pthread_t threads[WORKER_THREADS];
        pthread_barrier_init(&calls_done, NULL, WORKER_THREADS + 1);
        pthread_barrier_init(&status_read, NULL, WORKER_THREADS + 1);
        int started = 0;
        for (long i = 0; i < WORKER_THREADS; i++) {
                int rc = pthread_create(&threads[i], NULL, worker, (void *)(i + 1));
                if (rc != 0) {
                        report("pthread_create", (int)i + 1, -1, errno_name(rc), NULL);
                        return 1;
                }
                started++;
        }
        call_everything(0);
        pthread_barrier_wait(&calls_done);

        /* Every task of the process, as the kernel lists them, while all are alive. */
        DIR *dir = opendir("/proc/self/task");
        int tasks = 0;
        if (dir != NULL) {
                struct dirent *entry;
                while ((entry = readdir(dir)) != NULL) {
                        if (entry->d_name[0] == '.')
                                continue;
                        char path[300], extra[300];
                        snprintf(path, sizeof(path), "/proc/self/task/%s/status", entry->d_name);
                        snprintf(extra, sizeof(extra), ", \"tid\": %s", entry->d_name);
                        report("task_seccomp_mode", -1, 0, seccomp_mode(path), extra);
                        tasks++;
                }
                closedir(dir);
        }
        char extra[64];
        snprintf(extra, sizeof(extra), ", \"tasks\": %d", tasks);
        /* All five callers must have been seen as tasks. */
        report("task_count", -1, tasks, tasks == started + 1 ? "OK" : "EMISMATCH", extra);
        pthread_barrier_wait(&status_read);
        for (int i = 0; i < started; i++)
                pthread_join(threads[i], NULL);
        return 0;
}
