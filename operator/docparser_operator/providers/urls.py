"""Which URLs the operator may fetch: the allow-lists, per namespace (pure).

Why: a DocParser's author chooses ``spec.canary.analysis.prometheus.url`` (and a
``golden.uri``), but the operator fetches it with its own network position, next to the API
server, the cloud metadata service and every internal admin endpoint. Only a cluster admin
decides where that may go (``DOCPARSER_OPERATOR_PROMETHEUS_URLS``,
``DOCPARSER_OPERATOR_GOLDEN_SOURCES``), and a URL is compared with those entries only after
both went through the one parser (api/uri.py), so spelling cannot widen the list: no
userinfo, query or fragment; canonical host and explicit port; no dot segment or encoded
separator; a rule's path is a prefix on segment boundaries; a name rule never matches an IP
literal or the reverse, even when the name resolves to that address.

Per namespace: an entry may hold ``{namespace}`` (``http://prom.monitoring.svc:9090/{namespace}/``,
``s3://goldens/{namespace}/``), replaced by the DocParser's own namespace before comparing, so
one namespace's rule never admits another's folder. A namespace is a DNS label (no ``/``,
``.`` or ``%``), so the replacement stays inside the segment or label it was written in, and
two namespaces never yield the same rule (``team`` is not a prefix of ``team-b``'s segment:
prefixes match whole segments). An entry without the placeholder is shared by every namespace.

Pod addresses are not tenant-chosen URLs but the kubelet's ``status.podIP``: the rule for them
(``AllowList.pod_port``) admits an IP literal on the runtime's port only.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from docparser_operator.api import uri as uris
from docparser_operator.api.uri import URI, BadURI, Grammar

PLACEHOLDER = "{namespace}"
_NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")  # a DNS label
_SAMPLE_NAMESPACE = "namespace"  # what start-up substitutes to check an entry's form

Target = URI  # an http(s) URL in canonical form: what the client connects to


class BadURL(ValueError):
    """An allow-list entry that is not a plain prefix: stops start-up, naming the setting and
    the entry (an admin's own text, never a tenant's)."""


def parse(url: str) -> Target:
    """An http(s) URL in canonical form (api/uri.py); BadURI (a code) says why it has none."""
    return uris.parse(url, uris.HTTP)


def prefix(entry: str, namespace: str | None, grammar: Grammar) -> URI | None:
    """``entry`` as a prefix for ``namespace``: ``{namespace}`` replaced. None when the entry
    admits nothing there (it has the placeholder and no valid namespace is given, or the
    namespace makes it invalid, e.g. a host label over 63 characters)."""
    if PLACEHOLDER in entry:
        if namespace is None or not _NAMESPACE.fullmatch(namespace):
            return None
        entry = entry.replace(PLACEHOLDER, namespace)
    try:
        rule = uris.parse(entry, grammar)
    except BadURI:
        return None
    return None if rule.query else rule


def check_entries(entries: Iterable[str], setting: str, grammar: Grammar) -> tuple[str, ...]:
    """The entries, each checked as a prefix (with a sample namespace for ``{namespace}``);
    BadURL names the first bad one, so a typo never silently admits nothing (or more)."""
    checked = []
    for entry in entries:
        try:
            rule = uris.parse(entry.replace(PLACEHOLDER, _SAMPLE_NAMESPACE), grammar)
        except BadURI as exc:
            raise BadURL(f"{setting}: {entry!r}: {exc}") from exc
        if rule.query:
            raise BadURL(f"{setting}: {entry!r}: a prefix has no query")
        checked.append(entry)
    return tuple(checked)


def refused_by(entries: Sequence[str], setting: str) -> str:
    """The refusal of a URL no entry admits: the rule (the admin's entries, as written, and
    the setting), never the URL."""
    allowed = ", ".join(entries) or "none"
    return f"not under {setting} ({allowed}); a cluster admin adds a prefix there"


@dataclass(frozen=True)
class AllowList:
    """http(s) URL prefixes a fetch may go to, for one namespace when scoped (``{namespace}``
    entries admit nothing unscoped), and optionally any IP literal on one port (the pods' own
    address rule)."""

    entries: tuple[str, ...] = ()
    pod_port: int | None = None
    setting: str = "DOCPARSER_OPERATOR_PROMETHEUS_URLS"  # named in refusals
    namespace: str | None = None

    @classmethod
    def of(cls, entries: Iterable[str], setting: str) -> AllowList:
        """The allow-list of these entries; BadURL names the first one that is not a plain
        http(s) prefix (checked at start-up)."""
        return cls(check_entries(entries, setting, uris.HTTP), setting=setting)

    @classmethod
    def pods(cls, port: int) -> AllowList:
        return cls(pod_port=port, setting="the pods' own address")

    def scoped(self, namespace: str) -> AllowList:
        """This list for a DocParser in ``namespace``."""
        return replace(self, namespace=namespace)

    def refusal(self, url: str) -> str | None:
        """Why ``url`` may not be fetched, or None. The message names the rule that refused
        it (a reason code, the setting), never the URL."""
        try:
            target = parse(url)
        except BadURI as exc:
            return f"refused: {exc}"
        if target.query:  # parse refuses one; the operator's own parameters go separately
            return f"refused: {BadURI('URIQuery')}"
        if self.pod_port is not None:
            pod = target.is_ip and target.scheme == "http" and target.port == self.pod_port
            return None if pod else f"not a pod's IP on port {self.pod_port}"
        for entry in self.entries:
            rule = prefix(entry, self.namespace, uris.HTTP)
            if rule is not None and target.under(rule):
                return None
        return refused_by(self.entries, self.setting)
