/* The agent channel: how a sandbox started in pool mode receives its execution. The program
 * waiting on the other end is a warm-pool loader from guest/ (guest/python_loader.py documents
 * the format from its side):
 *
 *   u32 little-endian length of the header, the header (JSON), then each file's bytes in order
 *   header = {"argv": [argv[1], ...], "main": argv[1], "env": {NAME: value, ...},
 *             "files": [{"path": ..., "size": ..., "executable": ...}, ...]}
 *
 * argv[0] of the spec is the interpreter, already running; argv[1] is the program file. */
#pragma once

#include "sandbox/sandbox.h"
#include "util/error.h"

/* Writes spec's execution to fd (blocking; the loader reads as it goes). */
int sbx_agent_send_execution(int fd, const struct sbx_spec *spec, struct sbx_error *err);
