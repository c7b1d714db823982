"""A pushed group's name: the grouping key of a Pushgateway URL (``job/<j>{/<name>/<value>}``,
``@base64`` values), read by the push routes and the intake; and the error a refused
push raises, with its HTTP status."""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping

LABEL_NAME_RE = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


GroupKey = tuple[tuple[str, str], ...]


class PushError(Exception):
    """A refused push; ``status`` is the HTTP code, the message says what was wrong."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def valid_label_name(name: str) -> bool:
    return bool(LABEL_NAME_RE.match(name)) and not name.startswith("__")


def _b64(value: str) -> str:
    if value == "=":
        return ""
    padded = value + "=" * (-len(value) % 4)
    try:
        std = padded.replace("-", "+").replace("_", "/")  # URL-safe or standard alphabet
        return base64.b64decode(std, validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        raise PushError(400, f"invalid base64 label value {value!r}") from None


def parse_grouping_key(path: str) -> dict[str, str]:
    """``job/<j>/<name>/<value>...`` (``@base64`` allowed on any name) into labels."""
    parts = path.strip("/").split("/")
    if len(parts) < 2 or parts[0] not in ("job", "job@base64"):
        raise PushError(400, "the path must be /metrics/job/<job>{/<label>/<value>}")
    if len(parts) % 2:
        raise PushError(400, f"odd number of components in label path {path!r}; "
                             "labels come in /<name>/<value> pairs")
    labels: dict[str, str] = {}
    for i in range(0, len(parts), 2):
        name, value = parts[i], parts[i + 1]
        if name.endswith("@base64"):
            name, value = name[: -len("@base64")], _b64(value)
        if i and name == "job":
            raise PushError(400, "job is set by /job/<job>; it cannot repeat as a label")
        if not valid_label_name(name):
            raise PushError(400, f"improper label name {name!r}: use [a-zA-Z_][a-zA-Z0-9_]* "
                                 "not starting with __")
        if name in labels:
            raise PushError(400, f"label {name!r} appears twice in the path")
        labels[name] = value
    if not labels["job"]:
        raise PushError(400, "the job name must not be empty")
    return labels


def group_key(labels: Mapping[str, str]) -> GroupKey:
    return tuple(sorted(labels.items()))
