"""Python pool entries forked from a template interpreter (issue 18; DESIGN.md "Warm pools:
templates"). The service keeps one `python3 ... template` process, its child; each python entry's
init is cloned by it into fresh namespaces and the program is init's fork of that interpreter,
locked down like any program. These tests hold the service to what that changes and what it must
not: the entries do come from the template; nothing of one execution reaches a later one through
the template (whose memory every entry shares); what an interpreter seeds at start-up from
randomness is fresh in every entry; a template that dies is replaced and meanwhile nothing fails;
`templates = false` turns it off. Equivalence with a cold run, program by program, is
test_pool_equivalence.py's (its "template" cases); the hostile suite runs its python payloads on
this path with their layer controls (harness.py, "template")."""

import hashlib
import os
import signal
import time

from serve_helpers import (FREE_TIER, SLOW, children_of, cmdline, expect_json, running_server)

TIERS = {"free": FREE_TIER}
TENANTS = {"acme": "free"}
POOL = {"python": {"min_idle": 2, "max_idle": 2}}


def template_pid(srv):
    """The engine's template child (python3 ... template MODULE 3), or None."""
    for child in children_of(srv.pid):
        argv = cmdline(child) or []
        if len(argv) > 3 and argv[0].endswith(b"python3") and argv[3] == b"template":
            return child
    return None


def wait_for(condition, timeout_s):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    return condition()


def run_ok(srv, code):
    result = srv.run(code)
    assert result["status"] == "ok", result
    return result


# Scans this process's own readable memory, as a program looking for what an earlier execution
# left would: every mapping /proc/self/maps lists as readable. A needle must not be in the
# scanner's own memory, or the scan finds itself: each comes as NAME=REGEX=SHA256, and NAME is
# found when some match of REGEX (a pattern its own text does not match) hashes to SHA256.
SCAN = r"""
import hashlib, re, sys
needles = [(a.split("=", 1)[0], *a.split("=", 1)[1].rsplit("=", 1)) for a in sys.argv[1:]]
needles = [(name, re.compile(pattern.encode()), digest) for name, pattern, digest in needles]
found = set()
with open("/proc/self/maps") as maps, open("/proc/self/mem", "rb", 0) as mem:
    for line in maps:
        start, end = (int(x, 16) for x in line.split()[0].split("-"))
        if "r" not in line.split()[1] or "[vvar" in line or "[vsyscall" in line:
            continue
        try:
            mem.seek(start)
            chunk = mem.read(end - start)
        except (OSError, OverflowError, ValueError):
            continue
        for name, pattern, digest in needles:
            for match in pattern.finditer(chunk):
                text = match.group(1) if match.groups() else match.group(0)
                if hashlib.sha256(text).hexdigest() == digest:
                    found.add(name)
                    break
print(sorted(found))
"""


def needle(name, pattern, text):
    return f"{name}={pattern}={hashlib.sha256(text.encode()).hexdigest()}"


def scan(srv, *needles, env=None):
    result = expect_json(srv.post_execution({"language": "python", "code": SCAN,
                                             "args": list(needles), "env": env or {}}), 200)
    assert result["status"] == "ok", result
    return result


def test_python_entries_are_forked_from_the_template():
    with running_server(tiers=TIERS, tenants=TENANTS, pools=POOL) as srv:
        template = wait_for(lambda: template_pid(srv), 10 * SLOW)
        assert template, f"no template child of the engine: {children_of(srv.pid)}"
        # No writable mapping shared with the template or another fork (read-only shared
        # mappings of /usr files, as glibc's gconv cache, are what any process has).
        result = run_ok(srv, "print([m for m in open('/proc/self/maps') "
                             "if m.split()[1][1] == 'w' and m.split()[1][3] == 's'])")
        assert result["pooled"] is True
        assert result["stdout"] == "[]\n", result["stdout"]
        # Init is the engine's child (CLONE_PARENT from the template), not a worker's.
        inits = [c for c in children_of(srv.pid) if (cmdline(c) or [b""])[0].endswith(b"python3")
                 and c != template]
        assert inits, "no pool entry's init among the engine's children"
        # The template runs as root outside any sandbox but imports none of a tenant's code:
        # its cmdline is the loader's own source and the module's path.
        argv = cmdline(template)
        assert argv[1] == b"-c" and argv[4].endswith(b"sandboxd-template.so"), argv


