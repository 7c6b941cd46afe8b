/* Hostile payload (residue), tenant A: plants the run token (argument 1) in every IPC object a
 * later tenant could open by name or key: a SysV shared memory segment (16 MiB, filled, so it is
 * memory charged to this run), a SysV message queue holding the token, a SysV semaphore set
 * to 4242, all with key argument 2; a POSIX message queue named argument 3 holding the token
 * (in the sandbox only the empty queue: Landlock refuses to open it, see below); a
 * POSIX shared memory object "/<token>"; and touches 32 MiB of anonymous memory so this run's
 * memory peak is high. Everything is left in place on exit. Tenant B (search_ipc.c) looks for it.
 * Exit status 0 only when every plant worked. One JSON line per plant. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <mqueue.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/msg.h>
#include <sys/sem.h>
#include <sys/shm.h>
#include <unistd.h>

static int failed;

static void report(const char *op, int ok)
{
        const char *name = ok ? "OK" : strerrorname_np(errno);
        printf("{\"op\": \"%s\", \"ret\": %d, \"errno\": \"%s\"}\n", op, ok ? 0 : -1,
               name != NULL ? name : "UNKNOWN");
        fflush(stdout);
        if (!ok)
                failed = 1;
}

int main(int argc, char **argv)
{
        if (argc < 4)
                return 2;
        const char *token = argv[1];
        key_t key = (key_t)strtol(argv[2], NULL, 0);
        const char *mq_name = argv[3];
        size_t token_len = strlen(token) + 1;

        size_t shm_size = 16u << 20;
        int shm = shmget(key, shm_size, IPC_CREAT | IPC_EXCL | 0666);
        char *mem = shm >= 0 ? shmat(shm, NULL, 0) : (void *)-1;
        if (mem != (void *)-1) {
                for (size_t off = 0; off + token_len <= shm_size; off += 4096)
                        memcpy(mem + off, token, token_len);
                shmdt(mem);
        }
        report("plant_sysv_shm", mem != (void *)-1);

        struct {
                long mtype;
                char text[128];
        } msg = {.mtype = 1};
        snprintf(msg.text, sizeof(msg.text), "%s", token);
        int q = msgget(key, IPC_CREAT | IPC_EXCL | 0666);
        report("plant_sysv_msg", q >= 0 && msgsnd(q, &msg, strlen(msg.text) + 1, 0) == 0);

        int sem = semget(key, 1, IPC_CREAT | IPC_EXCL | 0666);
        report("plant_sysv_sem", sem >= 0 && semctl(sem, 0, SETVAL, 4242) == 0);

        /* Under Landlock, mq_open creates the queue and then refuses to open it (EACCES: the
         * mqueue filesystem is beneath no allowed path); the named, empty queue still exists in
         * this IPC namespace, and that name is the residue B looks for. */
        struct mq_attr attr = {.mq_maxmsg = 4, .mq_msgsize = 128};
        mqd_t mq = mq_open(mq_name, O_CREAT | O_EXCL | O_WRONLY, 0666, &attr);
        int mq_ok = mq != (mqd_t)-1 && mq_send(mq, token, token_len, 1) == 0;
        if (mq == (mqd_t)-1 && errno == EACCES) {
                mq_ok = mq_open(mq_name, O_RDONLY) == (mqd_t)-1 && errno == EACCES; /* exists */
                errno = EACCES;
        }
        /* gVisor (2022-12) makes the queue but has no mq_timedsend (ENOSYS): the named, empty
         * queue is the residue, as under Landlock. */
        if (mq != (mqd_t)-1 && !mq_ok && errno == ENOSYS)
                mq_ok = 1;
        /* RLIMIT_MSGQUEUE 0 (the sandbox's): no queue can be made, so there is no such residue
         * to leave; B's self-test reports the same refusal. */
        if (mq == (mqd_t)-1 && errno == EMFILE)
                mq_ok = 1;
        report("plant_mqueue", mq_ok);

        char shm_name[160];
        snprintf(shm_name, sizeof(shm_name), "/%s", token);
        int fd = shm_open(shm_name, O_CREAT | O_EXCL | O_RDWR, 0666);
        report("plant_posix_shm", fd >= 0 && write(fd, token, token_len) == (ssize_t)token_len);

        /* 32 MiB touched: this run's memory peak, which tenant B's must not include. */
        size_t anon_size = 32u << 20;
        char *anon =
                mmap(NULL, anon_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (anon != MAP_FAILED)
                for (size_t off = 0; off < anon_size; off += 4096)
                        anon[off] = 1;
        report("touch_memory", anon != MAP_FAILED);
        return failed;
}
