"""Credentials of the routes that are not the client API: the internal token of the shadow
canary's mirror path and the admin key of ``/admin/v1/``.

WHY a guard of their own: ``/v1`` routes take API keys and are rate-limited per key; the
mirror path must neither accept a client's API key (a caller could reach the canary and skip
its quota) nor spend one. Each credential is one secret in a file the operator mounts (a
Secret, ``optional: true``), re-read when its stat data changes (rotation without restart)
and compared in constant time (sha256 of both sides, ``hmac.compare_digest``).

A missing or empty file closes the route: 404, as if it did not exist. With the file
present, no credential is 401 and a wrong one 403. Secrets are never logged.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import threading
from pathlib import Path

from docparser_runtime.errors import NotFound, PermissionDenied, Unauthenticated

log = logging.getLogger("docparser.auth")

INTERNAL_TOKEN_HEADER = "x-docparser-internal-token"


class SecretFile:
    """One secret in a file (trimmed), reloaded when the file's stat data changes."""

    def __init__(self, path: Path, what: str) -> None:
        self.path = Path(path)
        self.what = what
        self._lock = threading.Lock()
        self._signature: tuple[object, ...] | None = None
        self._secret: str | None = None
        self._digest: bytes | None = None

    def _stat(self) -> tuple[object, ...]:
        try:
            st = self.path.stat()  # follows the Secret volume's symlinks
        except OSError as exc:
            return ("missing", type(exc).__name__)
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def _refresh(self) -> None:
        signature = self._stat()
        if signature == self._signature:
            return
        with self._lock:
            text = ""
            try:
                if signature[0] != "missing":
                    text = self.path.read_text(encoding="utf-8").strip()
            except (OSError, UnicodeDecodeError) as exc:
                log.error("cannot read the %s (%s): %s", self.what, self.path, type(exc).__name__)
            self._secret = text or None
            self._digest = hashlib.sha256(text.encode()).digest() if text else None
            self._signature = signature

    def value(self) -> str | None:
        """The secret, or None when the file is missing or empty."""
        self._refresh()
        return self._secret

    def check(self, candidate: str | None) -> None:
        """404 when no secret is configured, 401 without a candidate, 403 when it differs."""
        self._refresh()
        digest = self._digest
        if digest is None:
            raise NotFound("not found", code="not_found")
        if not candidate:
            raise Unauthenticated(f"the {self.what} is required", code="missing_credential")
        probe = hashlib.sha256(candidate.encode("utf-8", "surrogateescape")).digest()
        if not hmac.compare_digest(probe, digest):
            raise PermissionDenied(f"the {self.what} is not valid", code="invalid_credential")


def bearer(authorization: str | None) -> str | None:
    """The token of ``Authorization: Bearer <token>``, or None."""
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    if scheme.lower() != "bearer":
        return None
    return token.strip() or None
