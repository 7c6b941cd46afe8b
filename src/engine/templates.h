/* The Python template process (sandbox/native/template.h, DESIGN.md "Warm pools: templates"):
 * `python3 -c <guest/python_loader.py> template MODULE 3`, started with the arguments and the
 * environment of a pool entry's loader, so that its forks are what that loader would have been.
 * The engine keeps one (templates.c); `sandboxd run --pooled --template` starts one for its run. */
#pragma once

#include <sys/types.h>

#include "util/error.h"

/* A started template, the caller's child. */
struct sbx_template {
        pid_t pid;     /* 0: none */
        int fd;        /* the caller's end of its socket (close-on-exec, inherited by forks: what
                        * sbx_spec.template_fd and sbx_pool_entry_create take); -1: none */
        int stderr_fd; /* the read end of its stderr (non-blocking); -1: none */
};

/* Starts a template as a child of the caller, which must reap it (sbx_template_ended). It dies
 * with the caller. */
int sbx_template_start(struct sbx_template *template, struct sbx_error *err);

/* The template was reaped: logs what it wrote on stderr (why it ended) and closes its fds. */
void sbx_template_ended(struct sbx_template *template);

/* Kills the template (SIGKILL by pid), reaps it, and then as sbx_template_ended. */
void sbx_template_stop(struct sbx_template *template);
