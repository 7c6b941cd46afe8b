"""RL episodes over HTTP (issue 15): a Gymnasium-shaped environment in its own sandbox, stepped
one message round trip at a time; many per call; its failures (an exception, a step that hangs,
the memory and pids caps); tenants kept apart; a DELETE in the middle of a step; quotas, the
audit row and the metrics."""

import base64
import json
import random
import sqlite3
import os
import threading
import time

import pytest

from serve_helpers import (FREE_TIER, PRO_TIER, STANDARD_TENANTS, expect_problem,
                           kept_data_dir, running_server)

TIERS = {"free": {**FREE_TIER, "max_concurrency": 4, "max_episodes": 3},
         "pro": {**PRO_TIER, "max_concurrency": 8, "max_episodes": 20}}
TENANTS = STANDARD_TENANTS

# A 5 x 5 gridworld: the agent starts at (0, 0) and is paid 10 at (4, 4), -1 a move otherwise;
# a seeded Random puts a pit (-10, the end) somewhere. The test computes the same.
GRIDWORLD = '''
import random

class GridWorld:
    MOVES = {"up": (0, -1), "down": (0, 1), "left": (-1, 0), "right": (1, 0)}

    def reset(self, seed=None, options=None):
        rng = random.Random(seed)
        self.pit = (rng.randrange(1, 4), rng.randrange(1, 4))
        self.pos = (0, 0)
        return list(self.pos), {"pit": list(self.pit)}

    def step(self, action):
        dx, dy = self.MOVES[action]
        self.pos = (min(4, max(0, self.pos[0] + dx)), min(4, max(0, self.pos[1] + dy)))
        if self.pos == (4, 4):
            return list(self.pos), 10.0, True, False, {}
        if self.pos == self.pit:
            return list(self.pos), -10.0, True, False, {"fell": True}
        return list(self.pos), -1.0, False, False, {}
'''


def reference_step(pos, pit, action):
    dx, dy = {"up": (0, -1), "down": (0, 1), "left": (-1, 0), "right": (1, 0)}[action]
    pos = (min(4, max(0, pos[0] + dx)), min(4, max(0, pos[1] + dy)))
    if pos == (4, 4):
        return pos, 10.0, True
    if pos == pit:
        return pos, -10.0, True
    return pos, -1.0, False


def post(srv, path, body, tenant="acme", want=None):
    r = srv.request("POST", path, data=json.dumps(body), headers=srv.headers(tenant))
    if want is not None:
        assert r.status_code == want, r.text[:3000]
    return r


def open_episode(srv, body, tenant="acme", want=201):
    return post(srv, "/v1/episodes", body, tenant, want).json()


def step(srv, eid, action, tenant="acme", want=200):
    return post(srv, f"/v1/episodes/{eid}/step", {"action": action}, tenant, want).json()


def reset(srv, eid, seed=None, tenant="acme", want=200):
    return post(srv, f"/v1/episodes/{eid}/reset", {"seed": seed}, tenant, want).json()


def get(srv, eid, tenant="acme"):
    return srv.get(f"/v1/episodes/{eid}", headers=srv.headers(tenant, content_type=None))


def delete(srv, eid, tenant="acme"):
    return srv.request("DELETE", f"/v1/episodes/{eid}",
                       headers=srv.headers(tenant, content_type=None))


def test_a_gridworld_for_1000_steps_with_every_reward_checked():
    with running_server(tiers=TIERS, tenants=TENANTS) as srv:
        first = open_episode(srv, {"code": GRIDWORLD, "env_class": "GridWorld", "seed": 7})
        eid = first["id"]
        assert first["state"] == "ready" and first["observation"] == [0, 0]
        pit = tuple(first["info"]["pit"])
        chooser = random.Random(1)
        pos, steps, episodes, total = (0, 0), 0, 0, 0.0
        for n in range(1000):
            action = chooser.choice(["up", "down", "left", "right", "right", "down"])
            answer = step(srv, eid, action)
            pos, reward, done = reference_step(pos, pit, action)
            steps += 1
            total += reward
            assert answer["status"] == "ok", answer
            assert answer["observation"] == list(pos) and answer["reward"] == reward, (n, answer)
            assert answer["terminated"] is done and answer["truncated"] is False
            assert answer["step"] == steps
            assert abs(answer["episode_reward"] - total) < 1e-9
            if done:
                episodes += 1
                again = reset(srv, eid, seed=7 + episodes)
                assert again["status"] == "ok" and again["observation"] == [0, 0]
                pit = tuple(again["info"]["pit"])
                pos, steps, total = (0, 0), 0, 0.0
        assert episodes > 10  # the walk ends episodes often: resets are exercised too
        state = get(srv, eid).json()
        assert state["steps"] == steps and state["lifetime_steps"] == 1000
        assert state["resets"] == episodes + 1 and state["state"] == "ready"
        assert delete(srv, eid).status_code == 204
        gone = step(srv, eid, "up", want=404)
        assert gone["end_reason"] == "deleted"


