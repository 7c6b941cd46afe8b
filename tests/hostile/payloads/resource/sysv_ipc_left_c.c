/* Create a SysV shared memory segment, semaphore set and message queue under the key argv[1]
 * (and one IPC_PRIVATE segment), fill them, and exit without removing any. The host must never
 * see them: they belong to the sandbox's IPC namespace. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/msg.h>
#include <sys/sem.h>
#include <sys/shm.h>

static void report(const char *op, long ret)
{
        if (ret < 0)
                printf("{\"op\":\"%s\",\"ret\":-1,\"errno\":\"%s\"}\n", op, strerrorname_np(errno));
        else
                printf("{\"op\":\"%s\",\"ret\":%ld,\"errno\":null}\n", op, ret);
}

int main(int argc, char **argv)
{
        key_t key = argc > 1 ? (key_t)strtol(argv[1], NULL, 0) : 0x5bd;
        int shm = shmget(key, 1 << 20, IPC_CREAT | 0666);
        report("shmget", shm);
        if (shm >= 0) {
                char *p = shmat(shm, NULL, 0);
                if (p != (void *)-1) {
                        memset(p, 'R', 1 << 20);
                        shmdt(p);
                }
        }
        report("shmget_private", shmget(IPC_PRIVATE, 1 << 20, IPC_CREAT | 0666));
        report("semget", semget(key, 4, IPC_CREAT | 0666));
        int msq = msgget(key, IPC_CREAT | 0666);
        report("msgget", msq);
        if (msq >= 0) {
                struct {
                        long type;
                        char text[64];
                } msg = {1, "residue"};
                report("msgsnd", msgsnd(msq, &msg, sizeof msg.text, IPC_NOWAIT));
        }
        return 0;
}
