"""Hostile payload (session): a session that tries to outlive its deadlines. Cell 1 ignores
SIGINT and blocks forever: the engine's interrupt at the run's deadline does nothing, so after
the grace it must restart the interpreter (status timeout, restarted true). Cell 2 leaves a
daemon made the classic way (fork, setsid, fork again; SIGINT, SIGTERM and SIGHUP ignored; stdio
on /dev/null) with the run token in its command line and a heartbeat in $TMPDIR, and returns as
soon as the daemon is up. Then the session's input ends: once `sandboxd session` has exited,
nothing of the session may be alive on the host (the harness's probes look). Cells are cut at
`# %%` lines; each is self-contained (the outside control runs each as its own process)."""
# %% timeout_ms=1000
import signal
import time

signal.signal(signal.SIGINT, signal.SIG_IGN)
while True:
    time.sleep(30)
# %%
import json
import os
import sys

TOKEN = "{token}"
DAEMON = r'''
import os, signal, sys, time
for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    signal.signal(sig, signal.SIG_IGN)
os.write(int(sys.argv[2]), b"up")
os.close(int(sys.argv[2]))
beat = os.path.join(sys.argv[3], "hostile-outlive-" + sys.argv[1].rsplit("-", 1)[1])
while True:
    try:
        with open(beat, "w") as f:
            f.write(str(time.time()))
    except OSError:
        pass
    time.sleep(0.2)
'''
ready_r, ready_w = os.pipe()
pid = os.fork()
if pid == 0:
    try:
        os.setsid()
        if os.fork():
            os._exit(0)
        devnull = os.open("/dev/null", os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        os.set_inheritable(ready_w, True)
        os.execv(sys.executable, [sys.executable, "-c", DAEMON, "hostile-outlive-" + TOKEN,
                                  str(ready_w), os.environ.get("TMPDIR", "/tmp")])
    finally:
        os._exit(127)
os.waitpid(pid, 0)  # the first child is gone at once: the daemon is nobody's child
os.close(ready_w)
up = os.read(ready_r, 2) == b"up"
print(json.dumps({"op": "daemon", "ret": 0 if up else -1, "errno": "OK" if up else "FAILED"}),
      flush=True)
