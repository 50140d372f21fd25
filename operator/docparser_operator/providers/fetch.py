"""The one HTTP client of the operator's own outbound requests (pod ``/metrics``, PromQL,
golden parses, golden sets over http(s)); the API server is reached by kube/client.py only.

Why one module: every such request is made with the operator's network position on behalf
of someone else (a DocParser's author, a pod's owner), so each gets the same guard here
rather than whatever the calling module remembered:

- the URL must pass an ``AllowList`` (urls.py) *before* anything is resolved or connected;
  it has no query of its own (the one parser, api/uri.py, refuses one): the request is
  rebuilt from its parsed scheme, host, port and path, plus the caller's ``params`` encoded
  here, so a tenant's URL can never add or replace a parameter (a second ``query=``);
- a name is resolved once and the connection goes to that address (no second lookup for a
  rebinding resolver to answer differently), and no address in ``DENIED`` is ever dialled,
  whatever name or literal led there (cloud metadata, link-local, unspecified, multicast);
- redirects are never followed (a 3xx is an error): an allowed server cannot bounce the
  operator elsewhere;
- each exchange is bounded in bytes (``Content-Length`` checked first, then counted) and in
  wall time: a watchdog shuts the socket at the deadline, so a server trickling a byte at a
  time is cut as surely as a silent one;
- no proxy from the environment, no cookies, no ``Content-Encoding`` decoding (a compressed
  reply is not decompressed, so no decompression bomb);
- ``FetchError``'s message is a reason *code* chosen here (``HTTP 503``, ``Timeout``,
  ``TooLarge``, ``ConnectionRefused``, ...): never a byte the remote side sent, not even an
  HTTP reason phrase or a TLS certificate's names, because callers put it in status, which
  the DocParser's author reads.
"""

from __future__ import annotations

import contextlib
import http.client
import ipaddress
import socket
import ssl
import threading
import time
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from docparser_operator.api.uri import BadURI
from docparser_operator.providers.urls import AllowList, Target, parse

# Never dialled, by name or by literal: where the cloud's instance metadata (and its
# credentials) answer, and addresses that are never a service.
DENIED = (
    ipaddress.ip_network("169.254.0.0/16"),  # link-local: AWS/GCP/Azure/OpenStack metadata
    ipaddress.ip_network("fe80::/10"),
    ipaddress.ip_network("fd00:ec2::254/128"),  # AWS metadata over IPv6
    ipaddress.ip_network("100.100.100.200/32"),  # Alibaba Cloud metadata
    ipaddress.ip_network("0.0.0.0/8"),
    ipaddress.ip_network("::/128"),
    ipaddress.ip_network("224.0.0.0/4"),
    ipaddress.ip_network("ff00::/8"),
    ipaddress.ip_network("255.255.255.255/32"),
)

Resolve = Callable[[str, int], list[str]]  # (host, port) -> addresses


class FetchError(Exception):
    """Nothing usable came back. ``str()`` is a reason code safe for status."""


class NotAllowed(FetchError):
    """Refused before any name was resolved or any connection opened."""


