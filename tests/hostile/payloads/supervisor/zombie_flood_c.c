/* Zombie flood: fork children that exit at once and are never reaped, until fork fails; then
 * block forever. The zombies fill pids.max; the wall kill must still end the run and reap all. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int main(void)
{
        int zombies = 0, err = 0;
        for (int i = 0; i < 100000; i++) {
                pid_t pid = fork();
                if (pid == 0)
                        _exit(0);
                if (pid < 0) {
                        err = errno;
                        break;
                }
                zombies++;
        }
        printf("{\"op\":\"fork\",\"ret\":-1,\"errno\":\"%s\",\"zombies\":%d}\n",
               err ? strerrorname_np(err) : "NONE", zombies);
        fflush(stdout);
        for (;;)
                pause();
}
