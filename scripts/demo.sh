#!/bin/sh
# `make demo`: a short demonstration of sandboxd's main job. Runs a few untrusted programs with
# `sandboxd run --json` and the built-in default limits (only the timeout demo shortens the
# deadline), and prints each result's status and the kernel's evidence. Exits 0 when every demo
# ended with the status it was meant to show.
#
# usage: scripts/demo.sh path/to/sandboxd
set -u

if [ $# -ne 1 ] || [ ! -x "$1" ]; then
        echo "usage: $0 path/to/sandboxd" >&2
        exit 64
fi
SANDBOXD=$1
PYTHON=/usr/bin/python3
failures=0

# demo TITLE EXPECTED_STATUS SANDBOXD_RUN_ARGS...: runs one sandbox and prints its result.
demo() {
        title=$1
        expected=$2
        shift 2
        result=$("$SANDBOXD" run --json "$@")
        cli_exit=$?
        if ! RESULT=$result CLI_EXIT=$cli_exit "$PYTHON" - "$title" "$expected" <<'EOF'; then
import json, os, sys

title, expected = sys.argv[1], sys.argv[2]
print(f"== {title}")
try:
    r = json.loads(os.environ["RESULT"])
except ValueError:
    print(f"   sandboxd printed no JSON result (exit {os.environ['CLI_EXIT']})\n")
    sys.exit(1)
ok = r.get("status") == expected
u, e, t, lim = r["usage"], r["evidence"], r["timing"], r["limits"]
how = f"exit code {r['exit_code']}" if r["exit_code"] is not None else f"signal {r['signal']}"
print(f"   status     {r['status']} ({how}; sandboxd exit {os.environ['CLI_EXIT']})"
      + ("" if ok else f"   <-- expected {expected}"))
for stream in ("stdout", "stderr"):
    lines = r[stream].strip().splitlines()
    if lines:
        more = f"  (+{len(lines) - 1} earlier lines)" if len(lines) > 1 else ""
        print(f"   {stream:10} {lines[-1][:70]!r}{more}")
print(f"   limits     memory {lim['memory_mb']} MiB, pids {lim['pids']}, wall {lim['wall_ms']} ms,"
      f" cpu {lim['cpu_ms']} ms, disk {lim['disk_mb']} MiB")
print(f"   usage      wall {u['wall_ms']} ms, cpu {u['cpu_ms']} ms,"
      f" memory peak {u['memory_peak_bytes'] / 2**20:.1f} MiB")
print(f"   evidence   oom_kills {e['oom_kills']}, pids_max_events {e['pids_max_events']},"
      f" wall_timeout {str(e['wall_timeout']).lower()}, cpu_usage {e['cpu_usage_us'] // 1000} ms")
print(f"   timing     setup {t['setup_us'] / 1000:.1f} ms, run {t['run_us'] / 1000:.1f} ms,"
      f" teardown {t['teardown_us'] / 1000:.1f} ms, total {t['total_us'] / 1000:.1f} ms")
if r.get("error"):
    print(f"   error      {r['error']}")
print()
sys.exit(0 if ok else 1)
EOF
                failures=$((failures + 1))
        fi
}

echo "sandboxd demo: $("$SANDBOXD" version 2>/dev/null || echo "$SANDBOXD")"
echo

demo "hello world (python)" ok \
        -c 'import platform; print("hello from", platform.node(), "as uid", __import__("os").getuid())'

demo "an endless loop, with --timeout 2s: killed at the wall-clock deadline" timeout \
        --timeout 2s -c 'while True: pass'

demo "a memory bomb (10 MiB at a time): the cgroup's OOM killer ends it at the 256 MiB cap" \
        memory_limit -c '
chunks = []
while True:
    chunks.append(bytearray(b"\x01") * (10 << 20))
    print(f"{len(chunks) * 10} MiB", flush=True)'

# shellcheck disable=SC2016 # $((...)) is for the sandboxed bash, not this shell
demo "a fork bomb (bash): the kernel refuses forks at the 64-process cap" pids_limit \
        --lang bash -c '
:(){ :|:& };:
end=$((SECONDS + 2)); while (( SECONDS < end )); do true; done
echo "the shell survived the bomb"'

if [ "$failures" -ne 0 ]; then
        echo "demo: $failures demo(s) did not end with their expected status"
        exit 1
fi
echo "demo: every sandbox ended with its expected status"
