"""Open /dev/null until open fails or argv[1] descriptors are open. Reports the errno (expected
EMFILE at RLIMIT_NOFILE) and the highest descriptor number reached."""
import errno
import os
import sys

want = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
fds = []
try:
    while len(fds) < want:
        fds.append(os.open("/dev/null", os.O_RDONLY))
except OSError as exc:
    print('{"op": "open", "ret": -1, "errno": "%s", "count": %d, "highest": %d}'
          % (errno.errorcode.get(exc.errno, str(exc.errno)), len(fds), max(fds, default=-1)),
          flush=True)
    sys.exit(0)
print('{"op": "open", "ret": 0, "errno": null, "count": %d, "highest": %d}'
      % (len(fds), max(fds)), flush=True)