def test_a_seeded_reset_repeats_the_trajectory_and_count_makes_seeds_in_a_row():
    env = ("import random\n"
           "def reset(seed=None, options=None):\n"
           "    global rng\n"
           "    rng = random.Random(seed)\n"
           "    return rng.random(), {'seed': seed, 'options': options}\n"
           "def step(action):\n"
           "    return rng.random() * action, rng.random(), False, False, {}\n")
    with running_server(tiers=TIERS, tenants=TENANTS) as srv:
        eid = open_episode(srv, {"code": env, "seed": 42})["id"]

        def trajectory():
            return [(a["observation"], a["reward"]) for a in (step(srv, eid, k) for k in range(20))]

        first_obs = reset(srv, eid, seed=5)
        one = trajectory()
        second_obs = reset(srv, eid, seed=5)
        assert first_obs["observation"] == second_obs["observation"]
        assert trajectory() == one
        other = reset(srv, eid, seed=6)
        assert other["observation"] != first_obs["observation"]
        options = post(srv, f"/v1/episodes/{eid}/reset", {"seed": 1, "options": {"level": 3}},
                       want=200).json()
        assert options["info"] == {"seed": 1, "options": {"level": 3}}
        # count: seeds seed + i, in order.
        many = open_episode(srv, {"code": env, "seed": 100, "count": 3}, tenant="globex")
        seeds = [e["info"]["seed"] for e in many["episodes"]]
        assert seeds == [100, 101, 102]
        assert len({e["id"] for e in many["episodes"]}) == 3
        for e in many["episodes"]:
            assert delete(srv, e["id"], tenant="globex").status_code == 204
        assert delete(srv, eid).status_code == 204


def test_bytes_and_ndarrays_travel_both_ways():
    env = ("import numpy as np\n"
           "class Env:\n"
           "    def reset(self, seed=None, options=None):\n"
           "        return np.arange(6, dtype=np.float32).reshape(2, 3), {'raw': b'\\x00\\xff'}\n"
           "    def step(self, action):\n"
           "        if isinstance(action, bytes):\n"
           "            return action[::-1], 0.0, False, False, {}\n"
           "        return action * 2, float(action.sum()), False, False,"
           " {'dtype': str(action.dtype), 'shape': list(action.shape)}\n")
    with running_server(tiers=TIERS, tenants=TENANTS) as srv:
        first = open_episode(srv, {"code": env, "env_class": "Env"})
        eid = first["id"]
        array = first["observation"]["$ndarray"]
        assert array["dtype"] == "<f4" and array["shape"] == [2, 3]
        assert base64.b64decode(array["data"]) == b"".join(
            __import__("struct").pack("<f", float(v)) for v in range(6))
        assert first["info"] == {"raw": {"$bytes": base64.b64encode(b"\x00\xff").decode()}}
        sent = {"$bytes": base64.b64encode(b"abc\x00").decode()}
        assert step(srv, eid, sent)["observation"] == {
            "$bytes": base64.b64encode(b"\x00cba").decode()}
        data = b"".join(v.to_bytes(2, "little", signed=True) for v in (1, -2, 3, 4))
        answer = step(srv, eid, {"$ndarray": {"dtype": "<i2", "shape": [2, 2],
                                              "data": base64.b64encode(data).decode()}})
        assert answer["status"] == "ok", answer
        assert answer["reward"] == 6.0 and answer["info"] == {"dtype": "int16", "shape": [2, 2]}
        doubled = answer["observation"]["$ndarray"]
        assert base64.b64decode(doubled["data"]) == b"".join(
            v.to_bytes(2, "little", signed=True) for v in (2, -4, 6, 8))
        assert delete(srv, eid).status_code == 204


def test_an_environment_that_raises_fails_the_episode_until_a_reset():
    env = ("class Env:\n"
           "    def reset(self, seed=None, options=None):\n"
           "        self.n = 0\n"
           "        return 0, {}\n"
           "    def step(self, action):\n"
           "        self.n += 1\n"
           "        if action == 'boom':\n"
           "            raise ValueError('bad action %r' % action)\n"
           "        return self.n, 1, False, False, {}\n")
    with running_server(tiers=TIERS, tenants=TENANTS) as srv:
        eid = open_episode(srv, {"code": env, "env_class": "Env"})["id"]
        assert step(srv, eid, "ok")["observation"] == 1
        failed = step(srv, eid, "boom")
        assert failed["status"] == "error" and failed["state"] == "failed"
        assert failed["error"]["name"] == "ValueError"
        assert "bad action 'boom'" in failed["error"]["value"]
        assert any("env.py" in line for line in failed["error"]["traceback"])
        assert not any("session_agent" in line for line in failed["error"]["traceback"])
        refused = expect_problem(post(srv, f"/v1/episodes/{eid}/step", {"action": "ok"}), 409)
        assert "reset" in refused["detail"]
        assert get(srv, eid).json()["state"] == "failed"
        assert reset(srv, eid)["status"] == "ok"
        assert step(srv, eid, "ok")["observation"] == 1
        assert delete(srv, eid).status_code == 204


