"""The walls: a read-only runtime, no privileges, a private view of processes and files, and no
network. Each test has the payload itself report what the kernel answered (the errno name), so
a pass means the kernel refused, not that the payload happened to fail."""

import json
import os
import select
import socket
import subprocess

import pytest

WRITE_PROBE = """
import errno, json
result = {}
for path in PATHS:
    try:
        with open(path, "a") as f:
            f.write("x")
        result[path] = "WRITABLE"
    except OSError as e:
        result[path] = errno.errorcode[e.errno]
print(json.dumps(result))
"""


def test_runtime_and_root_are_read_only(run):
    paths = ["/usr/bin/x", "/etc/passwd", "/etc/new-file", "/x", "/usr/lib/os-release"]
    r = run(f"PATHS = {paths!r}\n" + WRITE_PROBE)
    r.expect("ok", rc=0)
    got = json.loads(r["stdout"])
    for path in paths:
        assert got[path] in ("EROFS", "EACCES"), (path, got[path])


def test_host_secrets_and_sys_are_absent(run):
    code = (
        "import errno, json, os\n"
        "res = {}\n"
        "for p in ('/etc/shadow', '/etc/gshadow', '/root', '/home', '/work', '/sys',\n"
        "          '/sys/fs/cgroup', '/var/run/docker.sock', '/run'):\n"
        "    try:\n"
        "        os.stat(p); res[p] = 'PRESENT'\n"
        "    except OSError as e:\n"
        "        res[p] = errno.errorcode[e.errno]\n"
        "print(json.dumps(res))\n"
    )
    r = run(code)
    r.expect("ok", rc=0)
    got = json.loads(r["stdout"])
    assert got["/etc/shadow"] == "ENOENT"
    assert got["/sys"] == "ENOENT", "no /sys inside the sandbox"
    for path, result in got.items():
        assert result in ("ENOENT", "EACCES"), (path, result)


STATUS_PROBE = (
    "import json, re\n"
    "status = open('/proc/self/status').read()\n"
    "fields = dict(re.findall(r'^(\\w+):\\s*(.*)$', status, re.M))\n"
    "print(json.dumps({k: fields.get(k) for k in ('CapInh', 'CapPrm', 'CapEff', 'CapBnd',\n"
    "  'CapAmb', 'NoNewPrivs', 'Seccomp', 'Seccomp_filters')}))\n"
)


# caps.h CAPS_ROOT_SET_MASK: CHOWN, DAC_OVERRIDE, FOWNER, KILL, SETGID, SETUID, over the
# sandbox's own user namespace.
ROOT_SET = (1 << 0) | (1 << 1) | (1 << 3) | (1 << 5) | (1 << 6) | (1 << 7)


def test_privileges_are_reduced(run):
    r = run(STATUS_PROBE)
    r.expect("ok", rc=0)
    got = json.loads(r["stdout"])
    # The sandbox's root holds exactly the documented set, and no way to more: nothing
    # inheritable or ambient, and the bounding set (what any exec could grant) is the same set.
    for cap in ("CapPrm", "CapEff", "CapBnd"):
        assert int(got[cap], 16) == ROOT_SET, (cap, got[cap])
    for cap in ("CapInh", "CapAmb"):
        assert int(got[cap], 16) == 0, (cap, got[cap])
    assert got["NoNewPrivs"] == "1"
    assert got["Seccomp"] == "2", "2 = SECCOMP_MODE_FILTER"
    assert int(got["Seccomp_filters"] or "1") >= 1


def test_control_privileges_without_the_layers(run):
    # Control: with those layers off the same probe reads more capabilities, no no_new_privs and no
    # filter. (seccomp must be off too for no_new_privs: loading a filter sets it.)
    r = run(STATUS_PROBE, "python", "--test-without", "caps", "--test-without", "no_new_privs",
            "--test-without", "seccomp")
    r.expect("ok", rc=0)
    got = json.loads(r["stdout"])
    assert int(got["CapEff"], 16) & ~ROOT_SET and int(got["CapBnd"], 16) & ~ROOT_SET, got
    assert got["NoNewPrivs"] == "0", got
    assert got["Seccomp"] == "0", got


SYSCALL_PROBE = """
import ctypes, errno, json
libc = ctypes.CDLL(None, use_errno=True)
CLONE_NEWUSER = 0x10000000
CLONE_NEWNS = 0x00020000
res = {}
def probe(name, rc):
    res[name] = "OK" if rc == 0 else errno.errorcode.get(ctypes.get_errno(), ctypes.get_errno())
probe("mount", libc.mount(b"none", b"/tmp", b"tmpfs", 0, None))
probe("unshare_user", libc.unshare(CLONE_NEWUSER))
probe("unshare_mount", libc.unshare(CLONE_NEWNS))
print(json.dumps(res))
"""


