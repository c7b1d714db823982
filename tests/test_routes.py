"""The server's routes in-process (FastAPI's TestClient, no subprocess): each bad request
gets its own 4xx and message, and nothing stored is lost. The end-to-end tests drive the
same routes through a real server."""

from __future__ import annotations

import dataclasses
import re

import pytest
from fastapi.testclient import TestClient

from rl_insight import config
from rl_insight.server.app import create_app
from rl_insight.server.services.supervisor import Supervisor
from rl_insight.server.state import ServerState

GOOD = {"job_name": "vllm", "targets": ["10.0.0.5:8000"], "labels": {"replica": "0"},
        "project": "p", "experiment_name": "e"}


@pytest.fixture
def client(served):
    return served  # tests/conftest.py


@pytest.mark.parametrize("body, status, message", [
    ({**GOOD, "job_name": "9bad"}, 400, "job_name '9bad'"),
    ({**GOOD, "targets": []}, 400, "targets: List should have at least 1 item"),
    ({**GOOD, "targets": ["http://x:1/metrics"]}, 400, "only host:port is allowed"),
    ({**GOOD, "labels": [{"replica": "0"}, {"replica": "1"}]}, 400, "labels is a list of 2"),
    ({**GOOD, "labels": {"job": "x"}}, 400, "label 'job' is reserved"),
    ({**GOOD, "experiment_name": ""}, 400, "give both project and experiment_name"),
    ({**GOOD, "targets": ["127.0.0.1:9999"]}, 422, "names the registering machine itself"),
    ([1, 2], 400, "the body must be a JSON object"),
])
def test_each_bad_registration_says_what_is_wrong_and_keeps_what_is_stored(
        client, body, status, message):
    c, state = client
    assert c.post("/api/v1/prometheus/targets", json=GOOD).status_code == 200
    r = c.post("/api/v1/prometheus/targets", json=body)
    assert r.status_code == status, r.text
    assert message in r.json()["error"]
    assert [t["target"] for t in state.targets.list()] == ["10.0.0.5:8000"]


def test_a_body_that_is_not_json_is_a_400(client):
    c, _ = client
    r = c.post("/api/v1/prometheus/targets", content=b"{not json",
               headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]


def test_push_and_otlp_refusals_answer_with_their_own_status(client):
    c, state = client
    ok = c.put("/metrics/job/j/project/p/experiment_name/e", content=b"x 1\n")
    assert ok.status_code == 200, ok.text
    r = c.put("/metrics/job/j", content=b"not a metric line{\n")
    assert 400 <= r.status_code < 500 and r.json()["error"]
    r = c.put("/metrics/job/j", content=b"x 1\n",
              headers={"Content-Type": "application/vnd.google.protobuf"})
    assert r.status_code == 415 and "text format" in r.json()["error"]
    r = c.post("/v1/traces", content=b"\x00garbage",
               headers={"Content-Type": "application/x-protobuf"})
    assert 400 <= r.status_code < 500 and r.json()["error"]
    assert len(state.pushes.groups) == 1  # the stored group is untouched


