"""Helpers every route module uses: bounded body reading and error answers."""

from __future__ import annotations

from fastapi import Request
from fastapi.responses import JSONResponse


class HttpError(Exception):
    """Raised by routes; answered as ``{"error": message}`` with the status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


async def read_body(request: Request, limit: int, setting: str) -> bytes:
    """The request body, refusing (413) anything over ``limit`` bytes without reading
    further than that."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise HttpError(413, f"the body is {declared} bytes; the limit is {limit} "
                             f"({setting})")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise HttpError(413, f"the body is over the limit of {limit} bytes ({setting})")
        chunks.append(chunk)
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