def test_other_ids_hold_no_capability(run):
    # A process that became another id of the sandbox's range holds nothing, and cannot get back.
    code = (
        "import json, os, re\n"
        "os.setresgid(1000, 1000, 1000)\n"
        "os.setresuid(1000, 1000, 1000)\n"
        "caps = dict(re.findall(r'^(Cap\\w+):\\s*(\\w+)$', open('/proc/self/status').read(), re.M))\n"
        "try:\n"
        "    os.setresuid(0, 0, 0)\n"
        "    back = 'ROOT AGAIN'\n"
        "except PermissionError:\n"
        "    back = 'EPERM'\n"
        "print(json.dumps({'caps': caps, 'back': back, 'uid': os.getuid()}))\n"
    )
    r = run(code)
    r.expect("ok", rc=0)
    got = json.loads(r["stdout"])
    assert got["back"] == "EPERM" and got["uid"] == 1000, got
    for cap in ("CapInh", "CapPrm", "CapEff", "CapAmb"):
        assert int(got["caps"][cap], 16) == 0, got


def test_ids_outside_the_range_do_not_exist(run):
    code = (
        "import errno, os\n"
        "for uid in (65536, 2000000000, 4294967294):\n"
        "    try:\n"
        "        os.setresuid(uid, uid, uid)\n"
        "        print(uid, 'OK')\n"
        "    except OSError as e:\n"
        "        print(uid, errno.errorcode[e.errno])\n"
    )
    r = run(code)
    r.expect("ok", rc=0)
    assert r["stdout"].split() == ["65536", "EINVAL", "2000000000", "EINVAL", "4294967294",
                                   "EINVAL"], r["stdout"]


def test_mount_and_unshare_are_refused(run):
    r = run(SYSCALL_PROBE)
    r.expect("ok", rc=0)
    got = json.loads(r["stdout"])
    assert got == {"mount": "EPERM", "unshare_user": "EPERM", "unshare_mount": "EPERM"}, got


def test_mount_and_unshare_tools_are_refused(run):
    code = (
        "mount -t tmpfs none /tmp; echo \"mount=$?\"\n"
        "unshare -U true; echo \"unshare=$?\"\n"
        "unshare -r -m true; echo \"unshare_root=$?\"\n"
    )
    r = run(code, "bash")
    r.expect("ok", rc=0)
    results = dict(line.split("=") for line in r["stdout"].split())
    assert all(v != "0" for v in results.values()), results
    assert "Operation not permitted" in r["stderr"], r["stderr"]


def test_control_unshare_works_without_seccomp(run):
    # Control for the test above: with only the seccomp layer off, the same call succeeds, so
    # the refusal there is seccomp's doing and the probe can tell the difference.
    with open("/proc/sys/user/max_user_namespaces") as f:
        if int(f.read()) == 0:
            pytest.skip("user namespaces are disabled on this host (max_user_namespaces=0)")
    r = run(SYSCALL_PROBE, "python", "--test-without", "seccomp")
    r.expect("ok", rc=0)
    got = json.loads(r["stdout"])
    assert got["unshare_user"] == "OK", got


def test_host_canary_is_invisible(run, canary_dir, tmp_path):
    directory, token = canary_dir
    # A second canary in the host's /tmp: the sandbox's /tmp is its own.
    host_tmp_canary = tmp_path / f"{directory.name}-tmp"
    host_tmp_canary.write_text(token)
    code = (
        "import errno, os, sys\n"
        "for path in sys.argv[1:4]:\n"
        "    try:\n"
        "        print(path, 'READ', open(path).read().strip())\n"
        "    except OSError as e:\n"
        "        print(path, errno.errorcode[e.errno])\n"
        "name = sys.argv[4]\n"
        "for top in ('/',):\n"
        "    for dirpath, dirnames, filenames in os.walk(top):\n"
        "        if dirpath == '/':\n"
        "            dirnames[:] = [d for d in dirnames if d not in ('proc',)]\n"
        "        for entry in dirnames + filenames:\n"
        "            if name in entry:\n"
        "                print('FOUND', os.path.join(dirpath, entry))\n"
        "print('walk done')\n"
    )
    targets = (str(directory / "secret.txt"), str(directory), str(host_tmp_canary))
    r = run(code, "python", "--timeout", "30s", args=(*targets, directory.name))
    r.expect("ok", rc=0)
    lines = r["stdout"].splitlines()
    assert lines[-1] == "walk done"
    for target, line in zip(targets, lines):
        assert line == f"{target} ENOENT", line
    assert not [line for line in lines if line.startswith("FOUND")], lines
    for stream in (r["stdout"], r["stderr"], r.raw.decode(errors="replace"), r.cli_stderr):
        assert token not in stream
    # The canary is untouched on the host.
    assert (directory / "secret.txt").read_text() == token + "\n"


