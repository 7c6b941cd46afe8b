/* Fill /dev/shm with 1 MiB files until a write fails or argv[1] MiB are written. Reports the
 * failing write's errno (expected ENOSPC at the tmpfs bound) and the bytes written. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
        long want = (argc > 1 ? atol(argv[1]) : 48) << 20;
        static char chunk[1 << 20];
        memset(chunk, 0xa5, sizeof chunk);
        signal(SIGXFSZ, SIG_IGN); /* see EFBIG instead of dying, should the rlimit come first */
        long written = 0;
        for (int i = 0; written < want; i++) {
                char path[64];
                snprintf(path, sizeof path, "/dev/shm/fill-%d", i);
                int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
                if (fd < 0) {
                        printf("{\"op\":\"fill\",\"ret\":-1,\"errno\":\"%s\",\"bytes\":%ld}\n",
                               strerrorname_np(errno), written);
                        return 0;
                }
                size_t done = 0;
                while (done < sizeof chunk) {
                        ssize_t n = write(fd, chunk + done, sizeof chunk - done);
                        if (n < 0) {
                                printf("{\"op\":\"fill\",\"ret\":-1,\"errno\":\"%s\",\"bytes\":%ld}"
                                       "\n",
                                       strerrorname_np(errno), written);
                                return 0;
                        }
                        done += (size_t)n;
                        written += n;
                }
                close(fd);
        }
        printf("{\"op\":\"fill\",\"ret\":0,\"errno\":null,\"bytes\":%ld}\n", written);
        return 0;
}
