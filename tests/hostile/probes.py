"""Host-side evidence collectors of the hostile suite (see harness.py for the declaration format).

A probe is set up on the host before a run, checked on the host after it, and cleaned up. It never
asks the payload anything: what the payload printed is at most compared against a secret the probe
chose itself (a canary token must NOT appear). Every probe works in both run modes:
  "sandbox"  the payload ran through `sandboxd run` (host uids >= SANDBOX_UID_BASE, cgroups under
             /sys/fs/cgroup/*/sandboxd/, or /sys/fs/cgroup/sandboxd/ on the pure v2 layout)
  "outside"  the `outside` control: the payload ran unsandboxed as uid 65534 inside the harness's
             safety cgroup (the harness records what was still alive there when the main process
             exited: ctx.outside_leftovers)

Declaring a probe: `probes = ["name", { name = "name", param = value }, ...]`.
Variables a probe offers to the payload are substituted into `args` and `stdin` as {variable}.

Probe (variables)                    clean when
  no_leftover_processes              no process of a host uid >= 2000000000 outside a live sandboxd,
                                     no sandboxd cgroup left behind (outside: nothing of the payload
                                     alive once its main process exited)
  no_leftover_cgroups                only the cgroup half of the above
  host_sysv_ipc_unchanged (ipc_key)  no new SysV shm/msg/sem object on the host with key ipc_key or
                                     owned by a sandbox uid (outside: by uid 65534); removes them
  host_mqueue_absent (mq_name)       the POSIX message queue mq_name does not exist on the host
  host_disk_unchanged                free space of the host's /, /tmp, /var/tmp, /dev/shm did not drop
                                     by more than max_drop (param, default "8M"; paths = [...])
  canary_file (canary_path,          a host file holding a random token: sha256, mtime, inode, size,
     canary_dir, canary_token)       mode unchanged and the token not in the run's stdout/stderr
                                     (params: mode = 0o644, dir_mode = 0o755)
  host_files_unchanged               sha256/mtime/inode/size/mode of `paths` (param) unchanged
  tcp_listener (tcp_port, host_ip,   a TCP listener on 0.0.0.0:tcp_port accepted 0 connections
     lo_ip)                          (host_ip: the host's first non-loopback IPv4, or "" if none)
  udp_listener (udp_port, host_ip,   a UDP socket on 0.0.0.0:udp_port received 0 datagrams
     lo_ip)
  listeners                          tcp_listener + udp_listener
  unix_listener (unix_path,          a path socket (in a 0777 dir) and an abstract socket
     unix_abstract)                  ("\\0" + unix_abstract) accepted 0 connections
  mountinfo_unchanged                the harness's (host) /proc/self/mountinfo is unchanged
  clock_not_stepped                  CLOCK_REALTIME - CLOCK_MONOTONIC moved by < 0.5 s
  canary_process (canary_pid)        a `sleep` the harness started as root outside is still alive
  token_absent_from_output (token)   the run token does not appear in the judged run's stdout/stderr
  loop_devices_unchanged             the set of attached loop devices is unchanged
  dns_listener (host_ip, lo_ip)      UDP and TCP listeners on the host's 0.0.0.0:53 (where the
                                     sandbox's resolver, having no resolv.conf, would send) got 0
                                     queries; when port 53 is taken the probe is clean with a
                                     recorded "skipped" reason
  host_token_files_absent            no file or directory whose name holds the run token exists in
                                     the host's /tmp, /var/tmp, /dev/shm (2 levels; param paths);
                                     removes what it finds (the outside control plants there)
  token_processes_absent             no process on the host has the run token in its command line
                                     (a session's daemon carries it): read once the run is over
                                     (sandbox: `sandboxd session` has exited; outside: what the
                                     cells left is still alive then, killed after the check)
"""

import ctypes
import ctypes.util
import errno as errno_module
import fcntl
import hashlib
import os
import re
import secrets
import select
import shutil
import socket
import subprocess
import threading
import time