def test_a_step_past_its_timeout_ends_the_episode():
    env = ("import time\n"
           "def reset(seed=None, options=None):\n"
           "    return 0, {}\n"
           "def step(action):\n"
           "    while action == 'hang':\n"
           "        pass\n"
           "    return 1, 0, False, False, {}\n")
    with running_server(tiers=TIERS, tenants=TENANTS) as srv:
        eid = open_episode(srv, {"code": env, "step_timeout_ms": 500})["id"]
        assert step(srv, eid, "go")["status"] == "ok"
        started = time.monotonic()
        hung = step(srv, eid, "hang")
        assert hung["status"] == "timeout" and hung["state"] == "ended"
        assert time.monotonic() - started < 8
        # It spun until interrupted: most of the 500 ms on a quiet machine, less on a busy one
        # (22 ms once, while another stage's 64 clients took both CPUs).
        assert hung["usage"]["cpu_ms"] >= 100
        gone = step(srv, eid, "go", want=404)
        assert gone["end_reason"] == "step_timeout"
        assert get(srv, eid).status_code == 404


def test_the_memory_cap_holds_and_a_reset_revives_the_environment():
    env = ("def reset(seed=None, options=None):\n"
           "    return 0, {}\n"
           "def step(action):\n"
           "    if action == 'eat':\n"
           "        hog = []\n"
           "        while True:\n"
           "            hog.append(bytearray(1 << 20))\n"
           "    return 1, 0, False, False, {}\n")
    with running_server(tiers=TIERS, tenants=TENANTS) as srv:
        eid = open_episode(srv, {"code": env, "limits": {"memory_mb": 96}})["id"]
        eaten = step(srv, eid, "eat")
        assert eaten["status"] == "memory_limit", eaten
        assert eaten["evidence"]["oom_kills"] >= 1 and eaten["state"] == "failed"
        assert eaten["evidence"]["memory_peak_bytes"] <= 96 << 20
        # The interpreter was restarted without the environment: a reset imports it again.
        expect_problem(post(srv, f"/v1/episodes/{eid}/step", {"action": "x"}), 409)
        assert reset(srv, eid)["status"] == "ok"
        assert step(srv, eid, "x")["status"] == "ok"
        assert delete(srv, eid).status_code == 204


def test_an_environment_that_forks_meets_the_pids_cap():
    env = ("import os\n"
           "def reset(seed=None, options=None):\n"
           "    return 0, {}\n"
           "def step(action):\n"
           "    made = 0\n"
           "    try:\n"
           "        for _ in range(200):\n"
           "            if os.fork() == 0:\n"
           "                import time\n"
           "                time.sleep(30)\n"
           "                os._exit(0)\n"
           "            made += 1\n"
           "    except OSError as e:\n"
           "        return made, 0, False, False, {'errno': e.errno}\n"
           "    return made, 0, False, False, {}\n")
    with running_server(tiers=TIERS, tenants=TENANTS) as srv:
        eid = open_episode(srv, {"code": env, "limits": {"pids": 16}})["id"]
        forked = step(srv, eid, "fork")
        assert forked["status"] == "pids_limit", forked
        assert forked["info"] == {"errno": 11} and forked["observation"] < 16
        assert forked["evidence"]["pids_max_events"] >= 1
        assert forked["evidence"]["pids_peak"] <= 16
        assert delete(srv, eid).status_code == 204


def test_a_batch_of_16_with_one_failing_environment():
    env = ("import os\n"
           "class Env:\n"
           "    def reset(self, seed=None, options=None):\n"
           "        self.seed, self.t = seed, 0\n"
           "        return seed, {}\n"
           "    def step(self, action):\n"
           "        self.t += 1\n"
           "        if self.seed == 105 and self.t == 2:\n"
           "            raise RuntimeError('environment 105 breaks')\n"
           "        return [self.seed, self.t], action, False, False, {'pid': os.getpid()}\n")
    with running_server(tiers=TIERS, tenants=TENANTS) as srv:
        opened = open_episode(srv, {"code": env, "env_class": "Env", "seed": 100, "count": 16},
                              tenant="globex")["episodes"]
        ids = [e["id"] for e in opened]
        for t in (1, 2, 3):
            body = {"steps": [{"id": eid, "action": i} for i, eid in enumerate(ids)]
                    + [{"id": "f" * 32, "action": 0}]}
            results = post(srv, "/v1/episodes/step", body, tenant="globex", want=200).json()
            results = results["results"]
            assert len(results) == 17
            for i, (eid, result) in enumerate(zip(ids, results)):
                assert result["id"] == eid
                if i == 5 and t == 2:
                    assert result["status"] == "error"
                    assert result["error"]["name"] == "RuntimeError"
                elif i == 5 and t == 3:
                    assert result["status"] == "rejected"
                    assert result["problem"]["status"] == 409
                else:
                    assert result["status"] == "ok", result
                    assert result["observation"] == [100 + i, t] and result["reward"] == i
            assert results[16]["status"] == "rejected" and results[16]["id"] == "f" * 32
            assert results[16]["problem"]["status"] == 404
        # Each environment is a process of its own sandbox: one pid each, the same pid (its
        # sandbox's pid namespace) in every one.
        for eid in ids:
            assert delete(srv, eid, tenant="globex").status_code == 204
        # The same item twice in one batch: the second is refused, the first steps.
        again = open_episode(srv, {"code": env, "env_class": "Env", "seed": 1}, tenant="globex")
        twice = post(srv, "/v1/episodes/step",
                     {"steps": [{"id": again["id"], "action": 1},
                                {"id": again["id"], "action": 2}]},
                     tenant="globex", want=200).json()["results"]
        assert twice[0]["status"] == "ok" and twice[1]["problem"]["status"] == 409
        assert delete(srv, again["id"], tenant="globex").status_code == 204


