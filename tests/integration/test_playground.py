"""The web playground (issue 20): `sandboxd serve` answers the page built from web/ at / (its
script and stylesheet under /assets/) with a strict Content-Security-Policy; headless Chromium
(/usr/bin/chromium), driven by playwright-core (tests/compat/playground_browser.mjs), uses it as
a person would: pastes the token, runs print(2+2) and sees 4, sees a timeout's status, runs
session cells (state kept, a matplotlib figure shown as an image, an HTML result in a sandboxed
frame), and sees the runs in the recent executions. Nothing may break the policy, and the token
may appear in no URL and in no log. Screenshots go to playground-{run,timeout,session}.png beside
the sandboxd under test (build/, build-asan/: the two integration lanes run this at once); with
SANDBOXD_UPDATE_DOCS=1 the session's also becomes docs/playground.png (the README's picture)."""

import json
import os
import pathlib
import re
import shutil

import pytest

from conftest import SANDBOXD
from serve_helpers import (FREE_TIER, SLOW, expect_json, no_new_leaks, run_node_client,
                           running_server)

assert no_new_leaks  # imported to replace conftest's per-test leak check in this module

REPO = pathlib.Path(__file__).resolve().parents[2]
SHOTS = pathlib.Path(SANDBOXD).resolve().parent
DOCS_SHOT = REPO / "docs" / "playground.png"
CHROMIUM = "/usr/bin/chromium"

# What the page is designed for: its own script and stylesheet, images from itself or data:
# URLs (plots), calls to its own origin, frames only for untrusted HTML (sandboxed srcdoc).
POLICY = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
          "connect-src 'self'; frame-src 'self'; base-uri 'none'; form-action 'none'; "
          "frame-ancestors 'none'")

TIERS = {"free": {**FREE_TIER, "languages": "python, bash", "max_sessions": 2}}
TENANTS = {"acme": "free"}


@pytest.fixture(scope="module")
def srv():
    with running_server(tiers=TIERS, tenants=TENANTS) as server:
        yield server


def require_chromium():
    """The browser: missing, it fails the test under `make test` (whose dependency script
    installs it) and skips it otherwise, saying how to install it."""
    if not os.access(CHROMIUM, os.X_OK):
        if os.environ.get("SANDBOXD_TEST_RUN"):
            pytest.fail(f"{CHROMIUM} is missing: scripts/install-deps.sh installs it (chromium)")
        pytest.skip(f"{CHROMIUM} is missing: apt-get install chromium")


def test_the_page_and_its_assets_are_served_with_the_policy(srv):
    # No token needed: the page is static; everything it shows comes from calls with one.
    page = srv.get("/")
    assert page.status_code == 200, page.text[:500]
    assert page.headers["Content-Type"].split(";")[0] == "text/html"
    assert page.headers.get("Content-Security-Policy") == POLICY
    html = page.text
    assert "<title>sandboxd playground</title>" in html
    assert re.findall(r'<script[^>]*\bsrc="([^"]+)"', html) == ["/assets/app.js"]
    assert re.findall(r'<link rel="stylesheet" href="([^"]+)"', html) == ["/assets/app.css"]
    # Nothing inline that the policy would refuse: no script body, no <style>, no style or
    # event-handler attribute.
    assert not re.search(r"<script[^>]*>\s*[^<\s]", html)
    assert "<style" not in html
    assert not re.search(r"\sstyle\s*=", html)
    assert not re.search(r"\son[a-z]+\s*=", html)
    for path, content_type in (("/assets/app.js", ("text/javascript", "application/javascript")),
                               ("/assets/app.css", ("text/css",))):
        asset = srv.get(path)
        assert asset.status_code == 200, f"{path}: {asset.status_code} {asset.text[:300]}"
        assert asset.headers["Content-Type"].split(";")[0] in content_type, asset.headers
        assert len(asset.content) > 1000, path


