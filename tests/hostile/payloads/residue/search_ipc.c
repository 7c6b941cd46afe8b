/* Hostile payload (residue), tenant B: runs right after tenant A (plant_ipc.c) and looks for A's
 * IPC objects by the same names: SysV shm / msg / sem with key argument 2, the POSIX message
 * queue argument 3, the POSIX shared memory object "/<token>" (argument 1), and counts every SysV
 * object this tenant can see (SHM_INFO, MSG_INFO, SEM_INFO). Each lookup must fail with ENOENT; an
 * object found is reported "FOUND" (and removed, so that the unsandboxed control leaves nothing
 * behind).
 *
 * Self-test first: B creates its own objects with key+1 and "<mq_name>-selftest" and must find
 * them with the same calls ("selftest" lines, FOUND), then removes them. One JSON line per
 * lookup: {"op": "lookup_sysv_shm", "ret": R, "errno": "ENOENT"|"FOUND"}. */
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

static void report(const char *op, int found, int err)
{
        const char *name = found ? "FOUND" : strerrorname_np(err);
        printf("{\"op\": \"%s\", \"ret\": %d, \"errno\": \"%s\"}\n", op, found ? 0 : -1,
               name != NULL ? name : "UNKNOWN");
        fflush(stdout);
}

/* Looks every object up and removes what it found. Reports under `op_prefix`. With mq_refused
 * set (no queue can be made here), the queue's report is that refusal instead of a lookup. */
static void look(const char *op_prefix, key_t key, const char *mq_name, const char *shm_name,
                 int mq_refused)
{
        char op[64];
        int id = shmget(key, 0, 0);
        snprintf(op, sizeof(op), "%s_sysv_shm", op_prefix);
        report(op, id >= 0, errno);
        if (id >= 0)
                shmctl(id, IPC_RMID, NULL);

        id = msgget(key, 0);
        snprintf(op, sizeof(op), "%s_sysv_msg", op_prefix);
        report(op, id >= 0, errno);
        if (id >= 0)
                msgctl(id, IPC_RMID, NULL);

        id = semget(key, 0, 0);
        snprintf(op, sizeof(op), "%s_sysv_sem", op_prefix);
        report(op, id >= 0, errno);
        if (id >= 0)
                semctl(id, 0, IPC_RMID);

        /* EACCES is "exists": Landlock refuses to open any queue (the mqueue filesystem is
         * beneath no allowed path), while a missing name is ENOENT before that check. */
        mqd_t mq = mq_refused ? (mqd_t)-1 : mq_open(mq_name, O_RDONLY);
        int mq_errno = mq_refused ? mq_refused : errno;
        snprintf(op, sizeof(op), "%s_mqueue", op_prefix);
        report(op, mq != (mqd_t)-1 || mq_errno == EACCES, mq_errno);
        if (mq != (mqd_t)-1)
                mq_close(mq);
        if (mq != (mqd_t)-1 || mq_errno == EACCES)
                mq_unlink(mq_name);

        int fd = shm_open(shm_name, O_RDONLY, 0);
        snprintf(op, sizeof(op), "%s_posix_shm", op_prefix);
        report(op, fd >= 0, errno);
        if (fd >= 0) {
                close(fd);
                shm_unlink(shm_name);
        }
}

/* Number of SysV objects of a kind in this IPC namespace, from the kernel's *_INFO counts
 * (/proc/sysvipc is not in the sandbox's /proc). */
static int count_sysv(const char *kind)
{
        if (strcmp(kind, "shm") == 0) {
                struct shm_info info;
                return shmctl(0, SHM_INFO, (struct shmid_ds *)&info) < 0 ? -1 : info.used_ids;
        }
        struct msginfo minfo;
        if (strcmp(kind, "msg") == 0)
                return msgctl(0, MSG_INFO, (struct msqid_ds *)&minfo) < 0 ? -1 : minfo.msgpool;
        struct seminfo sinfo;
        return semctl(0, 0, SEM_INFO, &sinfo) < 0 ? -1 : sinfo.semusz;
}

int main(int argc, char **argv)
{
        if (argc < 4)
                return 2;
        const char *token = argv[1];
        key_t key = (key_t)strtol(argv[2], NULL, 0);
        const char *mq_name = argv[3];
        char shm_name[160], self_mq[160], self_shm[160];
        snprintf(shm_name, sizeof(shm_name), "/%s", token);
        snprintf(self_mq, sizeof(self_mq), "%s-selftest", mq_name);
        snprintf(self_shm, sizeof(self_shm), "/%s-selftest", token);

        /* Tenant A's objects, before anything else could disturb the listing: before the
         * self-test's own too (gVisor's SHM_INFO still counts a segment removed a moment ago). */
        static const char *const kinds[] = {"shm", "msg", "sem"};
        for (int i = 0; i < 3; i++) {
                int n = count_sysv(kinds[i]);
                printf("{\"op\": \"sysvipc_objects\", \"kind\": \"%s\", \"ret\": %d, "
                       "\"errno\": \"%s\"}\n",
                       kinds[i], n,
                       n == 0  ? "ENOENT"
                       : n < 0 ? "UNREADABLE"
                               : "FOUND");
        }
        /* Self-test: the same lookups find objects that do exist. */
        key_t self_key = key + 1;
        int ok = shmget(self_key, 4096, IPC_CREAT | 0600) >= 0 &&
                 msgget(self_key, IPC_CREAT | 0600) >= 0 &&
                 semget(self_key, 1, IPC_CREAT | 0600) >= 0;
        struct mq_attr attr = {.mq_maxmsg = 1, .mq_msgsize = 16};
        mqd_t mq = mq_open(self_mq, O_CREAT | O_RDWR, 0600, &attr);
        /* EACCES under Landlock: created, not opened (see look). EMFILE: the sandbox's
         * RLIMIT_MSGQUEUE 0 lets no queue be made, and A could not leave one either. */
        int mq_errno = errno;
        int fd = shm_open(self_shm, O_CREAT | O_RDWR, 0600);
        if (!ok || (mq == (mqd_t)-1 && mq_errno != EACCES && mq_errno != EMFILE) || fd < 0)
                report("selftest_setup", 0, errno);
        if (mq != (mqd_t)-1)
                mq_close(mq);
        if (fd >= 0)
                close(fd);
        int mq_refused = mq == (mqd_t)-1 && mq_errno == EMFILE ? EMFILE : 0;
        look("selftest", self_key, self_mq, self_shm, mq_refused);

        look("lookup", key, mq_name, shm_name, 0);
        return 0;
}
