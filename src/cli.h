/* The command-line programs: thin clients of the engine. */
#pragma once

/* `sandboxd run ...`: argv[0] is "run". Returns the process exit code (README: exit codes). */
int cli_run(int argc, char **argv);

#define CLI_EXIT_USAGE    64 /* EX_USAGE: bad flags or values */
#define CLI_EXIT_NOINPUT  66 /* EX_NOINPUT: a named file cannot be read */
#define CLI_EXIT_SOFTWARE 70 /* EX_SOFTWARE: sandboxd itself failed */
