# Hostile payload (infoleak): identify the host from a shell. The machine's identifiers
# (/etc/machine-id, the dbus one, the boot id, DMI serials and UUIDs), the host's name and
# network (/etc/hosts, /etc/resolv.conf, /proc/net/route, /sys/class/net), users (/etc/passwd,
# /etc/group), and the kernel log through the dmesg tool. Each file is either absent/refused or
# printed. One JSON line per attempt on stdout.

newline='
'
tab=$(printf '\t')

# $1 op, $2 target, $3 exit status, $4 error message or the content
report() {
    if [ "$3" = 0 ]; then
        ret=0 errno=null
    else
        ret=-1
        case "$4" in
            *"No such file"*|*"nonexistent"*) errno='"ENOENT"' ;;
            *"Permission denied"*) errno='"EACCES"' ;;
            *"not permitted"*) errno='"EPERM"' ;;
            *) errno='"UNKNOWN"' ;;
        esac
    fi
    # Piped through tools only when it needs them: a fork and an exec cost ~50 ms each on
    # tests/uml's guest kernel, and most reports are one short line of an error.
    detail=$4
    [ "${#detail}" -gt 300 ] && detail=$(printf '%s' "$detail" | head -c 300)
    case "$detail" in
        *[\"\\"$tab"]*|*"$newline"*) detail=$(printf '%s' "$detail" | tr -d '"\\' | tr '\n\t' '  ') ;;
    esac
    printf '{"op": "%s", "target": "%s", "ret": %s, "errno": %s, "detail": "%s"}\n' \
        "$1" "$2" "$ret" "$errno" "$detail"
}

read_file() { # op path
    out=$(cat "$2" 2>&1)
    report "$1" "$2" $? "$out"
}

# A file of the list below that a kernel of the sandbox's own serves (gVisor's) holds that
# kernel's facts, not the host's: when the content says so, the verdict names how, in place of
# the content (a host kernel's file never reads so: it has routes, neighbours, interfaces, tasks,
# an uptime since the host booted, a CPU's model name, the host's memory in use).
#   NO_ROUTES, NO_NEIGHBOURS  /proc/net/route, arp: the header alone
#   LOOPBACK_ONLY             /proc/net/dev: no interface but lo
#   SANDBOX_UPTIME            /proc/uptime: under a minute (the sandbox's kernel started with the run)
#   NO_HOST_TASKS             /proc/loadavg: no task at all (a host's counts the reader's)
#   CPUID_ONLY                /proc/cpuinfo: no model name (only what the cpuid instruction tells
#                             any program, sandboxed or not)
#   SANDBOX_MEMORY            /proc/meminfo: at most 256 MiB in use (the run's memory cap; its
#                             MemTotal is the host's, as sysinfo(2) tells a native sandbox's program)
own_kernel_file() { # path content: prints the verdict, or nothing
    case "$1" in
        /proc/net/route|/proc/net/arp)
            [ "$(printf '%s\n' "$2" | awk 'NR > 1' | wc -l)" = 0 ] || return
            [ "$1" = /proc/net/route ] && echo NO_ROUTES || echo NO_NEIGHBOURS ;;
        /proc/net/dev)
            [ -z "$(printf '%s\n' "$2" | awk -F: 'NR > 2 { gsub(/ /, "", $1); if ($1 != "lo") print $1 }')" ] &&
                echo LOOPBACK_ONLY ;;
        /proc/uptime)
            [ "${2%%.*}" -lt 60 ] 2>/dev/null && echo SANDBOX_UPTIME ;;
        /proc/loadavg)
            case "$2" in *" "*/0" "*) echo NO_HOST_TASKS ;; esac ;;
        /proc/cpuinfo)
            printf '%s\n' "$2" | grep -q '^model name[[:space:]]*: unknown$' &&
                ! printf '%s\n' "$2" | grep -q '^model name[[:space:]]*: [^u]' && echo CPUID_ONLY ;;
        /proc/meminfo)
            printf '%s\n' "$2" | awk '/^MemTotal:/ { t = $2 } /^MemFree:/ { f = $2 }
                END { exit !(t > 0 && f > 0 && t - f <= 262144) }' && echo SANDBOX_MEMORY ;;
    esac
}

