"""The servers a fleet of sandboxd nodes runs beside them, started for the fleet's tests
(tests/integration/test_fleet.py) and its benchmark (bench/fleet.py), each on loopback ports,
stopped by its pid and removed after. Stdlib only.

- PostgreSQL: Debian's postgresql (15 on Debian 12), its own cluster made by initdb in a temp
  dir, run as the `postgres` user the package creates (initdb and postgres refuse root);
- HAProxy: Debian's haproxy with the project's own deploy/haproxy.cfg, its bind address and
  server lines (those marked "fleet:") replaced by the caller's.

Their temp dirs are named /tmp/sandboxd-*, so that the leak audit (scripts/leak_audit.py) finds
one left behind, and held with its flock while in use, so that they are not one meanwhile."""

import contextlib
import errno
import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time

import leak_audit

DEPLOY_HAPROXY_CFG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "deploy",
                                  "haproxy.cfg")


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# What a server prints (sandboxd serve, PostgreSQL, HAProxy: strerror's words) when another
# process took its port.
ADDRESS_IN_USE = os.strerror(errno.EADDRINUSE)


def listener_pids(port):
    """The pids holding a socket that listens on 127.0.0.1:port (or on any address).

    A connection that succeeds proves only that something listens there: make test runs two
    integration stages side by side, each picking free ports, so the other stage's server may
    have taken the port between free_port() and our server's bind (ours then exits with
    EADDRINUSE, perhaps after our probe was answered by theirs)."""
    inodes = set()
    with open("/proc/net/tcp") as table:
        next(table)
        for row in table:
            fields = row.split()
            address, state, inode = fields[1], fields[3], fields[9]
            host, hex_port = address.split(":")
            if state == "0A" and int(hex_port, 16) == port and host in ("0100007F", "00000000"):
                inodes.add(f"socket:[{inode}]")
    pids = set()
    for fd_dir in glob.glob("/proc/[0-9]*/fd") if inodes else []:
        with contextlib.suppress(OSError):
            if any(os.readlink(os.path.join(fd_dir, fd)) in inodes for fd in os.listdir(fd_dir)):
                pids.add(int(fd_dir.split("/")[2]))
    return pids


def postgres_bin_dir():
    """The newest PostgreSQL's bin directory, or None."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"),
                   key=lambda p: int(p.split("/")[4]) if p.split("/")[4].isdigit() else 0)
    return os.path.dirname(found[-1]) if found else None


def postgres_account():
    """The postgres account's pwd entry, or None."""
    try:
        return pwd.getpwnam("postgres")
    except KeyError:
        return None


def haproxy_binary():
    """HAProxy's path, or None."""
    if shutil.which("haproxy"):
        return shutil.which("haproxy")
    return "/usr/sbin/haproxy" if os.path.exists("/usr/sbin/haproxy") else None


def _read_text(path):
    """A server's log, "" when there is none yet."""
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def _as_postgres(account):
    def demote():
        os.setgid(account.pw_gid)
        os.setgroups([])
        os.setuid(account.pw_uid)
    return demote


class Postgres:
    """One cluster. start() and stop() may be called again (a restart keeps the data). on_pid
    (optional) is told the postmaster's pid when it starts, and None when it stops."""

    def __init__(self, bin_dir, account, on_pid=None):
        self.bin_dir, self.account, self.on_pid = bin_dir, account, on_pid
        self.dir = tempfile.mkdtemp(prefix="sandboxd-postgres-")
        self.held = leak_audit.hold(self.dir)
        os.chown(self.dir, self.account.pw_uid, self.account.pw_gid)
        self.data = os.path.join(self.dir, "data")
        self.log_path = os.path.join(self.dir, "postgres.log")
        self.proc = None
        self.started = False
        self.port = free_port()
        made = subprocess.run([os.path.join(self.bin_dir, "initdb"), "-D", self.data, "-U",
                               "postgres", "--auth=trust", "-E", "UTF8", "--no-sync",
                               "--no-instructions"],
                              preexec_fn=_as_postgres(self.account), capture_output=True,
                              text=True, timeout=120, cwd=self.dir, check=False)
        if made.returncode != 0:
            self.remove()
            raise RuntimeError(f"initdb failed:\n{made.stderr[-3000:]}")

    @property
    def url(self):
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def start(self):
        # Its first start may find the port taken (listener_pids); a restart keeps its port,
        # which the nodes' configs name.
        for _attempt in range(8):
            log_before = len(self.log())
            with open(self.log_path, "ab") as log:
                # fsync off: a test's cluster is thrown away; the socket directory is its own.
                self.proc = subprocess.Popen(
                    [os.path.join(self.bin_dir, "postgres"), "-D", self.data, "-p",
                     str(self.port), "-k", self.dir, "-c", "listen_addresses=127.0.0.1", "-c",
                     "fsync=off", "-c", "max_connections=60"],
                    stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd=self.dir,
                    preexec_fn=_as_postgres(self.account), start_new_session=True)
            if self.on_pid:
                self.on_pid(self.proc.pid)
            if self._wait_ready():
                self.started = True
                return self
            exited, self.proc = self.proc.returncode, None  # reaped: its pid is no longer ours
            if self.started or ADDRESS_IN_USE not in self.log()[log_before:]:
                raise RuntimeError(f"postgres exited with {exited}:\n{self.log()[-3000:]}")
            self.port = free_port()
        raise RuntimeError("postgres found no free port in 8 attempts")

    def _wait_ready(self):
        """True once the postmaster accepts connections on its port; False if it exited."""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                if self.on_pid:
                    self.on_pid(None)
                return False
            ready = subprocess.run([os.path.join(self.bin_dir, "pg_isready"), "-q", "-h",
                                    "127.0.0.1", "-p", str(self.port)], check=False)
            if ready.returncode == 0 and self.proc.pid in listener_pids(self.port):
                return True
            time.sleep(0.1)
        raise RuntimeError(f"postgres did not get ready within 60 s:\n{self.log()[-3000:]}")

    def stop(self):
        """Fast shutdown (SIGINT: clients are disconnected), by the postmaster's pid."""
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
        self.proc = None
        if self.on_pid:
            self.on_pid(None)
        # Its port is free once it has gone: no process of this cluster (they run in its data
        # directory) listens there. (Another stage's server may, having taken the port since.)
        for pid in listener_pids(self.port):
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{pid}/cwd") == self.data:
                    raise RuntimeError(f"port {self.port} still listens after postgres stopped")

    def url_of(self, database):
        return self.url.rsplit("/", 1)[0] + "/" + database

    def sql(self, statement, database="postgres"):
        """Runs statement through psql in database; returns its output (unaligned, tuples
        only)."""
        out = subprocess.run([os.path.join(self.bin_dir, "psql"), "-X", "-A", "-t", "-q",
                              "-v", "ON_ERROR_STOP=1", self.url_of(database), "-c", statement],
                             capture_output=True, text=True, timeout=30, check=False,
                             preexec_fn=_as_postgres(self.account), cwd=self.dir)
        if out.returncode != 0:
            raise RuntimeError(f"psql: {out.stderr}")
        return out.stdout.strip()

    def log(self):
        return _read_text(self.log_path)

    def remove(self):
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
        os.close(self.held)


