"""The rule for server-side URL fetching: never, unless the host is explicitly allowed.

A document parser that fetches ``image_url``s for its callers is an SSRF tool aimed at
the cluster network (metadata endpoints, internal services). So by default the server
fetches nothing; ``settings.url_fetch_allowlist`` opts hosts in. Entries look like
``[scheme://]host[:port]``; ``*.example.com`` allows subdomains (not the apex). Without
a port, only the scheme's default port is allowed. URLs with credentials
(``user@host``) are refused because parsers disagree on them.

Pure functions; callers that fetch must also refuse redirects to hosts not allowed
(fetch with redirects disabled, or check every hop with ``check_url_allowed``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from docparser_runtime.errors import InvalidInput

DEFAULT_PORTS = {"http": 80, "https": 443}


@dataclass(frozen=True)
class _Target:
    scheme: str | None
    host: str
    port: int | None


def _normalize_host(host: str) -> str:
    host = host.strip().rstrip(".").lower()
    if host.startswith("*."):
        return "*." + _normalize_host(host[2:])
    try:
        return host.encode("idna").decode("ascii")
    except UnicodeError:
        return host


def _parse(value: str, *, is_entry: bool) -> _Target | None:
    text = value.strip()
    if is_entry and "://" not in text:
        text = "//" + text
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError:
        return None
    if parts.username is not None or parts.password is not None or not parts.hostname:
        return None
    scheme = parts.scheme.lower() or None
    if scheme is not None and scheme not in DEFAULT_PORTS:
        return None
    host = parts.hostname
    if is_entry and parts.netloc.split("@")[-1].startswith("*."):
        host = "*." + host.removeprefix("*.")
    return _Target(scheme, _normalize_host(host), port)


def _host_matches(pattern: str, host: str) -> bool:
    if pattern.startswith("*."):
        suffix = pattern[1:]  # ".example.com"
        return host.endswith(suffix) and len(host) > len(suffix)
    return host == pattern


def is_url_allowed(url: str, allowlist: Iterable[str]) -> bool:
    """True when ``url`` is http(s), has no credentials and matches an allow-list entry."""
    target = _parse(url, is_entry=False)
    if target is None or target.scheme is None:
        return False
    port = target.port or DEFAULT_PORTS[target.scheme]
    for raw in allowlist:
        entry = _parse(raw, is_entry=True)
        if entry is None:
            continue
        if entry.scheme is not None and entry.scheme != target.scheme:
            continue
        allowed_port = entry.port or DEFAULT_PORTS[entry.scheme or target.scheme]
        if port == allowed_port and _host_matches(entry.host, target.host):
            return True
    return False


def check_url_allowed(url: str, allowlist: Iterable[str]) -> None:
    """Raise ``InvalidInput`` (code ``url_not_allowed``) unless ``url`` may be fetched."""
    if not is_url_allowed(url, allowlist):
        raise InvalidInput(
            "this server does not fetch URLs from this host; send the document inline "
            "(base64 or a data: URL) or ask the operator to allow the host",
            code="url_not_allowed",
        )