read_host_file() { # path
    if out=$(cat "$1" 2>&1) && verdict=$(own_kernel_file "$1" "$out") && [ -n "$verdict" ]; then
        printf '{"op": "host_file", "target": "%s", "ret": 0, "errno": "%s", "detail": ""}\n' \
            "$1" "$verdict"
        return
    fi
    read_file host_file "$1"
}

for path in /etc/machine-id /var/lib/dbus/machine-id /proc/sys/kernel/random/boot_id \
        /sys/class/dmi/id/product_uuid /sys/class/dmi/id/product_serial \
        /sys/class/dmi/id/board_serial /sys/devices/virtual/dmi/id/product_name \
        /proc/device-tree/serial-number /etc/ssh/ssh_host_ed25519_key.pub; do
    read_file machine_id "$path"
done
# (/etc/os-release is present on purpose since issue 11: it names the distribution the runtime
# comes from, the same on every host of one release, not this host.)
for path in /etc/resolv.conf /proc/net/route \
        /proc/net/arp /proc/net/dev /sys/class/net/eth0/address /sys/class/net/lo/address \
        /proc/partitions /proc/swaps /proc/cpuinfo /proc/meminfo /proc/loadavg /proc/uptime; do
    read_host_file "$path"
done
# The sandbox writes its own /etc/passwd, /etc/group and /etc/hosts (root, sandbox, nobody,
# localhost): any other name in them is the host's file showing through.
own_names() { # path allowed-names...
    path=$1
    shift
    if ! names=$(cut -d: -f1 "$path" 2>/tmp/err.txt); then
        report sandbox_file "$path" 1 "$(cat /tmp/err.txt)"
        return
    fi
    [ "$path" = /etc/hosts ] && names=$(awk '{ for (i = 2; i <= NF; i++) print $i }' "$path")
    foreign=""
    for name in $names; do
        case " $* " in
            *" $name "*) ;;
            *) foreign="$foreign $name" ;;
        esac
    done
    [ -z "$foreign" ] && verdict='"SANDBOX_OWN"' || verdict='"HOST_CONTENT"'
    printf '{"op": "sandbox_file", "target": "%s", "ret": 0, "errno": %s, "detail": "foreign:%s"}\n' \
        "$path" "$verdict" "$(printf '%s' "$foreign" | head -c 200)"
}
own_names /etc/passwd root sandbox nobody
own_names /etc/group root sandbox nogroup
own_names /etc/hosts localhost sandbox ip6-localhost ip6-loopback

# /proc/self/net/dev exists in every process's view: it must show the sandbox's own network
# namespace (loopback only), not the host's interfaces.
if [ -r /proc/self/net/dev ]; then
    ifaces=$(awk -F: 'NR > 2 { gsub(/ /, "", $1); print $1 }' /proc/self/net/dev | tr '\n' ' ')
    case " $ifaces" in
        " lo "|" ") verdict='"LOOPBACK_ONLY"' ;;
        *) verdict='"HOST_INTERFACES"' ;;
    esac
    printf '{"op": "net_interfaces", "target": "/proc/self/net/dev", "ret": 0, "errno": %s, "detail": "%s"}\n' \
        "$verdict" "$ifaces"
fi
# gVisor's kernel answers syslog(2) with a log of its own making, the same in every sandbox
# ("Starting gVisor...", then jokes): GVISOR_LOG, not the host's kernel log.
out=$(dmesg 2>&1 | head -c 300)
case "$out" in
    *"Operation not permitted"*) report dmesg dmesg 1 "$out" ;;
    *"No such file"*) report dmesg dmesg 1 "$out" ;;
    "[    0.000000] Starting gVisor..."*)
        printf '{"op": "dmesg", "target": "dmesg", "ret": 0, "errno": "GVISOR_LOG", "detail": ""}\n' ;;
    *) report dmesg dmesg 0 "$out" ;;
esac
exit 0
