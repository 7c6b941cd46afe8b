"""Block forever reading stdin: after the real (empty) stdin is exhausted, stdin becomes a pipe
whose write end this process keeps open, so the read never returns."""
import os
import sys

data = sys.stdin.buffer.read()
print('{"op": "read_stdin", "ret": %d, "errno": null}' % len(data), flush=True)
r, w = os.pipe()
os.dup2(r, 0)
os.read(0, 1)
