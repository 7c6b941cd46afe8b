#!/bin/sh
# What `make test` runs after building: the format check, the unit tests and the integration
# tests against the normal and the sanitizer (ASan + UBSan) builds, the store's own tests again
# with the store in PostgreSQL, the hostile suite, an integration subset on a pure cgroup v2
# hierarchy and Linux 6.1 without Landlock under user-mode-linux (tests/uml), the hostile suite's
# cgroup classes on pure cgroup v2 and Debian's Linux 6.1 under qemu's emulation (tests/qemu; the
# integration subset too where UML cannot run), the hostile classes Landlock defends against
# again with Landlock left out, each libFuzzer harness of the fuzz build for 10 seconds (`make
# fuzz` runs them longer), then the leak audit. The integration stages of both builds run side by
# side (the sanitizer stage's output is printed when the other's ends).
# Every stage runs even when an earlier one failed, so that one run shows every failure,
# and the leak audit always runs last; the exit status is non-zero when any stage failed, and the
# output ends with each failed test and payload, read back from the stages' results files
# (scripts/test_failures.py).
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
ASAN_BUILD=${ASAN_BUILD:-build-asan}
FUZZ_BUILD=${FUZZ_BUILD:-build-fuzz}
PYTEST="/usr/bin/python3 -m pytest -q -p no:cacheprovider"
# Marks every sandboxd this run starts, so that the leak audit tells them from another run's.
SANDBOXD_TEST_RUN=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
export SANDBOXD_TEST_RUN

# What a killed earlier run left behind (a slot, a temp dir) is reported by the leak audit but
# is not this run's leak; this run's leftovers fail it.
baseline=$(mktemp /tmp/make-test-leftovers.XXXXXX) || exit 1
# The stages started in the background (below), stopped if this script ends before they do.
background=""
stop_background() {
        for pid in $background; do
                pkill -TERM -P "$pid"
                kill "$pid"
        done 2>/dev/null
}
trap 'rm -f "$baseline"; stop_background' EXIT
/usr/bin/python3 scripts/leak_audit.py --record "$baseline"

# Each stage's results file (pytest's JUnit XML, the hostile report), read back at the end to name
# what failed (scripts/test_failures.py); an earlier run's are removed first, so that a stage that
# ended before writing its own is not judged by them.
integration_xml=$BUILD/integration.xml
integration_asan_xml=$ASAN_BUILD/integration.xml
integration_alone_xml=$BUILD/integration-alone.xml
integration_pg_xml=$BUILD/integration-postgresql.xml
integration_pg2_xml=$BUILD/integration-postgresql-2.xml
integration_asan_alone_xml=$ASAN_BUILD/integration-alone.xml
hostile_json=$BUILD/hostile-report.json
uml_xml=$BUILD/uml-integration.xml
qemu_xml=$BUILD/qemu-integration.xml
qemu_json=$BUILD/qemu-hostile-report.json
hostile_wl_json=$BUILD/hostile-without-landlock-report.json
rm -f "$integration_xml" "$integration_asan_xml" "$integration_alone_xml" "$integration_pg_xml" \
        "$integration_pg2_xml" \
        "$integration_asan_alone_xml" "$hostile_json" "$uml_xml" "$qemu_xml" \
        "$qemu_json" "$hostile_wl_json"

failed=""
failures=""
# stage NAME RESULTS COMMAND...: RESULTS is the stage's results files, "name:path" each,
# space-separated, or "".
stage() {
        name=$1
        results=$2
        shift 2
        echo "==> $name"
        started=$(date +%s)
        if ! "$@"; then
                failed="$failed $name"
                failures="$failures $results"
                echo "==> $name: FAILED ($(($(date +%s) - started)) s)"
        else
                echo "==> $name: passed ($(($(date +%s) - started)) s)"
        fi
}

