# What tests/uml/run.sh and tests/qemu/run.sh share (sourced by both, with vm_name set to "uml"
# or "qemu"): the run's results directory, the guest's session and its end, and the report of
# the stages. Nothing survives a run: the guest's host processes form one session, killed as a
# whole by its leader's pid, and the results directory is removed.
#
# After sourcing: $results is the run's directory; set $session to the guest's session leader
# once it is started, then call vm_wait_guest and vm_report.

results=$(mktemp -d "/tmp/sandboxd-$vm_name.XXXXXX") || exit 1
# Held while the run lives: a leak audit (another checkout's, meanwhile) counts only temp dirs
# nobody holds an flock on. The guest must not inherit it (start it with 9<&-).
exec 9<"$results" && flock -n 9 || echo "$vm_name: cannot lock $results" >&2
session=""

# The stated subsets both guests run by default: the whole suite does not fit their time (qemu
# emulates every instruction; UML runs the guest's processes on one slow CPU: its whole
# integration suite did not finish in the stage's 20 minutes here). The integration subset:
# every cgroup code path on v2 (limits: memory, pids, cpu quota, cpu time, wall; the evidence
# read back; the kill of a whole cgroup on timeout and when the program ends; reconciliation
# after a crash; pooled entries, whose cgroups are made ahead of the run: the cases of
# test_pool_equivalence.py that hit a cap, each kind of entry (python's both exec'd and forked
# from a template: its init moves into no v1 cgroup there, CLONE_INTO_CGROUP is all), not its cases about a program's
# bytes, exit paths or node's module loading, ~100 s more there that test no cgroup; a
# session's memory cap, which must kill its interpreter and not its agent: memory.oom.group;
# an RL episode's, whose step reads the counters through files kept open). Not bash_pids: bash
# gives up a refused fork when its 1 s retry sleep is cut short, a host-speed bound that qemu's
# emulation missed once (exit 254); a pooled entry's pids cap stays covered by fork_limit (the same
# cgroup file, set at acquire), and the hostile resource class's fork bombs hit it in both guests.
# Files or node ids, relative to tests/integration (read with globbing off: ids have brackets).
integration_subset="test_cgroups.py test_limits.py
        test_pool_equivalence.py::test_pooled_equals_cold[memory_bomb-exec]
        test_pool_equivalence.py::test_pooled_equals_cold[memory_bomb-template]
        test_pool_equivalence.py::test_pooled_equals_cold[fork_limit-exec]
        test_pool_equivalence.py::test_pooled_equals_cold[fork_limit-template]
        test_pool_equivalence.py::test_pooled_equals_cold[timeout-exec]
        test_pool_equivalence.py::test_pooled_equals_cold[timeout-template]
        test_pool_equivalence.py::test_pooled_equals_cold[output_flood-exec]
        test_pool_equivalence.py::test_pooled_equals_cold[output_flood-template]
        test_pool_equivalence.py::test_node_loader_equals_cold[timeout]
        test_pool_equivalence.py::test_an_exec_entry_equals_cold[bash_memory]
        test_pool_equivalence.py::test_an_exec_entry_equals_cold[bash_timeout]
        test_pool_equivalence.py::test_pool_entry_has_every_layer
        test_session_cli.py::test_memory_cap_restarts_the_interpreter
        test_serve_sessions.py::test_timeout_memory_and_a_dead_agent
        test_serve_episodes.py::test_the_memory_cap_holds_and_a_reset_revives_the_environment"
# The hostile subset, by class: resource (every limit hit, with the cgroup's evidence, and each
# control lifting it), supervisor (the kill of the whole cgroup on a deadline or an output cap),
# failclosed (failclosed_cgroup: a cgroup step that fails must fail the run), session (a session's
# cgroup killed at a cell's deadline and made again, and gone once the session ends). Left out:
# the classes whose containment does not depend on the cgroup layout (filesystem, network,
# privilege, infoleak, kernel) and residue (files and IPC one tenant leaves for the next; its
# cgroup check, A's cgroups gone, is session_residue's too): 200 s more under emulation.
hostile_classes="resource,supervisor,failclosed,session"


