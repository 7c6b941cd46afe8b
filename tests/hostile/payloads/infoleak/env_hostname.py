"""Hostile payload (infoleak): what the sandbox tells about its host through the environment and
the UTS namespace. The environment must be exactly PATH, HOME, TMPDIR, LANG with the documented
values (/proc/self/environ too); the hostname "sandbox" (gethostname, uname, /etc/hostname if it
exists at all), the NIS domain name empty. Whatever differs is printed. One JSON line per check."""
import ctypes
import errno
import json
import os
import socket

EXPECTED_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/workspace", "TMPDIR": "/tmp",
                "LANG": "C.UTF-8"}


def report(op, ret, err=None, **extra):
    line = {"op": op, "ret": ret, "errno": err}
    line.update(extra)
    print(json.dumps(line), flush=True)


def judge_env(op, env):
    extra = {k: v for k, v in env.items() if k not in EXPECTED_ENV}
    wrong = {k: v for k, v in env.items() if k in EXPECTED_ENV and v != EXPECTED_ENV[k]}
    missing = sorted(set(EXPECTED_ENV) - set(env))
    exact = not extra and not wrong and not missing
    report(op, len(env), "EXACT" if exact else "UNEXPECTED", extra=extra, wrong=wrong,
           missing=missing)


judge_env("environment", dict(os.environ))
try:
    with open("/proc/self/environ", "rb") as f:
        raw = f.read()
    pairs = [item.split(b"=", 1) for item in raw.split(b"\0") if item]
    judge_env("proc_environ", {k.decode(errors="replace"): v.decode(errors="replace")
                               for k, v in (p if len(p) == 2 else (p[0], b"") for p in pairs)})
except OSError as e:
    report("proc_environ", -1, errno.errorcode.get(e.errno), path="/proc/self/environ")

for source, name in (("gethostname", socket.gethostname()), ("uname", os.uname().nodename)):
    report("hostname", 0, "SANDBOX" if name == "sandbox" else "HOST_NAME", source=source,
           value=name)
try:
    with open("/etc/hostname", encoding="utf-8", errors="replace") as f:
        content = f.read().strip()
    report("etc_hostname", len(content), "SANDBOX" if content == "sandbox" else "HOST_NAME",
           value=content)
except OSError as e:
    report("etc_hostname", -1, errno.errorcode.get(e.errno))

buf = ctypes.create_string_buffer(256)
ctypes.CDLL(None).getdomainname(buf, 256)
domain = buf.value.decode(errors="replace")
report("domainname", 0, "EMPTY" if domain in ("", "(none)") else "SET", value=domain)