# userns.h: slot N maps the sandbox's ids 0..65535 to host uids from
# SANDBOX_UID_BASE + N * SANDBOX_IDS_PER_SLOT on.
SANDBOX_UID_BASE = 2000000000
SANDBOX_IDS_PER_SLOT = 65536
OUTSIDE_UID = 65534
CGROUP_ROOT = "/sys/fs/cgroup"
# The pure cgroup v2 layout (most hosts; tests/uml): one hierarchy mounted at CGROUP_ROOT itself,
# whose root has cgroup.controllers. Otherwise v1 hierarchies sit in directories below it, with
# the controller-less v2 one (if any) at CGROUP_ROOT/unified.
CGROUP_V2 = os.path.exists(os.path.join(CGROUP_ROOT, "cgroup.controllers"))
# Every hierarchy sandboxd may create a per-sandbox child in (v1 controllers and the unified one).
SANDBOXD_CGROUP_HIERARCHIES = ("unified",) if CGROUP_V2 else (
    "pids", "memory", "cpu", "cpuacct", "freezer", "cpuset", "blkio", "devices", "unified",
    "systemd")


def hierarchy_dir(hierarchy):
    """Where the hierarchy that carries `hierarchy` ("unified", "memory", "pids", ...) is
    mounted: CGROUP_ROOT for every name on the pure v2 layout."""
    return CGROUP_ROOT if CGROUP_V2 else os.path.join(CGROUP_ROOT, hierarchy)
# A run of another job may be between creating its cgroup and starting its child, or between
# killing and removing: only something that stays wrong this long is a leftover.
RECHECK_WINDOW_S = 1.5


class ProbeError(Exception):
    """A probe could not be set up or checked (a harness problem, never a verdict)."""


def parse_size(value):
    """'64K' / '16M' / '1G' / 4096 -> bytes (binary units)."""
    if isinstance(value, (int, float)):
        return int(value)
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGkmg]?)i?[Bb]?\s*", str(value))
    if not match:
        raise ValueError(f"bad size {value!r}")
    factor = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[match.group(2).lower()]
    return int(float(match.group(1)) * factor)


# ---------------------------------------------------------------------------------------------
# process and cgroup scans


def read_process_table():
    """pid -> {ppid, uids, comm, state} for every process visible on the host."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status", encoding="utf-8", errors="replace") as f:
                status = f.read()
        except OSError:
            continue
        info = {"pid": int(entry)}
        for line in status.splitlines():
            key, _, value = line.partition(":")
            if key == "PPid":
                info["ppid"] = int(value.split()[0])
            elif key == "Uid":
                info["uids"] = [int(x) for x in value.split()]
            elif key == "Name":
                info["comm"] = value.strip()
            elif key == "State":
                info["state"] = value.split()[0]
        if "ppid" in info and "uids" in info:
            table[info["pid"]] = info
    return table


def is_supervisor(info):
    # sandboxd's supervisor runs as real root; the sandbox's own init is also named sandboxd but
    # runs under the sandbox's mapped uid, so it never counts as an owner.
    return info.get("comm") == "sandboxd" and info["uids"][0] == 0


def owned_by_live_supervisor(pid, table):
    seen = set()
    while pid in table and pid not in seen:
        seen.add(pid)
        info = table[pid]
        if is_supervisor(info):
            return True
        pid = info["ppid"]
    return False


def sandbox_orphans():
    """Processes of a sandbox uid that no live sandboxd supervisor owns: {pid: description}."""
    table = read_process_table()
    found = {}
    for pid, info in table.items():
        if max(info["uids"]) < SANDBOX_UID_BASE:
            continue
        if owned_by_live_supervisor(pid, table):
            continue
        found[pid] = f"pid {pid} uid {info['uids'][0]} comm {info.get('comm')} " \
                     f"state {info.get('state')} ppid {info['ppid']}"
    return found


def token_processes(token):
    """{pid: description} of every host process whose command line holds `token`."""
    found = {}
    needle = token.encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        if needle in cmdline:
            args = cmdline.split(b"\0")
            shown = b" ".join(args[:1] + [a for a in args[1:] if needle in a])
            found[int(entry)] = f"pid {entry} argv {shown.decode('utf-8', 'replace')[:160]}"
    return found


def cgroup_procs(path):
    try:
        with open(os.path.join(path, "cgroup.procs"), encoding="ascii") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def sandboxd_cgroup_children():
    """Every per-sandbox cgroup directory under any hierarchy's sandboxd/ parent."""
    found = []
    for hierarchy in SANDBOXD_CGROUP_HIERARCHIES:
        parent = os.path.join(hierarchy_dir(hierarchy), "sandboxd")
        try:
            names = os.listdir(parent)
        except OSError:
            continue
        for name in names:
            path = os.path.join(parent, name)
            if os.path.isdir(path):
                found.append(path)
    return found