def render_haproxy_cfg(port, node_ports):
    """deploy/haproxy.cfg with its "fleet:" lines (bind, servers) made the caller's."""
    with open(DEPLOY_HAPROXY_CFG) as f:
        lines = f.read().splitlines()
    out, servers_done, bind_done = [], False, False
    for line in lines:
        if line.rstrip().endswith("# fleet: bind"):
            out.append(f"    bind 127.0.0.1:{port}")
            bind_done = True
        elif line.rstrip().endswith("# fleet: server"):
            if not servers_done:
                out += [f"    server node{i + 1} 127.0.0.1:{p}" for i, p in enumerate(node_ports)]
                servers_done = True
        else:
            out.append(line)
    if not (servers_done and bind_done):
        raise RuntimeError(f"{DEPLOY_HAPROXY_CFG} has no '# fleet: bind' or '# fleet: server' line")
    return "\n".join(out) + "\n"


class HAProxy:
    """HAProxy in the foreground (-db) in front of node_ports; remove() stops it by its pid."""

    def __init__(self, binary, node_ports, on_pid=None):
        self.binary, self.node_ports, self.on_pid = binary, node_ports, on_pid
        self.port = None
        self.dir = tempfile.mkdtemp(prefix="sandboxd-haproxy-")
        self.held = leak_audit.hold(self.dir)
        self.config = os.path.join(self.dir, "haproxy.cfg")
        self.log_path = os.path.join(self.dir, "haproxy.log")
        self.proc = None

    @property
    def base(self):
        return f"http://127.0.0.1:{self.port}"

    def start(self):
        for _attempt in range(8):
            self.port = free_port()
            with open(self.config, "w") as f:
                f.write(render_haproxy_cfg(self.port, self.node_ports))
            log_before = len(self.log())
            with open(self.log_path, "ab") as log:
                self.proc = subprocess.Popen([self.binary, "-db", "-f", self.config],
                                             stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                             start_new_session=True)
            if self.on_pid:
                self.on_pid(self.proc.pid)
            if self._wait_listening():
                return self
            exited, self.proc = self.proc.returncode, None  # reaped: its pid is no longer ours
            if ADDRESS_IN_USE not in self.log()[log_before:]:
                raise RuntimeError(f"haproxy exited with {exited}:\n{self.log()[-3000:]}")
        raise RuntimeError("haproxy found no free port in 8 attempts")

    def _wait_listening(self):
        """True once HAProxy itself listens on its port; False if it exited."""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                if self.on_pid:
                    self.on_pid(None)
                return False
            if self.proc.pid in listener_pids(self.port):
                return True
            time.sleep(0.05)
        raise RuntimeError(f"haproxy did not listen within 30 s:\n{self.log()[-3000:]}")

    def log(self):
        return _read_text(self.log_path)

    def remove(self):
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGUSR1)  # soft stop: finish what is open, exit
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    self.proc.kill()
                self.proc.wait(timeout=10)
            self.proc = None
            if self.on_pid:
                self.on_pid(None)
        shutil.rmtree(self.dir, ignore_errors=True)
        os.close(self.held)
