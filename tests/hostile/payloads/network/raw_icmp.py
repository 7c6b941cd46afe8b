"""Hostile payload (network): what a Python ping/packet-forging tool tries: a raw ICMP socket to
send an echo request, a raw IPPROTO_RAW socket to forge an IP header (IP_HDRINCL), an IPv6 raw
ICMPv6 socket, and the unprivileged ping socket (SOCK_DGRAM + IPPROTO_ICMP). Raw sockets must be
refused by the seccomp policy (EAFNOSUPPORT); ping sockets by the sandbox network namespace's
ping_group_range (EACCES).

One JSON line per attempt: {"op": "raw_socket" | "ping_socket", "what": W, "ret": R,
"errno": NAME}; a socket that was made also sends one packet to 127.0.0.1 ("send" line)."""
import errno
import json
import socket
import struct

ECHO = struct.pack("!BBHHH", 8, 0, 0xf7ff, 0, 0)  # ICMP echo request, checksum precomputed


def report(op, what, ret, err):
    print(json.dumps({"op": op, "what": what, "ret": ret,
                      "errno": "OK" if err is None else errno.errorcode.get(err, str(err))}),
          flush=True)


def attempt(op, what, family, kind, proto, packet=ECHO, dest=("127.0.0.1", 0)):
    try:
        s = socket.socket(family, kind, proto)
    except OSError as e:
        report(op, what, -1, e.errno)
        return
    report(op, what, s.fileno(), None)
    with s:
        try:
            if proto == socket.IPPROTO_RAW:
                s.setsockopt(socket.IPPROTO_IP, socket.IP_HDRINCL, 1)
            report("send", what, s.sendto(packet, dest), None)
        except OSError as e:
            report("send", what, -1, e.errno)


# A forged IPv4 header claiming to come from 192.0.2.99, carrying the echo request.
forged = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(ECHO), 0, 0, 64, socket.IPPROTO_ICMP, 0,
                     socket.inet_aton("192.0.2.99"), socket.inet_aton("127.0.0.1")) + ECHO

attempt("raw_socket", "icmp", socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
attempt("raw_socket", "ipproto_raw_hdrincl", socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW,
        packet=forged)
attempt("raw_socket", "tcp", socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_TCP)
attempt("raw_socket", "icmpv6", socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6,
        dest=("::1", 0))
attempt("raw_socket", "raw_nonblock", socket.AF_INET, socket.SOCK_RAW | socket.SOCK_NONBLOCK,
        socket.IPPROTO_ICMP)
attempt("ping_socket", "icmp_dgram", socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP)
attempt("ping_socket", "icmpv6_dgram", socket.AF_INET6, socket.SOCK_DGRAM, socket.IPPROTO_ICMPV6,
        dest=("::1", 0))