def test_http_sd_answers_prometheus_format_with_filters_and_without_archived_runs(client):
    c, state = client
    assert c.get("/api/v1/prometheus/sd").json() == []
    for body in (GOOD, {**GOOD, "targets": ["10.0.0.6:8000"], "labels": {"replica": "1"}},
                 {**GOOD, "job_name": "transfer_queue", "targets": ["10.0.0.7:9000"],
                  "labels": None, "experiment_name": "e2"}):
        assert c.post("/api/v1/prometheus/targets", json=body).status_code == 200
    r = c.get("/api/v1/prometheus/sd")
    # Prometheus' http_sd wants exactly this media type (discovery/http/http.go)
    assert r.headers["content-type"] == "application/json"
    groups = r.json()
    assert groups == state.targets.sd_groups()
    assert {"targets": ["10.0.0.5:8000"], "labels": {
        "job": "vllm", "project": "p", "experiment_name": "e", "replica": "0",
        "role": "rollout"}} in groups
    assert all(set(g) == {"targets", "labels"} and isinstance(g["targets"], list)
               and all(isinstance(v, str) for v in g["labels"].values()) for g in groups)

    def targets(**params) -> list[str]:
        return [t for g in c.get("/api/v1/prometheus/sd", params=params).json()
                for t in g["targets"]]

    assert targets(job="vllm") == ["10.0.0.5:8000", "10.0.0.6:8000"]
    assert targets(experiment_name="e2") == ["10.0.0.7:9000"]
    assert targets(project="p", experiment_name="e", job="transfer_queue") == []
    assert targets(project="nope") == []
    ok = c.post("/api/v1/experiments/archive", json={"project": "p", "experiment_name": "e"})
    assert ok.status_code == 200, ok.text
    assert targets() == ["10.0.0.7:9000"]  # the archived run's targets are not scraped
    # with a token, reads of run data need it too (a Prometheus sends it: `authorization`
    # in its http_sd config); liveness and the service ports stay open
    state.settings = config.with_values(state.settings, {"server.token": "tok"})
    with TestClient(create_app(state)) as guarded:
        assert guarded.get("/api/v1/prometheus/sd").status_code == 401
        assert guarded.get("/api/v1/prometheus/sd", headers={
            "Authorization": "Bearer tok"}).json() == [
            g for g in groups if g["labels"]["experiment_name"] == "e2"]
        assert guarded.get("/healthz").status_code == 200
        assert guarded.get("/api/v1/services").status_code == 200
        refused = guarded.post("/api/v1/prometheus/targets", json=GOOD)
        assert refused.status_code == 401  # and it says which scheme (RFC 9110, 11.6.1)
        assert refused.headers["www-authenticate"] == 'Bearer realm="rl-insight"'
        assert "RL_INSIGHT_TOKEN" in refused.json()["error"]


@pytest.mark.parametrize("services, status, says", [
    ({}, 404, "Prometheus does not run with this server"),  # switched off
    # installed and enabled, but nothing answers on its port
    ({"prometheus": ("installed", "enabled")}, 503, "Prometheus does not answer"),
])
def test_the_query_proxy_says_when_prometheus_is_not_there(tmp_path, services, status, says):
    """Switched off by configuration: 404, there is nothing to query here; switched on
    but not answering: 503; both say what to run, and neither is a 200 around an
    error."""
    from rl_insight.server.services.base import ServiceInfo

    settings = config.load(environ={"RL_INSIGHT_HOME": str(tmp_path)},
                           overrides=["prometheus.port=1"])
    infos = {name: ServiceInfo(name, True, True) for name in services}
    state = ServerState(settings, Supervisor(settings.supervisor, settings.logs_dir), infos)
    state.open()
    try:
        with TestClient(create_app(state)) as c:
            r = c.get("/api/v1/prometheus/query", params={"query": "up"})
        assert r.status_code == status, r.text
        assert says in r.text and "rl-insight server status" in r.text
    finally:
        state.close()


def test_an_intake_beyond_its_limit_is_told_when_to_come_back(client):
    """Beyond server.max_intake_inflight, pushes and span exports get 503 with
    Retry-After and nothing is stored; reads stay answered."""
    _, state = client
    # every intake request is one too many (below the setting's minimum: replaced as is)
    state.settings = dataclasses.replace(state.settings, server=dataclasses.replace(
        state.settings.server, max_intake_inflight=0))
    with TestClient(create_app(state)) as full:
        r = full.put("/metrics/job/j", content=b"x 1\n")
        assert r.status_code == 503 and r.headers["retry-after"] == "1"
        assert "nothing was stored" in r.json()["error"]
        assert full.post("/v1/traces", content=b"",
                         headers={"Content-Type": "application/x-protobuf"}).status_code == 503
        assert not state.pushes.groups
        assert full.get("/healthz").status_code == 200
        assert full.get("/metrics").status_code == 200


