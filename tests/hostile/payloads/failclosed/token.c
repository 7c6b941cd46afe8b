/* Hostile payload (failclosed): run with one setup step forced to fail (--test-fail-step STEP; one
 * declaration per step). If it runs at all, the sandbox started user code although that step
 * failed: a half-isolated execution. It prints the run token (argument 1) to stdout and stderr,
 * leaves it in /tmp and the workspace, and forks a child that outlives it; the harness requires
 * status internal_error naming the step, the token absent from the output, and nothing of the run
 * left on the host. The control is the same run without the forced failure: the token appears. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

int main(int argc, char **argv)
{
        if (argc < 2)
                return 2;
        printf("%s\n", argv[1]);
        fflush(stdout);
        fprintf(stderr, "%s\n", argv[1]);
        static const char *const paths[] = {"/tmp/failclosed-token", "failclosed-token"};
        for (int i = 0; i < 2; i++) {
                FILE *f = fopen(paths[i], "w");
                if (f != NULL) {
                        fprintf(f, "%s\n", argv[1]);
                        fclose(f);
                }
        }
        if (fork() == 0) {
                setsid();
                int devnull = open("/dev/null", O_RDWR);
                for (int fd = 0; fd < 3 && devnull >= 0; fd++)
                        dup2(devnull, fd);
                execlp("sleep", "sleep", "30", (char *)NULL);
                _exit(127);
        }
        return 0;
}
