"""Profiler files read a piece at a time: a JSON document's top-level array elements (or
an object's members, the one big array among them element by element) and JSON lines,
gzipped or not, so a multi-GB trace never sits in memory whole.

Chrome traces (torch's ``{"traceEvents": [...], "distributedInfo": {...}}``, Ascend's
``trace_view.json``: a bare array) keep everything in one array; the standard library's
``json.JSONDecoder.raw_decode`` decodes one element at a time from a window of the file
that slides on. A damaged file raises :class:`BadJson` with where it broke.
"""

from __future__ import annotations

import gzip
import io
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

CHUNK = 1 << 20  # characters read at a time
MAX_VALUE = 1 << 28  # characters one element may take: beyond, it is damaged or no trace
GZIP_MAGIC = b"\x1f\x8b"
_WS = " \t\r\n"
_NUMBER_TAIL = re.compile(r"[0-9.eE+-]+")  # what may go on a number in the next chunk


class Member(str):
    """The key of a member :func:`items` yields whole: equal to the plain key, and tells
    a member from the streamed array's elements (``{"traceEvents": {...}}`` is no array
    of one event)."""

    __slots__ = ()


class BadJson(ValueError):
    """The file is no JSON this reader can walk (or is cut short): where and why."""


def open_text(path: str | Path) -> IO[str]:
    """A file as text, gunzipped when it starts with gzip's magic bytes (whatever its
    name says: verl's torch traces end in ``.json.gz``, a copied file may not)."""
    with open(path, "rb") as f:
        gz = f.read(2) == GZIP_MAGIC
    raw = gzip.open(path, "rb") if gz else open(path, "rb")  # noqa: SIM115 (returned)
    return io.TextIOWrapper(raw, encoding="utf-8", errors="replace")


def lines(path: str | Path) -> Iterator[tuple[int, str]]:
    """(line number, line) of a JSON-lines file, blank lines left out; gzip read
    through. Reading a truncated gzip stream raises :class:`BadJson`."""
    try:
        with open_text(path) as f:
            for n, line in enumerate(f, 1):
                if line.strip():
                    yield n, line
    except (EOFError, OSError) as e:  # gzip cut short, or no gzip after its magic
        raise BadJson(f"cannot be read to its end ({e})") from e


class _Window:
    """The part of the file not decoded yet, refilled as values are taken from it."""

    def __init__(self, f: IO[str]) -> None:
        self.f, self.buf, self.pos, self.eof = f, "", 0, False
        self.consumed = 0  # characters dropped from the front (for the messages)
        self.decoder = json.JSONDecoder()

    def fill(self) -> bool:
        if self.eof:
            return False
        if self.pos > CHUNK:
            self.consumed += self.pos
            self.buf, self.pos = self.buf[self.pos:], 0
        try:
            more = self.f.read(max(CHUNK, len(self.buf)))  # doubling: one huge element
        except (EOFError, OSError) as e:
            raise BadJson(f"cannot be read to its end ({e})") from e
        self.buf += more
        self.eof = not more
        return bool(more)

    def peek(self) -> str:
        """The next character that is not white space ("" at the end of the file)."""
        while True:
            while self.pos < len(self.buf) and self.buf[self.pos] in _WS:
                self.pos += 1
            if self.pos < len(self.buf) or not self.fill():
                return self.buf[self.pos:self.pos + 1]

    def expect(self, chars: str) -> str:
        c = self.peek()
        if not c or c not in chars:
            raise self.error(f"expected one of {chars!r}, found {c or 'the end'!r}")
        self.pos += 1
        return c

    def value(self) -> Any:
        """The next JSON value, reading on until it is whole (a number or a word at the
        window's end may go on in the next chunk)."""
        self.peek()
        while True:
            try:
                v, end = self.decoder.raw_decode(self.buf, self.pos)
            except json.JSONDecodeError as e:
                if len(self.buf) - self.pos < MAX_VALUE and self.fill():
                    continue
                raise self.error(f"no JSON value here ({e.msg})") from e
            # a number the window cut after "1." or "1e" decodes as 1: read on
            cut = end == len(self.buf) or (type(v) in (int, float) and
                                           _NUMBER_TAIL.fullmatch(self.buf, end) is not None)
            if cut and self.fill():
                continue
            self.pos = end
            return v

    def error(self, why: str) -> BadJson:
        return BadJson(f"{why} at character {self.consumed + self.pos}")


def items(f: IO[str], array_key: str = "traceEvents") -> Iterator[tuple[str | None, Any]]:
    """A JSON document's parts in file order: a top-level array's elements as ``(None,
    element)``; an object's members as ``(key, value)``, except the array under
    ``array_key``, whose elements come one by one as ``(array_key, element)`` (the
    others' keys are :class:`Member`, so an ``array_key`` that is no array is told). Members
    after the array (torch writes ``distributedInfo`` before or after it) come after."""
    w = _Window(f)
    opener = w.expect("[{")
    if opener == "[":
        yield from ((None, v) for v in _elements(w))
    else:
        yield from _members(w, array_key)
    if w.peek():
        raise w.error("more after the document's end")


def _elements(w: _Window) -> Iterator[Any]:
    if w.peek() == "]":
        w.pos += 1
        return
    while True:
        yield w.value()
        if w.expect(",]") == "]":
            return


def _members(w: _Window, array_key: str) -> Iterator[tuple[str, Any]]:
    if w.peek() == "}":
        w.pos += 1
        return
    while True:
        key = w.value()
        if not isinstance(key, str):
            raise w.error("an object's key that is no string")
        w.expect(":")
        if key == array_key and w.peek() == "[":
            w.pos += 1
            yield from ((key, v) for v in _elements(w))
        else:
            yield Member(key), w.value()
        if w.expect(",}") == "}":
            return
