/* The Python template process (sandbox/native/template.h, DESIGN.md "Warm pools: templates"):
 * `python3 -c <guest/python_loader.py> template MODULE 3`, started with the arguments and the
 * environment of a pool entry's loader, so that its forks are what that loader would have been.
 * The engine keeps one (templates.c); `sandboxd run --pooled --template` starts one for its run. */
#pragma once

#include <sys/types.h>

#include "util/error.h"

/* Starts a template as a child of the caller, which must reap it; *fd: the caller's end of its
 * socket (close-on-exec, inherited by forks: what sbx_spec.template_fd and
 * sbx_pool_entry_create take). The template dies with the caller. */
int sbx_template_start(pid_t *pid, int *fd, struct sbx_error *err);

/* Closes fd, kills the template by pid (SIGKILL) and reaps it. */
void sbx_template_stop(pid_t pid, int fd);
