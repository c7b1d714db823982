"""Which values of a run's configuration are secrets, masked before they leave the
training process (and again at the server, for clients that are not ours).

By the key's name: a word such as ``password``, ``secret``, ``credentials`` or ``auth``
anywhere in it (a section of that name has every value under it masked); a last word
``token`` or ``key`` after a word that makes it a credential (``hf_token``,
``WANDB_API_KEY``, ``logger.wandb.key``: a name that is only ``key`` or ``token``), or
whose value looks like one (no spaces, letters and digits, 16 characters or more:
``RL_INSIGHT_TOKEN``), so that an RL configuration's many ``max_tokens``, ``pad_token``
and ``prompt_key`` stay readable. By the value, whatever the key: a URL's password
(``https://user:***@host``), a URL's secret query parameters, a bearer credential and
the well-known token shapes (Hugging Face, OpenAI, GitHub, GitLab, Slack, AWS).
``None``, ``""`` and booleans are never masked: whether a secret is set is no secret.
"""

from __future__ import annotations

import re

from rl_insight.wire.runconfig import MASK

_WORDS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
# a word that makes any name a secret's
STRONG = frozenset({
    "password", "passwd", "pwd", "secret", "secrets", "credential", "credentials",
    "passphrase", "cookie", "cookies", "authorization", "auth", "apikey", "privatekey",
    "accesskey", "secretkey", "bearer", "sas"})
# last words that name a secret only after one of PREFIXES, alone, or with a value
# that looks like one (credential_like)
AMBIGUOUS = frozenset({"token", "key"})
PREFIXES = frozenset({
    "api", "access", "secret", "private", "ssh", "auth", "hf", "hub", "wandb", "openai",
    "github", "gh", "gitlab", "session", "bearer", "refresh", "client", "license",
    "signing", "encryption", "master", "oauth", "id", "slack", "discord", "anthropic",
    "azure", "aws", "gcp", "google", "service", "personal", "deploy", "webhook",
    "swanlab", "comet", "neptune", "mlflow", "clearml", "ngc", "modelscope", "trackio"})

_URL_PASSWORD = re.compile(r"(?P<head>[a-zA-Z][a-zA-Z0-9+.-]*://[^:/@\s]*):[^@/\s]+@")
_QUERY = re.compile(r"(?P<head>[?&](?:access_token|token|api_key|apikey|key|password|"
                    r"passwd|secret|sig|signature|auth|x-amz-signature)=)[^&#\s]+", re.I)
# an Authorization header's credential (a basic one has a digit or padding: no prose)
_BEARER = re.compile(r"(?P<head>\bbearer\s+)[A-Za-z0-9._~+/=-]{8,}|"
                     r"(?P<basic>\bbasic\s+)(?=[A-Za-z0-9+/]*[0-9+/=])[A-Za-z0-9+/]{8,}=*",
                     re.I)
_SHAPES = re.compile(
    r"\b(?:hf_[A-Za-z0-9]{20,}|sk-[A-Za-z0-9_-]{20,}|gh[pousr]_[A-Za-z0-9]{20,}|"
    r"github_pat_[A-Za-z0-9_]{20,}|glpat-[A-Za-z0-9_-]{20,}|xox[abprs]-[A-Za-z0-9-]{10,}|"
    r"AKIA[0-9A-Z]{16})\b")


def words(name: object) -> list[str]:
    """A key's words, lower case: ``WANDB_API_KEY``, ``wandbApiKey``, ``wandb-api-key``
    all read ``wandb api key``."""
    return [w.lower() for w in _WORDS.findall(str(name))]


def secret_name(name: object) -> bool:
    """A name whose every value is a secret's (see the module's rules)."""
    ws = words(name)
    if not ws:
        return False
    if any(w in STRONG for w in ws):
        return True
    return ws[-1] in AMBIGUOUS and (len(ws) == 1 or ws[-2] in PREFIXES)


def maybe_secret_name(name: object) -> bool:
    """A name ending in ``token`` or ``key`` that is not a secret's by itself: its value
    is masked when it looks like a credential."""
    ws = words(name)
    return bool(ws) and ws[-1] in AMBIGUOUS


def credential_like(value: object) -> bool:
    """16 characters or more, no spaces, letters and digits, no markup or path: what a
    generated token looks like (``pad_token: "<|endoftext|>"`` does not)."""
    return (isinstance(value, str) and len(value) >= 16 and not any(c.isspace() for c in
                                                                     value)
            and any(c.isdigit() for c in value) and any(c.isalpha() for c in value)
            and value[0] not in "<[{(" and "/" not in value)


def shown(value: object) -> bool:
    """Values never masked: whether a secret is set is no secret."""
    return value is None or value == "" or isinstance(value, bool)


def mask_text(text: str) -> str:
    """Secrets inside a text, whatever its key: a URL's password and secret query
    parameters, a bearer credential, well-known token shapes."""
    if len(text) < 8:
        return text
    text = _URL_PASSWORD.sub(lambda m: f"{m['head']}:{MASK}@", text)
    text = _QUERY.sub(lambda m: m["head"] + MASK, text)
    text = _BEARER.sub(lambda m: (m["head"] or m["basic"]) + MASK, text)
    return _SHAPES.sub(MASK, text)


def masked(name: object, value: object, in_secret: bool) -> tuple[object, bool]:
    """(the value to keep, whether it was masked) for one key's value; ``in_secret``: a
    section above it is a secret's."""
    if shown(value):
        return value, False
    if in_secret or secret_name(name) or (maybe_secret_name(name) and
                                          credential_like(value)):
        return MASK, True
    if isinstance(value, str):
        out = mask_text(value)
        return out, out != value
    return value, False
