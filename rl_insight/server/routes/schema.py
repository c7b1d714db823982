"""What the OpenAPI schema promises of each route beyond its JSON body (whose model,
server/ingest/bodies.py, writes its own schema): every status it can answer, the push
routes' text bodies and the intake's own routes. Schemathesis holds the server to it
(tests/reliability/test_api_schema.py)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from rl_insight.server.ingest.bodies import schema_of
from rl_insight.wire import paths

ERROR = {"type": "object", "required": ["error"],
         "properties": {"error": {"type": "string", "description": "what was wrong and "
                                                                   "what to do"}}}
WHY = {
    400: "malformed: a field, parameter or body the server cannot read",
    401: "a write, or a read of run data, without the server's token "
         "(`WWW-Authenticate`)",
    403: "a target outside server.allowed_networks; profiles turned off",
    404: "no such run, experiment or service here",
    409: "conflicts with what is stored: an archived run, a metric of another type",
    413: "the body is over its limit (the setting is named)",
    415: "a Content-Type or Content-Encoding the route does not read",
    422: "well-formed but not kept as sent; the answer says what to send instead",
    429: "the server holds its limit of series; a rank or run profiled too often",
    502: "Prometheus answered with an error of its own",
    503: "busy (with Retry-After: nothing stored, send again) or a service it needs is "
         "down",
}


def answers(*codes: int) -> dict[int | str, dict[str, Any]]:
    """The ``responses`` of a route: each refusal it can answer, as ``{"error": ...}``."""
    return {c: {"description": WHY[c], "content": {"application/json": {"schema": ERROR}}}
            for c in codes}


READ = (400, 401)  # a query parameter the route cannot read; no token (with one set)
WRITE = (400, 401, 413, 503)  # bad body, no token, too big, store or intake busy


def json_body(model: type[BaseModel]) -> dict[str, Any]:
    """``openapi_extra`` for a route that reads its JSON body as ``model`` itself (within
    a size limit, with the model's messages: server/ingest/bodies.py ``read``)."""
    return {"requestBody": {"required": True, "content": {"application/json": {
        "schema": schema_of(model)}}}}


# A push body: the Prometheus text format (what the Pushgateway and prometheus_client's
# push helpers send). The format name tells generators to write that format.
TEXT_FORMAT = {"type": "string", "format": "prometheus-text",
               "description": "the Prometheus text exposition format, version 0.0.4"}
PUSH_BODY = {"requestBody": {"required": False, "content": {
    "text/plain; version=0.0.4": {"schema": TEXT_FORMAT}}}}
# any value but "." and ".." (a client's URL normalisation would take them out of the path)
JOB_VALUE = {"type": "string", "pattern": r"^(?:[^/.][^/]*|\.[^/.][^/]*|\.\.[^/]+)$",
             "description": "the job label's value"}
PUSH_PATH = ("The group's labels: the job, then Pushgateway's grouping key, further "
             "/<name>/<value> pairs (each name once, not job; <name>@base64 takes a "
             "base64url value, `=` for empty); /metrics/job@base64/<job> likewise.")


OTLP_BODY = {"required": True, "content": {
    "application/x-protobuf": {"schema": {"type": "string", "format": "binary"}},
    "application/json": {"schema": {"type": "object"}}}}


def _push_operation(summary: str, operation_id: str) -> dict[str, Any]:
    return {"summary": summary, "description": PUSH_PATH, "operationId": operation_id,
            "parameters": [{"name": "job", "in": "path", "required": True,
                            "schema": {**JOB_VALUE, "title": "Job"}}],
            **PUSH_BODY,
            "responses": {"200": {"description": "stored; an empty body"},
                          **{str(c): v for c, v in answers(*WRITE, 409, 415, 429).items()}}}


# The intake's routes: answered by the Guard on the intake's own path (server/ingest/intake.py),
# never by the app, so described here, once
INTAKE_PATHS: dict[str, dict[str, Any]] = {
    paths.PUSH_GROUP: {
        "put": _push_operation("Replace a group (Pushgateway PUT)", "push_put"),
        "post": _push_operation("Replace the pushed families in a group (Pushgateway "
                                "POST)", "push_post")},
    paths.TRACES: {"post": {
        "summary": "OTLP/HTTP trace export (protobuf or JSON, gzip)",
        "operationId": "otlp_traces", "requestBody": OTLP_BODY,
        "responses": {"200": {"description": "an ExportTraceServiceResponse, in the "
                                             "request's encoding"},
                      **{str(c): v for c, v in answers(*WRITE, 415).items()}}}},
}


def finish(doc: dict[str, Any]) -> dict[str, Any]:
    """The intake's routes added (``INTAKE_PATHS``). FastAPI documents its own 422 for
    parameters it cannot read; this server answers those with 400 and ``{"error": ...}``
    (app.py), so the schema says 400."""
    for path, ops in INTAKE_PATHS.items():
        doc.setdefault("paths", {}).setdefault(path, {}).update(ops)
    for ops in doc.get("paths", {}).values():
        for op in ops.values():
            responses = op.get("responses", {})
            if responses.get("422", {}).get("description") == "Validation Error":
                del responses["422"]
                responses.setdefault("400", answers(400)[400])
    doc.get("components", {}).get("schemas", {}).pop("HTTPValidationError", None)
    doc.get("components", {}).get("schemas", {}).pop("ValidationError", None)
    return doc
