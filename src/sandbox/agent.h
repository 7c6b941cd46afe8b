/* The agent channel: how a sandbox started in pool mode receives its execution. On the other end
 * waits a warm-pool loader from guest/ (guest/python_loader.py documents the format from its
 * side), or, in exec mode (a generic pool entry), the sandbox's init itself:
 *
 *   u32 little-endian length of the header, the header, then each file's bytes in order
 *   header = NUL-separated fields: the count of argv entries and each of them (argv[0] is the
 *            interpreter, which a loader has running already, or the program to exec), the
 *            count of environment entries and each "NAME=value", the count of files and each
 *            file's path, size and flags ("x" executable, "r" read-only, both, or none), the
 *            program file's path (argv[1], or argv[0] when there is no argv[1]), then the
 *            count of limits and each (model/limits.h's rows, in their order), which an exec
 *            entry's program applies as a cold one does (a loader's came by prlimit).
 *            On a stdin channel the header ends with the rlimits the loader sets itself
 *            (native/rlimit.h's plan): their count, then each one's resource number, soft and
 *            hard value (RLIM_INFINITY as 18446744073709551615).
 *
 * A compile stage's artifact file (sbx_spec.artifact_fd) travels attached to the length prefix
 * (SCM_RIGHTS); exec mode's init gives it to the program as its fd 3.
 *
 * Plain fields, not JSON: the loader parses them with bytes.split, importing nothing (every
 * module a loader imports is paid by each pool entry). No field can hold a NUL: argv, env and
 * paths are validated before (engine/execution.h). */
#pragma once

#include "sandbox/sandbox.h"
#include "util/error.h"

/* The warm-pool loaders' sources (guest/), embedded at build time: the engine starts Python's and
 * node's in pool entries, and a gVisor exec entry waits in Python's (gvisor/spec.h). */
extern const char sbx_python_loader_source[];
extern const char sbx_node_loader_source[];

/* The channel's kind: the native backend's socket (the sandbox's fd 3), or a gVisor sandbox's
 * stdin, a pipe, which is all that reaches into runsc's sandbox (no fd passes with the prefix;
 * the rlimits travel in the header, as no prlimit reaches into gVisor's kernel). */
enum sbx_agent_channel {
        SBX_AGENT_SOCKET,
        SBX_AGENT_STDIN,
};

/* Writes spec's execution to fd (blocking; the loader reads as it goes). */
int sbx_agent_send_execution(int fd, enum sbx_agent_channel channel, const struct sbx_spec *spec,
                             struct sbx_error *err);

/* Appends spec's execution, as sbx_agent_send_execution writes it on a stdin channel, to out:
 * the uml backend's, which reaches its guest's loader through a console. E2BIG when it passes
 * out's cap. */
struct sbx_buffer;
int sbx_agent_encode_execution(const struct sbx_spec *spec, struct sbx_buffer *out,
                               struct sbx_error *err);

/* An execution as exec mode's init received it: spec is a copy of init's own with the message's
 * argv, environment, files and limits, whose memory the other members own. */
struct sbx_agent_received {
        struct sbx_spec spec;
        char *header; /* argv, envp and the paths point into it */
        const char **argv;
        const char **envp;
        struct sbx_file *files;
};

/* Exec mode's init: reads one execution from fd (blocking) into *out (the files' bytes together
 * at most base's disk size). 1 when one came, 0 at end of file before it (the entry was retired
 * unused), -1 with err for a malformed or truncated one (nothing is kept then). */
int sbx_agent_receive_execution(int fd, const struct sbx_spec *base, struct sbx_agent_received *out,
                                struct sbx_error *err);

/* Frees the bytes of the files (once written: init must not hold them in the sandbox's memory
 * for the program's whole run); the rest stays until the program execs. */
void sbx_agent_free_files(struct sbx_agent_received *received);

/* Frees all of it. */
void sbx_agent_received_free(struct sbx_agent_received *received);