# Sets $pytest_args and $hostile_args for the guest: $1 and $2 when given (the caller's
# *_PYTEST_ARGS and *_HOSTILE_ARGS), else the subsets above, printing what they leave out for the
# stages in $stages.
vm_subsets() {
        pytest_args=$1
        set -f # the subset's node ids are not glob patterns
        if [ -z "$pytest_args" ]; then
                for test in $integration_subset; do
                        pytest_args="$pytest_args tests/integration/$test"
                done
                # The subset on one line, its words one space apart (it is written over several).
                # shellcheck disable=SC2086
                subset_line=" $(printf '%s ' $integration_subset)"
                set +f
                left_out=""
                for file in tests/integration/test_*.py; do
                        name=${file##*/}
                        case "$subset_line" in
                        *" $name "* | *" $name::"*) ;;
                        *) left_out="$left_out $name" ;;
                        esac
                done
                case " $stages " in *" integration "*) ;; *) left_out="" ;; esac
                [ -z "$left_out" ] || echo "SKIP ($vm_name) integration$left_out: not in the" \
                        "stage's subset (the whole suite does not fit its time in the guest; the" \
                        "subset covers every cgroup code path)"
        fi
        set +f
        hostile_args=$2
        if [ -z "$hostile_args" ]; then
                hostile_args="--class $hostile_classes"
                classes=$hostile_classes
                case " $stages " in *" hostile "*) ;; *) classes="" ;; esac
                [ -z "$classes" ] || echo "SKIP ($vm_name) hostile classes other than $classes:" \
                        "not in the stage's subset (they do not depend on the cgroup layout, and" \
                        "all of them do not fit its time)"
        fi
}

# Kills whatever is left of the guest's session by its leader's pid, and waits until none is
# left.
kill_guest() {
        [ -n "$session" ] || return 0
        kill -KILL "-$session" 2>/dev/null # dash: no "--"; -PID is the process group
        i=0
        while pgrep -s "$session" >/dev/null 2>&1 && [ $i -lt 100 ]; do
                sleep 0.1
                i=$((i + 1))
        done
        if pgrep -s "$session" >/dev/null 2>&1; then
                echo "$vm_name: processes of session $session survived SIGKILL:" >&2
                pgrep -a -s "$session" >&2
        fi
        wait "$session" 2>/dev/null
}
cleanup() {
        kill_guest
        rm -rf "$results"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Waits for the guest until it powers off or timeout_s have passed since started, then makes
# sure nothing of its session is left (also after a clean power-off).
vm_wait_guest() {
        while kill -0 "$session" 2>/dev/null; do
                if [ $(($(date +%s) - started)) -ge "$timeout_s" ]; then
                        echo "$vm_name: the guest is still running after $timeout_s s: killing it" >&2
                        break
                fi
                sleep 1
        done
        kill_guest
}

# Reports the stages of $stages from the status files in directory $1 (each "exit-code seconds"),
# keeps the hostile report as $build/$2 and the integration stage's JUnit XML as $build/$3 (what
# scripts/test_failures.py reads; a stage that wrote none leaves none, not an earlier run's), and
# exits 1 when a stage failed or did not finish.
vm_report() {
        case " $stages " in *" hostile "*) rm -f "$build/$2" ;; esac
        case " $stages " in *" integration "*) rm -f "$build/$3" ;; esac
        [ -f "$1/hostile-report.json" ] && cp "$1/hostile-report.json" "$build/$2"
        [ -f "$1/integration.xml" ] && cp "$1/integration.xml" "$build/$3"
        echo "$vm_name: machine: $(tr '\n' ';' <"$1/machine.txt" 2>/dev/null)"
        failed=""
        for stage in $stages; do
                if [ -f "$1/$stage.status" ]; then
                        read -r rc seconds <"$1/$stage.status"
                        echo "$vm_name: stage $stage: exit $rc in $seconds s"
                        [ "$rc" = 0 ] || failed="$failed $stage"
                else
                        echo "$vm_name: stage $stage: did not finish"
                        failed="$failed $stage"
                fi
        done
        echo "$vm_name: total $(($(date +%s) - started)) s"
        [ -z "$failed" ] || {
                echo "$vm_name: FAILED:$failed"
                exit 1
        }
}
