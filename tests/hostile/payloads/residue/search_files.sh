#!/bin/bash
# Hostile payload (residue), tenant B: runs right after tenant A (plant_files.sh) planted the
# token (argument 1) and searches every place A used, by name, by content and in user xattrs:
# /tmp, $TMPDIR, the workspace, $HOME, /dev/shm, /var/tmp, /run (where present).
# First a self-test: B plants its own marker (the token reversed, so it never matches A's) in
# the same places and must find it with the same search, so that "not found" means absent, not a
# blind search. One JSON line per place: {"op": "search", "where": W, "errno": "ENOENT"} when the
# token is absent, "FOUND" (with what) when it is there; {"op": "selftest", "errno": "FOUND"}.
token=${1:?token}
marker=$(printf '%s' "$token" | rev)
places=()
for p in /tmp "${TMPDIR:-/tmp}" "$PWD" "$HOME" /dev/shm /var/tmp /run; do
    [ -d "$p" ] || continue
    case " ${places[*]} " in *" $p "*) continue ;; esac # once each ($HOME is the workspace)
    places+=("$p")
done

search() { # needle place -> prints what matched, status 0 when something did
    local needle=$1 place=$2 hits
    hits=$( {
        find "$place" -xdev -name "*$needle*" 2>/dev/null
        grep -rlsF --no-messages -e "$needle" "$place" 2>/dev/null
        find "$place" -xdev \( -type f -o -type d \) -print0 2>/dev/null |
            /usr/bin/python3 -c '
import os, sys
needle = sys.argv[1].encode()
for path in sys.stdin.buffer.read().split(b"\0"):
    if not path:
        continue
    try:
        for name in os.listxattr(path):
            if needle in os.getxattr(path, name):
                print("xattr:" + path.decode(errors="replace"))
    except OSError:
        pass
' "$needle"
    } | head -n 5 | tr '\n' ' ')
    printf '%s' "$hits"
    [ -n "$hits" ]
}

# Self-test: a file in /tmp, one in the workspace, and an xattr on an empty workspace file (where
# tmpfs keeps user xattrs: Linux 6.6; EOPNOTSUPP before, when that channel does not exist).
echo "$marker" > /tmp/selftest-file && echo "$marker" > ./selftest-file && : > ./selftest-x
for probe_place in /tmp "$PWD"; do
    if hits=$(search "$marker" "$probe_place"); then e=FOUND; else e=ENOENT; fi
    printf '{"op": "selftest", "where": "%s", "ret": 0, "errno": "%s", "hits": "%s"}\n' \
        "$probe_place" "$e" "$hits"
done
if ! /usr/bin/python3 -c 'import os, sys; os.setxattr("selftest-x", "user.selftest", sys.argv[1].encode())' \
    "$marker" 2>/tmp/xattr-error; then
    grep -q "Operation not supported" /tmp/xattr-error && e=EOPNOTSUPP || e=FAILED
    hits=""
elif hits=$(search "$marker" ./selftest-x); then e=FOUND; else e=ENOENT; fi
printf '{"op": "selftest_xattr", "where": "%s", "ret": 0, "errno": "%s", "hits": "%s"}\n' \
    "$PWD/selftest-x" "$e" "$hits"
rm -f /tmp/selftest-file /tmp/xattr-error ./selftest-file ./selftest-x

for place in "${places[@]}"; do
    if hits=$(search "$token" "$place"); then e=FOUND; else e=ENOENT; fi
    printf '{"op": "search", "where": "%s", "ret": 0, "errno": "%s", "hits": "%s"}\n' \
        "$place" "$e" "${hits//\"/}"
done
