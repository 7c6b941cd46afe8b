#!/usr/bin/python3
"""A/B of the HTTP session cell between builds, side by side in one run.

Starts one `sandboxd serve` per build directory given (each with a python session), and times the
cell `x += 1` over HTTP against each, alternately, in three modes: interleaved (each cell after a
bare `python3 -c pass`, caches cold), back to back, and after a 20 ms idle pause; each with
http.client (as bench/sessions.py) and with a raw socket (the request pre-built, no client
library on the path). Prints the medians in ms.

usage: bench/sessions_ab.py BUILD_DIR [BUILD_DIR...]   (N=rounds, default 150)
"""

import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sessions import HttpSession  # noqa: E402


def raw_cell(session):
    sock = socket.create_connection(("127.0.0.1", session.server.port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    body = json.dumps({"code": "x += 1"}).encode()
    request = (f"POST {session.path} HTTP/1.1\r\nHost: x\r\n"
               f"Authorization: {session.headers['Authorization']}\r\n"
               f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
               ).encode() + body

    def cell():
        sock.sendall(request)
        data = b""
        while b"\r\n\r\n" not in data:
            data += sock.recv(65536)
        head, rest = data.split(b"\r\n\r\n", 1)
        size = int(re.search(rb"(?i)content-length: (\d+)", head).group(1))
        while len(rest) < size:
            rest += sock.recv(65536)
        assert b'"status":"ok"' in rest, rest[:300]
    return cell


def main():
    builds = sys.argv[1:]
    if not builds:
        sys.exit(__doc__)
    rounds = int(os.environ.get("N", "150"))
    workdir = tempfile.mkdtemp(prefix="bench-sessions-ab-")
    os.chmod(workdir, 0o711)
    sessions = []
    try:
        for i, build in enumerate(builds):
            sessions.append(HttpSession(os.path.abspath(os.path.join(build, "sandboxd")),
                                        workdir, name=f"s{i}"))
        raws = [raw_cell(s) for s in sessions]
        for mode in ("interleaved", "back to back", "after 20 ms idle"):
            samples = [{"http.client": [], "raw": []} for _ in sessions]
            for _ in range(rounds):
                for i, session in enumerate(sessions):
                    for kind, cell in (("http.client", lambda: session.cell("x += 1")),
                                       ("raw", raws[i])):
                        if mode == "interleaved":
                            subprocess.run(["/usr/bin/python3", "-c", "pass"], check=True)
                        elif mode != "back to back":
                            time.sleep(0.02)
                        started = time.perf_counter()
                        cell()
                        samples[i][kind].append((time.perf_counter() - started) * 1000)
            for build, got in zip(builds, samples):
                print(f"{mode:17} {build:30}", "  ".join(
                    f"{kind} {statistics.median(v):.3f} ms" for kind, v in got.items()))
    finally:
        for session in sessions:
            session.close()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
