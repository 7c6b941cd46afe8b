"""Hostile payload (session), session A, which the harness keeps open while session B runs
(cross_reach.py): it holds the run token in a file in its workspace, in /tmp and in /dev/shm, in
its environment, and in a background process (token in argv) that listens on the abstract
socket "\\0hostile-peer-<token>" and answers with the token. The cell ends in an error when
something is not in place. One JSON line per holding."""
# %%
import json
import os
import subprocess
import sys

TOKEN = "{token}"
HOLDER = r'''
import os, socket, sys, time
token = sys.argv[1].rsplit("-", 1)[1]
listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
listener.bind("\0hostile-peer-" + token)
listener.listen(8)
os.write(int(sys.argv[2]), b"up")
os.close(int(sys.argv[2]))
while True:
    conn, _ = listener.accept()
    conn.sendall(("peer " + token + "\n").encode())
    conn.close()
'''
held = []
for path in (os.path.join(os.getcwd(), f"peer-{TOKEN}.txt"), f"/tmp/peer-{TOKEN}.txt",
             f"/dev/shm/peer-{TOKEN}"):
    with open(path, "w") as f:
        f.write(TOKEN)
    held.append(path)
ready_r, ready_w = os.pipe()
holder = subprocess.Popen([sys.executable, "-c", HOLDER, "hostile-peer-" + TOKEN, str(ready_w)],
                          pass_fds=[ready_w], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                          env=dict(os.environ, HOSTILE_PEER=TOKEN))
os.close(ready_w)
up = os.read(ready_r, 2) == b"up"
print(json.dumps({"op": "hold", "ret": holder.pid, "errno": "OK" if up else "FAILED",
                  "files": held}), flush=True)
assert up, "the holder did not come up"
