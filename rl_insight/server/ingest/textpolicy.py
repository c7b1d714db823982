"""What of a span's text (prompts, completions, reasoning, tool arguments) this server
keeps: enforced at the intake, whatever a caller sends, so one caller's mistake cannot
fill Tempo with prompts (upstream's inference-trace RFC, docs/monitor/inference_trace_rfc.md:
text off by default; "Text is never a Prometheus label").

``traces.text_policy``:
- ``off`` (the default): text attributes are removed;
- ``redacted``: each becomes ``[redacted <n> bytes sha256:<16 hex>]`` (equal texts stay
  comparable, none readable);
- ``full``: kept up to ``traces.text_max_bytes`` (cut on a character boundary), with
  ``text_truncated=true`` on a span where one was cut.

A text attribute is one named in :data:`TEXT_KEYS`, or whose name ends in ``.text``,
``_text``, ``.content`` or ``.prompt``/``.completion`` (the GenAI conventions'
``gen_ai.prompt.0.content``), on spans and their events alike; its string value, if not
empty.
"""

from __future__ import annotations

import functools
import hashlib

POLICIES = ("off", "redacted", "full")
TEXT_KEYS = frozenset({
    "text", "content", "reasoning", "prompt", "completion", "response", "input",
    "output", "messages", "tool_args", "tool_result", "gen_ai.prompt", "gen_ai.completion",
    "gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.system_instructions",
    "llm.prompts", "llm.completions", "input.value", "output.value"})
SUFFIXES = (".text", "_text", ".content", ".prompt", ".completion")
TRUNCATED = "text_truncated"
NO_LIMIT = 1 << 62  # full text, uncut: the policy changes nothing


@functools.lru_cache(maxsize=4096)  # the same few dozen keys on every span
def is_text_key(key: str) -> bool:
    return key in TEXT_KEYS or key.endswith(SUFFIXES)


def enforced(policy: str, limit: int) -> bool:
    """Whether the policy changes anything (``full`` with no limit keeps every text)."""
    return not (policy == "full" and limit >= NO_LIMIT)


def _redact(value: str) -> str:
    raw = value.encode("utf-8", "replace")
    return f"[redacted {len(raw)} bytes sha256:{hashlib.sha256(raw).hexdigest()[:16]}]"


def _cut(value: str, limit: int) -> str | None:
    """``value`` cut to ``limit`` UTF-8 bytes on a character boundary; None if it fits."""
    raw = value.encode("utf-8", "replace")
    if len(raw) <= limit:
        return None
    return raw[:limit].decode("utf-8", "ignore")


def _apply_to(attributes, policy: str, limit: int) -> tuple[int, bool]:
    """(attributes changed, one was cut) of one repeated KeyValue field, in place."""
    changed, cut = 0, False
    i = 0
    while i < len(attributes):
        kv = attributes[i]
        if is_text_key(kv.key) and kv.value.WhichOneof("value") == "string_value" and \
                kv.value.string_value:
            if policy == "off":
                del attributes[i]
                changed += 1
                continue
            if policy == "redacted":
                kv.value.string_value = _redact(kv.value.string_value)
                changed += 1
            else:
                shorter = _cut(kv.value.string_value, limit)
                if shorter is not None:
                    kv.value.string_value = shorter
                    changed += 1
                    cut = True
        i += 1
    return changed, cut


def apply_span(span, policy: str, limit: int) -> int:
    """Enforce the policy on one span and its events, in place; the attributes changed."""
    n, cut = _apply_to(span.attributes, policy, limit)
    for event in span.events:
        m, c = _apply_to(event.attributes, policy, limit)
        n, cut = n + m, cut or c
    if cut:
        kv = span.attributes.add()
        kv.key = TRUNCATED
        kv.value.bool_value = True
    return n

