/* Fork bomb: every process forks until fork fails, bounded by a shared count (argv[1], default
 * 400) so that a lifted pids limit lets it finish. Reports one line: the first fork failure
 * (expected: EAGAIN from pids.max) or success once the bound is reached. */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

struct shared {
        atomic_int created;
        atomic_int failures;
        atomic_int first_errno;
};

static void sleep_ms(long ms)
{
        struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
}

int main(int argc, char **argv)
{
        int cap = argc > 1 ? atoi(argv[1]) : 400;
        struct shared *s =
                mmap(NULL, sizeof *s, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (s == MAP_FAILED)
                return 2;
        pid_t top = getpid();
        for (;;) {
                if (atomic_load(&s->created) >= cap || atomic_load(&s->failures) > 0)
                        break;
                pid_t pid = fork();
                if (pid == 0)
                        continue; /* the child is a bomb too */
                if (pid < 0) {
                        int expected = 0;
                        atomic_compare_exchange_strong(&s->first_errno, &expected, errno);
                        atomic_fetch_add(&s->failures, 1);
                        break;
                }
                atomic_fetch_add(&s->created, 1);
        }
        if (getpid() != top) {
                for (;;)
                        pause(); /* hold the slot */
        }
        /* the top waits until the bomb stops growing (failure seen, or the bound reached) */
        for (int i = 0; i < 300; i++) {
                if (atomic_load(&s->created) >= cap || atomic_load(&s->failures) > 0)
                        break;
                sleep_ms(10);
        }
        int err = atomic_load(&s->first_errno);
        if (atomic_load(&s->failures) > 0)
                printf("{\"op\":\"fork\",\"ret\":-1,\"errno\":\"%s\",\"created\":%d}\n",
                       strerrorname_np(err), atomic_load(&s->created));
        else
                printf("{\"op\":\"fork\",\"ret\":0,\"errno\":null,\"created\":%d}\n",
                       atomic_load(&s->created));
        fflush(stdout);
        return 0;
}