def slot_held_by_live_sandboxd(path):
    """Whether a live sandboxd holds the slot of this cgroup directory: it keeps an flock on the
    slot's primary directory (cgroup2, else v1 memory) from just after creating it until it has
    removed it (src/sandbox/native/cgroup.c). A concurrent run's cgroup is briefly empty while it
    is set up or torn down; it is no leftover."""
    name = os.path.basename(path)
    for hierarchy in ("unified", "memory"):
        primary = os.path.join(hierarchy_dir(hierarchy), "sandboxd", name)
        try:
            fd = os.open(primary, os.O_RDONLY | os.O_DIRECTORY)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)  # closing drops the lock if it was taken
        return False
    return False


def orphan_cgroups(strict):
    """sandboxd cgroups no live run explains: empty ones (strict: all of them), or ones holding a
    process that no live supervisor owns. A slot a live sandboxd holds is never one."""
    table = read_process_table()
    found = {}
    for path in sandboxd_cgroup_children():
        if not strict and slot_held_by_live_sandboxd(path):
            continue
        procs = cgroup_procs(path)
        if strict:
            found[path] = f"{path} ({len(procs)} processes)"
        elif not procs:
            found[path] = f"{path} (empty)"
        # A pid missing from the table was born after it was read (or died since): unknown,
        # not unowned (a pool spawning sandboxes otherwise looks like a leak).
        elif any(pid in table and not owned_by_live_supervisor(pid, table) for pid in procs):
            found[path] = f"{path} (holds unowned processes {procs[:8]})"
    return found


def persistent(scan, baseline):
    """Run scan() until what it finds (minus what existed before the run) stays found for
    RECHECK_WINDOW_S; returns that stable set."""
    deadline = time.monotonic() + RECHECK_WINDOW_S
    current = {k: v for k, v in scan().items() if k not in baseline}
    while current and time.monotonic() < deadline:
        time.sleep(0.1)
        again = scan()
        current = {k: v for k, v in current.items() if k in again}
    return current


# ---------------------------------------------------------------------------------------------
# probe base


class Probe:
    """Subclasses set `name`, may override setup/check/cleanup. check returns (clean, findings)."""

    name = ""

    def __init__(self, params):
        self.params = dict(params)

    def setup(self, ctx):
        return {}

    def check(self, ctx, result):
        return True, {}

    def cleanup(self, ctx):
        pass


def run_output(result):
    if not result:
        return ""
    return (result.get("stdout") or "") + (result.get("stderr") or "")


class NoLeftoverCgroups(Probe):
    name = "no_leftover_cgroups"

    def setup(self, ctx):
        self.baseline = set(orphan_cgroups(strict=False)) if ctx.mode == "sandbox" else set()
        return {}

    def check(self, ctx, result):
        if ctx.mode == "outside":
            return True, {"cgroups": []}
        left = persistent(lambda: orphan_cgroups(strict=False), self.baseline)
        return not left, {"cgroups": sorted(left.values())}


class NoLeftoverProcesses(NoLeftoverCgroups):
    name = "no_leftover_processes"

    def setup(self, ctx):
        super().setup(ctx)
        self.process_baseline = set(sandbox_orphans()) if ctx.mode == "sandbox" else set()
        return {}

    def check(self, ctx, result):
        if ctx.mode == "outside":
            left = ctx.outside_leftovers or []
            return not left, {"processes": left}
        left = persistent(sandbox_orphans, self.process_baseline)
        cgroups_clean, cgroup_findings = super().check(ctx, result)
        findings = {"processes": sorted(left.values()), **cgroup_findings}
        return (not left) and cgroups_clean, findings


# ---------------------------------------------------------------------------------------------
# IPC