def test_no_residue_between_tenants():
    env = ("import os, glob\n"
           "SEEN = []\n"
           "def reset(seed=None, options=None):\n"
           "    found = glob.glob('/workspace/*') + glob.glob('/tmp/*')\n"
           "    return sorted(f for f in found if not f.endswith('__pycache__')), {}\n"
           "def step(action):\n"
           "    open('/workspace/secret-' + action, 'w').write(action)\n"
           "    open('/tmp/secret-' + action, 'w').write(action)\n"
           "    SEEN.append(action)\n"
           "    return SEEN, 0, False, False, {}\n")
    with running_server(tiers=TIERS, tenants=TENANTS) as srv:
        mine = open_episode(srv, {"code": env})
        assert mine["observation"] == ["/workspace/env.py"]
        assert step(srv, mine["id"], "acme")["observation"] == ["acme"]
        # globex cannot reach acme's episode by its id, under any route.
        for path in ("", "/files/secret-acme"):
            r = srv.get(f"/v1/episodes/{mine['id']}{path}",
                        headers=srv.headers("globex", content_type=None))
            expect_problem(r, 404)
        expect_problem(post(srv, f"/v1/episodes/{mine['id']}/step", {"action": "x"},
                            tenant="globex"), 404)
        expect_problem(delete(srv, mine["id"], tenant="globex"), 404)
        # Nor through the session routes (an episode is not a session).
        r = srv.request("POST", f"/v1/sessions/{mine['id']}/run", data=json.dumps({"code": "1"}),
                        headers=srv.headers())
        expect_problem(r, 404)
        # An episode is not listed among sessions either.
        listed = srv.get("/v1/sessions", headers=srv.headers(content_type=None)).json()
        assert listed["sessions"] == []
        # acme's own file is there; after it closes, globex's new episode starts clean.
        got = srv.get(f"/v1/episodes/{mine['id']}/files/secret-acme",
                      headers=srv.headers(content_type=None))
        assert got.status_code == 200 and got.content == b"acme"
        assert delete(srv, mine["id"]).status_code == 204
        theirs = open_episode(srv, {"code": env}, tenant="globex")
        assert theirs["observation"] == ["/workspace/env.py"]
        assert step(srv, theirs["id"], "globex", tenant="globex")["observation"] == ["globex"]
        assert delete(srv, theirs["id"], tenant="globex").status_code == 204


def test_deleting_an_episode_in_the_middle_of_a_step():
    env = ("import time\n"
           "def reset(seed=None, options=None):\n"
           "    return 0, {}\n"
           "def step(action):\n"
           "    time.sleep(action)\n"
           "    return 1, 0, False, False, {}\n")
    with running_server(tiers=TIERS, tenants=TENANTS) as srv:
        eid = open_episode(srv, {"code": env, "step_timeout_ms": 9000})["id"]
        outcome = {}

        def slow_step():
            outcome["r"] = post(srv, f"/v1/episodes/{eid}/step", {"action": 8})

        thread = threading.Thread(target=slow_step)
        thread.start()
        time.sleep(0.8)
        started = time.monotonic()
        assert delete(srv, eid).status_code == 204
        assert time.monotonic() - started < 5  # the step was interrupted, not waited out
        thread.join(timeout=20)
        answer = outcome["r"]
        assert answer.status_code == 200 and answer.json()["status"] == "canceled", answer.text
        assert step(srv, eid, 0, want=404)["end_reason"] == "deleted"


