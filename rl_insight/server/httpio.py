"""HTTP bodies read within their limits and refusals answered as {"error": ...}: what the
routes and the intake's own ASGI path share (floor 1 of the server)."""

from __future__ import annotations

from fastapi import Request
from fastapi.responses import JSONResponse

# the scope key under which the Guard notes when a request arrived (time.monotonic()):
# what a route measures a client's deadline from
ARRIVED = "rl_insight.arrived"


class HttpError(Exception):
    """Raised by routes; answered as ``{"error": message}`` with the status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def error(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=headers)


class ClientGone(Exception):
    """The client went away before its body arrived: nothing to answer."""


async def read_body(request: Request, limit: int, setting: str) -> bytes:
    """The request body, refusing (413) anything over ``limit`` bytes without reading
    further than that."""
    return await read_asgi_body(request.receive, request.headers.get("content-length"),
                                limit, setting)


async def read_asgi_body(receive, declared: str | bytes | None, limit: int,
                         setting: str) -> bytes:
    """``read_body`` on the ASGI ``receive`` itself (the intake's own path has no
    Request); raises ClientGone when the client disconnects."""
    if isinstance(declared, bytes):
        declared = declared.decode("latin-1")
    if declared and declared.isdigit() and int(declared) > limit:
        raise HttpError(413, f"the body is {declared} bytes; the limit is {limit} "
                             f"({setting})")
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise HttpError(413, f"the body is over the limit of {limit} bytes ({setting})")
        chunks.append(chunk)
        if not message.get("more_body"):
            return b"".join(chunks)


async def json_body(request: Request, limit: int, setting: str):
    """The request body parsed as JSON; 400 with the parser's reason otherwise."""
    import json

    raw = await read_body(request, limit, setting)
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise HttpError(400, f"the body is not JSON: {exc}") from None


def text_body(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise HttpError(400, f"the body is not UTF-8 text: {exc}") from None


RAW_TEXT_BODY = {"requestBody": {"content": {"text/plain": {"schema": {"type": "string"}}},
                                 "required": False}}
RAW_JSON_BODY = {"requestBody": {"content": {"application/json": {"schema": {
    "type": "object"}}}, "required": True}}