def read_sysvipc():
    """(kind, id) -> {key, uid, ...} for every SysV object on the host."""
    objects = {}
    for kind in ("shm", "msg", "sem"):
        try:
            with open(f"/proc/sysvipc/{kind}", encoding="ascii") as f:
                lines = f.read().splitlines()
        except OSError:
            continue
        if not lines:
            continue
        header = lines[0].split()
        id_field = {"shm": "shmid", "msg": "msqid", "sem": "semid"}[kind]
        for line in lines[1:]:
            row = dict(zip(header, line.split()))
            if id_field in row:
                objects[(kind, int(row[id_field]))] = {
                    "key": int(row["key"]), "uid": int(row["uid"]), "cuid": int(row["cuid"]),
                    "cpid": int(row.get("cpid", row.get("lspid", -1)))}
    return objects


class HostSysvIpcUnchanged(Probe):
    name = "host_sysv_ipc_unchanged"

    def setup(self, ctx):
        self.key = secrets.randbelow(0x7FFFFFF0) + 1
        self.before = read_sysvipc()
        return {"ipc_key": str(self.key), "ipc_key_hex": f"0x{self.key:08x}"}

    def _suspects(self, ctx):
        suspects = {}
        for ident, row in read_sysvipc().items():
            if row["key"] == self.key:
                suspects[ident] = row
            elif ident not in self.before:
                uid = row["cuid"]
                if uid >= SANDBOX_UID_BASE or (ctx.mode == "outside" and uid == OUTSIDE_UID):
                    suspects[ident] = row
        return suspects

    def check(self, ctx, result):
        suspects = self._suspects(ctx)
        return not suspects, {"new_sysv_objects": [
            f"{kind} id {ident} key 0x{row['key']:08x} uid {row['uid']}"
            for (kind, ident), row in sorted(suspects.items())]}

    def cleanup(self, ctx):
        # Remove only what is certainly this run's: its key, an escaped sandbox's objects, or
        # (outside) what its own main process created; another harness's outside control may
        # hold uid-65534 objects of its own at the same time.
        own_pids = getattr(ctx, "outside_pids", None) or set()
        flags = {"shm": "-m", "msg": "-q", "sem": "-s"}
        for (kind, ident), row in self._suspects(ctx).items():
            if (row["key"] != self.key and row["cuid"] < SANDBOX_UID_BASE
                    and row["cpid"] not in own_pids):
                continue
            subprocess.run(["ipcrm", flags[kind], str(ident)], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, check=False)


_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
_libc.mq_open.restype = ctypes.c_int
_libc.mq_open.argtypes = [ctypes.c_char_p, ctypes.c_int]
_libc.mq_unlink.argtypes = [ctypes.c_char_p]


class HostMqueueAbsent(Probe):
    name = "host_mqueue_absent"

    def setup(self, ctx):
        self.mq_name = "/sandboxd-hostile-" + secrets.token_hex(6)
        return {"mq_name": self.mq_name}

    def check(self, ctx, result):
        fd = _libc.mq_open(self.mq_name.encode(), os.O_RDONLY)
        if fd >= 0:
            os.close(fd)
            return False, {"mqueue": f"{self.mq_name} exists on the host"}
        err = ctypes.get_errno()
        if err != errno_module.ENOENT:
            raise ProbeError(f"mq_open({self.mq_name}) on the host: {os.strerror(err)}")
        return True, {"mqueue": "absent"}

    def cleanup(self, ctx):
        _libc.mq_unlink(self.mq_name.encode())


# ---------------------------------------------------------------------------------------------
# files and disks


def file_fingerprint(path):
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return {"exists": False}
    digest = None
    if os.path.isfile(path) and not os.path.islink(path):
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        digest = h.hexdigest()
    return {"exists": True, "sha256": digest, "mtime_ns": st.st_mtime_ns, "inode": st.st_ino,
            "size": st.st_size, "mode": st.st_mode, "nlink": st.st_nlink, "uid": st.st_uid}


