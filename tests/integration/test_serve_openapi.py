"""GET /v1/openapi.json: an OpenAPI 3.1 document that matches what the server really does. Real
responses (execution results of every kind, problem bodies of every status, the health body, an
audit record, and the headers that go with them) are validated against the schemas the document
itself names for that operation and status (jsonschema, draft 2020-12). The request schema must
accept the requests the server runs and refuse some it refuses."""

import json
import os
import signal
import time

import jsonschema
import pytest

from serve_helpers import FREE_TIER, expect_problem, no_new_leaks, running_server

assert no_new_leaks  # imported to replace conftest's per-test leak check in this module

BASE_URI = "urn:sandboxd:openapi"


@pytest.fixture(scope="module")
def srv():
    tiers = {
        "free": {**FREE_TIER, "languages": "python, bash, sh, c, cpp"},
        "pyonly": {**FREE_TIER, "languages": "python"},
        # One execution spends the budget for an hour: the second is a 429.
        "broke": {**FREE_TIER, "cpu_budget_ms": 1, "cpu_window_s": 3600},
    }
    with running_server(tiers=tiers, tenants={"acme": "free", "pyco": "pyonly",
                                              "skint": "broke"},
                        server={"max_body_bytes": 65536}) as server:
        yield server


@pytest.fixture(scope="module")
def doc(srv):
    r = srv.get("/v1/openapi.json")
    assert r.status_code == 200, r.text[:500]
    assert r.headers.get("Content-Type", "").split(";")[0] == "application/json", r.headers
    return json.loads(r.text)


def resolve(doc, node):
    """Follows a local "$ref" (to components/responses, headers, ...) to the object."""
    while isinstance(node, dict) and "$ref" in node and len(node) == 1:
        ref = node["$ref"]
        assert ref.startswith("#/"), ref
        node = doc
        for part in ref[2:].split("/"):
            node = node[part.replace("~1", "/").replace("~0", "~")]
    return node


def response_spec(doc, path, method, status):
    operation = doc["paths"][path][method.lower()]
    responses = operation["responses"]
    assert str(status) in responses, \
        f"{method} {path} answered {status}, which the document does not list " \
        f"({sorted(responses)})"
    return resolve(doc, responses[str(status)])


def validator(doc, schema):
    """A Draft 2020-12 validator for schema; a local $ref in it is made absolute in the
    document's URN (jsonschema 4.10: RefResolver, no `referencing`)."""
    if set(schema) == {"$ref"} and schema["$ref"].startswith("#/"):
        schema = {"$ref": BASE_URI + schema["$ref"]}
    resolver = jsonschema.RefResolver(BASE_URI, doc)
    return jsonschema.Draft202012Validator(schema, resolver=resolver)


def validate(doc, schema, instance, what):
    errors = sorted(validator(doc, schema).iter_errors(instance), key=lambda e: list(e.path))
    assert not errors, f"{what} does not match the document's schema:\n" + "\n".join(
        f"  at {list(e.absolute_path)}: {e.message[:300]}" for e in errors[:10]) + \
        f"\ninstance: {json.dumps(instance)[:1500]}"


def check_response(doc, path, method, response, template=None):
    """Validates status, Content-Type, body and documented headers of a real response against
    the operation in the document. template is the path as the document spells it."""
    spec = response_spec(doc, template or path, method, response.status_code)
    content_type = response.headers.get("Content-Type", "").split(";")[0].strip()
    content = spec.get("content", {})
    assert content_type in content, \
        f"{method} {path} {response.status_code}: Content-Type {content_type} not documented " \
        f"({sorted(content)})"
    schema = content[content_type]["schema"]
    body = response.json() if "json" in content_type else response.text
    validate(doc, schema, body, f"{method} {path} {response.status_code} body")
    for name, header in spec.get("headers", {}).items():
        header = resolve(doc, header)
        value = response.headers.get(name)
        if header.get("required"):
            assert value is not None, f"{method} {path} {response.status_code}: no {name} header"
        if value is not None:
            typed = int(value) if header["schema"].get("type") == "integer" else value
            validate(doc, header["schema"], typed, f"header {name}")
    return body


# --- the document ---------------------------------------------------------------------------------


def test_document_is_openapi_3_1(doc):
    assert doc["openapi"].startswith("3.1."), doc["openapi"]
    assert doc["info"]["title"] and doc["info"]["version"]
    assert {"/v1/executions", "/v1/executions/{id}", "/health", "/metrics",
            "/v1/openapi.json"} <= set(doc["paths"])
    assert "post" in doc["paths"]["/v1/executions"]
    assert "get" in doc["paths"]["/v1/executions/{id}"]
    assert doc.get("jsonSchemaDialect", "https://spec.openapis.org/oas/3.1/dialect/base")


def test_every_schema_is_a_valid_2020_12_schema(doc):
    schemas = doc["components"]["schemas"]
    assert schemas
    for name, schema in schemas.items():
        jsonschema.Draft202012Validator.check_schema(schema)
        assert name


