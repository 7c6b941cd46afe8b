#!/bin/sh
# Runs every libFuzzer harness of a fuzz build (meson -Dfuzz=true; `make fuzz` makes one) for
# SECONDS each, as many at once as there are CPUs, and prints one line per harness: runs,
# execs/s, coverage.
#
# usage: tests/fuzz/run.sh BUILD_DIR SECONDS [HARNESS...]
#
# Each harness starts from its seeds, tests/fuzz/corpus/<harness>/, read-only: the inputs it finds
# go to BUILD_DIR/fuzz/corpus/<harness>/, which later runs start from too, so that the source
# tree stays clean and a long run's findings are not lost. A crash, leak, UBSan report or hang
# (an input taking over 10 s) fails the run; the input that caused it is kept as
# BUILD_DIR/fuzz/artifacts/<harness>-crash-<sha1> (reproduce: BUILD_DIR/tests/fuzz/<harness> FILE)
# and the end of the harness's log is printed. Full logs: BUILD_DIR/fuzz/logs/<harness>.log.
#
# The binary seeds of fuzz_protocol are messages the encoders made (a RUN with code, a RUN with
# files, args, env and stdin, two RESULTs, a REFUSED, a CONFIG, a STATS_REPLY, a PING and a
# CANCEL); after a change of the protocol, regenerate them with the encoders of
# protocol/protocol.h.
set -u
if [ $# -lt 2 ]; then
        echo "usage: $0 BUILD_DIR SECONDS [HARNESS...]" >&2
        exit 64
fi
case $1 in
/*) build=$1 ;;
*) build=$PWD/$1 ;;
esac
cd "$(dirname "$0")/../.." || exit 1
seconds=$2
shift 2
harnesses=${*:-fuzz_protocol fuzz_settings fuzz_config fuzz_mountinfo fuzz_parse fuzz_session_frame fuzz_compat}

mkdir -p "$build/fuzz/artifacts" "$build/fuzz/logs" || exit 1
# fuzz_one NAME: runs one harness, prints its line and leaves NAME in $build/fuzz/failed.NAME when
# it failed.
fuzz_one() {
        name=$1
        exe="$build/tests/fuzz/$name"
        if [ ! -x "$exe" ]; then
                echo "fuzz: $exe is missing (build with: make fuzz-build)" >&2
                : >"$build/fuzz/failed.$name"
                return
        fi
        corpus="$build/fuzz/corpus/$name"
        log="$build/fuzz/logs/$name.log"
        if ! mkdir -p "$corpus"; then
                : >"$build/fuzz/failed.$name"
                return
        fi
        # -timeout: no input of these parsers needs more than milliseconds, so 10 s is a hang.
        if "$exe" -max_total_time="$seconds" -timeout=10 -print_final_stats=1 \
                -artifact_prefix="$build/fuzz/artifacts/$name-" \
                "$corpus" "tests/fuzz/corpus/$name" >"$log" 2>&1; then
                # The last status line: "#4192980 REDUCE cov: 212 ft: 590 corp: 198/9812b ...";
                # the edges instrumented: "Loaded 1 modules   (3277 inline 8-bit counters)".
                status=$(grep '^#[0-9].* cov: ' "$log" | tail -n 1)
                cov=$(echo "$status" | sed -n 's/.* cov: \([0-9]*\).*/\1/p')
                ft=$(echo "$status" | sed -n 's/.* ft: \([0-9]*\).*/\1/p')
                corp=$(echo "$status" | sed -n 's/.* corp: \([^ ]*\).*/\1/p')
                edges=$(sed -n 's/.*Loaded 1 modules *(\([0-9]*\) inline 8-bit counters.*/\1/p' "$log")
                runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
                rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
                echo "fuzz: $name: ok, ${runs:-?} runs in $seconds s (${rate:-?} exec/s)," \
                        "coverage ${cov:-?} of ${edges:-?} edges, ${ft:-?} features," \
                        "corpus ${corp:-?}"
        else
                echo "fuzz: $name: FAILED (log: $log); its end:"
                tail -n 40 "$log"
                : >"$build/fuzz/failed.$name"
        fi
}

# As many harnesses at once as there are CPUs (or FUZZ_JOBS): each is one single-threaded process, so N of them
# on N CPUs fuzz as much as N one after the other, in 1/N of the time. Each one's lines are
# printed whole once it ends.
rm -f "$build/fuzz"/failed.* "$build/fuzz"/out.*
jobs=${FUZZ_JOBS:-$(nproc 2>/dev/null || echo 1)}
running=0
for name in $harnesses; do
        fuzz_one "$name" >"$build/fuzz/out.$name" 2>&1 &
        running=$((running + 1))
        if [ "$running" -ge "$jobs" ]; then
                wait
                running=0
        fi
done
wait
failed=""
for name in $harnesses; do
        cat "$build/fuzz/out.$name"
        rm -f "$build/fuzz/out.$name"
        if [ -e "$build/fuzz/failed.$name" ]; then
                failed="$failed $name"
                rm -f "$build/fuzz/failed.$name"
        fi
done
if [ -n "$failed" ]; then
        echo "fuzz: FAILED:$failed"
        exit 1
fi
