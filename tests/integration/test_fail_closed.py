"""Fail closed: when any setup step fails, the program never runs. The payload would print a
token; the token is assembled at run time (reversed in the source), so it can only reach the
output if the program actually ran."""

import secrets

import pytest

# cli.md: the setup steps --test-fail-step accepts, in setup order.
SETUP_STEPS = [
    "cgroup",
    "userns",
    "hostname",
    "netns",
    "mount",
    "pivot_root",
    "files",
    "landlock",
    "no_new_privs",
    "rlimits",
    "caps",
    "seccomp",
    "exec",
]


@pytest.mark.parametrize("step", SETUP_STEPS)
def test_failed_setup_step_never_runs_the_program(run, step):
    token = "RAN-" + secrets.token_hex(12)
    code = f"import sys\nprint({token[::-1]!r}[::-1], flush=True)\nsys.exit(0)\n"
    r = run(code, "python", "--test-fail-step", step)
    r.expect("internal_error", rc=70)
    assert step in r.get("error", ""), f"error does not name the step: {r.get('error')!r}"
    assert r["exit_code"] is None
    for text in (r["stdout"], r["stderr"], r.raw.decode(errors="replace"), r.cli_stderr):
        assert token not in text, "the program ran although a setup step failed"


def test_control_the_token_appears_when_nothing_fails(run):
    token = "RAN-" + secrets.token_hex(12)
    r = run(f"print({token[::-1]!r}[::-1])")
    r.expect("ok", rc=0)
    assert r["stdout"] == token + "\n"
