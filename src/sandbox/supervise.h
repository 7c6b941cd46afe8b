/* The supervisor's I/O loop, shared by every backend: feeds stdin, drains stdout and stderr
 * concurrently under a per-stream byte cap, and enforces the wall deadline. The kernel enforces
 * every other limit; this loop only reads pipes and watches the clock. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "sandbox/sandbox.h"
#include "util/error.h"

struct sbx_supervise {
        int stdin_fd; /* write end of the program's stdin (non-blocking), or -1; closed here */
        const void *stdin_data;
        size_t stdin_size;
        /* Once stdin_data is written, the pipe stays open until the end (no end of file): a UML
         * console hangs up at end of file, dropping what its guest has yet to read. */
        bool stdin_held;
        int stdout_fd; /* read ends of the program's stdout and stderr; closed here */
        int stderr_fd;
        int end_fd; /* readable (data or end of file) once the run is over */
        /* Once end_fd is readable, what the pipes hold is the whole output: they are read until
         * empty, not to end of file (runsc holds its copies of them through its own teardown:
         * gvisor.c, the Wait calls). end_next, when set, is asked first what that end was: -1,
         * the run's; else (no usable Wait answer) the fd whose readiness ends the run instead,
         * for which it sets end_is_final's value in *final. */
        bool end_is_final;
        int (*end_next)(void *ctx, bool *final);
        void *end_ctx;
        uint64_t deadline_us; /* CLOCK_MONOTONIC (sbx_now_us) at which the sandbox is killed */
        size_t output_cap;    /* bytes kept per stream; one more ends the run */
        /* Bytes stdout may carry past output_cap: a compile's artifact from a backend that can
         * pass it no fd (gvisor.c), which takes it back out before the cap is judged. */
        size_t stdout_extra;
        /* Kills every process of the sandbox; called at the deadline and at the output cap. */
        int (*kill)(void *ctx, struct sbx_error *err);
        void *kill_ctx;
        /* Readable = cancel: kill the sandbox, set run->canceled. <= 0 for none; not closed. */
        int cancel_fd;
        /* NULL, or called with the output kept (stream 1 stdout, 2 stderr) as it is read, in
         * batches (supervise.c says how large and how late). */
        void (*on_output)(void *ctx, int stream, const void *data, size_t len);
        void *output_ctx;
};

/* Runs the loop until end_fd is readable and both output pipes are at end of file (or empty,
 * with end_is_final). Fills run->out, run->err (initialised here), run->wall_timeout,
 * run->output_limit and run->canceled; the caller fills the exit status. */
int sbx_supervise(const struct sbx_supervise *params, struct sbx_run *run, struct sbx_error *err);
