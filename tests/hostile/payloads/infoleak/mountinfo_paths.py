"""Hostile payload (infoleak): the mount table and cgroup paths as seen from inside. Every entry
of /proc/self/mountinfo, /proc/self/mounts and /proc/self/mountstats must name only the
allowlisted bind targets and the sandbox's own filesystems (/, /usr, /etc/..., /dev and its nodes,
/dev/pts, /dev/shm, /proc, /workspace, /tmp), never a host directory (/root, /home, /work, /var,
/srv, /opt, /mnt, /run, a sandboxd state dir, ...); /proc/self/cgroup must show "/" only. Offending
entries are printed whole. One JSON line per table when it is clean, else one per offending
entry."""
import json
import re

# First path component allowed as a mount point or as the root of a bind inside its filesystem
# (tmpfs roots /workspace, /tmp and /shm are the scratch tmpfs's own directories; devtmpfs roots
# are the device nodes bound one by one).
ALLOWED_FIRST = {"", "usr", "etc", "dev", "proc", "workspace", "tmp", "shm", "lib", "lib32",
                 "lib64", "libx32", "bin", "sbin", "null", "zero", "full", "random", "urandom",
                 "pts", "ptmx"}
# Names that must not occur anywhere in an entry (options included): host directories and the
# daemon's own state.
FORBIDDEN = ("/root", "/home", "/work", "/var", "/srv", "/opt", "/mnt", "/run", "/boot",
             "/old_root", "/media", "/farm", "/sys", "sandboxd")
# A forbidden name counts as a whole path component ("/work" but not "/workspace").
FORBIDDEN_RE = re.compile("(" + "|".join(re.escape(n) for n in FORBIDDEN) + r")(?=$|[/\s,:])")


def empty_sys(mount_point, fstype, options):
    """The one /sys entry that names no host directory: an empty read-only tmpfs over the mount
    point (the gVisor backend's, which hides gVisor's own sysfs; the native backend has none).
    The host's sysfs, or any bind, at /sys stays a finding."""
    return mount_point == "/sys" and fstype == "tmpfs" and "ro" in options.split(",")


def unescape(field):
    return field.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n") \
        .replace("\\134", "\\")


def allowed_path(path):
    parts = path.split("/")
    return path.startswith("/") and parts[1] in ALLOWED_FIRST


def forbidden_in(text):
    return sorted(set(FORBIDDEN_RE.findall(text)))


def report(op, verdict, **extra):
    line = {"op": op, "ret": 0, "errno": verdict}
    line.update(extra)
    print(json.dumps(line), flush=True)


def judge(op, entries):
    """entries: (mount point, problems, line). One line for a clean table, else one per
    offending entry (printed whole)."""
    bad = [(point, problems, line) for point, problems, line in entries if problems]
    if not bad:
        report(op, "ALLOWED", entries=len(entries), mount_points=[p for p, _, _ in entries])
    for point, problems, line in bad:
        report(op, "HOST_PATH", mount_point=point, problems=problems, line=line)


def check_mountinfo():
    with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as f:
        lines = f.read().splitlines()
    entries = []
    for line in lines:
        fields = line.split()
        dash = fields.index("-")
        root, mount_point = unescape(fields[3]), unescape(fields[4])
        problems = []
        if not allowed_path(mount_point):
            problems.append(f"mount point {mount_point}")
        if not allowed_path(root):
            problems.append(f"root {root}")
        problems += [f"names {name}" for name in forbidden_in(" ".join(fields[dash + 1:]))]
        problems += [f"names {name}" for name in forbidden_in(root + " " + mount_point)]
        if root == "/" and empty_sys(mount_point, fields[dash + 1], fields[5]):
            problems = []
        entries.append((mount_point, problems, line))
    judge("mountinfo_entry", entries)


def check_mounts(path, op):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError as e:
        report(op, "ENOENT" if e.errno == 2 else "ERROR", path=path)
        return
    entries = []
    for line in lines:
        fields = line.split()
        if op == "mountstats_entry":
            # "device X mounted on Y with fstype Z"
            mount_point = unescape(fields[4]) if len(fields) > 4 else ""
        else:
            mount_point = unescape(fields[1])
        problems = ([] if allowed_path(mount_point) else [f"mount point {mount_point}"]) + \
            [f"names {name}" for name in forbidden_in(line)]
        if op == "mounts_entry" and len(fields) > 3 and empty_sys(mount_point, fields[2],
                                                                  fields[3]):
            problems = []
        entries.append((mount_point, problems, line))
    judge(op, entries)


def check_cgroup():
    with open("/proc/self/cgroup", encoding="utf-8", errors="replace") as f:
        lines = f.read().splitlines()
    foreign = [line for line in lines if line.split(":", 2)[2] != "/"]
    report("cgroup_path", "HOST_PATH" if foreign else "NAMESPACE_ROOT", hierarchies=len(lines),
           foreign=foreign)


check_mountinfo()
check_mounts("/proc/self/mounts", "mounts_entry")
check_mounts("/proc/self/mountstats", "mountstats_entry")
check_cgroup()
