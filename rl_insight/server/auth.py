"""The shared-secret check. With a token (configured, or made because the server listens
beyond loopback: rl_insight/common/secret.py), every write and every read of run data needs it:
``Authorization: Bearer <token>``, or HTTP basic auth with the token as the password (any
user name: what a browser sends for the status page). Open without it: liveness, the
service ports, the API schema."""

from __future__ import annotations

import base64
import binascii
import hmac

from rl_insight.wire import paths

WRITE_METHODS = frozenset({"POST", "PUT", "DELETE", "PATCH"})
# what anyone may read: no run data in them (verl main reads /api/v1/services for the
# OTLP port before it has any credential)
OPEN_READS = frozenset({paths.HEALTH, paths.SERVICES, "/openapi.json", "/docs",
                        "/docs/oauth2-redirect", "/redoc"})


def given_token(authorization: str | None) -> str:
    """The secret an Authorization header carries: a bearer token, or a basic-auth
    password; "" for anything else."""
    scheme, _, value = (authorization or "").partition(" ")
    scheme = scheme.lower()
    if scheme == "bearer":
        return value.strip()
    if scheme == "basic":
        try:
            decoded = base64.b64decode(value.strip(), validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            return ""
        return decoded.partition(":")[2]
    return ""


def needs_token(method: str, path: str) -> bool:
    return method.upper() in WRITE_METHODS or path not in OPEN_READS


def allowed(method: str, path: str, authorization: str | None, token: str) -> bool:
    if not token or not needs_token(method, path):
        return True
    return hmac.compare_digest(given_token(authorization).encode(), token.encode())
