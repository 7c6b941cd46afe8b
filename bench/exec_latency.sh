#!/bin/sh
# Exec latency, side by side in one run: `/bin/true` and `python3 -c 'print(2+2)'`, bare, under
# `sandboxd run` and under `bwrap --unshare-all`. Prints median and p95 per variant, each
# sandbox's overhead over bare exec and the ratio sandboxd/bwrap, and writes the same as
# markdown to bench/results/exec_latency.md.
#
# usage: bench/exec_latency.sh path/to/sandboxd
#   ITERATIONS=N     timed runs per variant (default 50)
#   OUTPUT=FILE      where the markdown goes (default bench/results/exec_latency.md)
#   VARIANTS=a,b     only these groups: bare, sandboxd, bwrap (default all)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
if [ $# -ne 1 ]; then
        echo "usage: $0 path/to/sandboxd" >&2
        exit 64
fi
exec /usr/bin/python3 "$here/exec_latency.py" \
        --sandboxd "$1" \
        --iterations "${ITERATIONS:-50}" \
        --output "${OUTPUT:-$here/results/exec_latency.md}" \
        --variants "${VARIANTS:-bare,sandboxd,bwrap}" \
        --command-line "$0 $*"
