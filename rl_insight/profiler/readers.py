"""Which module reads which profiler's files, by the name users give
(``rl-insight import --profiler NAME``, ``POST /api/v1/import/NAME``).

A reader is a module of this package with:

- ``files(root: str | Path) -> Iterator[Path]``: its inputs under a directory, in name
  order (a file given is itself);
- ``read(path: str | Path) -> Iterator[RankTrace]``: one input's ranks
  (:mod:`rl_insight.profiler.model`), raising :class:`~rl_insight.profiler.model.BadFile`
  (with why, and what to do) for a file it cannot read. The importer takes a file's
  traces only once ``read`` is exhausted, so a file that breaks half-way sends nothing;
- optionally ``step_of(path) -> int | None``: the step a file's name says it holds (the
  importer reads a step's files together and sends its mark after them; without it,
  every mark comes after the last file);
- optionally ``UPLOAD``: the JSON schema of one file as the API's upload takes it
  (``application/json``); its ``read`` then also takes ``name=`` (the uploaded file's
  name), ``step=`` (where the name tells none) and ``strict=True`` (what the schema
  requires must be inside the file). A reader without one is imported by the CLI only.

Modules are imported when asked for, so naming a profiler loads only its reader (the
server and the CLI load none until an import comes).
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Protocol

from rl_insight.profiler.model import RankTrace

log = logging.getLogger(__name__)

READERS = {
    "torch": "rl_insight.profiler.torch",  # torch.profiler's Chrome traces (verl's tool=torch)
    "nvtx": "rl_insight.profiler.nvtx",  # Nsight Systems' `nsys export --type jsonlines`
    "mstx": "rl_insight.profiler.mstx",  # Ascend's *_ascend_pt/ASCEND_PROFILER_OUTPUT
}


class Reader(Protocol):
    """What the importer calls of a reader module."""

    def files(self, root: str | Path) -> Iterator[Path]: ...

    def read(self, path: str | Path) -> Iterator[RankTrace]: ...


class NoReader(ValueError):
    """A profiler name no reader answers to, or whose module is not there."""


def names() -> list[str]:
    return sorted(READERS)


def get(name: str) -> Reader:
    """The reader module of ``name``; NoReader says which names there are."""
    module = READERS.get(name)
    if module is None:
        raise NoReader(f"no reader for profiler {name!r}; known: {', '.join(names())}")
    try:
        found: ModuleType = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name != module:
            raise
        raise NoReader(f"the {name} reader ({module}) is not in this version of "
                       "rl-insight; upgrade it, or import another profiler's files") from None
    return found  # type: ignore[return-value]  (a module, as the Protocol reads it)


def uploadable() -> dict[str, dict]:
    """profiler -> the JSON schema of one file, for the readers that declare one."""
    out = {}
    for name in names():
        try:
            schema = getattr(get(name), "UPLOAD", None)
        except NoReader:
            continue
        except Exception:  # a broken reader loses its route, never the server's start
            log.exception("the %s reader cannot be loaded; its upload route is left out",
                          name)
            continue
        if schema:
            out[name] = schema
    return out