def test_close_takes_a_concurrency_slot_as_a_step_does():
    # DELETE calls close(), the tenant's code: it runs as an operation of the tenant, so a
    # tenant at its concurrency has the episode ended without close() (its sandbox goes all the
    # same). Three environments share a sandbox whose workspace keeps what each close() wrote;
    # a fourth, in its own sandbox, holds the tenant's one slot with a slow step.
    env = ("import time\n"
           "class Env:\n"
           "    def reset(self, seed=None, options=None):\n"
           "        self.seed = seed\n"
           "        return seed, {}\n"
           "    def step(self, action):\n"
           "        if action == 'sleep':\n"
           "            time.sleep(2)\n"
           "        return self.seed, 0.0, False, False, {}\n"
           "    def close(self):\n"
           "        open('/workspace/closed', 'a').write(f'{self.seed}\\n')\n")
    tiers = {**TIERS, "free": {**TIERS["free"], "max_concurrency": 1, "max_episodes": 4}}
    with running_server(tiers=tiers, tenants=TENANTS) as srv:
        shared = [e["id"] for e in open_episode(
            srv, {"code": env, "env_class": "Env", "seed": 0, "count": 3,
                  "sandbox": "shared"})["episodes"]]
        alone = open_episode(srv, {"code": env, "env_class": "Env", "seed": 7})["id"]

        def closed():
            r = srv.get(f"/v1/episodes/{shared[2]}/files/closed",
                        headers=srv.headers(content_type=None))
            assert r.status_code == 200, r.text
            return r.content

        assert delete(srv, shared[0]).status_code == 204
        assert closed() == b"0\n"
        # The slot taken by a step in progress: the DELETE ends the episode without close().
        stepped = {}
        stepper = threading.Thread(target=lambda: stepped.update(step(srv, alone, "sleep")))
        stepper.start()
        try:
            deadline = time.monotonic() + 10
            while get(srv, alone).json()["state"] != "running" and time.monotonic() < deadline:
                time.sleep(0.05)
            assert get(srv, alone).json()["state"] == "running"
            assert delete(srv, shared[1]).status_code == 204
        finally:
            stepper.join(30)
        assert stepped["status"] == "ok", stepped
        assert closed() == b"0\n"
        step(srv, shared[1], 0, want=404)
        # With the slot free again, close() runs.
        assert delete(srv, alone).status_code == 204
        assert delete(srv, shared[2]).status_code == 204


def test_max_steps_truncates_and_a_done_episode_needs_a_reset():
    env = ("def reset(seed=None, options=None):\n"
           "    return 0, {}\n"
           "def step(action):\n"
           "    return action, 1, action == 'stop', False, {}\n")
    with running_server(tiers=TIERS, tenants=TENANTS) as srv:
        eid = open_episode(srv, {"code": env, "max_steps": 3})["id"]
        assert step(srv, eid, 1)["truncated"] is False
        assert step(srv, eid, 2)["truncated"] is False
        third = step(srv, eid, 3)
        assert third["truncated"] is True and third["state"] == "done"
        assert third["episode_reward"] == 3
        expect_problem(post(srv, f"/v1/episodes/{eid}/step", {"action": 4}), 409)
        reset(srv, eid)
        stopped = step(srv, eid, "stop")
        assert stopped["terminated"] is True and stopped["truncated"] is False
        assert delete(srv, eid).status_code == 204


def test_opening_refusals_and_bad_input():
    with running_server(tiers=TIERS, tenants=TENANTS) as srv:
        env = "def reset(seed=None, options=None):\n    return 0, {}\n" \
              "def step(a):\n    return 0, 0, False, False, {}\n"
        for body, field in (({}, "code"),
                            ({"code": env, "files": []}, "code"),
                            ({"code": env, "language": "bash"}, "language"),
                            ({"code": env, "env_class": "not a name"}, "env_class"),
                            ({"code": env, "count": 0}, "count"),
                            ({"code": env, "count": 65}, "count"),
                            ({"code": env, "seed": "x"}, "seed"),
                            ({"code": env, "step_timeout_ms": 0}, "step_timeout_ms"),
                            ({"code": env, "max_steps": -1}, "max_steps"),
                            ({"code": env, "surprise": 1}, "surprise"),
                            ({"files": [{"path": "e.py", "content": env}]}, "entrypoint"),
                            ({"files": [{"path": "e.py", "content": env}],
                              "entrypoint": "../e.py"}, "entrypoint")):
            expect_problem(post(srv, "/v1/episodes", body), 400, field=field)
        # The environment's first reset raises: 422 with its error, and nothing stays open.
        broken = expect_problem(post(srv, "/v1/episodes", {"code": "raise ImportError('no')"}),
                                422)
        assert broken["error"]["name"] == "ImportError"
        missing = expect_problem(post(srv, "/v1/episodes", {"code": env, "env_class": "Nope"}),
                                 422)
        assert missing["error"]["name"] == "AttributeError"
        listed = srv.get("/v1/episodes", headers=srv.headers(content_type=None)).json()
        assert listed["episodes"] == []
        # files and entrypoint: a package of modules.
        pkg = open_episode(srv, {"files": [{"path": "envs/grid.py", "content": env.replace(
            "return 0, {}", "import helper\n    return helper.START, {}")},
            {"path": "envs/helper.py", "content": "START = 41"}],
            "entrypoint": "envs/grid.py"})
        assert pkg["observation"] == 41
        # free: 3 episodes at most; a count that would pass it opens none.
        expect_problem(post(srv, "/v1/episodes", {"code": env, "count": 3}), 429)
        two = open_episode(srv, {"code": env, "count": 2})["episodes"]
        expect_problem(post(srv, "/v1/episodes", {"code": env}), 429)
        for e in two + [pkg]:
            assert delete(srv, e["id"]).status_code == 204
        # A batch none of whose items could run is refused as a whole.
        nobody = expect_problem(post(srv, "/v1/episodes/step",
                                     {"steps": [{"id": "a" * 32, "action": 1}]}), 404)
        assert "no such episode" in nobody["detail"]
        step_body = post(srv, "/v1/episodes/step", {"steps": []})
        expect_problem(step_body, 400, field="steps")
        expect_problem(post(srv, "/v1/episodes/step", {"steps": [{"id": "x"}]}), 400)
        r = srv.request("POST", "/v1/episodes", data=json.dumps({"code": env}),
                        headers=srv.headers(token="wrong"))
        expect_problem(r, 401)


