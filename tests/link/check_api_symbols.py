#!/usr/bin/env python3
"""Fails when the API process's binary contains code that builds sandboxes (STYLE.md practice
12): the unprivileged sandboxd-api must link the vocabulary (src/model), the protocol, util, the
service and the API, never the sandbox layer or the engine's execution machinery.

usage: check_api_symbols.py API_BINARY MACHINERY_LIB.a...

Two checks, each enough to fail:
- no symbol the API binary defines is a global symbol of a machinery library (the sandbox layer
  and the engine), whatever its name;
- no symbol it defines has a machinery name: a kernel mechanism's module prefix (sandbox/native/),
  the supervisor, the agent channel, the backend operations, sbx_execute, the warm pools.
"""
import re
import subprocess
import sys

MACHINERY_NAMES = re.compile(
    r"^(caps_|cgroup_|landlock_|launch_|mount_|netns_|rlimit_|seccomp_|userns_|native_"
    r"|sbx_native_|sbx_supervise|sbx_agent_|sbx_backend_find|sbx_execute|sbx_pool_entry_"
    r"|sbx_python_loader)")


def defined_symbols(path, global_only):
    args = ["nm", "--defined-only"] + (["-g"] if global_only else []) + [path]
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    names = set()
    for line in out.splitlines():
        fields = line.split()
        if len(fields) == 3:
            names.add(fields[2])
    return names


def main():
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    api = defined_symbols(sys.argv[1], global_only=False)
    machinery = set()
    for lib in sys.argv[2:]:
        machinery |= defined_symbols(lib, global_only=True)
    if not machinery:
        print("no machinery symbols found: wrong library?", file=sys.stderr)
        return 2
    bad = sorted((api & machinery) | {name for name in api if MACHINERY_NAMES.match(name)})
    if bad:
        print(f"{sys.argv[1]} links {len(bad)} symbols of the sandbox machinery:", file=sys.stderr)
        for name in bad:
            print(f"  {name}", file=sys.stderr)
        return 1
    print(f"{sys.argv[1]}: none of {len(machinery)} machinery symbols, no machinery name")
    return 0


if __name__ == "__main__":
    sys.exit(main())
