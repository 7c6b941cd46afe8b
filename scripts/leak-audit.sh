#!/bin/sh
# Leak audit, run at the end of `make test`: after every sandbox has been destroyed, nothing of
# sandboxd may remain on the host. Checks, and prints everything it finds:
#   - processes running as a sandbox host uid (>= 2000000000, userns.h SBX_HOST_ID_BASE), zombies
#     included, and processes named sandboxd
#   - sandbox cgroups: any directory below a `sandboxd` parent in any cgroup hierarchy (the
#     parents themselves are sandboxd's own and may stay)
#   - mounts mentioning sandboxd
#   - loop devices backed by files under /tmp/sandboxd*
#   - temp dirs /tmp/sandboxd*
# Exits 1 if anything leaked, else prints "leak-audit: clean" and exits 0.
set -u

SANDBOX_UID_BASE=2000000000
CGROUP_ROOT=${CGROUP_ROOT:-/sys/fs/cgroup}
leaks=0

# report_lines WHAT TEXT: one finding per non-empty line of TEXT.
report_lines() {
        [ -n "$2" ] || return 0
        printf '%s\n' "$2" | sed "s|^|leak-audit: $1: |"
        leaks=$((leaks + $(printf '%s\n' "$2" | wc -l)))
}

# Processes. The Uid line of /proc/PID/status holds the real, effective, saved and fs uid; a
# zombie still has one, and an unreaped sandbox process is a leak too.
found=""
for status in /proc/[0-9]*/status; do
        line=$(awk -v base="$SANDBOX_UID_BASE" '
                /^Name:/ { name = $2 }
                /^State:/ { state = $2 }
                /^Uid:/ { for (i = 2; i <= 5; i++) if ($i + 0 >= base) uid = $i }
                END { if (uid != "") printf "%s uid=%s state=%s", name, uid, state }
        ' "$status" 2>/dev/null) || continue
        if [ -n "$line" ]; then
                pid=${status#/proc/}
                found="$found${found:+
}pid ${pid%/status} $line"
        fi
done
report_lines "process running as a sandbox uid" "$found"

found=""
for comm in /proc/[0-9]*/comm; do
        [ "$(cat "$comm" 2>/dev/null)" = sandboxd ] || continue
        pid=${comm#/proc/}
        pid=${pid%/comm}
        found="$found${found:+
}pid $pid: $(tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline")"
done
report_lines "sandboxd process still running" "$found"

# cgroups: the children of every hierarchy's sandboxd parent (-prune: the parents are not
# searched for further parents).
if [ -d "$CGROUP_ROOT" ]; then
        parents=$(find "$CGROUP_ROOT" -mindepth 1 -maxdepth 6 -type d -name sandboxd -prune \
                2>/dev/null)
        found=""
        for parent in $parents; do
                children=$(find "$parent" -mindepth 1 -type d 2>/dev/null)
                for child in $children; do
                        procs=$(tr '\n' ' ' 2>/dev/null <"$child/cgroup.procs" | sed 's/ $//')
                        found="$found${found:+
}$child${procs:+ (processes: $procs)}"
                done
        done
        report_lines "cgroup left behind" "$found"
fi

# Mounts, in this mount namespace.
report_lines "mount left behind" "$(grep sandboxd /proc/self/mountinfo 2>/dev/null)"

# Loop devices whose backing file is one of sandboxd's scratch images.
if command -v losetup >/dev/null 2>&1; then
        report_lines "loop device still attached" "$(losetup --list --noheadings \
                --output NAME,BACK-FILE 2>/dev/null | awk '$2 ~ "^/tmp/sandboxd"')"
fi

# Temp dirs and files.
found=""
for path in /tmp/sandboxd*; do
        [ -e "$path" ] || continue
        found="$found${found:+
}$path"
done
report_lines "temp path left behind" "$found"

if [ "$leaks" -ne 0 ]; then
        echo "leak-audit: $leaks leak(s) found"
        exit 1
fi
echo "leak-audit: clean"
exit 0
