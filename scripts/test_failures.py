#!/usr/bin/python3
"""What failed in a `make test` run, one line each, printed by scripts/test.sh at its end: a CI
log is often read from its tail only, where a failing stage's own lines scrolled away long ago.

    python3 scripts/test_failures.py STAGE:FILE [STAGE:FILE ...]

Each FILE is a stage's results: pytest's JUnit XML (`--junit-xml`) or the hostile harness's
report (`--report`, JSON). A file that is missing is said to be missing (the stage ended before
writing it: a crash, a timeout, a guest that did not boot); the stage's own output says why.
"""

import json
import sys
import xml.etree.ElementTree as ET

MAX_LINES_PER_FILE = 25
MAX_WHY = 300


def one_line(text):
    text = " ".join(str(text or "").split())
    return text if len(text) <= MAX_WHY else text[:MAX_WHY] + "…"


def junit_failures(path):
    """pytest's failed and errored tests as (node id, why)."""
    found = []
    for case in ET.parse(path).getroot().iter("testcase"):
        for outcome in ("failure", "error"):
            element = case.find(outcome)
            if element is None:
                continue
            # classname "test_x" or "subdir.test_x", name "test_y[param]": the node id's parts.
            module = case.get("classname", "").replace(".", "/")
            node = f"{module}.py::{case.get('name', '?')}"
            lines = (element.text or "").strip().splitlines()
            why = element.get("message") or (lines[-1] if lines else "")
            found.append((node, f"{outcome}: {one_line(why)}"))
    return found


def hostile_failures(path):
    """The hostile report's payloads that did not pass (escaped, control not flipped, leak)."""
    with open(path, encoding="utf-8") as f:
        entries = json.load(f)
    found = []
    for entry in entries:
        if entry.get("passed"):
            continue
        reasons = list(entry.get("reasons") or [])
        if entry.get("control_flipped") is False:
            control = entry.get("control") or {}
            reasons.append("control not flipped: " + str(control.get("invalid") or
                                                        "judged contained too"))
        if entry.get("class") == "audit":
            reasons = [str(p) for p in (entry.get("evidence") or {}).get("problems", [])]
        found.append((f"{entry.get('class')}/{entry.get('name')}", one_line("; ".join(reasons))))
    return found


def main(argv):
    status = 0
    for spec in argv:
        stage, _, path = spec.partition(":")
        try:
            failures = hostile_failures(path) if path.endswith(".json") else junit_failures(path)
        except FileNotFoundError:
            print(f"  {stage}: no results ({path} was not written)")
            continue
        except (OSError, ValueError, ET.ParseError) as exc:
            print(f"  {stage}: unreadable results {path}: {exc}")
            status = 1
            continue
        for name, why in failures[:MAX_LINES_PER_FILE]:
            print(f"  {stage}: {name}: {why}")
        if len(failures) > MAX_LINES_PER_FILE:
            print(f"  {stage}: … and {len(failures) - MAX_LINES_PER_FILE} more in {path}")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