def test_a_405_names_every_method_the_path_takes(client):
    client, _ = client
    r = client.options("/metrics/job/j")  # served by two routes: the documented and the rest
    assert r.status_code == 405
    assert r.headers["Allow"] == "DELETE, POST, PUT"
    assert "this path takes DELETE, POST, PUT" in r.json()["error"]
    r = client.patch("/api/v1/prometheus/targets")
    assert r.status_code == 405 and r.headers["Allow"] == "DELETE, GET, POST"


def test_the_schema_documents_400_not_fastapis_422(client):
    client, _ = client
    doc = client.get("/openapi.json").json()
    codes = {(path, method): set(op["responses"]) for path, ops in doc["paths"].items()
             for method, op in ops.items()}
    # the routes whose 422 is their own (well-formed, not kept as sent: a target naming
    # the machine itself, a query Prometheus refused, a profile longer than allowed)
    own = ("/api/v1/prometheus/targets", "/api/v1/prometheus/query", "/api/v1/profiles")
    assert not [k for k, v in codes.items() if "422" in v and k[0] not in own]
    assert "400" in codes[("/api/v1/anatomy", "get")]
    assert client.get("/api/v1/anatomy", params={"project": "p", "experiment_name": "e",
                                                 "last": -1}).status_code == 400
    body = doc["paths"]["/metrics/job/{job}"]["put"]["requestBody"]["content"]
    assert body == {"text/plain; version=0.0.4": {"schema": {
        "type": "string", "format": "prometheus-text",
        "description": "the Prometheus text exposition format, version 0.0.4"}}}


def test_every_json_body_is_declared_once_by_its_model(client):
    """Each route that reads a JSON body shows its model's own schema (server/ingest/
    bodies.py), and the model refuses what that schema refuses: no hand-written copy."""
    from rl_insight.server.ingest import bodies

    c, _ = client
    models = (bodies.Registration, bodies.Binding, bodies.RunIdentity, bodies.PushBatch,
              bodies.ProfileRequest, bodies.ProfileTake, bodies.ProfileResult,
              bodies.RunConfig)
    declared = {m.__name__: bodies.schema_of(m) for m in models}
    # a profiler's file as its upload's body: the schema its reader declares, once
    # (rl_insight/profiler/readers.py: a reader's UPLOAD)
    from rl_insight.profiler import readers

    for name in readers.READERS:
        upload = getattr(readers.get(name), "UPLOAD", None)
        if upload is not None:
            declared[f"{name} file"] = upload
    seen = {}
    for path, ops in c.get("/openapi.json").json()["paths"].items():
        for method, op in ops.items():
            body = op.get("requestBody", {}).get("content", {}).get("application/json")
            if body and body["schema"] != {"type": "object"}:  # OTLP/JSON: protobuf's
                name = next((n for n, s in declared.items() if s == body["schema"]), None)
                assert name, f"{method.upper()} {path}: a body schema no model wrote"
                seen[f"{method.upper()} {path}"] = name
    assert set(seen.values()) == set(declared), seen
    assert seen["POST /api/v1/push/batch"] == "PushBatch"
    # what each schema forbids, the model refuses, saying where
    for model, body, where in (
            (bodies.Binding, {"owner": "o", "project": "", "experiment_name": "e"},
             "project"),
            (bodies.PushBatch, {"groups": [{"job": "j", "text": "", "replace": "yes"}]},
             "groups[0].replace"),
            (bodies.RunIdentity, {"project": "p"}, "experiment_name")):
        with pytest.raises(bodies.BodyError, match=rf"^{re.escape(where)}\b"):
            bodies.read(model, body)


def test_an_empty_promql_query_is_refused_as_the_schema_says(client):
    """The schema asks for a query of at least one character (schemathesis found an
    empty one the schema allowed and the route refused)."""
    c, _ = client
    spec = c.get("/openapi.json").json()
    (param,) = [p for p in spec["paths"]["/api/v1/prometheus/query"]["get"]["parameters"]
                if p["name"] == "query"]
    assert param["schema"]["minLength"] == 1
    r = c.get("/api/v1/prometheus/query", params={"query": ""})
    assert r.status_code in (400, 422) and "query" in r.text, r.text
