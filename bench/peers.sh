#!/bin/sh
# sandboxd against its peers, side by side in one run (issue 4's benchmark):
#   1. latency of `python3 -c 'print(2+2)'` and `/bin/sh -c 'exec /bin/true'`: bare, `sandboxd
#      run` (cold), HTTP POST /v1/executions with the pool off (cold) and on (warm), bwrap,
#      firejail, crun and runsc (ptrace); medians, p95, ratios;
#   2. HTTP throughput (wrk) of print(2+2) at several concurrencies against bare exec;
#   3. memory: the daemon's RSS idle and under load, a pooled sandbox's against the interpreter's.
# Writes the results (with the command, date, machine and versions) to bench/results/peers.md,
# checks them against the issue's targets and, when one is missed, profiles the warm load with
# perf. Needs root and the peers: scripts/install-deps.sh --bench. Takes about 8 minutes with
# the defaults. Cleans up everything it starts, also on failure or Ctrl-C.
#
# usage: bench/peers.sh path/to/sandboxd
#   ITERATIONS=N       timed runs per latency variant (default 30)
#   BENCH_SECONDS=S    seconds per throughput row (default 30; 5 for a quick run)
#   CONCURRENCY=a,b    throughput concurrencies (default 1,2,8,32)
#   THROUGHPUT=a,b     throughput targets: bare, http warm, http cold (default all three)
#   VARIANTS=a,b       latency variants (default all: bare,sandboxd run (cold),http cold (pool
#                      off),http warm (pool on),bwrap,firejail,crun,runsc)
#   PROFILE=auto|always|never   perf profile of the warm load (default auto: when a target is missed)
#   OUTPUT=FILE        where the markdown goes (default bench/results/peers.md)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
if [ $# -ne 1 ]; then
        echo "usage: $0 path/to/sandboxd" >&2
        exit 64
fi
command_line="$0 $*"
for knob in ITERATIONS BENCH_SECONDS CONCURRENCY THROUGHPUT VARIANTS PROFILE; do
        eval "value=\${$knob:-}"
        [ -n "$value" ] && command_line="$knob='$value' $command_line"
done
exec /usr/bin/python3 "$here/peers.py" \
        --sandboxd "$1" \
        --iterations "${ITERATIONS:-30}" \
        --seconds "${BENCH_SECONDS:-30}" \
        --concurrency "${CONCURRENCY:-1,2,8,32}" \
        --throughput-targets "${THROUGHPUT:-bare,http warm,http cold}" \
        --variants "${VARIANTS:-bare,sandboxd run (cold),http cold (pool off),http warm (pool on),bwrap,firejail,crun,runsc}" \
        --profile "${PROFILE:-auto}" \
        --output "${OUTPUT:-$here/results/peers.md}" \
        --command-line "$command_line"
