"""Fill /tmp with 1 MiB files until a write fails or argv[1] MiB are written. One report line:
the failing write's errno (expected ENOSPC at the tmpfs bound) and the bytes written before it."""
import errno
import os
import sys

want = int(sys.argv[1]) if len(sys.argv) > 1 else 48
target = sys.argv[2] if len(sys.argv) > 2 else "/tmp"
chunk = b"\xa5" * (1 << 20)
written, index = 0, 0
try:
    while written < want << 20:
        with open(os.path.join(target, f"fill-{index}"), "wb") as f:
            index += 1
            view = memoryview(chunk)
            while view:
                n = f.write(view)
                written += n
                view = view[n:]
except OSError as exc:
    print('{"op": "fill", "ret": -1, "errno": "%s", "bytes": %d}'
          % (errno.errorcode.get(exc.errno, str(exc.errno)), written), flush=True)
    sys.exit(0)
print('{"op": "fill", "ret": 0, "errno": null, "bytes": %d}' % written, flush=True)