class HostFilesUnchanged(Probe):
    name = "host_files_unchanged"

    def setup(self, ctx):
        self.paths = list(self.params.get("paths", []))
        if not self.paths:
            raise ProbeError("host_files_unchanged needs paths = [...]")
        self.before = {p: file_fingerprint(p) for p in self.paths}
        return {}

    def check(self, ctx, result):
        changed = {}
        for path in self.paths:
            after = file_fingerprint(path)
            if after != self.before[path]:
                changed[path] = {k: [self.before[path].get(k), after.get(k)]
                                 for k in set(after) | set(self.before[path])
                                 if after.get(k) != self.before[path].get(k)}
        return not changed, {"changed": changed}


class CanaryFile(Probe):
    name = "canary_file"

    def setup(self, ctx):
        self.dir = os.path.join(ctx.workdir, "canary-" + secrets.token_hex(4))
        os.mkdir(self.dir)
        os.chmod(self.dir, self.params.get("dir_mode", 0o755))
        self.token = "CANARY-" + secrets.token_hex(16)
        self.path = os.path.join(self.dir, "canary")
        with open(self.path, "w", encoding="ascii") as f:
            f.write(self.token + "\n")
        os.chmod(self.path, self.params.get("mode", 0o644))
        self.before = file_fingerprint(self.path)
        return {"canary_path": self.path, "canary_dir": self.dir, "canary_token": self.token}

    def check(self, ctx, result):
        after = file_fingerprint(self.path)
        findings = {}
        if after != self.before:
            findings["changed"] = {k: [self.before.get(k), after.get(k)]
                                   for k in set(after) | set(self.before)
                                   if after.get(k) != self.before.get(k)}
        if self.token in run_output(result):
            findings["token_in_output"] = True
        return not findings, findings

    def cleanup(self, ctx):
        shutil.rmtree(self.dir, ignore_errors=True)


def host_free_bytes(paths):
    free, seen = {}, set()
    for path in paths:
        try:
            st = os.statvfs(path)
            dev = os.stat(path).st_dev
        except OSError:
            continue
        if dev in seen:
            continue
        seen.add(dev)
        free[path] = st.f_bavail * st.f_frsize
    return free


class HostDiskUnchanged(Probe):
    name = "host_disk_unchanged"

    def setup(self, ctx):
        self.paths = self.params.get("paths", ["/", "/tmp", "/var/tmp", "/dev/shm", "/run"])
        self.max_drop = parse_size(self.params.get("max_drop", "8M"))
        self.before = host_free_bytes(self.paths)
        return {}

    def check(self, ctx, result):
        after = host_free_bytes(self.paths)
        drops = {p: self.before[p] - after.get(p, 0) for p in self.before}
        bad = {p: d for p, d in drops.items() if d > self.max_drop}
        return not bad, {"free_drop_bytes": drops, "max_drop": self.max_drop}


class LoopDevicesUnchanged(Probe):
    name = "loop_devices_unchanged"

    @staticmethod
    def snapshot():
        found = {}
        for dev in sorted(os.listdir("/sys/block")):
            if dev.startswith("loop"):
                try:
                    with open(f"/sys/block/{dev}/loop/backing_file", encoding="utf-8") as f:
                        found[dev] = f.read().strip()
                except OSError:
                    pass
        return found

    def setup(self, ctx):
        self.before = self.snapshot()
        return {}

    def check(self, ctx, result):
        after = self.snapshot()
        new = {d: f for d, f in after.items() if self.before.get(d) != f}
        return not new, {"new_loop_devices": new}


# ---------------------------------------------------------------------------------------------
# network


def host_ipv4():
    """The host's first non-loopback IPv4 address, or ''."""
    try:
        out = subprocess.run(["ip", "-4", "-o", "addr", "show"], capture_output=True, text=True,
                             check=False, timeout=5).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""
    for line in out.splitlines():
        match = re.search(r"inet (\d+\.\d+\.\d+\.\d+)/", line)
        if match and not match.group(1).startswith("127."):
            return match.group(1)
    return ""


