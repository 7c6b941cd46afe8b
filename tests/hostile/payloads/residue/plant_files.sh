#!/bin/bash
# Hostile payload (residue), tenant A: plants the run token (argument 1) everywhere a later
# tenant could stumble on it: /tmp (plain and hidden, nested), $TMPDIR, the workspace (cwd),
# $HOME/.cache, /dev/shm (with 24 MiB of data, which is memory charged to this run's cgroup),
# user xattrs on a workspace file and on the /tmp, /dev/shm and workspace directories themselves,
# and starts a burst of 24 processes so that this run's pids peak is high. Every name holds the
# token. Tenant B (search_files.sh) then looks for it.
# Exit status 0 only when every essential plant worked (the harness requires before.status ok),
# so an empty search in B is never an empty plant in A. One JSON line per plant.
token=${1:?token}
failed=0
plant() { # op where command...
    local op=$1 where=$2; shift 2
    if "$@" 2>/dev/null; then e=OK; else e=FAILED; failed=1; fi
    printf '{"op": "%s", "where": "%s", "ret": 0, "errno": "%s"}\n' "$op" "$where" "$e"
}
setx() { /usr/bin/python3 -c 'import os, sys; os.setxattr(sys.argv[1], "user.hostile", sys.argv[2].encode())' "$1" "$2"; }

plant file /tmp sh -c "echo $token > /tmp/$token.txt"
plant file /tmp/.hidden sh -c "mkdir -p /tmp/.hidden-$token/deep && echo $token > /tmp/.hidden-$token/deep/note"
plant file "\$TMPDIR" sh -c "echo $token > ${TMPDIR:-/tmp}/tmpdir-$token"
plant file workspace sh -c "echo $token > ./workspace-$token.txt"
plant file "\$HOME/.cache" sh -c "mkdir -p $HOME/.cache/hostile && echo $token > $HOME/.cache/hostile/cache-$token"
plant file /dev/shm sh -c "echo $token > /dev/shm/$token"
plant file /dev/shm/big sh -c "head -c 25165824 /dev/zero > /dev/shm/big-$token && echo $token >> /dev/shm/big-$token"
# A user xattr: tmpfs keeps them since Linux 6.6; before, the channel does not exist (EOPNOTSUPP,
# not a failed plant).
if setx "./workspace-$token.txt" "$token" 2>/tmp/xattr-error; then
    e=OK
elif grep -q "Operation not supported" /tmp/xattr-error; then
    e=EOPNOTSUPP
else
    e=FAILED
    failed=1
fi
printf '{"op": "xattr", "where": "workspace-file", "ret": 0, "errno": "%s"}\n' "$e"
# Directory xattrs: best effort (outside the sandbox these directories are not ours).
for dir in /tmp /dev/shm "$PWD"; do
    if setx "$dir" "$token" 2>/dev/null; then e=OK; else e=EPERM; fi
    printf '{"op": "xattr_dir", "where": "%s", "ret": 0, "errno": "%s"}\n' "$dir" "$e"
done
# A burst of processes: this run's pids peak must not show up in tenant B's counters.
for _ in $(seq 24); do sleep 0.3 & done
wait
exit $failed
