/* Daemonize: fork, setsid, fork again, close stdio, chdir /, and live on (sleep) after the
 * program's main process has exited. Nothing of it may survive the run. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

int main(void)
{
        pid_t first = fork();
        if (first == 0) {
                setsid();
                signal(SIGHUP, SIG_IGN);
                if (fork() != 0)
                        _exit(0);
                chdir("/");
                int null = open("/dev/null", O_RDWR);
                dup2(null, 0);
                dup2(null, 1);
                dup2(null, 2);
                for (;;)
                        sleep(3600);
        }
        int status;
        waitpid(first, &status, 0);
        printf("{\"op\":\"daemonize\",\"ret\":0,\"errno\":null}\n");
        return 0;
}
