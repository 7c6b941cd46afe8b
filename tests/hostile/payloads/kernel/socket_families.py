"""Hostile payload (kernel): every address family Python's socket module knows, other than
AF_UNIX, AF_INET and AF_INET6 (AF_NETLINK with NETLINK_ROUTE, NETLINK_AUDIT, NETLINK_XFRM,
NETLINK_KOBJECT_UEVENT, NETLINK_NETFILTER, NETLINK_GENERIC; AF_PACKET, AF_ALG, AF_VSOCK, AF_KEY
via its number, AF_CAN, AF_TIPC, AF_RDS, AF_BLUETOOTH, AF_QIPCRTR, ...), with each socket type.
Every attempt must be refused with EAFNOSUPPORT by the sandbox's family filter.

One JSON line per attempt: {"op": "socket", "family": "AF_NETLINK", "type": ..., "proto": ...,
"ret": -1, "errno": "EAFNOSUPPORT"} ("OK" and the fd when a socket was made; closed at once)."""
import errno
import json
import socket

ALLOWED = {"AF_UNIX", "AF_INET", "AF_INET6"}
families = {name: getattr(socket, name) for name in dir(socket)
            if name.startswith("AF_") and isinstance(getattr(socket, name), int)}
# Families Python does not name on every build, by number.
families.setdefault("AF_KEY", 15)
families.setdefault("AF_ALG", 38)
families.setdefault("AF_VSOCK", 40)
families.setdefault("AF_XDP", 44)
families.setdefault("AF_MCTP", 45)

NETLINK_PROTOCOLS = [0, 4, 6, 9, 12, 15, 16]  # ROUTE, SOCK_DIAG, XFRM, AUDIT, NETFILTER, UEVENT, GENERIC
TYPES = [socket.SOCK_STREAM, socket.SOCK_DGRAM, socket.SOCK_RAW, socket.SOCK_SEQPACKET]

for name, family in sorted(families.items()):
    if name in ALLOWED or family in (socket.AF_UNIX, socket.AF_INET, socket.AF_INET6):
        continue
    protocols = NETLINK_PROTOCOLS if name == "AF_NETLINK" else [0]
    for kind in TYPES:
        for proto in protocols:
            try:
                s = socket.socket(family, kind, proto)
            except OSError as e:
                code = errno.errorcode.get(e.errno, str(e.errno))
                print(json.dumps({"op": "socket", "family": name, "type": int(kind), "proto": proto,
                                  "ret": -1, "errno": code}), flush=True)
            else:
                print(json.dumps({"op": "socket", "family": name, "type": int(kind), "proto": proto,
                                  "ret": s.fileno(), "errno": "OK"}), flush=True)
                s.close()