@pytest.mark.own_store
def test_episodes_are_audited_and_counted():
    env = ("def reset(seed=None, options=None):\n    return 0, {}\n"
           "def step(a):\n    return a, a, False, False, {}\n")
    with kept_data_dir() as data_dir:
        with running_server(tiers=TIERS, tenants=TENANTS, data_dir=data_dir) as srv:
            eid = open_episode(srv, {"code": env, "seed": 3})["id"]
            for a in (1, 2, 3):
                step(srv, eid, a)
            assert delete(srv, eid).status_code == 204
            deadline = time.monotonic() + 10
            row = None
            while time.monotonic() < deadline:
                db = sqlite3.connect(f"file:{os.path.join(data_dir, 'audit.db')}?mode=ro",
                                     uri=True)
                db.row_factory = sqlite3.Row
                row = dict(db.execute("SELECT * FROM sessions WHERE id = ?", (eid,)).fetchone())
                db.close()
                if row["ended_at"] is not None:
                    break
                time.sleep(0.1)
            assert row["kind"] == "episode" and row["tenant"] == "acme"
            assert row["end_reason"] == "deleted"
            summary = json.loads(row["summary"])
            assert summary["steps"] == 3 and summary["total_reward"] == 6
            assert summary["resets"] == 1 and summary["cpu_ms"] >= 0
            requested = json.loads(row["requested"])
            assert requested["seed"] == 3 and "sha256" in requested["code"]
            metrics = srv.get("/metrics", headers=srv.headers(content_type=None)).text
            assert 'sandboxd_episode_steps_total{status="ok"} 4' in metrics  # 3 steps, 1 reset
            assert "sandboxd_episodes_opened_total 1" in metrics
            assert 'sandboxd_episodes_ended_total{reason="deleted"} 1' in metrics
            assert "sandboxd_episode_step_duration_seconds_count" in metrics


def test_responses_match_the_openapi_document():
    from test_serve_openapi import check_response
    env = ("def reset(seed=None, options=None):\n    return {'seed': seed}, {}\n"
           "def step(a):\n"
           "    if a == 'raise':\n"
           "        raise KeyError(a)\n"
           "    return a, 0.5, a == 'end', False, {'n': 1}\n")
    with running_server(tiers=TIERS, tenants=TENANTS) as srv:
        doc = srv.get("/v1/openapi.json").json()
        opened = post(srv, "/v1/episodes", {"code": env, "seed": 1})
        eid = check_response(doc, "/v1/episodes", "POST", opened)["id"]
        many = post(srv, "/v1/episodes", {"code": env, "count": 2})
        ids = [e["id"] for e in check_response(doc, "/v1/episodes", "POST", many)["episodes"]]
        check_response(doc, "/v1/episodes", "GET",
                       srv.get("/v1/episodes", headers=srv.headers(content_type=None)))
        check_response(doc, "/v1/episodes/{id}", "GET", get(srv, eid))
        for action in ("a", {"$bytes": "AA=="}, "raise"):
            check_response(doc, "/v1/episodes/{id}/step", "POST",
                           post(srv, f"/v1/episodes/{eid}/step", {"action": action}))
        check_response(doc, "/v1/episodes/{id}/step", "POST",
                       post(srv, f"/v1/episodes/{eid}/step", {"action": 1}))  # 409: failed
        check_response(doc, "/v1/episodes/{id}/reset", "POST",
                       post(srv, f"/v1/episodes/{eid}/reset", {"seed": 2}))
        batch = post(srv, "/v1/episodes/step",
                     {"steps": [{"id": i, "action": "end"} for i in ids + ["0" * 32]]})
        check_response(doc, "/v1/episodes/step", "POST", batch)
        check_response(doc, "/v1/episodes", "POST",
                       post(srv, "/v1/episodes", {"code": "raise SystemExit(3)"}))  # 422
        check_response(doc, "/v1/episodes", "POST", post(srv, "/v1/episodes", {"code": 5}))
        listing = srv.get(f"/v1/episodes/{eid}/files", headers=srv.headers(content_type=None))
        check_response(doc, "/v1/episodes/{id}/files", "GET", listing)
        for e in [eid] + ids:
            assert delete(srv, e).status_code == 204
        check_response(doc, "/v1/episodes/{id}", "GET", get(srv, eid))  # 404, ended