def test_every_local_ref_resolves(doc):
    def walk(node):
        if isinstance(node, dict):
            if isinstance(node.get("$ref"), str):
                resolve(doc, {"$ref": node["$ref"]})
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(doc)


def test_document_lists_the_statuses_the_server_uses(doc):
    post = set(doc["paths"]["/v1/executions"]["post"]["responses"])
    assert {"200", "400", "401", "403", "413", "415", "429", "503"} <= post, post
    get = set(doc["paths"]["/v1/executions/{id}"]["get"]["responses"])
    assert {"200", "401", "404"} <= get, get
    assert {"200", "503"} <= set(doc["paths"]["/health"]["get"]["responses"])


# --- real responses -------------------------------------------------------------------------------


@pytest.mark.parametrize("request_body, status", [
    ({"language": "python", "code": "print(2+2)"}, "ok"),
    ({"language": "bash", "code": "echo hi; exit 3"}, "exit_nonzero"),
    ({"language": "python", "code": "import os\nos.kill(os.getpid(), 9)"}, "signaled"),
    ({"language": "python", "code": "import time\ntime.sleep(5)", "limits": {"wall_ms": 300}},
     "timeout"),
    ({"language": "python", "code": "print('x' * 100)", "limits": {"output_bytes": 10}},
     "output_limit"),
    ({"language": "python", "code": "a = []\nwhile True:\n    a.append('x' * (8 << 20))",
      "limits": {"memory_mb": 48}}, "memory_limit"),
    ({"language": "python", "code": "print(1)", "limits": {"memory_mb": 9999, "wall_ms": 99999}},
     "ok"),
    ({"language": "sh", "files": [{"path": "a/b.sh", "content": "echo $1", "executable": True}],
      "entrypoint": "a/b.sh", "args": ["x"], "env": {"X": "1"}, "stdin": "in",
      "network": "none", "backend": "native"}, "ok"),
    ({"language": "c", "code": "#include <stdio.h>\nint main(void) { puts(\"hi\"); }"}, "ok"),
    ({"language": "c++", "code": "int main() { return nope; }"}, "compile_error"),
], ids=["ok", "exit_nonzero", "signaled", "timeout", "output_limit", "memory_limit", "clamped",
        "files", "compiled", "compile_error"])
def test_execution_result_and_its_audit_record_match(srv, doc, request_body, status):
    validate(doc, doc["paths"]["/v1/executions"]["post"]["requestBody"]["content"]
             ["application/json"]["schema"], request_body, "the request")
    r = srv.post_execution(request_body)
    body = check_response(doc, "/v1/executions", "POST", r)
    assert body["status"] == status, body
    record = srv.get_execution(body["id"])
    check_response(doc, f"/v1/executions/{body['id']}", "GET", record,
                   template="/v1/executions/{id}")


@pytest.mark.parametrize("case", [
    "malformed", "wrong-type", "unknown-field", "bad-path", "unauthorized", "forbidden",
    "too-large", "media-type", "unknown-id", "unknown-path", "method", "quota",
])
def test_problem_responses_match(srv, doc, case):
    def post(body, **kw):
        return srv.post_execution(body, **kw)

    if case == "malformed":
        r, path = post(b"{nope"), "/v1/executions"
    elif case == "wrong-type":
        r, path = post({"language": "python", "code": 5}), "/v1/executions"
    elif case == "unknown-field":
        r, path = post({"language": "python", "code": "1", "limits": {"x": 1}}), "/v1/executions"
    elif case == "bad-path":
        r, path = post({"language": "python", "files": [{"path": "../x", "content": ""}],
                        "entrypoint": "../x"}), "/v1/executions"
    elif case == "unauthorized":
        r, path = post({"language": "python", "code": "1"}, tenant=None), "/v1/executions"
    elif case == "forbidden":
        r, path = post({"language": "bash", "code": "echo"}, tenant="pyco"), "/v1/executions"
    elif case == "too-large":
        r, path = post(b'{"language": "python", "code": "' + b"x" * 70000 + b'"}'), \
            "/v1/executions"
    elif case == "media-type":
        r, path = post(json.dumps({"language": "python", "code": "1"}),
                       content_type="text/plain"), "/v1/executions"
    elif case == "unknown-id":
        r, path = srv.get_execution("0" * 32), "/v1/executions/{id}"
    elif case == "unknown-path":
        r = srv.get("/nowhere")
        expect_problem(r, 404)
        # No operation to look the response up in: check the body against Problem itself.
        validate(doc, {"$ref": "#/components/schemas/Problem"}, r.json(), "404 for a path")
        return
    elif case == "method":
        r = srv.request("DELETE", "/health")
        expect_problem(r, 405)
        spec = resolve(doc, {"$ref": "#/components/responses/MethodNotAllowed"})
        validate(doc, spec["content"]["application/problem+json"]["schema"], r.json(), "405")
        validate(doc, resolve(doc, spec["headers"]["Allow"])["schema"], r.headers["Allow"],
                 "Allow")
        return
    elif case == "quota":
        first = post({"language": "python", "code": "print(1)"}, tenant="skint")
        assert first.status_code == 200, first.text[:500]
        r, path = post({"language": "python", "code": "print(1)"}, tenant="skint"), \
            "/v1/executions"
        assert r.status_code == 429, r.text[:500]
    method = "GET" if path.endswith("{id}") else "POST"
    real_path = "/v1/executions/" + "0" * 32 if path.endswith("{id}") else path
    assert r.status_code >= 400
    expect_problem(r, r.status_code)
    check_response(doc, real_path, method, r, template=path)


