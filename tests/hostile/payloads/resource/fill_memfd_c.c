/* Grow a memfd (not on any size-bounded tmpfs: only RLIMIT_FSIZE and the memory cgroup bound it)
 * with 1 MiB writes until one fails or argv[1] MiB are written. SIGXFSZ is ignored so the bound
 * shows as EFBIG. Reports the errno and the size reached. */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int main(int argc, char **argv)
{
        long want = (argc > 1 ? atol(argv[1]) : 48) << 20;
        static char chunk[1 << 20];
        memset(chunk, 0xa5, sizeof chunk);
        signal(SIGXFSZ, SIG_IGN);
        int fd = memfd_create("hog", MFD_CLOEXEC);
        if (fd < 0) {
                printf("{\"op\":\"memfd_create\",\"ret\":-1,\"errno\":\"%s\"}\n",
                       strerrorname_np(errno));
                return 0;
        }
        long written = 0;
        while (written < want) {
                ssize_t n = write(fd, chunk, sizeof chunk);
                if (n < 0) {
                        printf("{\"op\":\"fill\",\"ret\":-1,\"errno\":\"%s\",\"bytes\":%ld}\n",
                               strerrorname_np(errno), written);
                        return 0;
                }
                written += n;
        }
        printf("{\"op\":\"fill\",\"ret\":0,\"errno\":null,\"bytes\":%ld}\n", written);
        return 0;
}
