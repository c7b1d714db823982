"""What the OpenAPI schema promises of each route: the bodies it accepts, written from the
patterns its parsers use, and every status it can answer. Schemathesis holds the server
to it (tests/reliability/test_api_schema.py); the parsers stay the one place that decides,
and their messages say what was wrong."""

from __future__ import annotations

from typing import Any

from rl_insight.server.ingest.targets import HARDWARE_JOBS, JOB_RE, OWNER_RE, RESERVED_LABELS

# [a-zA-Z_][a-zA-Z0-9_]* not starting with "__", written without a lookahead
LABEL_NAME = r"^(?:[a-zA-Z][a-zA-Z0-9_]*|_[a-zA-Z0-9][a-zA-Z0-9_]*|_)$"
_OCTET = r"(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?)"
_PORT = r"(?:[1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])"
_IPV6 = r"(?:[0-9a-fA-F]{1,4}(?::[0-9a-fA-F]{1,4}){7}|::1|::)"
HOSTPORT = rf"^(?:{_OCTET}(?:\.{_OCTET}){{0,2}}|\[{_IPV6}\]):{_PORT}$"

ERROR = {"type": "object", "required": ["error"],
         "properties": {"error": {"type": "string", "description": "what was wrong and "
                                                                   "what to do"}}}
WHY = {
    400: "malformed: a field, parameter or body the server cannot read",
    401: "a write, or a read of run data, without the server's token "
         "(`WWW-Authenticate`)",
    403: "a target outside server.allowed_networks",
    404: "no such run, experiment or service here",
    409: "conflicts with what is stored: an archived run, a metric of another type",
    413: "the body is over its limit (the setting is named)",
    415: "a Content-Type or Content-Encoding the route does not read",
    422: "well-formed but not kept as sent; the answer says what to send instead",
    429: "the server holds its limit of series",
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


NONE = ({"type": "null"}, {"const": ""})  # what the parsers read as "not given"


def labels_object(description: str) -> dict[str, Any]:
    return {"anyOf": [{"type": "object",
                       "propertyNames": {"pattern": LABEL_NAME,
                                         "not": {"enum": list(RESERVED_LABELS)}},
                       "additionalProperties": {"type": ["string", "number", "boolean"]}},
                      {"type": "null"}], "description": description}


RUN_NAME = {"type": "string", "minLength": 1, "maxLength": 256}
RUN = {"project": RUN_NAME, "experiment_name": RUN_NAME}
# a registration names its run by both fields or by neither (null and "" are neither)
RUN_OR_NONE = {"anyOf": [{"required": ["project", "experiment_name"], "properties": RUN},
                         {"properties": {"project": {"anyOf": list(NONE)},
                                         "experiment_name": {"anyOf": list(NONE)}}}]}
OWNER = {"anyOf": [{"type": "string", "pattern": OWNER_RE.pattern}, *NONE],
         "description": "who registered, e.g. 'ray:<session>:<job id>'; a later "
                        "POST /api/v1/runs/bind names its run"}
TARGET = {"type": "string", "pattern": HOSTPORT, "maxLength": 259,
          "description": "host:port (IPv6 in brackets); no scheme, path or credentials"}
_NODE = {"type": "object", "required": ["node"], "properties": {"node": {"minLength": 1}}}

REGISTRATION = {
    "type": "object", "required": ["job_name", "targets"],
    "description": "Also read, for clients of earlier versions: `targets` as one string, "
                   "and `labels` as a list with one entry (or null) per target.",
    "properties": {
        "job_name": {"type": "string", "pattern": JOB_RE.pattern,
                     "description": "the Prometheus job, e.g. vllm, sglang, node-exporter"},
        "targets": {"type": "array", "minItems": 1, "maxItems": 10_000, "items": {
            "anyOf": [TARGET, {"type": "object", "required": ["target"], "properties": {
                "target": TARGET, "labels": labels_object("this target's own labels")}}]}},
        "labels": labels_object("labels of every target"),
        "owner": OWNER,
        "project": {"description": "the run's project, with experiment_name, or neither"},
        "experiment_name": {"description": "the run's name, with project, or neither"},
    },
    "allOf": [RUN_OR_NONE],
    # a hardware exporter's target names its node (the dashboards join on it)
    "if": {"required": ["job_name"],
           "properties": {"job_name": {"enum": list(HARDWARE_JOBS)}}},
    "then": {"anyOf": [
        {"required": ["labels"], "properties": {"labels": _NODE}},
        {"properties": {"targets": {"items": {"type": "object", "required": ["labels"],
                                              "properties": {"labels": _NODE}}}}}]},
}
BINDING = {"type": "object", "required": ["owner", "project", "experiment_name"],
           "properties": {"owner": {"type": "string", "pattern": OWNER_RE.pattern}, **RUN}}
IDENTITY = {"type": "object", "required": ["project", "experiment_name"], "properties": RUN}


def json_body(schema: dict[str, Any]) -> dict[str, Any]:
    """``openapi_extra`` for a route that reads a JSON body itself."""
    return {"requestBody": {"required": True,
                            "content": {"application/json": {"schema": schema}}}}


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
    "/metrics/job/{job}": {
        "put": _push_operation("Replace a group (Pushgateway PUT)", "push_put"),
        "post": _push_operation("Replace the pushed families in a group (Pushgateway "
                                "POST)", "push_post")},
    "/v1/traces": {"post": {
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
