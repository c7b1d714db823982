"""The shared-secret check: with a token configured, every write needs
``Authorization: Bearer <token>``."""

from __future__ import annotations

import hmac

WRITE_METHODS = frozenset({"POST", "PUT", "DELETE", "PATCH"})


def allowed(method: str, authorization: str | None, token: str) -> bool:
    if not token or method.upper() not in WRITE_METHODS:
        return True
    scheme, _, given = (authorization or "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(),
                                                              token.encode())
