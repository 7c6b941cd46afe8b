"""Hostile payload (kernel): the kernel interfaces with the longest exploit records, called the
way an exploit would, with VALID arguments: io_uring_setup (a real ring), bpf (a map and a
trivial socket-filter program), perf_event_open (a software counter on itself, user space only),
userfaultfd (user-mode-only, what an unprivileged exploit gets), keyctl/add_key/request_key (the
session keyring). Unfiltered, several of these succeed for an unprivileged process on this kernel;
the sandbox must refuse every one (the policy's EPERM).

One JSON line per call: {"op": NAME, "ret": R, "errno": "EPERM"} ("OK" when it succeeded; the fd
is closed right away)."""
import ctypes
import errno
import json
import os
import struct

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long

NR = {"io_uring_setup": 425, "bpf": 321, "perf_event_open": 298, "userfaultfd": 323,
      "keyctl": 250, "add_key": 248, "request_key": 249, "io_uring_enter": 426,
      "io_uring_register": 427}


def call(op, nr, *args):
    ctypes.set_errno(0)
    cargs = [ctypes.c_long(a) if isinstance(a, int) else a for a in args]
    ret = libc.syscall(ctypes.c_long(nr), *cargs)
    err = ctypes.get_errno()
    name = "OK" if ret >= 0 else errno.errorcode.get(err, str(err))
    print(json.dumps({"op": op, "ret": ret, "errno": name}), flush=True)
    return ret


def close_if_fd(ret):
    if ret >= 0:
        try:
            os.close(ret)
        except OSError:
            pass


# io_uring_setup(entries, struct io_uring_params *): 120-byte params, zeroed.
params = ctypes.create_string_buffer(120)
close_if_fd(call("io_uring_setup", NR["io_uring_setup"], 8, params))
# io_uring_enter / io_uring_register on a bogus ring: refused before the fd is looked at.
call("io_uring_enter", NR["io_uring_enter"], 0, 0, 0, 0, 0, 0)
call("io_uring_register", NR["io_uring_register"], 0, 0, 0, 0)

# bpf(BPF_MAP_CREATE, {BPF_MAP_TYPE_ARRAY, key 4, value 4, 1 entry}, size)
attr = ctypes.create_string_buffer(struct.pack("IIII", 2, 4, 4, 1) + bytes(112))
close_if_fd(call("bpf_map_create", NR["bpf"], 0, attr, 128))
# bpf(BPF_PROG_LOAD, socket filter "r0 = 0; exit")
insns = ctypes.create_string_buffer(struct.pack("<BBhi", 0xb7, 0, 0, 0) + struct.pack("<BBhi", 0x95, 0, 0, 0))
license_ = ctypes.create_string_buffer(b"GPL")
prog = struct.pack("IIQQ", 1, 2, ctypes.addressof(insns), ctypes.addressof(license_))
prog_attr = ctypes.create_string_buffer(prog + bytes(128 - len(prog)))
close_if_fd(call("bpf_prog_load", NR["bpf"], 5, prog_attr, 128))

# perf_event_open(PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_CLOCK, exclude_kernel|exclude_hv), self
pe = bytearray(128)
struct.pack_into("IIQ", pe, 0, 1, 128, 0)  # type, size, config
struct.pack_into("Q", pe, 40, (1 << 5) | (1 << 6))  # flags: exclude_kernel, exclude_hv
pe_buf = ctypes.create_string_buffer(bytes(pe))
close_if_fd(call("perf_event_open", NR["perf_event_open"], pe_buf, 0, -1, -1, 0))

# userfaultfd(UFFD_USER_MODE_ONLY | O_CLOEXEC)
close_if_fd(call("userfaultfd", NR["userfaultfd"], 1 | os.O_CLOEXEC))

# keyctl(KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING, create=0)
call("keyctl", NR["keyctl"], 0, -3, 0)
# add_key("user", "hostile", "x", 1, KEY_SPEC_PROCESS_KEYRING)
call("add_key", NR["add_key"], ctypes.c_char_p(b"user"), ctypes.c_char_p(b"hostile"),
     ctypes.c_char_p(b"x"), 1, -2)
# request_key("user", "hostile", NULL, 0)
call("request_key", NR["request_key"], ctypes.c_char_p(b"user"), ctypes.c_char_p(b"hostile"), 0, 0)