class _CountingServer:
    """Counts connections (stream) or datagrams on some sockets from a background thread."""

    def __init__(self, sockets, stream):
        self.sockets, self.stream = sockets, stream
        self.count, self.peers = 0, []
        self.stop_r, self.stop_w = os.pipe()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self):
        while True:
            ready, _, _ = select.select(self.sockets + [self.stop_r], [], [])
            if self.stop_r in ready:
                return
            for sock in ready:
                try:
                    if self.stream:
                        conn, peer = sock.accept()
                        conn.close()
                    else:
                        _, peer = sock.recvfrom(65536)
                except OSError:
                    continue
                self.count += 1
                self.peers.append(str(peer))

    def close(self):
        os.write(self.stop_w, b"x")
        self.thread.join(timeout=5)
        for sock in self.sockets:
            sock.close()
        os.close(self.stop_r)
        os.close(self.stop_w)


class TcpListener(Probe):
    name = "tcp_listener"
    kind = socket.SOCK_STREAM

    def setup(self, ctx):
        sock = socket.socket(socket.AF_INET, self.kind)
        sock.bind(("0.0.0.0", 0))
        if self.kind == socket.SOCK_STREAM:
            sock.listen(64)
        port = sock.getsockname()[1]
        socks = [sock]
        try:  # the same port on IPv6 too, when the host has it
            sock6 = socket.socket(socket.AF_INET6, self.kind)
            sock6.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock6.bind(("::", port))
            if self.kind == socket.SOCK_STREAM:
                sock6.listen(64)
            socks.append(sock6)
        except OSError:
            pass
        self.server = _CountingServer(socks, self.kind == socket.SOCK_STREAM)
        var = "tcp_port" if self.kind == socket.SOCK_STREAM else "udp_port"
        return {var: str(port), "host_ip": host_ipv4(), "lo_ip": "127.0.0.1"}

    def check(self, ctx, result):
        time.sleep(0.05)  # let the accept thread drain what may have just arrived
        return self.server.count == 0, {"received": self.server.count,
                                        "peers": self.server.peers[:8]}

    def cleanup(self, ctx):
        self.server.close()


class UdpListener(TcpListener):
    name = "udp_listener"
    kind = socket.SOCK_DGRAM


class Listeners(Probe):
    name = "listeners"

    def setup(self, ctx):
        self.parts = [TcpListener({}), UdpListener({})]
        out = {}
        for part in self.parts:
            out.update(part.setup(ctx))
        return out

    def check(self, ctx, result):
        clean, findings = True, {}
        for part in self.parts:
            ok, found = part.check(ctx, result)
            clean = clean and ok
            findings[part.name] = found
        return clean, findings

    def cleanup(self, ctx):
        for part in self.parts:
            part.cleanup(ctx)


class DnsListener(Probe):
    name = "dns_listener"

    def setup(self, ctx):
        self.server, self.skipped = None, None
        socks = []
        try:
            udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            socks.append(udp)
            udp.bind(("0.0.0.0", 53))
            tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            socks.append(tcp)
            tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            tcp.bind(("0.0.0.0", 53))
            tcp.listen(16)
        except OSError as exc:
            for sock in socks:
                sock.close()
            self.skipped = f"cannot listen on port 53: {exc.strerror}"
            return {"host_ip": host_ipv4(), "lo_ip": "127.0.0.1"}
        # One counter for both: a query over either transport is a query that left.
        self.udp_server = _CountingServer([udp], False)
        self.server = _CountingServer([tcp], True)
        return {"host_ip": host_ipv4(), "lo_ip": "127.0.0.1"}

    def check(self, ctx, result):
        if self.skipped:
            return True, {"skipped": self.skipped}
        time.sleep(0.05)
        count = self.udp_server.count + self.server.count
        return count == 0, {"received": count,
                            "peers": (self.udp_server.peers + self.server.peers)[:8]}

    def cleanup(self, ctx):
        if self.server is not None:
            self.server.close()
            self.udp_server.close()


class HostTokenFilesAbsent(Probe):
    name = "host_token_files_absent"

    def _scan(self, ctx):
        found = []
        for top in self.params.get("paths", ["/tmp", "/var/tmp", "/dev/shm"]):
            for root, dirs, names in os.walk(top):
                depth = root[len(top):].count(os.sep)
                for name in dirs + names:
                    if ctx.token in name:
                        found.append(os.path.join(root, name))
                if depth >= 1:
                    dirs[:] = []  # two levels: top/x and top/x/y
                else:
                    dirs[:] = [d for d in dirs if ctx.token not in d]
        return found

    def check(self, ctx, result):
        found = self._scan(ctx)
        return not found, {"found": found[:8]}

    def cleanup(self, ctx):
        for path in self._scan(ctx):
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                try:
                    os.unlink(path)
                except OSError:
                    pass