def test_the_playground_in_a_browser(srv):
    require_chromium()
    token = srv.tokens["acme"]
    SHOTS.mkdir(exist_ok=True)
    shots = {name: SHOTS / f"playground-{name}.png" for name in ("run", "timeout", "session")}
    for shot in shots.values():
        shot.unlink(missing_ok=True)
    # The token goes in the environment, not in argv (which every process may read).
    env = dict(os.environ, PLAYGROUND_URL=srv.base, PLAYGROUND_TOKEN=token,
               PLAYGROUND_CHROMIUM=CHROMIUM, PLAYGROUND_SHOTS=str(SHOTS),
               PLAYGROUND_STEP_MS=str(30000 * SLOW))
    proc = run_node_client("playground_browser.mjs", [], package="playwright-core", env=env,
                           timeout=240 * SLOW)
    report = json.loads(proc.stdout)
    context = json.dumps({k: report[k] for k in ("console", "pageErrors", "violations")},
                         indent=1)[:4000]

    # The policy held: the page and CodeMirror (its styles in a shadow root's constructed sheet)
    # work without one refusal, and nothing failed in the page.
    assert report["csp"] == POLICY
    assert report["violations"] == [], context
    assert not [m for m in report["console"] if "Content Security Policy" in m["text"]], context
    assert report["pageErrors"] == [], context
    assert not [m for m in report["console"] if m["type"] == "error"], context
    assert report["editorStyled"] is True
    assert report["languages"] == ["python", "bash"], report["languages"]

    # print(2+2): 4, ok, the latency decomposition as a bar of its four phases.
    run = report["run"]
    assert run["status"] == "ok" and run["statusText"] == "ok", run
    assert run["output"].strip() == "4", run
    assert run["timingSegments"] == 4, run
    assert [key.split()[0] for key in run["timingLegend"]] == \
        ["acquire", "setup", "run", "teardown"], run
    assert run["timingTotal"].startswith("total "), run

    # The wall-clock field: a timeout, with the kernel's evidence.
    timeout = report["timeout"]
    assert timeout["status"] == "timeout", timeout
    assert "wall_timeout" in timeout["evidence"], timeout

    # Session cells: x survives from the first to the second, whose figure is a PNG image.
    session = report["session"]
    assert session["first"]["status"] == "ok", session
    assert session["second"]["status"] == "ok", session
    assert session["second"]["output"].strip() == "42", session
    [image] = session["second"]["images"]
    assert image["src"].startswith("data:image/png;base64,iVBORw0KGgo"), image
    assert image["width"] > 100 and image["height"] > 100, image
    assert session["counts"] == ["[1]", "[2]", "[3]", "[ ]"], session
    # The program's HTML: rendered in a frame sandboxed with nothing allowed, never in the page.
    assert report["html"] == {"status": "ok", "sandbox": "", "cell": "21", "inPage": 0}, \
        report["html"]
    assert report["sessionDeleted"] == 204

    # The recent executions: the five runs, newest first, as the API lists them.
    listed = expect_json(srv.get("/v1/executions?limit=20",
                                 headers=srv.headers(content_type=None)))["executions"]
    rows = report["recent"]["rows"]
    assert [row["id"] for row in rows] == [record["id"] for record in listed], (rows, listed)
    assert [row["cells"][3] for row in rows] == ["ok", "ok", "ok", "timeout", "ok"], rows
    assert {row["cells"][2] for row in rows} == {"python"}, rows
    assert report["recent"]["record"]["id"] == rows[0]["id"]
    assert report["recent"]["record"]["status"] == "ok"

    # The token: in no URL the page had or asked for, not in the page, not in the server's log.
    assert report["tokenInUrls"] is False
    assert report["tokenInDom"] is False
    assert set(report["urls"]) == {srv.base + "/"}, report["urls"]
    assert token not in srv.stderr()

    for shot in shots.values():
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", shot
    # The README's picture changes with every run (ids, times): refreshed on request only, so
    # that a test run leaves the tree as it was.
    if os.environ.get("SANDBOXD_UPDATE_DOCS"):
        shutil.copyfile(shots["session"], DOCS_SHOT)