def denied(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return any(ip in net for net in DENIED if net.version == ip.version)


def system_resolve(host: str, port: int) -> list[str]:
    """The system resolver's addresses for ``host`` (its own timeouts bound the lookup)."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


@dataclass(frozen=True)
class Reply:
    status: int
    body: bytes
    content_type: str

    def ok(self) -> bytes:
        """The body of a 2xx reply; otherwise FetchError with the status code alone."""
        if not 200 <= self.status < 300:
            raise FetchError(f"HTTP {self.status}")
        return self.body


def _reason(exc: BaseException) -> str:
    """A reason code for a transport failure: our own words, never the exception's text
    (an SSL error names the server's certificate, an HTTP error the server's phrase)."""
    if isinstance(exc, socket.gaierror):
        return "DNSError"
    if isinstance(exc, TimeoutError | socket.timeout):
        return "Timeout"
    if isinstance(exc, ConnectionRefusedError):
        return "ConnectionRefused"
    if isinstance(exc, ssl.SSLError | ssl.CertificateError):
        return "TLSError"
    if isinstance(exc, http.client.HTTPException):
        return "BadResponse"
    if isinstance(exc, OSError):
        return "ConnectError"
    return "FetchFailed"


@dataclass
class Fetcher:
    """Guarded GET/POST for one kind of destination (its ``allow`` list)."""

    allow: AllowList
    resolve: Resolve = system_resolve
    tls: ssl.SSLContext = field(default_factory=ssl.create_default_context)
    user_agent: str = "docparser-operator"

    def refusal(self, url: str) -> str | None:
        return self.allow.refusal(url)

    def scoped(self, namespace: str) -> Fetcher:
        """This client for a DocParser in ``namespace`` (its ``{namespace}`` rules)."""
        return replace(self, allow=self.allow.scoped(namespace))

    def get(
        self,
        url: str,
        *,
        timeout_s: float,
        max_bytes: int,
        params: Mapping[str, str] | None = None,
    ) -> Reply:
        return self.request("GET", url, timeout_s=timeout_s, max_bytes=max_bytes, params=params)

    def request(
        self,
        method: str,
        url: str,
        *,
        timeout_s: float,
        max_bytes: int,
        body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        params: Mapping[str, str] | None = None,
    ) -> Reply:
        """One exchange within ``timeout_s`` (all of it: lookup aside, connect, headers,
        body) and ``max_bytes`` of body. ``params``: the query, the caller's own (``url`` has
        none). Raises NotAllowed before any I/O, FetchError after."""
        reason = self.allow.refusal(url)
        if reason is not None:
            raise NotAllowed(reason)
        try:
            target = parse(url)
        except BadURI as exc:  # refusal() already said so; kept for the type checker
            raise NotAllowed(str(exc)) from exc
        target = replace(target, query=urllib.parse.urlencode(params or {}))
        assert target.port is not None  # an http(s) URL's port is always made explicit
        deadline = time.monotonic() + timeout_s
        address = self._address(target)
        remaining = max(0.001, deadline - time.monotonic())
        try:
            sock = socket.create_connection((address, target.port), timeout=remaining)
        except OSError as exc:
            raise FetchError(_reason(exc)) from None
        cut = threading.Event()
        live = [sock]  # the socket the watchdog shuts: the TLS one once it wraps this

        def watchdog() -> None:
            cut.set()
            with contextlib.suppress(OSError):
                live[0].shutdown(socket.SHUT_RDWR)

        timer = threading.Timer(max(0.0, deadline - time.monotonic()), watchdog)
        timer.daemon = True
        timer.start()
        try:
            if target.scheme == "https":
                tls = self.tls.wrap_socket(
                    sock, server_hostname=target.host, do_handshake_on_connect=False
                )
                live[0] = tls
                tls.do_handshake()  # under the watchdog, like everything after it
            reply = self._exchange(live[0], target, method, body, headers, deadline, max_bytes)
        except FetchError:
            raise
        except Exception as exc:
            raise FetchError("Timeout" if cut.is_set() else _reason(exc)) from None
        finally:
            timer.cancel()
            live[0].close()
        if cut.is_set():  # the watchdog ended the body early: never a truncated reply
            raise FetchError("Timeout")
        return reply

    def _address(self, target: Target) -> str:
        """The one address to dial: the literal, or the name's first address; refused when any
        address the name has is denied (a name that also points at metadata is not trusted)."""
        if target.is_ip:
            addresses = [target.host]
        else:
            try:
                addresses = self.resolve(target.host, target.port or 0)
            except OSError as exc:
                raise FetchError(_reason(exc)) from None
        if not addresses:
            raise FetchError("DNSError")
        if any(denied(a) for a in addresses):
            raise NotAllowed("the host resolves to an address the operator never dials")
        return addresses[0]

    def _exchange(
        self,
        sock: socket.socket,
        target: Target,
        method: str,
        body: bytes | None,
        headers: Mapping[str, str] | None,
        deadline: float,
        max_bytes: int,
    ) -> Reply:
        kind = (
            http.client.HTTPSConnection if target.scheme == "https" else http.client.HTTPConnection
        )
        conn = kind(target.host, target.port)  # its Host header; never its own connect():
        conn.sock = sock  # already connected (and TLS-wrapped) to the address we chose
        path = target.path + (f"?{target.query}" if target.query else "")
        sent = {"User-Agent": self.user_agent, "Accept-Encoding": "identity", **(headers or {})}
        conn.request(method, path, body=body, headers=sent)
        reply = conn.getresponse()
        if 300 <= reply.status < 400:
            raise FetchError(f"HTTP {reply.status} (redirects are not followed)")
        if reply.getheader("Content-Encoding", "identity").lower() != "identity":
            raise FetchError("EncodedReply")
        length = reply.getheader("Content-Length")
        if length is not None and length.isdigit() and int(length) > max_bytes:
            raise FetchError(f"TooLarge (over {max_bytes} bytes)")
        chunks: list[bytes] = []
        size = 0
        while True:
            sock.settimeout(max(0.001, deadline - time.monotonic()))
            chunk = reply.read1(65536)
            if not chunk:
                break
            size += len(chunk)
            if size > max_bytes:
                raise FetchError(f"TooLarge (over {max_bytes} bytes)")
            chunks.append(chunk)
        content_type = reply.getheader("Content-Type", "") or ""
        return Reply(reply.status, b"".join(chunks), content_type.split(";")[0].strip()[:100])
