"""API keys: ``Authorization: Bearer <key>`` on every ``/v1`` route.

Keys come from ``settings.api_keys_file``: either a file with one key per line (blank
lines and ``#`` comments ignored) or a directory, which is how Kubernetes mounts a
Secret (each file's content is one key; the ``..data``/``..2024_...`` entries of the
atomic-update machinery are skipped). A rotated Secret shows up as changed stat data of
the key files, so a cheap ``stat`` per request reloads keys without a restart.

Keys are compared in constant time against *all* configured keys (sha256 of both sides
with ``hmac.compare_digest``, no early exit), so timing reveals neither a key's content
nor its length nor which key matched. Keys are never logged; callers get a short,
non-secret ``key_id`` to label rate limits and logs.

Each ``/v1`` request's outcome is written into its ASGI scope (``AUTH_OUTCOME``): the
request middleware (server/app.py) counts as client activity, what scale to zero reads,
only the requests that passed, and the rest by reason in
``docparser_unauthorized_requests_total``. Otherwise one keyless request per idle window
would keep a DocParser's GPU pods awake for ever.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import threading
from dataclasses import dataclass
from pathlib import Path

from fastapi import Request
from starlette.types import Scope

from docparser_runtime.errors import DocParserError, PermissionDenied, Unauthenticated

log = logging.getLogger("docparser.auth")

ANONYMOUS = "anonymous"

AUTH_OUTCOME = "docparser.auth"  # scope key: PASSED, or the reason the request was refused
PASSED = "passed"
# Why a /v1 request is not client activity (the unauthorised counter's reason label).
REASON_BY_CODE = {
    "missing_api_key": "missing_key",
    "malformed_authorization": "malformed_key",
    "invalid_api_key": "wrong_key",
}
UNKNOWN_ROUTE = "unknown_route"  # no route (or method) matched: auth never ran
UNAUTHORIZED_REASONS = (*REASON_BY_CODE.values(), UNKNOWN_ROUTE)


def auth_outcome(scope: Scope) -> str:
    """PASSED for a request that passed the API-key check (or any, with auth off), else
    the reason it did not: a refused key, or UNKNOWN_ROUTE when no route ran the check."""
    outcome = scope.get(AUTH_OUTCOME)
    return outcome if isinstance(outcome, str) else UNKNOWN_ROUTE


@dataclass(frozen=True)
class Principal:
    """Who is calling: ``key_id`` is derived from the key, safe to log and label."""

    key_id: str
    authenticated: bool


def key_id_of(key: bytes) -> str:
    return "key-" + hashlib.sha256(b"docparser-key-id:" + key).hexdigest()[:12]


def parse_keys_file(text: str) -> list[str]:
    """One key per line; blank lines and ``#`` comments ignored; whitespace trimmed."""
    keys = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keys.append(line)
    return keys


def _secret_entries(directory: Path) -> list[Path]:
    # Kubernetes' AtomicWriter keeps real files under ``..<timestamp>`` and a ``..data``
    # link; the visible names are links into ``..data``. Dotfiles are never keys.
    return sorted(p for p in directory.iterdir() if not p.name.startswith("."))


class ApiKeyStore:
    """The configured keys, reloaded when the file or Secret directory changes."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._signature: tuple[object, ...] | None = None
        self._digests: tuple[bytes, ...] = ()
        self._ids: tuple[str, ...] = ()
        self.reload_count = 0
        self._refresh()

    def _stat_signature(self) -> tuple[object, ...]:
        """Stat data of everything that holds keys (follows Secret symlinks)."""
        try:
            if self.path.is_dir():
                items = []
                for entry in _secret_entries(self.path):
                    st = entry.stat()
                    items.append((entry.name, st.st_ino, st.st_mtime_ns, st.st_size))
                return ("dir", *items)
            st = self.path.stat()
            return ("file", st.st_ino, st.st_mtime_ns, st.st_size)
        except OSError as exc:
            return ("error", type(exc).__name__)

    def _read_keys(self) -> list[str]:
        if self.path.is_dir():
            keys = []
            for entry in _secret_entries(self.path):
                if entry.is_file():
                    keys.extend(parse_keys_file(entry.read_text(encoding="utf-8")))
            return keys
        return parse_keys_file(self.path.read_text(encoding="utf-8"))

    def _refresh(self) -> None:
        signature = self._stat_signature()
        if signature == self._signature:
            return
        with self._lock:
            if signature == self._signature:
                return
            try:
                keys = [k.encode("utf-8") for k in self._read_keys()]
            except (OSError, UnicodeDecodeError) as exc:
                # Fail closed: an unreadable key source admits nobody.
                log.error("cannot read API keys from %s: %s", self.path, type(exc).__name__)
                keys = []
            if not keys:
                log.warning("no API keys configured in %s: every /v1 request is refused", self.path)
            self._digests = tuple(hashlib.sha256(k).digest() for k in keys)
            self._ids = tuple(key_id_of(k) for k in keys)
            self._signature = signature
            self.reload_count += 1
            log.info("loaded %d API key(s) from %s", len(keys), self.path)

    def match(self, candidate: str) -> str | None:
        """The ``key_id`` of the matching key, or None; constant time over all keys."""
        self._refresh()
        probe = hashlib.sha256(candidate.encode("utf-8", "surrogateescape")).digest()
        found = None
        for digest, key_id in zip(self._digests, self._ids, strict=True):
            if hmac.compare_digest(probe, digest):
                found = key_id
        return found


def bearer_token(authorization: str | None) -> str:
    """Extract the token from an ``Authorization`` header or raise ``Unauthenticated``."""
    if not authorization:
        raise Unauthenticated("missing Authorization: Bearer <api key>", code="missing_api_key")
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise Unauthenticated(
            "the Authorization header must be 'Bearer <api key>'", code="malformed_authorization"
        )
    return token


def authenticate(store: ApiKeyStore | None, authorization: str | None) -> Principal:
    """Auth disabled (no store) -> anonymous; otherwise a valid key or an error."""
    if store is None:
        return Principal(ANONYMOUS, authenticated=False)
    key_id = store.match(bearer_token(authorization))
    if key_id is None:
        raise PermissionDenied("the API key is not valid", code="invalid_api_key")
    return Principal(key_id, authenticated=True)


def create_key_store(api_keys_file: Path | None) -> ApiKeyStore | None:
    return None if api_keys_file is None else ApiKeyStore(api_keys_file)


def require_api_key(request: Request, store: ApiKeyStore | None) -> Principal:
    """The API-key check of a ``/v1`` request (``ratelimit.admission`` runs it first): the
    principal goes on ``request.state``, the outcome into the scope (``AUTH_OUTCOME``).

    WHY the store is an argument: the guards sit at the server's bottom, below the app's
    state, so they are handed what they check against instead of reading it."""
    try:
        principal = authenticate(store, request.headers.get("authorization"))
    except DocParserError as exc:
        request.scope[AUTH_OUTCOME] = REASON_BY_CODE.get(exc.code, "wrong_key")
        raise
    request.scope[AUTH_OUTCOME] = PASSED
    request.state.principal = principal
    return principal


def client_identity(request: Request, principal: Principal) -> str:
    """What rate limits are keyed by: the key id, or the peer address without auth."""
    if principal.authenticated:
        return principal.key_id
    host = request.client.host if request.client else "unknown"
    return f"ip:{host}"
