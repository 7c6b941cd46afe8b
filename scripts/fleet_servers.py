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
        with open(self.log_path, "ab") as log:
            # fsync off: a test's cluster is thrown away; the socket directory is its own.
            self.proc = subprocess.Popen(
                [os.path.join(self.bin_dir, "postgres"), "-D", self.data, "-p", str(self.port),
                 "-k", self.dir, "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off",
                 "-c", "max_connections=60"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd=self.dir,
                preexec_fn=_as_postgres(self.account), start_new_session=True)
        if self.on_pid:
            self.on_pid(self.proc.pid)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"postgres exited with {self.proc.returncode}:\n"
                                   f"{self.log()[-3000:]}")
            ready = subprocess.run([os.path.join(self.bin_dir, "pg_isready"), "-q", "-h",
                                    "127.0.0.1", "-p", str(self.port)], check=False)
            if ready.returncode == 0:
                return self
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
        # Its port is free once it has gone: a client connecting now is refused.
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", self.port)) == 0:
                raise RuntimeError(f"port {self.port} still answers after postgres stopped")

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
        self.binary, self.on_pid = binary, on_pid
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="sandboxd-haproxy-")
        self.held = leak_audit.hold(self.dir)
        self.config = os.path.join(self.dir, "haproxy.cfg")
        with open(self.config, "w") as f:
            f.write(render_haproxy_cfg(self.port, node_ports))
        self.log_path = os.path.join(self.dir, "haproxy.log")
        self.proc = None

    @property
    def base(self):
        return f"http://127.0.0.1:{self.port}"

    def start(self):
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen([self.binary, "-db", "-f", self.config],
                                         stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                         start_new_session=True)
        if self.on_pid:
            self.on_pid(self.proc.pid)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"haproxy exited with {self.proc.returncode}:\n"
                                   f"{self.log()[-3000:]}")
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return self
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
