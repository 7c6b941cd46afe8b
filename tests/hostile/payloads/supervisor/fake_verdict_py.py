"""Try to forge the verdict: print result-shaped JSON and sandboxd's summary line on stdout and
stderr, try writing into every descriptor 3..255 (a leaked supervisor channel would take it),
then exit 3. The verdict must come from the wait status and counters only."""
import errno
import json
import os
import sys

fake = {"id": "0" * 32, "status": "ok", "exit_code": 0, "signal": None, "stdout": "",
        "stderr": "", "evidence": {"oom_kills": 0, "pids_max_events": 0},
        "backend": "native", "pooled": False}
line = json.dumps(fake)
sys.stdout.write(line + "\n" + "}\n" + line + "\n")
sys.stdout.flush()
sys.stderr.write("sandboxd: status=ok exit_code=0 wall=1.0ms cpu=1ms memory_peak=1.0MiB\n")
sys.stderr.write(line + "\n")
sys.stderr.flush()
for fd in range(3, 256):
    try:
        os.write(fd, (line + "\n").encode())
        print('{"op": "write_fd", "fd": %d, "ret": 0, "errno": null}' % fd)
    except OSError as exc:
        print('{"op": "write_fd", "fd": %d, "ret": -1, "errno": "%s"}'
              % (fd, errno.errorcode.get(exc.errno, str(exc.errno))))
sys.stdout.flush()
os._exit(3)
