/* dup(1) until it fails or argv[1] descriptors exist; also try dup2 onto a number far above the
 * limit. Reports the errnos (expected EMFILE, and EBADF for dup2 beyond RLIMIT_NOFILE). */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
        int want = argc > 1 ? atoi(argv[1]) : 2000;
        int count = 0, highest = -1, err = 0;
        while (count < want) {
                int fd = dup(1);
                if (fd < 0) {
                        err = errno;
                        break;
                }
                count++;
                if (fd > highest)
                        highest = fd;
        }
        if (err)
                printf("{\"op\":\"dup\",\"ret\":-1,\"errno\":\"%s\",\"count\":%d,\"highest\":%d}\n",
                       strerrorname_np(err), count, highest);
        else
                printf("{\"op\":\"dup\",\"ret\":0,\"errno\":null,\"count\":%d,\"highest\":%d}\n",
                       count, highest);
        int target = argc > 2 ? atoi(argv[2]) : 3000;
        int r = dup2(1, target);
        printf("{\"op\":\"dup2_high\",\"ret\":%d,\"errno\":%s%s%s,\"target\":%d}\n", r,
               r < 0 ? "\"" : "", r < 0 ? strerrorname_np(errno) : "null", r < 0 ? "\"" : "",
               target);
        return 0;
}
