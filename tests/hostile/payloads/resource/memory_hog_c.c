/* Anonymous memory hog: malloc and touch 1 MiB blocks up to argv[1] MiB. Under the memory cap the
 * cgroup's OOM killer must SIGKILL it (no swap to hide in); it reports only when it got it all. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
        long want = argc > 1 ? atol(argv[1]) : 256;
        long got = 0;
        for (; got < want; got++) {
                char *block = malloc(1 << 20);
                if (block == NULL) {
                        printf("{\"op\":\"alloc\",\"ret\":-1,\"errno\":\"%s\",\"mib\":%ld}\n",
                               strerrorname_np(errno), got);
                        return 0;
                }
                memset(block, 0xa5, 1 << 20);
        }
        printf("{\"op\":\"alloc\",\"ret\":0,\"errno\":null,\"mib\":%ld}\n", got);
        return 0;
}
