"""Which URLs the operator may fetch: normalisation and the allow-list (pure).

Why: a DocParser's author chooses ``spec.canary.analysis.prometheus.url`` (and a
``golden.uri``), but the operator fetches it with its own network position, next to the API
server, the cloud metadata service and every internal admin endpoint. Only a cluster admin
decides where that may go (``DOCPARSER_OPERATOR_PROMETHEUS_URLS``,
``DOCPARSER_OPERATOR_GOLDEN_SOURCES``), and a URL is compared with those entries only after
both are reduced to one canonical form, so spelling cannot widen the list:

- scheme ``http`` or ``https`` only; port made explicit (``:80`` equals no port);
- no userinfo at all (``http://allowed@evil/`` is refused, not parsed one way by us and
  another by a client);
- a host is either a DNS name (lower case, IDNA, no trailing dot) or an IP literal in its
  canonical form. Numeric spellings that resolvers read as IPv4 (``127.1``, ``0x7f.0.0.1``,
  ``2130706433``) are refused, and a name rule never matches an IP literal or the reverse,
  even when the name resolves to that address;
- the path has no ``.``/``..`` segment and no encoded ``.``, ``/`` or ``\\``; a rule's path
  is a prefix on segment boundaries (``/prom`` admits ``/prom/api`` but not ``/promx``);
- no fragment, no control characters, no whitespace, no backslash.

Pod addresses are not tenant-chosen URLs but the kubelet's ``status.podIP``: the rule for them
(``AllowList.pod_port``) admits an IP literal on the runtime's port only.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

DEFAULT_PORTS = {"http": 80, "https": 443}
_LABEL = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)$")
_NUMERIC = re.compile(r"^(0x[0-9a-f]*|[0-9]+)$")  # what inet_aton would read as a number
_ENCODED_SEPARATOR = re.compile(r"%(2e|2f|5c)", re.IGNORECASE)


class BadURL(ValueError):
    """A URL that is not one canonical http(s) URL; the message is safe to show."""


@dataclass(frozen=True)
class Target:
    """One URL in canonical form: what the allow-list compares and the client connects to."""

    scheme: str
    host: str  # DNS name (lower case, IDNA) or canonical IP literal (no brackets)
    port: int
    path: str  # starts with "/"
    query: str
    is_ip: bool

    @property
    def origin(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"

    def __str__(self) -> str:
        return self.origin + self.path + (f"?{self.query}" if self.query else "")


def _host(raw: str) -> tuple[str, bool]:
    if raw.startswith("["):
        if not raw.endswith("]") or "%" in raw:
            raise BadURL("an IPv6 literal is [address], without a zone")
        return str(ipaddress.IPv6Address(raw[1:-1])), True
    try:
        return str(ipaddress.IPv4Address(raw)), True
    except ValueError:
        pass
    name = raw.lower().removesuffix(".")
    try:
        name = name.encode("idna").decode("ascii")
    except UnicodeError as exc:
        raise BadURL("the host is not a valid DNS name") from exc
    labels = name.split(".")
    if not name or not all(_LABEL.match(label) for label in labels):
        raise BadURL("the host is not a valid DNS name or IP literal")
    if _NUMERIC.match(labels[-1]):
        raise BadURL("a numeric host that is not a canonical IPv4 address")
    return name, False


def parse(url: str) -> Target:
    """``url`` in canonical form; BadURL says why it has none."""
    if any(c.isspace() or ord(c) < 0x20 or ord(c) == 0x7F or c == "\\" for c in url):
        raise BadURL("whitespace, control characters or a backslash in the URL")
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS:
        raise BadURL("only http:// and https:// URLs are fetched")
    if "@" in parts.netloc:
        raise BadURL("a URL with userinfo (user@host) is refused")
    if parts.fragment or url.endswith("#"):
        raise BadURL("a URL with a fragment is refused")
    netloc = parts.netloc
    if netloc.startswith("["):
        end = netloc.find("]")
        raw_host, rest = netloc[: end + 1], netloc[end + 1 :]
        if end < 0 or (rest and not rest.startswith(":")):
            raise BadURL("an IPv6 literal is [address] or [address]:port")
        raw_port = rest[1:]
    else:
        raw_host, _, raw_port = netloc.partition(":")
    if raw_port and not raw_port.isdigit():
        raise BadURL("the port is not a number")
    port = int(raw_port) if raw_port else DEFAULT_PORTS[scheme]
    if not 0 < port < 65536:
        raise BadURL("the port is out of range")
    if not raw_host:
        raise BadURL("the URL has no host")
    host, is_ip = _host(raw_host)
    path = parts.path or "/"
    if _ENCODED_SEPARATOR.search(path) or any(s in (".", "..") for s in path.split("/")):
        raise BadURL("a path with . or .. segments or an encoded separator is refused")
    return Target(scheme, host, port, path, parts.query, is_ip)


def _under(path: str, prefix: str) -> bool:
    return (path.rstrip("/") + "/").startswith(prefix.rstrip("/") + "/")


@dataclass(frozen=True)
class AllowList:
    """URL prefixes (canonical ``Target``s) a fetch may go to, and optionally any IP literal on
    one port (the pods' own address rule)."""

    prefixes: tuple[Target, ...] = ()
    pod_port: int | None = None
    setting: str = "DOCPARSER_OPERATOR_PROMETHEUS_URLS"  # named in refusals

    @classmethod
    def of(cls, entries: Iterable[str], setting: str) -> AllowList:
        """The allow-list of these entries; BadURL names the first one that is not a plain
        http(s) prefix (checked at start-up, so a typo never silently admits nothing)."""
        prefixes = []
        for entry in entries:
            try:
                target = parse(entry)
            except BadURL as exc:
                raise BadURL(f"{setting}: {entry!r}: {exc}") from exc
            if target.query:
                raise BadURL(f"{setting}: {entry!r}: a prefix has no query")
            prefixes.append(target)
        return cls(tuple(prefixes), setting=setting)

    @classmethod
    def pods(cls, port: int) -> AllowList:
        return cls(pod_port=port, setting="the pods' own address")

    def refusal(self, url: str) -> str | None:
        """Why ``url`` may not be fetched, or None. The message names the URL's origin only
        (never userinfo) and the setting that would admit it."""
        try:
            target = parse(url)
        except BadURL as exc:
            return f"not fetched: {exc}"
        if self.pod_port is not None:
            pod = target.is_ip and target.scheme == "http" and target.port == self.pod_port
            return None if pod else f"{target.origin}: not a pod's IP on port {self.pod_port}"
        for rule in self.prefixes:
            same = (rule.scheme, rule.host, rule.port) == (target.scheme, target.host, target.port)
            if same and _under(target.path, rule.path):
                return None
        allowed = ", ".join(str(p) for p in self.prefixes) or "none"
        return (
            f"{target.origin}{target.path} is not under the operator's allowed URLs ({allowed}); "
            f"a cluster admin adds a prefix with {self.setting}"
        )
