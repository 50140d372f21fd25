"""The one parser of every URL and URI a DocParser spec carries (pure; no urllib).

Why one, and hand-written: ``spec.canary.analysis.prometheus.url``, ``golden.uri`` and
``weights.uri`` are chosen by a namespace's users, and the operator either connects to them
with its own network position or puts them into pods. ``urllib.parse.urlsplit`` is lenient
(it keeps what it cannot read), raises on some inputs (``http://[::1``) and lets the port be
read later, differently (``int("٣٣")`` is 33). Each field used to add its own checks around
it, and every gap between them was a way past the allow-list or an exception that made a
DocParser's reconcile throw on every pass. Here one grammar decides, and its only failure is
``BadURI`` with a reason *code*: a fixed sentence that names the rule, never the input, so
status never carries what a tenant wrote.

The grammar (a subset of RFC 3986 that each field's consumer reads the same way):

- ASCII only outside an http(s) host (which goes through IDNA); no whitespace, control
  characters or backslash; at most 2048 characters;
- ``scheme://authority/path`` with a scheme the field takes; never userinfo (``a@b``) nor a
  fragment; a query only where the field takes one (``weights.uri``: a presigned URL);
- http(s): the host is a DNS name (lower case, IDNA, no trailing dot, never all-numeric as a
  resolver would read ``127.1``) or a canonical IP literal; the port ASCII digits 1..65535,
  made explicit; object stores: a bucket name; ``pvc://``: a claim name; ``file://``: no host;
- the path has no ``.``/``..`` segment; a percent-escape only in http(s) paths, and never of
  ``.``, ``/``, ``\\`` or a control character.

``URI`` is the canonical form: what allow-lists compare and what the operator rebuilds its
request or fsspec URI from, so nothing of the input but the parsed parts goes further.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

MAX_LENGTH = 2048
WEB = ("http", "https")
DEFAULT_PORTS = {"http": 80, "https": 443}
OBJECT_STORES = ("s3", "gs", "gcs", "az", "abfs")

# code -> the sentence status shows (with the field's name): the rule, never the input.
REASONS = {
    "URITooLong": f"longer than {MAX_LENGTH} characters",
    "URICharacters": "whitespace, a control or non-ASCII character, a backslash or a "
    "character outside RFC 3986",
    "URIScheme": "a scheme this field does not take",
    "URIUserinfo": "userinfo (user@host) is refused",
    "URIQuery": "a query (?...) is refused: the operator sends its own parameters only",
    "URIFragment": "a fragment (#...) is refused",
    "URIHost": "the host is not a DNS name, a canonical IP literal or a bucket/claim name",
    "URIPort": "the port is not ASCII digits from 1 to 65535 (or this scheme has none)",
    "URIPath": "the path has a . or .. segment, an encoded separator or a malformed escape",
}


class BadURI(ValueError):
    """The text is not a URI this field takes. ``code`` is one of ``REASONS``; ``str()`` is
    the code and its sentence, safe for status (nothing of the input)."""

    def __init__(self, code: str) -> None:
        assert code in REASONS, code
        self.code = code
        super().__init__(f"{code} ({REASONS[code]})")


@dataclass(frozen=True)
class Grammar:
    """What one field takes: its schemes and whether a query is part of its meaning."""

    schemes: frozenset[str]
    query: bool = False


HTTP = Grammar(frozenset(WEB))
GOLDEN = Grammar(frozenset({"file", *OBJECT_STORES, *WEB}))
WEIGHTS = Grammar(frozenset({"s3", "gs", "file", "pvc", *WEB}), query=True)
ANY = Grammar(frozenset({"file", "pvc", *OBJECT_STORES, *WEB}))


@dataclass(frozen=True)
class URI:
    """One URI in canonical form."""

    scheme: str
    host: str  # DNS name (IDNA), IP literal (no brackets), bucket or claim name; "" for file
    port: int | None  # explicit for http(s); None elsewhere
    path: str  # starts with "/"
    query: str = ""
    is_ip: bool = False

    @property
    def origin(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}" + (f":{self.port}" if self.port is not None else "")

    def __str__(self) -> str:
        return self.origin + self.path + (f"?{self.query}" if self.query else "")

    def under(self, prefix: URI) -> bool:
        """Same scheme, host and port, and the path under ``prefix``'s on segment boundaries
        (``/prom`` admits ``/prom/api``, not ``/promx``)."""
        same = (self.scheme, self.host, self.port) == (prefix.scheme, prefix.host, prefix.port)
        mine, theirs = self.path.rstrip("/") + "/", prefix.path.rstrip("/") + "/"
        return same and mine.startswith(theirs)


_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]{0,15}")
_PCHARS = re.compile(r"[A-Za-z0-9._~!$&'()*+,;=:@/%-]*")  # RFC 3986 pchar and "/"
_ESCAPE = re.compile(r"%([0-9A-Fa-f]{2})")
_PORT = re.compile(r"[0-9]{1,5}")
_LABEL = re.compile(r"(?!-)[a-z0-9-]{1,63}(?<!-)")
_NUMERIC = re.compile(r"0x[0-9a-f]*|[0-9]+")  # what inet_aton would read as a number
_BUCKET = re.compile(r"[a-z0-9]([a-z0-9._-]{0,220}[a-z0-9])?")
_CLAIM = re.compile(r"[a-z0-9]([-a-z0-9]{0,251}[a-z0-9])?")
# Encoded ".", "/", "\" and control characters: a server or store may decode them after the
# operator compared the path.
_FORBIDDEN_ESCAPES = frozenset({0x2E, 0x2F, 0x5C, 0x7F, *range(0x20)})


def _bad_characters(text: str) -> bool:
    return any(c.isspace() or ord(c) < 0x20 or ord(c) == 0x7F or c == "\\" for c in text)


def _web_host(raw: str) -> tuple[str, bool]:
    if raw.startswith("["):
        inner = raw[1:-1]
        if not raw.endswith("]") or "%" in inner or "[" in inner or "]" in inner:
            raise BadURI("URIHost")
        try:
            return str(ipaddress.IPv6Address(inner)), True
        except ValueError:
            raise BadURI("URIHost") from None
    if "[" in raw or "]" in raw:
        raise BadURI("URIHost")
    try:
        return str(ipaddress.IPv4Address(raw)), True
    except ValueError:
        pass
    name = raw.lower().removesuffix(".")
    try:
        name = name.encode("idna").decode("ascii")
    except (UnicodeError, ValueError):
        raise BadURI("URIHost") from None
    labels = name.split(".")
    if not name or len(name) > 253 or not all(_LABEL.fullmatch(label) for label in labels):
        raise BadURI("URIHost")
    if _NUMERIC.fullmatch(labels[-1]):
        raise BadURI("URIHost")
    return name, False


def _host(scheme: str, raw: str) -> tuple[str, bool]:
    if scheme in WEB:
        return _web_host(raw)
    if not raw.isascii():
        raise BadURI("URICharacters")
    if scheme == "file":
        if raw:
            raise BadURI("URIHost")
        return "", False
    pattern = _CLAIM if scheme == "pvc" else _BUCKET
    if not pattern.fullmatch(raw) or ".." in raw:
        raise BadURI("URIHost")
    return raw, False


def _authority(scheme: str, authority: str) -> tuple[str, str]:
    """(host, port text) of ``authority``; the port is "" when it has none."""
    if "@" in authority:
        raise BadURI("URIUserinfo")
    if authority.startswith("["):
        end = authority.find("]")
        if end < 0:
            raise BadURI("URIHost")
        rest = authority[end + 1 :]
        if rest and not rest.startswith(":"):
            raise BadURI("URIHost")
        return authority[: end + 1], rest[1:] if rest else ""
    host, colon, port = authority.partition(":")
    if colon and not port:
        raise BadURI("URIPort")
    return host, port


def _check_escapes(text: str, web: bool) -> None:
    if "%" not in text:
        return
    if not web or text.count("%") != len(_ESCAPE.findall(text)):
        raise BadURI("URIPath")
    if any(int(m, 16) in _FORBIDDEN_ESCAPES for m in _ESCAPE.findall(text)):
        raise BadURI("URIPath")


def _path(scheme: str, raw: str) -> str:
    if not raw.isascii() or not _PCHARS.fullmatch(raw):
        raise BadURI("URICharacters")
    _check_escapes(raw, scheme in WEB)
    if any(segment in (".", "..") for segment in raw.split("/")):
        raise BadURI("URIPath")
    path = raw or "/"
    if scheme in ("file", "pvc") and path.strip("/") == "":
        raise BadURI("URIPath")
    return path


def parse(text: str, grammar: Grammar = ANY) -> URI:
    """``text`` in canonical form for a field of ``grammar``; BadURI (a code) says why not.
    Total: no other exception leaves it, whatever the input."""
    if not isinstance(text, str):
        raise BadURI("URICharacters")
    if len(text) > MAX_LENGTH:
        raise BadURI("URITooLong")
    if _bad_characters(text):
        raise BadURI("URICharacters")
    head, sep, rest = text.partition("://")
    if not sep or not _SCHEME.fullmatch(head):
        raise BadURI("URIScheme")
    scheme = head.lower()
    if scheme not in grammar.schemes:
        raise BadURI("URIScheme")
    if "#" in rest:
        raise BadURI("URIFragment")
    rest, question, query = rest.partition("?")
    if question and not grammar.query:
        raise BadURI("URIQuery")
    if question and (not query.isascii() or not _PCHARS.fullmatch(query.replace("?", ""))):
        raise BadURI("URICharacters")
    if query.count("%") != len(_ESCAPE.findall(query)):
        raise BadURI("URIQuery")
    slash = rest.find("/")
    authority, raw_path = (rest, "") if slash < 0 else (rest[:slash], rest[slash:])
    raw_host, raw_port = _authority(scheme, authority)
    if raw_port and scheme not in WEB:
        raise BadURI("URIPort")
    if raw_port and not (_PORT.fullmatch(raw_port) and 0 < int(raw_port) < 65536):
        raise BadURI("URIPort")
    if scheme in WEB and not raw_host:
        raise BadURI("URIHost")
    host, is_ip = _host(scheme, raw_host)
    port = (int(raw_port) if raw_port else DEFAULT_PORTS[scheme]) if scheme in WEB else None
    return URI(scheme, host, port, _path(scheme, raw_path), query, is_ip)


def problem(text: str, grammar: Grammar = ANY) -> str | None:
    """``str(BadURI)`` for a text ``parse`` refuses, else None (for validators)."""
    try:
        parse(text, grammar)
    except BadURI as exc:
        return str(exc)
    return None