def test_a_session_pool_serves_episodes():
    # An episode's sandbox is a python session's: one opened ahead of time takes the episode's
    # caps and module, and a used one is never handed on (the next open gets another).
    from test_serve_sessions import wait_for_ready_entries
    env = ("import resource\n"
           "def reset(seed=None, options=None):\n"
           "    return resource.getrlimit(resource.RLIMIT_NOFILE)[0], {}\n"
           "def step(a):\n"
           "    global kept\n"
           "    kept = a\n"
           "    return a, 0, False, False, {}\n")
    pools = "\n[session_pool.python]\nmin_idle = 2\nmax_idle = 2\n"
    with running_server(tiers=TIERS, tenants=TENANTS, pools={"python": {"min_idle": 0}},
                        extra_config=pools) as srv:
        wait_for_ready_entries(srv, 2)
        first = open_episode(srv, {"code": env, "limits": {"open_files": 77}})
        assert first["pooled"] is True and first["observation"] == 77, first
        assert step(srv, first["id"], "mine")["status"] == "ok"
        assert delete(srv, first["id"]).status_code == 204
        wait_for_ready_entries(srv, 2)
        # The same module name: in a shared interpreter, sys.modules would hand it the first
        # episode's module, globals and all.
        peek = env.replace("    kept = a\n    return a, 0", "    return globals().get('kept'), 0")
        assert peek != env
        second = open_episode(srv, {"code": peek}, tenant="globex")
        assert second["pooled"] is True
        # A fresh interpreter: nothing of the first episode's.
        assert step(srv, second["id"], "x", tenant="globex")["observation"] is None
        assert delete(srv, second["id"], tenant="globex").status_code == 204


def test_answers_are_bounded_and_rewards_finite():
    env = ("def reset(seed=None, options=None):\n    return 0, {}\n"
           "def step(a):\n"
           "    if a == 'huge':\n"
           "        return 'x' * (2 << 20), 0, False, False, {}\n"
           "    if a == 'inf':\n"
           "        return 0, float('inf'), False, False, {}\n"
           "    return 'x' * (512 << 10), 1, False, False, {}\n")
    with running_server(tiers=TIERS, tenants=TENANTS) as srv:
        eid = open_episode(srv, {"code": env})["id"]
        big = step(srv, eid, "big")
        assert big["status"] == "ok" and len(big["observation"]) == 512 << 10
        # Past 1 MiB of JSON an answer is an error (the API holds a batch's answers together).
        huge = step(srv, eid, "huge")
        assert huge["status"] == "error" and "1 MiB" in huge["error"]["value"], huge
        reset(srv, eid)
        infinite = step(srv, eid, "inf")
        assert infinite["status"] == "error" and "finite" in infinite["error"]["value"]
        assert delete(srv, eid).status_code == 204


SHARED_ENV = ("import os, time\n"
              "class Env:\n"
              "    def reset(self, seed=None, options=None):\n"
              "        self.seed, self.t = seed, 0\n"
              "        return seed, {'pid': os.getpid()}\n"
              "    def step(self, action):\n"
              "        self.t += 1\n"
              "        if action == 'raise':\n"
              "            raise RuntimeError('environment %d breaks' % self.seed)\n"
              "        if action == 'hang':\n"
              "            time.sleep(60)\n"
              "        return [self.seed, self.t], 1.0, False, False, {}\n")


def test_a_shared_sandbox_holds_many_environments_in_one_interpreter():
    # "sandbox": "shared": one sandbox, one interpreter, one environment object each (as
    # Gymnasium's SyncVectorEnv); each is still an episode of its own. The server counts it as
    # one sandbox.
    with running_server(tiers=TIERS, tenants=TENANTS, server={"max_sessions": 2}) as srv:
        opened = open_episode(srv, {"code": SHARED_ENV, "env_class": "Env", "seed": 10,
                                    "count": 16, "sandbox": "shared"}, tenant="globex")
        episodes = opened["episodes"]
        ids = [e["id"] for e in episodes]
        assert [e["observation"] for e in episodes] == list(range(10, 26))
        assert len({e["info"]["pid"] for e in episodes}) == 1  # one interpreter
        assert all(e["sandbox"] == "shared" for e in episodes)
        # The server's maximum of 2 sandboxes: the shared one is one of them.
        other = open_episode(srv, {"code": SHARED_ENV, "env_class": "Env"}, tenant="globex")
        expect_problem(post(srv, "/v1/episodes", {"code": SHARED_ENV, "env_class": "Env"},
                            tenant="globex"), 503, slug="at-capacity")
        assert delete(srv, other["id"], tenant="globex").status_code == 204
        # A batch over all of them is one message into the interpreter; one raises, the rest
        # step on.
        actions = ["go"] * 16
        actions[3] = "raise"
        results = post(srv, "/v1/episodes/step",
                       {"steps": [{"id": i, "action": a} for i, a in zip(ids, actions)]},
                       tenant="globex", want=200).json()["results"]
        for i, result in enumerate(results):
            if i == 3:
                assert result["status"] == "error" and result["state"] == "failed"
                assert "environment 13 breaks" in result["error"]["value"]
            else:
                assert result["status"] == "ok" and result["observation"] == [10 + i, 1], result
        # One at a time works too, and a reset revives the failed one alone.
        assert step(srv, ids[0], "go", tenant="globex")["observation"] == [10, 2]
        expect_problem(post(srv, f"/v1/episodes/{ids[3]}/step", {"action": "go"},
                            tenant="globex"), 409)
        assert reset(srv, ids[3], seed=99, tenant="globex")["observation"] == 99
        assert step(srv, ids[3], "go", tenant="globex")["observation"] == [99, 1]
        # Deleting one closes its environment; the others live on in the sandbox.
        assert delete(srv, ids[0], tenant="globex").status_code == 204
        assert step(srv, ids[1], "go", tenant="globex")["observation"] == [11, 2]
        step(srv, ids[0], "go", tenant="globex", want=404)
        for eid in ids[1:]:
            assert delete(srv, eid, tenant="globex").status_code == 204
        # The sandbox closed with its last episode: room for two again.
        again = [open_episode(srv, {"code": SHARED_ENV, "env_class": "Env"}, tenant="globex")
                 for _ in range(2)]
        for e in again:
            assert delete(srv, e["id"], tenant="globex").status_code == 204


