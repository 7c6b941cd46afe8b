"""The smoke stage of the test guests (tests/uml/stage.sh smoke): the first facts to read off a new
guest, each printed on one line. `sandboxd run` of print(2+2), timed from outside (the median of
five, after one to warm the page cache) and as sandboxd counts it; then a memory bomb under a
64 MiB cap, which must end memory_limit with the cgroup's evidence (oom_kills). Exits non-zero
when either does not end as it must.

usage: smoke.py SANDBOXD
"""

import json
import statistics
import subprocess
import sys
import time

BOMB = "b = []\nwhile True:\n    b.append(bytearray(1 << 20))\n"


def run(sandboxd, *args):
    started = time.monotonic()
    out = subprocess.run([sandboxd, "run", "--json", *args], capture_output=True, text=True,
                         timeout=120)
    wall_ms = (time.monotonic() - started) * 1000
    try:
        return json.loads(out.stdout), wall_ms
    except ValueError:
        sys.exit(f"smoke: sandboxd run {' '.join(args)} printed no result "
                 f"(exit {out.returncode}): {out.stderr.strip()}")


def main():
    sandboxd = sys.argv[1]
    failed = False
    run(sandboxd, "-c", "print(2+2)")
    results = [run(sandboxd, "-c", "print(2+2)") for _ in range(5)]
    ok = all(r["status"] == "ok" and r["stdout"] == "4\n" for r, _ in results)
    walls = [wall for _, wall in results]
    inside = [r["usage"]["wall_ms"] for r, _ in results]
    totals = [r["timing"]["total_us"] / 1000 for r, _ in results]
    print(f"smoke: print(2+2): {'ok' if ok else 'FAILED'}; sandboxd run wall median "
          f"{statistics.median(walls):.0f} ms (min {min(walls):.0f}), sandbox total median "
          f"{statistics.median(totals):.0f} ms, program wall median {statistics.median(inside):.0f} ms")
    if not ok:
        print(f"smoke: print(2+2) result: {json.dumps(results[0][0])}")
        failed = True

    bomb, wall = run(sandboxd, "--memory", "64M", "--timeout", "30s", "-c", BOMB)
    ev = bomb.get("evidence", {})
    ok = bomb.get("status") == "memory_limit" and ev.get("oom_kills", 0) >= 1
    print(f"smoke: memory bomb (64M): {'ok' if ok else 'FAILED'}; status {bomb.get('status')}, "
          f"signal {bomb.get('signal')}, evidence {json.dumps(ev)}, usage "
          f"{json.dumps(bomb.get('usage'))}, wall {wall:.0f} ms")
    failed = failed or not ok
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
