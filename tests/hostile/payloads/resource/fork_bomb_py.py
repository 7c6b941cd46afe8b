"""Python fork bomb: every process forks until fork fails; bounded by a shared count (argv[1])
so a lifted pids limit lets it finish. One report line: the first failure's errno, or success."""
import errno
import fcntl
import mmap
import os
import signal
import struct
import sys
import tempfile
import time

cap = int(sys.argv[1]) if len(sys.argv) > 1 else 150
shared = mmap.mmap(-1, 16)  # anonymous MAP_SHARED: created, failures, first errno
# The count is read, checked and raised by many processes at once: without a lock, updates are
# lost and the bomb overshoots its bound (seen: 1,000 processes for a cap of 150 on a slow
# machine, whose control then could not finish in time). lockf locks are per process, so the
# inherited descriptor excludes the other processes of the bomb.
lock = tempfile.TemporaryFile()


def get(i):
    return struct.unpack_from("i", shared, 4 * i)[0]


def put(i, v):
    struct.pack_into("i", shared, 4 * i, v)


top = os.getpid()
while True:
    fcntl.lockf(lock, fcntl.LOCK_EX)
    if get(0) >= cap or get(1) != 0:
        fcntl.lockf(lock, fcntl.LOCK_UN)
        break
    try:
        pid = os.fork()
    except OSError as exc:
        if get(2) == 0:
            put(2, exc.errno)
        put(1, get(1) + 1)
        fcntl.lockf(lock, fcntl.LOCK_UN)
        break
    if pid == 0:
        continue  # the child is a bomb too (it holds no lock: lockf locks are not inherited)
    put(0, get(0) + 1)
    fcntl.lockf(lock, fcntl.LOCK_UN)

if os.getpid() != top:
    while True:
        signal.pause()  # hold the slot

for _ in range(300):
    if get(0) >= cap or get(1) > 0:
        break
    time.sleep(0.01)
if get(1) > 0:
    print('{"op": "fork", "ret": -1, "errno": "%s", "created": %d}'
          % (errno.errorcode.get(get(2), str(get(2))), get(0)), flush=True)
else:
    print('{"op": "fork", "ret": 0, "errno": null, "created": %d}' % get(0), flush=True)