def test_a_shared_sandbox_shares_its_deadline_and_its_end():
    with running_server(tiers=TIERS, tenants=TENANTS) as srv:
        ids = [e["id"] for e in open_episode(
            srv, {"code": SHARED_ENV, "env_class": "Env", "count": 4, "sandbox": "shared",
                  "step_timeout_ms": 700}, tenant="globex")["episodes"]]
        results = post(srv, "/v1/episodes/step",
                       {"steps": [{"id": i, "action": "hang" if n == 1 else "go"}
                                  for n, i in enumerate(ids)]},
                       tenant="globex", want=200).json()["results"]
        # One interpreter ran them: the deadline is the batch's, and ends every one of them.
        assert [r["status"] for r in results] == ["timeout"] * 4, results
        for eid in ids:
            assert step(srv, eid, "go", tenant="globex", want=404)["end_reason"] == \
                "step_timeout"
        # Module-level functions are one environment, whatever the count: refused.
        expect_problem(post(srv, "/v1/episodes",
                            {"code": "def reset(seed=None, options=None):\n    return 0, {}\n"
                                     "def step(a):\n    return 0, 0, False, False, {}\n",
                             "count": 2, "sandbox": "shared"}), 400, field="env_class")
        expect_problem(post(srv, "/v1/episodes", {"code": SHARED_ENV, "env_class": "Env",
                                                  "sandbox": "mine"}), 400, field="sandbox")


def test_nested_observations_and_a_shared_batchs_answers():
    # An observation as nested lists (a 64 x 64 x 3 image: 4161 lists) travels; one past what a
    # frame carries (100 000 lists) is that step's error, not the sandbox's end; in a shared
    # sandbox's batch it is that item's alone, and the batch's output comes once.
    env = ("class Env:\n"
           "    def reset(self, seed=None, options=None):\n"
           "        return 0, {}\n"
           "    def step(self, action):\n"
           "        print('stepped', action)\n"
           "        if action == 'image':\n"
           "            return [[[1, 2, 3] for _ in range(64)] for _ in range(64)], 0, False, "
           "False, {}\n"
           "        if action == 'deep':\n"
           "            return [[i] for i in range(100000)], 0, False, False, {}\n"
           "        return action, 0, False, False, {}\n")
    with running_server(tiers=TIERS, tenants=TENANTS) as srv:
        eid = open_episode(srv, {"code": env, "env_class": "Env"})["id"]
        image = step(srv, eid, "image")
        assert image["status"] == "ok" and len(image["observation"]) == 64
        assert image["observation"][63][63] == [1, 2, 3]
        deep = step(srv, eid, "deep")
        assert deep["status"] == "error" and "ndarray" in deep["error"]["value"], deep
        reset(srv, eid)
        assert step(srv, eid, 7)["observation"] == 7  # the sandbox lives on
        assert delete(srv, eid).status_code == 204
        ids = [e["id"] for e in open_episode(srv, {"code": env, "env_class": "Env", "count": 3,
                                                   "sandbox": "shared"},
                                             tenant="globex")["episodes"]]
        results = post(srv, "/v1/episodes/step",
                       {"steps": [{"id": ids[0], "action": 1}, {"id": ids[1], "action": "deep"},
                                  {"id": ids[2], "action": 3}]},
                       tenant="globex", want=200).json()["results"]
        assert [r["status"] for r in results] == ["ok", "error", "ok"], results
        assert results[0]["observation"] == 1 and results[2]["observation"] == 3
        # The interpreter's output of the whole batch, with its first item only.
        assert "stepped 1" in results[0]["stdout"] and "stepped 3" in results[0]["stdout"]
        assert results[2]["stdout"] == "" and "evidence" not in results[2]
        for eid in ids:
            assert delete(srv, eid, tenant="globex").status_code == 204
