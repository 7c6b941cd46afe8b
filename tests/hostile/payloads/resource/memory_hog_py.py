"""Anonymous memory hog: keep 1 MiB bytes objects (touched: b'\\x01' * n writes every page) up to
argv[1] MiB. The cgroup's OOM killer must SIGKILL it; it reports only if it got it all."""
import sys

want = int(sys.argv[1]) if len(sys.argv) > 1 else 256
hoard = []
try:
    for _ in range(want):
        hoard.append(b"\x01" * (1 << 20))
except MemoryError:
    print('{"op": "alloc", "ret": -1, "errno": "ENOMEM", "mib": %d}' % len(hoard), flush=True)
    sys.exit(0)
print('{"op": "alloc", "ret": 0, "errno": null, "mib": %d}' % len(hoard), flush=True)
