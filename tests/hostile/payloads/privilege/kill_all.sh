# Hostile payload (privilege): kill everything. kill(-1, SIGKILL) reaches every process the
# caller may signal; then the sandbox's init (pid 1) directly, and every host pid the harness
# passes as an argument (a canary process it started outside). One JSON line per attempt.

# $1 op, $2 target, $3 the kill command's exit status, $4 its error message.
report() {
    case "$4" in
        *"No such process"*) errno='"ESRCH"' ;;
        *"not permitted"*) errno='"EPERM"' ;;
        *"Invalid argument"*|*"invalid"*) errno='"EINVAL"' ;;
        "") errno=null ;;
        *) errno='"UNKNOWN"' ;;
    esac
    if [ "$3" = 0 ]; then ret=0; errno=null; else ret=-1; fi
    printf '{"op": "%s", "target": "%s", "ret": %s, "errno": %s}\n' "$1" "$2" "$ret" "$errno"
}

attempt() { # op target signal pid
    # The shell itself sends (no $(...) subshell): kill(-1) spares the caller, not its parent.
    kill -s "$3" -- "$4" 2>/tmp/kill.err
    rc=$?
    report "$1" "$2 ($3)" "$rc" "$(cat /tmp/kill.err)"
}

# Something of our own for kill(-1) to hit, so that the call has targets inside too.
sleep 30 &
sleep 30 &
attempt kill_all "-1" KILL -1

# The sandbox's init: a signal it accepted would be the program reaching the supervisor's side.
for sig in 0 KILL STOP; do
    attempt kill_init 1 "$sig" 1
done

for pid in "$@"; do
    for sig in 0 KILL; do
        attempt kill_host_pid "$pid" "$sig" "$pid"
    done
done
exit 0