class TokenProcessesAbsent(Probe):
    name = "token_processes_absent"

    def check(self, ctx, result):
        found = persistent(lambda: token_processes(ctx.token), set()) if ctx.mode == "sandbox" \
            else token_processes(ctx.token)
        return not found, {"processes": sorted(found.values())[:8]}


class UnixListener(Probe):
    name = "unix_listener"

    def setup(self, ctx):
        self.dir = os.path.join(ctx.workdir, "unix-" + secrets.token_hex(4))
        os.mkdir(self.dir)
        os.chmod(self.dir, 0o777)
        path = os.path.join(self.dir, "sock")
        path_sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        path_sock.bind(path)
        os.chmod(path, 0o777)
        path_sock.listen(16)
        self.abstract = "sandboxd-hostile-" + secrets.token_hex(6)
        abstract_sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        abstract_sock.bind("\0" + self.abstract)
        abstract_sock.listen(16)
        self.server = _CountingServer([path_sock, abstract_sock], True)
        return {"unix_path": path, "unix_abstract": self.abstract}

    def check(self, ctx, result):
        time.sleep(0.05)
        return self.server.count == 0, {"accepted": self.server.count}

    def cleanup(self, ctx):
        self.server.close()
        shutil.rmtree(self.dir, ignore_errors=True)


# ---------------------------------------------------------------------------------------------
# host state


class MountinfoUnchanged(Probe):
    name = "mountinfo_unchanged"

    @staticmethod
    def snapshot():
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as f:
            return f.read().splitlines()

    def setup(self, ctx):
        self.before = self.snapshot()
        return {}

    def check(self, ctx, result):
        after = self.snapshot()
        added = [line for line in after if line not in self.before]
        removed = [line for line in self.before if line not in after]
        return not added and not removed, {"added": added[:8], "removed": removed[:8]}


def realtime_offset():
    return time.clock_gettime(time.CLOCK_REALTIME) - time.clock_gettime(time.CLOCK_MONOTONIC)


class ClockNotStepped(Probe):
    name = "clock_not_stepped"

    def setup(self, ctx):
        self.before = realtime_offset()
        return {}

    def check(self, ctx, result):
        step = realtime_offset() - self.before
        return abs(step) < 0.5, {"realtime_step_s": round(step, 6)}


class CanaryProcess(Probe):
    name = "canary_process"

    def setup(self, ctx):
        self.proc = subprocess.Popen(["sleep", "3600"], stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return {"canary_pid": str(self.proc.pid)}

    def check(self, ctx, result):
        code = self.proc.poll()
        return code is None, {"canary_alive": code is None, "canary_exit": code}

    def cleanup(self, ctx):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


class TokenAbsentFromOutput(Probe):
    name = "token_absent_from_output"

    def check(self, ctx, result):
        found = ctx.token in run_output(result)
        return not found, {"token_in_output": found}


PROBES = {cls.name: cls for cls in (
    NoLeftoverProcesses, NoLeftoverCgroups, HostSysvIpcUnchanged, HostMqueueAbsent,
    HostDiskUnchanged, CanaryFile, HostFilesUnchanged, TcpListener, UdpListener, Listeners,
    UnixListener, MountinfoUnchanged, ClockNotStepped, CanaryProcess, TokenAbsentFromOutput,
    LoopDevicesUnchanged, DnsListener, HostTokenFilesAbsent, TokenProcessesAbsent)}


def make_probe(spec):
    """A probe from its declaration: "name" or {name = "name", param = ...}."""
    if isinstance(spec, str):
        name, params = spec, {}
    elif isinstance(spec, dict) and "name" in spec:
        params = {k: v for k, v in spec.items() if k != "name"}
        name = spec["name"]
    else:
        raise ProbeError(f"bad probe declaration {spec!r}")
    if name not in PROBES:
        raise ProbeError(f"unknown probe {name!r} (known: {', '.join(sorted(PROBES))})")
    return PROBES[name](params)
