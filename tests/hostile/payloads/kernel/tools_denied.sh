#!/bin/bash
# Hostile payload (kernel): the stock tools an attacker reaches for first, each of which needs a
# call the seccomp policy denies: unshare (new user/net/mount namespaces), nsenter (setns),
# setarch (personality: 32-bit domain, no ASLR, READ_IMPLIES_EXEC), dmesg (syslog), ip (netlink
# route and xfrm), and mount. Each must be refused with the policy's errno, which the tool prints
# as its strerror text. Also reports the seccomp mode of processes the program execs (inherited
# through fork and execve).
# One JSON line per attempt: {"op": NAME, "ret": EXIT, "errno": NAME} ("OK" when it worked).

# Sets $errno, and try cuts the detail with bash's own expansions: a command substitution or a
# pipe is a fork, ~50 ms on tests/uml's guest kernel.
errno_of() { # $1 = exit code, $2 = stderr text
    if [ "$1" = 0 ]; then errno=OK; return; fi
    case "${2,,}" in
        *"operation not permitted"*) errno=EPERM ;;
        *"address family not supported"*) errno=EAFNOSUPPORT ;;
        *"invalid argument"*) errno=EINVAL ;;
        *"function not implemented"*) errno=ENOSYS ;;
        *"permission denied"*) errno=EACCES ;; # mount(8) says "permission denied" for EPERM too
        *"no such file"*) errno=ENOENT ;;
        *"read-only file system"*) errno=EROFS ;;
        *) errno=OTHER ;;
    esac
}

try() { # $1 = op, rest = command
    local op=$1; shift
    local err rc errno detail
    err=$("$@" 2>&1 >/dev/null); rc=$?
    err=${err//\"/\'}
    errno_of "$rc" "$err"
    detail=${err:0:120}
    detail=${detail//[$'\n'\\]/}
    printf '{"op": "%s", "ret": %d, "errno": "%s", "detail": "%s"}\n' "$op" "$rc" "$errno" "$detail"
}

mkdir -p /tmp/mnt
try unshare_user unshare --user true
try unshare_net unshare --net true
try unshare_mount unshare --mount true
try unshare_map_root unshare --map-root-user true
try nsenter_user nsenter --user=/proc/self/ns/user true
try setarch_linux32 setarch linux32 true
try setarch_no_aslr setarch "$(uname -m)" -R true
try setarch_read_implies_exec setarch "$(uname -m)" -X true
try dmesg dmesg
try ip_link ip link show
try ip_route ip route show
try ip_xfrm ip xfrm state
try mount_tmpfs mount -t tmpfs none /tmp/mnt

# The filter is inherited by every process the program starts.
for _ in 1 2 3; do
    mode=$(awk '/^Seccomp:/ {print $2}' /proc/self/status)
    case "$mode" in 2) name=FILTER ;; 1) name=STRICT ;; 0) name=DISABLED ;; *) name=UNKNOWN ;; esac
    printf '{"op": "seccomp_mode_child", "ret": %s, "errno": "%s"}\n' "${mode:-0}" "$name"
done
