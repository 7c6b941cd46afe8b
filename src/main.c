/* sandboxd: run untrusted code in kernel-enforced sandboxes.
 *
 *   sandboxd run [options] (FILE | -c CODE) [-- ARGS...]   run once, no server
 *   sandboxd serve [--config FILE]                          the HTTP service
 *   sandboxd session < JSON-LINES                           one session, no server
 *   sandboxd token [TENANT]                                 a new API token
 *   sandboxd mcp                                            the MCP server on stdio
 *   sandboxd version
 *
 * main() prepares the process (stdio, signals, subreaper) and dispatches; everything else is a
 * library call that returns errors as values. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "cli.h"
#include "util/log.h"

static void usage(FILE *out)
{
        fprintf(out, "usage: sandboxd run [options] (FILE | -c CODE) [-- ARGS...]\n"
                     "       sandboxd serve [--config FILE]\n"
                     "       sandboxd session < JSON-LINES\n"
                     "       sandboxd token [TENANT]\n"
                     "       sandboxd mcp   (SANDBOXD_URL, SANDBOXD_TOKEN)\n"
                     "       sandboxd store migrate --from sqlite:PATH --to postgresql://... "
                     "[--node NAME]\n"
                     "       sandboxd version\n"
                     "Run `sandboxd run --help` for the options.\n");
}

/* Makes sure fds 0, 1 and 2 are open, so that no pipe or cgroup fd opened later gets one of
 * those numbers and is then clobbered by a dup2 onto stdio. */
static int ensure_stdio(void)
{
        for (int fd = 0; fd < 3; fd++) {
                if (fcntl(fd, F_GETFD) >= 0)
                        continue;
                int null = open("/dev/null", O_RDWR);
                if (null < 0)
                        return -1;
                if (null != fd) {
                        dup2(null, fd);
                        close(null);
                }
        }
        return 0;
}

int main(int argc, char **argv)
{
        if (ensure_stdio() < 0)
                return CLI_EXIT_SOFTWARE;
        /* A service says where it listens and when it stops; a command run stays quiet. */
        sbx_log_init(argc >= 2 && strcmp(argv[1], "serve") == 0 ? SBX_LOG_INFO : SBX_LOG_WARN);
        /* A sandbox that closes its end of a pipe must not kill the supervisor writing to it;
         * write() reports EPIPE instead. */
        signal(SIGPIPE, SIG_IGN);
        /* Anything re-parented while sandboxes run comes to sandboxd, never to the machine's
         * pid 1 (which reaps slowly here, MACHINE.md); each sandbox's init reaps its own. */
        prctl(PR_SET_CHILD_SUBREAPER, 1);

        if (argc < 2) {
                usage(stderr);
                return CLI_EXIT_USAGE;
        }
        if (strcmp(argv[1], "run") == 0)
                return cli_run(argc - 1, argv + 1);
        if (strcmp(argv[1], "serve") == 0)
                return cli_serve(argc - 1, argv + 1);
        if (strcmp(argv[1], "session") == 0)
                return cli_session(argc - 1, argv + 1);
        if (strcmp(argv[1], "token") == 0)
                return cli_token(argc - 1, argv + 1);
        if (strcmp(argv[1], "mcp") == 0)
                return cli_mcp(argc - 1, argv + 1);
        if (strcmp(argv[1], "store") == 0)
                return cli_store(argc - 1, argv + 1);
        if (strcmp(argv[1], "version") == 0 || strcmp(argv[1], "--version") == 0) {
                printf("sandboxd %s\n", SANDBOXD_VERSION);
                return 0;
        }
        if (strcmp(argv[1], "help") == 0 || strcmp(argv[1], "--help") == 0 ||
            strcmp(argv[1], "-h") == 0) {
                usage(stdout);
                return 0;
        }
        fprintf(stderr, "sandboxd: unknown command '%s'\n", argv[1]);
        usage(stderr);
        return CLI_EXIT_USAGE;
}
