/* The agent channel: how a sandbox started in pool mode receives its execution. The program
 * waiting on the other end is a warm-pool loader from guest/ (guest/python_loader.py documents
 * the format from its side):
 *
 *   u32 little-endian length of the header, the header, then each file's bytes in order
 *   header = NUL-separated fields: the count of argv entries and argv[1..] (argv[0], the
 *            interpreter, is already running; argv[1] is the program file), the count of
 *            environment entries and each "NAME=value", the count of files and each file's
 *            path, size and "1"/"0" (executable), and last the program file's path again.
 *
 * Plain fields, not JSON: the loader parses them with bytes.split, importing nothing (every
 * module a loader imports is paid by each pool entry). No field can hold a NUL: argv, env and
 * paths are validated before (engine/execution.h). */
#pragma once

#include "sandbox/sandbox.h"
#include "util/error.h"

/* Writes spec's execution to fd (blocking; the loader reads as it goes). */
int sbx_agent_send_execution(int fd, const struct sbx_spec *spec, struct sbx_error *err);