def test_nothing_of_an_execution_reaches_a_later_one_through_the_template():
    """Execution A holds a secret in its memory (a global, its environment, its output);
    execution B, forked from the same template afterwards, scans every readable byte of its
    own memory for it. The controls: the same scan finds what B inherited from the template
    (a string of the loader's source, which only the template's interpreter holds), so it does
    see the template's memory in a fork, and a value of the secret's shape that B holds itself
    (its environment)."""
    secret = os.urandom(12).hex()
    own = os.urandom(12).hex()
    with running_server(tiers=TIERS, tenants=TENANTS, pools=POOL) as srv:
        template = wait_for(lambda: template_pid(srv), 10 * SLOW)
        assert template
        a = expect_json(srv.post_execution({
            "language": "python", "env": {"SECRET": secret},
            "code": f"kept = '{secret}' * 3\nimport os\nprint(os.environ['SECRET'], kept[:24])"}),
            200)
        assert a["status"] == "ok" and secret in a["stdout"], a
        b = scan(srv, needle("secret", "(?=([0-9a-f]{24}))", secret),
                 needle("own", "(?=([0-9a-f]{24}))", own),
                 needle("inherited", r"def become_[a-z]{7}\(module, fd\)",
                        "def become_program(module, fd)"), env={"OWN": own})
        assert template_pid(srv) == template, "the same template made both entries"
        assert b["pooled"] is True
        assert b["stdout"] == "['inherited', 'own']\n", b


def test_what_the_interpreter_seeds_is_fresh_in_every_entry():
    """random (imported after the fork), uuid4 and os.urandom differ from entry to entry; the
    one value a fork shares is the interpreter's str hash secret (DESIGN.md says why that is
    accepted)."""
    code = ("import random, uuid, os\n"
            "print(random.random(), uuid.uuid4(), os.urandom(8).hex(), 'random' in "
            "__import__('sys').modules)")
    with running_server(tiers=TIERS, tenants=TENANTS, pools=POOL) as srv:
        assert wait_for(lambda: template_pid(srv), 10 * SLOW)
        outputs = [run_ok(srv, code)["stdout"].split() for _ in range(4)]
        for column in range(3):
            values = [o[column] for o in outputs]
            assert len(set(values)) == len(values), (column, values)


def test_a_dead_template_is_replaced_and_meanwhile_nothing_fails():
    with running_server(tiers=TIERS, tenants=TENANTS, pools=POOL) as srv:
        first = wait_for(lambda: template_pid(srv), 10 * SLOW)
        assert first
        os.kill(first, signal.SIGKILL)
        # Every execution meanwhile is answered (cold while no template runs).
        for _ in range(6):
            run_ok(srv, "print(2+2)")
        second = wait_for(lambda: (template_pid(srv) or 0) not in (0, first)
                          and template_pid(srv), 15 * SLOW)
        assert second and second != first, (first, second)
        assert "the python template" in srv.stderr()
        # And the entries come from the new one again.
        time.sleep(0.5)
        for _ in range(3):
            assert run_ok(srv, "print(1)")["stdout"] == "1\n"


def test_templates_off():
    with running_server(tiers=TIERS, tenants=TENANTS, pools=POOL,
                        server={"templates": "false"}) as srv:
        result = run_ok(srv, "print(2+2)")
        assert result["stdout"] == "4\n"
        assert template_pid(srv) is None


def test_sigterm_leaves_no_template_behind():
    with running_server(tiers=TIERS, tenants=TENANTS, pools=POOL) as srv:
        template = wait_for(lambda: template_pid(srv), 10 * SLOW)
        assert template
        run_ok(srv, "print(2+2)")
    # running_server's stop checked that nothing of the server is left; the template too.
    assert not os.path.exists(f"/proc/{template}") or \
        b"template" not in (cmdline(template) or [b""] * 4)[3:4]