def test_proc_shows_only_the_sandbox(run):
    code = (
        "import json, os\n"
        "pids = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())\n"
        "print(json.dumps({'pids': pids, 'self': os.getpid()}))\n"
    )
    r = run(code)
    r.expect("ok", rc=0)
    got = json.loads(r["stdout"])
    assert got["self"] in got["pids"]
    host_pids = [p for p in os.listdir("/proc") if p.isdigit()]
    assert len(got["pids"]) <= 3, f"the sandbox sees {got['pids']} (host has {len(host_pids)})"
    assert max(got["pids"]) < 100, got


def test_only_loopback_exists(run):
    code = (
        "lines = open('/proc/self/net/dev').read().splitlines()[2:]\n"
        "print(sorted(line.split(':')[0].strip() for line in lines))\n"
    )
    r = run(code)
    r.expect("ok", rc=0)
    assert r["stdout"] == "['lo']\n"


def _host_addresses():
    """127.0.0.1 and, when the host has one, a non-loopback IPv4 address."""
    addresses = ["127.0.0.1"]
    try:
        out = subprocess.run(["ip", "-o", "-4", "addr", "show", "scope", "global"],
                             capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        out = ""
    for line in out.splitlines():
        fields = line.split()
        if "inet" in fields:
            addresses.append(fields[fields.index("inet") + 1].split("/")[0])
            break
    return addresses


CONNECT_PROBE = """
import errno, socket, sys
for target in sys.argv[1:]:
    host, port = target.rsplit(":", 1)
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(3)
    try:
        s.connect((host, int(port)))
        print(target, "CONNECTED")
    except socket.timeout:
        print(target, "TIMEOUT")
    except OSError as e:
        print(target, errno.errorcode.get(e.errno, e.errno))
    finally:
        s.close()
"""


def _open_host_listeners():
    listeners = []
    for address in _host_addresses():
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((address, 0))
        sock.listen(16)
        sock.setblocking(False)
        listeners.append(sock)
    return listeners


def test_host_listeners_are_unreachable(run):
    listeners = []
    try:
        listeners = _open_host_listeners()
        targets = [f"{s.getsockname()[0]}:{s.getsockname()[1]}" for s in listeners]
        r = run(CONNECT_PROBE, "python", "--timeout", "30s", args=targets)
        r.expect("ok", rc=0)
        results = dict(line.split() for line in r["stdout"].splitlines())
        assert set(results) == set(targets), r["stdout"]
        for target, outcome in results.items():
            # ECONNREFUSED: 127.0.0.1 is the sandbox's own loopback, where nothing listens.
            assert outcome in ("ENETUNREACH", "ECONNREFUSED"), (target, outcome)
        # The evidence on the host side: not one connection reached any listener.
        for sock in listeners:
            readable, _, _ = select.select([sock], [], [], 0)
            assert not readable, f"listener {sock.getsockname()} saw a connection"
            with pytest.raises(BlockingIOError):
                sock.accept()
        # Control: the same listeners do accept a connection from the host itself.
        for sock in listeners:
            probe = socket.create_connection(sock.getsockname(), timeout=3)
            readable, _, _ = select.select([sock], [], [], 3)
            assert readable
            conn, _ = sock.accept()
            conn.close()
            probe.close()
    finally:
        for sock in listeners:
            sock.close()


def test_control_host_listeners_reachable_without_netns(run):
    # Control: TCP on loopback is allowed inside (issue 11), so the network namespace is the one
    # layer between the program and the host's listeners. With only that layer off, the same
    # probe reaches them, and the listeners see it.
    listeners = []
    try:
        listeners = _open_host_listeners()
        targets = [f"{s.getsockname()[0]}:{s.getsockname()[1]}" for s in listeners]
        r = run(CONNECT_PROBE, "python", "--timeout", "30s", "--test-without", "netns",
                args=targets)
        r.expect("ok", rc=0)
        results = dict(line.split() for line in r["stdout"].splitlines())
        assert results == {t: "CONNECTED" for t in targets}, r["stdout"]
        for sock in listeners:
            readable, _, _ = select.select([sock], [], [], 3)
            assert readable, f"listener {sock.getsockname()} saw nothing"
            sock.accept()[0].close()
    finally:
        for sock in listeners:
            sock.close()
