"""The servers the fleet's tests start beside sandboxd (scripts/fleet_servers.py: PostgreSQL and
HAProxy on loopback ports), as context managers that SKIP, saying what is missing, where Debian's
postgresql or haproxy is not installed, and whose pids the leak checks know for the servers'
(not an exited sandboxd's orphans)."""

import contextlib

import pytest

import fleet_servers
from serve_helpers import helper_pids


def _tracker():
    """on_pid for a server: keeps its current pid in helper_pids."""
    current = []

    def on_pid(pid):
        while current:
            helper_pids.discard(current.pop())
        if pid is not None:
            current.append(pid)
            helper_pids.add(pid)
    return on_pid


@contextlib.contextmanager
def running_postgres():
    """A started cluster, stopped and removed on exit."""
    bin_dir = fleet_servers.postgres_bin_dir()
    if bin_dir is None:
        pytest.skip("PostgreSQL is not installed (scripts/install-deps.sh installs Debian's "
                    "postgresql)")
    account = fleet_servers.postgres_account()
    if account is None:
        pytest.skip("no postgres account (Debian's postgresql package creates it)")
    server = fleet_servers.Postgres(bin_dir, account, on_pid=_tracker())
    try:
        yield server.start()
    finally:
        server.remove()


@contextlib.contextmanager
def running_haproxy(node_ports):
    """HAProxy with deploy/haproxy.cfg in front of node_ports, stopped and removed on exit."""
    binary = fleet_servers.haproxy_binary()
    if binary is None:
        pytest.skip("HAProxy is not installed (scripts/install-deps.sh installs Debian's haproxy)")
    proxy = fleet_servers.HAProxy(binary, node_ports, on_pid=_tracker())
    try:
        yield proxy.start()
    finally:
        proxy.remove()
