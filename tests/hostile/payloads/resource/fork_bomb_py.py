"""Python fork bomb: every process forks until fork fails; bounded by a shared count (argv[1])
so a lifted pids limit lets it finish. One report line: the first failure's errno, or success."""
import errno
import mmap
import os
import signal
import struct
import sys
import time

cap = int(sys.argv[1]) if len(sys.argv) > 1 else 150
shared = mmap.mmap(-1, 16)  # anonymous MAP_SHARED: created, failures, first errno


def get(i):
    return struct.unpack_from("i", shared, 4 * i)[0]


def put(i, v):
    struct.pack_into("i", shared, 4 * i, v)


top = os.getpid()
while get(0) < cap and get(1) == 0:
    try:
        pid = os.fork()
    except OSError as exc:
        if get(2) == 0:
            put(2, exc.errno)
        put(1, get(1) + 1)
        break
    if pid == 0:
        continue  # the child is a bomb too
    put(0, get(0) + 1)

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
