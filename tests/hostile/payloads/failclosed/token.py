"""Hostile payload (failclosed): run with one setup step forced to fail (--test-fail-step STEP; one declaration per step).
If it runs at all, the sandbox started user code although that step failed: a half-isolated
execution. It prints the run token (argument 1) to stdout and stderr, leaves it in /tmp and the
workspace, and forks a child that outlives it; the harness requires status internal_error naming
the step, the token absent from the output, and nothing of the run left on the host. The control
is the same run without the forced failure: the token appears."""
import os
import sys

token = sys.argv[1]
print(token, flush=True)
print(token, file=sys.stderr, flush=True)
for path in ("/tmp/failclosed-token", "failclosed-token"):
    try:
        with open(path, "w") as f:
            f.write(token)
    except OSError:
        pass
if os.fork() == 0:
    os.setsid()
    devnull = os.open("/dev/null", os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.execvp("sleep", ["sleep", "30"])
