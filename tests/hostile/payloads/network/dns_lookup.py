"""Hostile payload (network): DNS as an exfiltration channel. Resolves a unique name (argument 1,
or a random one) through the C library (getaddrinfo, gethostbyname: /etc/hosts, then the
resolver, which without /etc/resolv.conf asks 127.0.0.1:53), then sends hand-made DNS queries
over UDP and TCP to port 53 of the addresses in the remaining arguments (the host's loopback and
its non-loopback address). Every lookup must fail and no query may reach the host: the harness
listens on the host's 127.0.0.1:53 (when free) and counts datagrams.

One JSON line per attempt: {"op": NAME, "ret": R, "errno": NAME}; resolver failures report the
EAI_* name ("OK" when a name resolved)."""
import errno
import json
import os
import random
import socket
import struct
import sys

# Keep the resolver quick: one try, one second (glibc reads RES_OPTIONS at its first lookup).
os.environ["RES_OPTIONS"] = "timeout:1 attempts:1"

name = sys.argv[1] if len(sys.argv) > 1 else "sandboxd-hostile-%08x.example.com" % random.getrandbits(32)
servers = sys.argv[2:]

EAI = {getattr(socket, n): n for n in dir(socket) if n.startswith("EAI_")}


def report(op, ret, err, **extra):
    print(json.dumps({"op": op, "ret": ret, "errno": err, **extra}), flush=True)


def oserror_name(e):
    return errno.errorcode.get(e.errno, str(e.errno)) if e.errno else type(e).__name__


try:
    res = socket.getaddrinfo(name, 80)
    report("getaddrinfo", len(res), "OK", name=name)
except socket.gaierror as e:
    report("getaddrinfo", -1, EAI.get(e.errno, str(e.errno)), name=name)

try:
    addr = socket.gethostbyname(name)
    report("gethostbyname", 0, "OK", name=name, addr=addr)
except socket.gaierror as e:
    report("gethostbyname", -1, EAI.get(e.errno, str(e.errno)), name=name)
except OSError as e:
    report("gethostbyname", -1, oserror_name(e), name=name)


def query(qname):
    header = struct.pack(">HHHHHH", random.getrandbits(16), 0x0100, 1, 0, 0, 0)
    body = b"".join(bytes([len(p)]) + p.encode() for p in qname.split(".")) + b"\0"
    return header + body + struct.pack(">HH", 1, 1)


packet = query(name)
for server in servers:
    host = server.rpartition(":")[0] if server.count(":") == 1 else server
    if not host:  # the harness had no non-loopback host address to offer
        report("dns_udp_host", 0, "SKIPPED", server=server, reason="no host address")
        report("dns_tcp", 0, "SKIPPED", server=server, reason="no host address")
        continue
    loop = host.startswith("127.")
    # UDP: on the sandbox's own loopback the datagram is accepted and goes nowhere, so only the
    # host listener's count judges it; the host's address must be unreachable.
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(1)
        try:
            s.sendto(packet, (host, 53))
            s.recvfrom(512)
            report("dns_udp_loopback" if loop else "dns_udp_host", 0, "OK", server=host)
        except OSError as e:
            report("dns_udp_loopback" if loop else "dns_udp_host", -1,
                   oserror_name(e) if not isinstance(e, socket.timeout) else "ETIMEDOUT",
                   server=host)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(2)
        try:
            s.connect((host, 53))
            s.sendall(struct.pack(">H", len(packet)) + packet)
            report("dns_tcp", 0, "OK", server=host)
        except OSError as e:
            report("dns_tcp", -1, oserror_name(e), server=host)