def test_invalid_request_shapes_are_refused_by_the_schema_too(doc):
    schema = doc["paths"]["/v1/executions"]["post"]["requestBody"]["content"] \
        ["application/json"]["schema"]
    check = validator(doc, schema)
    refused = [
        {"language": "cobol", "code": "x"},
        {"language": "python"},
        {"language": "python", "code": "x", "extra": 1},
        {"language": "python", "code": "x", "limits": {"memory_mb": 0}},
        {"language": "python", "code": "x", "limits": {"memory_mb": 1.5}},
        {"language": "python", "code": "x", "env": {"LD_PRELOAD": "x"}},
        {"language": "python", "files": [{"path": "/abs", "content": ""}], "entrypoint": "/abs"},
        {"language": "python", "files": [{"path": "a//b", "content": ""}], "entrypoint": "a//b"},
        {"language": "python", "files": [{"path": "../x", "content": ""}], "entrypoint": "../x"},
        {"language": "python", "code": "x", "files": [{"path": "a", "content": ""}],
         "entrypoint": "a"},
    ]
    for body in refused:
        assert not check.is_valid(body), f"the document's schema accepts {body}"


def test_the_validation_is_not_vacuous(srv, doc):
    """The same validation refuses a result that strays from the document."""
    r = srv.post_execution({"language": "python", "code": "print(1)"})
    schema = response_spec(doc, "/v1/executions", "POST", 200)["content"]["application/json"][
        "schema"]
    good = r.json()
    validate(doc, schema, good, "the real result")
    check = validator(doc, schema)
    for bad in ({**good, "bogus": 1}, {**good, "status": "fine"}, {**good, "exit_code": "0"},
                {**good, "error": "only with internal_error"},
                {**good, "usage": {**good["usage"], "cpu_ms": -1}},
                {k: v for k, v in good.items() if k != "timing"}):
        assert not check.is_valid(bad), f"the schema accepts {bad}"


def test_languages_match_and_say_what_runs_here(srv, doc):
    r = srv.get("/v1/languages", headers=srv.headers())
    body = check_response(doc, "/v1/languages", "GET", r)
    by_name = {entry["name"]: entry for entry in body["languages"]}
    assert list(by_name)[:3] == ["python", "bash", "sh"], list(by_name)
    python = by_name["python"]
    assert python["version"].startswith("Python 3."), python
    assert python["pooled"] is True and python["compiled"] is False
    assert "py" in python["aliases"] and ".py" in python["extensions"]
    assert by_name["cpp"]["compiled"] is True and "c++" in by_name["cpp"]["aliases"]
    assert by_name["c"]["version"][0].isdigit(), by_name["c"]  # gcc -dumpfullversion
    # scripts/install-deps.sh installs every toolchain; sh (dash) prints no version.
    assert {name for name, e in by_name.items() if e["version"] is None} == {"sh"}, by_name
    assert by_name["java"]["version"].startswith("openjdk 17"), by_name["java"]
    assert by_name["go"]["version"].startswith("go version go1."), by_name["go"]
    # The caller's tier (acme: free, which allows python, bash, sh, c, cpp) decides "allowed".
    assert [name for name, e in by_name.items() if e["allowed"]] == \
        ["python", "bash", "sh", "c", "cpp"], by_name
    pyonly = srv.get("/v1/languages", headers=srv.headers("pyco"))
    assert [e["name"] for e in pyonly.json()["languages"] if e["allowed"]] == ["python"]
    check_response(doc, "/v1/languages", "GET", srv.get("/v1/languages"))  # 401


def test_health_matches(srv, doc):
    r = srv.get("/health")
    body = check_response(doc, "/health", "GET", r)
    assert body == {"status": "ok", "engine": "up"}


def test_metrics_and_openapi_responses_are_documented(srv, doc):
    check_response(doc, "/metrics", "GET", srv.get("/metrics"))
    check_response(doc, "/v1/openapi.json", "GET", srv.get("/v1/openapi.json"))


def test_engine_unavailable_matches(srv, doc):
    """A stopped engine answers no PING: /health is a 503 problem; then it recovers."""
    os.kill(srv.pid, signal.SIGSTOP)
    try:
        r = srv.get("/health")
    finally:
        os.kill(srv.pid, signal.SIGCONT)
    expect_problem(r, 503)
    check_response(doc, "/health", "GET", r)
    deadline = time.monotonic() + 10
    while srv.get("/health").status_code != 200:
        assert time.monotonic() < deadline, "/health did not recover after SIGCONT"
        time.sleep(0.1)
