# Bash fork bomb: a binary tree of subshells (depth $1, ~3*2^depth processes) that all stay
# alive. The watcher uses builtins only (no fork of its own) and reports bash's first fork
# failure ("fork: retry: Resource temporarily unavailable" = EAGAIN) or that the tree is complete.
depth=${1:-7}
need=$(( 3 * (1 << depth) - 2 ))
mkfifo /tmp/tick && exec 9<>/tmp/tick
bomb() { if (( $1 <= 0 )); then sleep 30; return; fi; bomb $(( $1 - 1 )) & bomb $(( $1 - 1 )) & wait; }
bomb "$depth" 2>/tmp/bomb.err &
for (( i = 0; i < 200; i++ )); do
        if read -r line </tmp/bomb.err && [[ $line == *"Resource temporarily unavailable"* ]]; then
                echo '{"op": "fork", "ret": -1, "errno": "EAGAIN"}'
                exit 0
        fi
        procs=(/proc/[0-9]*)
        if (( ${#procs[@]} >= need )); then
                echo '{"op": "fork", "ret": 0, "errno": null, "processes": '"${#procs[@]}"'}'
                exit 0
        fi
        read -r -t 0.02 -u 9
done
echo '{"op": "fork", "ret": 0, "errno": "UNDECIDED"}'