stage format "" ./tests/style/check-format.sh
stage unit "" meson test -C "$BUILD" --print-errorlogs
stage unit-asan "" meson test -C "$ASAN_BUILD" --print-errorlogs
# logged NAME COMMAND...: runs COMMAND with its output in $BUILD/NAME.log, then writes its exit
# status to $BUILD/NAME.status: a stage started early, in the background, whose output and
# status `outcome NAME` gives at its place in the order, so that stages' lines never mix.
logged() {
        name=$1
        shift
        "$@" >"$BUILD/$name.log" 2>&1
        echo $? >"$BUILD/$name.status"
}
outcome() {
        while [ ! -f "$BUILD/$1.status" ]; do
                sleep 1
        done
        cat "$BUILD/$1.log"
        return "$(cat "$BUILD/$1.status")"
}
rm -f "$BUILD"/*.status

# The integration tests of both builds run side by side: they wait on sandboxes, servers and
# clocks more than they compute (one stage alone keeps these two CPUs 45% busy, two 85%), and
# the leak checks count only what nothing live holds, so that one stage's sandboxes are not the
# other's leaks (nor a sandbox that descends from the other stage's processes); each stage marks
# its processes with its own SANDBOXD_TEST_RUN. The tests marked alone (those that crash sandboxd
# and judge what the next start reconciles, which the other stage's starts would do first, and
# the load tests, which would starve the other stage's deadlines) run afterwards, one build after
# the other.
# The store's other implementation: the tests of what it keeps (records, the queue, batches,
# deliveries, a restart's recovery) again with every server's store in PostgreSQL (a cluster for
# each half, a database per data directory). One half follows each integration stage, so that
# the two lanes end together (~45 s less than both halves after the normal build's stage). A third
# lane for them beside both stages from the start cost more than it saved (2026-12-07: the two
# stages took 681 and 692 s beside it, against 592 and 599 with the halves after them).
# (Its variables are not stage's: sh has no local ones.)
postgresql() {
        pg_run=$1
        pg_xml=$2
        shift 2
        env SANDBOXD="$PWD/$BUILD/sandboxd" SANDBOXD_TEST_RUN="$SANDBOXD_TEST_RUN/$pg_run" \
                SANDBOXD_TEST_STORE=postgresql $PYTEST -m "not alone" --junit-xml "$pg_xml" "$@"
}
(
        logged integration-asan env SANDBOXD="$PWD/$ASAN_BUILD/sandboxd" SANDBOXD_SANITIZED=1 \
                SANDBOXD_TEST_RUN="$SANDBOXD_TEST_RUN/asan" \
                $PYTEST -m "not alone" --junit-xml "$integration_asan_xml" tests/integration
        logged integration-postgresql-2 postgresql postgresql-2 "$integration_pg2_xml" \
                tests/integration/test_serve_batches.py tests/integration/test_serve_lifecycle.py
) &
background="$background $!"
stage integration "integration:$integration_xml" \
        env SANDBOXD="$PWD/$BUILD/sandboxd" SANDBOXD_TEST_RUN="$SANDBOXD_TEST_RUN/normal" \
        $PYTEST -m "not alone" --junit-xml "$integration_xml" tests/integration
stage integration-postgresql "integration-postgresql:$integration_pg_xml" \
        postgresql postgresql "$integration_pg_xml" tests/integration/test_serve_audit.py \
        tests/integration/test_serve_async.py tests/integration/test_serve_webhooks.py
stage integration-asan "integration-asan:$integration_asan_xml" outcome integration-asan
stage integration-postgresql-2 "integration-postgresql-2:$integration_pg2_xml" \
        outcome integration-postgresql-2
stage integration-alone "integration-alone:$integration_alone_xml" \
        env SANDBOXD="$PWD/$BUILD/sandboxd" \
        $PYTEST -m alone --junit-xml "$integration_alone_xml" tests/integration
stage integration-asan-alone "integration-asan-alone:$integration_asan_alone_xml" \
        env SANDBOXD="$PWD/$ASAN_BUILD/sandboxd" SANDBOXD_SANITIZED=1 \
        $PYTEST -m alone --junit-xml "$integration_asan_alone_xml" tests/integration
# Three payloads at once: they wait on deadlines, guests' boots and runsc more than they compute
# (two kept these two CPUs ~60% busy): 237 and 275 s in two runs of make test, 311 s at two in
# one before (with slower payloads since fixed), every bound met.
stage hostile "hostile:$hostile_json" \
        /usr/bin/python3 tests/hostile/harness.py --sandboxd "$PWD/$BUILD/sandboxd" -j 3 \
        --report "$hostile_json"
# The guests after the host's stages, not beside them: run in the background at nice 19 they
# still slowed the integration stages by half (UML's system calls are the host kernel's work),
# and starved of the CPU their own tests' deadlines passed.
#
# UML: its integration stage only: the hostile classes of its subset run on the same Linux 6.1
# and cgroup v2 in qemu, and UML's run of them cost 240 s of a 25-minute budget.
# The fuzz harnesses beside it, built then run one at a time: the UML guest runs on one CPU, and
# the fuzzers' results do not depend on time (47 s less than on two CPUs before the UML stage,
# and the harnesses' build, 42 to 54 s on one CPU, is no longer before every stage).
fuzz() {
        ${NINJA:-ninja} -j 1 -C "$FUZZ_BUILD" fuzzers >"$BUILD/fuzz-build.log" 2>&1 || {
                tail -n 30 "$BUILD/fuzz-build.log"
                return 1
        }
        FUZZ_JOBS=1 ./tests/fuzz/run.sh "$FUZZ_BUILD" 10
}
logged fuzz fuzz &
background="$background $!"
stage uml "uml-integration:$uml_xml" env BUILD="$BUILD" ./tests/uml/run.sh integration
# qemu: a different kernel (Debian's amd64 build, with Landlock) on different hardware (two
# emulated CPUs, virtio, 9p); each stage's name says which guest passed or failed. Its
# integration subset is UML's (tests/uml/guest_run.sh): where UML ran it, on the same Linux 6.1
# and cgroup v2, qemu runs its smoke and hostile stages only (66-100 s less); where UML could not
# run (no results), all three.
qemu_stages="smoke integration hostile"
if [ -f "$uml_xml" ]; then
        qemu_stages="smoke hostile"
        echo "SKIP (qemu) integration: its subset ran under user-mode-linux (uml stage)"
fi
# shellcheck disable=SC2086
stage qemu "qemu-integration:$qemu_xml qemu-hostile:$qemu_json" \
        env BUILD="$BUILD" ./tests/qemu/run.sh $qemu_stages
# The no-Landlock path (a kernel with Landlock left out of its LSM list, or without it): the
# hostile classes with payloads Landlock is a layer against (filesystem, network, privilege: the
# declarations that name it), on this host with Landlock's system calls answering EOPNOTSUPP as
# such a kernel's do (harness.py --kernel-without landlock: a seccomp filter on the harness,
# inherited by sandboxd and every sandbox). Each must stay contained by the other layers, or say
# in its declaration that its refusal needs Landlock (the harness then judges it by what still
# holds). A real kernel without Landlock runs under UML (its integration subset, above); this
# stage ran in the qemu guest booted with lsm= without landlock until the whole of `make test`
# passed 30 minutes: 220 s there, 20 s here.
stage hostile-without-landlock "hostile-without-landlock:$hostile_wl_json" \
        /usr/bin/python3 tests/hostile/harness.py --sandboxd "$PWD/$BUILD/sandboxd" \
        --kernel-without landlock --backends native --class filesystem,network,privilege \
        --report "$hostile_wl_json"
stage fuzz "" outcome fuzz
stage leak-audit "" /usr/bin/python3 scripts/leak_audit.py --except "$baseline"

if [ -n "$failed" ]; then
        if [ -n "$failures" ]; then
                echo "make test: what failed:"
                # shellcheck disable=SC2086
                /usr/bin/python3 scripts/test_failures.py $failures
        fi
        echo "make test: FAILED:$failed"
        exit 1
fi
echo "make test: every stage passed"
