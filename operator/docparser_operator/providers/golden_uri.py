"""Golden documents from a URI (``golden.uri``): a folder of ``<id>.png`` / ``<id>.pdf`` with
``<id>.txt`` or ``<id>.md``, read by the operator.

``file:///golden/...`` is a volume mounted into the operator pod (the chart's
``golden.volume``, which may itself be a CSI bucket mount); ``s3://``, ``gs://`` and ``az://``
are object stores read with the operator's own identity by fsspec's backend for the scheme,
when the image has one. The published image has none: s3fs's aiobotocore pins
``python-dateutil<3`` and the Kubernetes client 37 needs ``>=3``. ``http://`` and ``https://``
folders are read by the guarded client (fetch.py: no redirect, bounded replies) from the
folder's index page: the links to plain file names in it, as nginx's autoindex or
``python -m http.server`` list them. A ConfigMap is capped at 1 MiB; a folder holds scans up
to the limits below.

Why an allow-list (``DOCPARSER_OPERATOR_GOLDEN_SOURCES``, default
``file:///golden/{namespace}/``): a DocParser's author picks the URI, and the operator reads it
with its own identity and sends the bytes to a pod whose image that author chose. Without the
list any namespace could have the operator read its other files or buckets; with one list for
the whole cluster, any namespace could still read another team's golden folder under a shared
prefix. So an entry is per namespace through ``{namespace}``, replaced by the DocParser's
namespace before comparing (urls.py: whole segments, a namespace is a DNS label); an entry
without it is shared by every namespace. The URI goes through the one parser (api/uri.py: no
userinfo, query, fragment, ``.``/``..`` segment or percent-escape outside http(s)), is compared
in its canonical form (``file://`` after resolving symlinks), and what is read is rebuilt from
that form, not the text. A refusal names the rule, a failure an error class or reason code:
never the URI, a file name, or what the store or server said.
"""

from __future__ import annotations

import html.parser
import os
import posixpath
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from docparser_operator.api import uri as uris
from docparser_operator.api.uri import URI, BadURI
from docparser_operator.providers import golden
from docparser_operator.providers.fetch import Fetcher, FetchError
from docparser_operator.providers.golden import Documents, GoldenUnavailable, pair
from docparser_operator.providers.urls import AllowList, check_entries, prefix, refused_by

MAX_DOCUMENT_BYTES = 32 * 1024 * 1024
MAX_TOTAL_BYTES = 128 * 1024 * 1024
DEFAULT_SOURCES = ("file:///golden/{namespace}/",)
SETTING = "DOCPARSER_OPERATOR_GOLDEN_SOURCES"
LISTING_MAX_BYTES = 1024 * 1024
HTTP_TIMEOUT_S = 60.0

# uri -> (filesystem, path in it): fsspec.core.url_to_fs by default; tests pass their own.
Open = Callable[[str], tuple[Any, str]]


def check_sources(sources: Sequence[str]) -> tuple[str, ...]:
    """The golden sources, each checked as a prefix (at start-up; BadURL names a bad one)."""
    return check_entries(sources, SETTING, uris.GOLDEN)


def http_allow_list(sources: Sequence[str]) -> AllowList:
    """The http(s) entries of the golden sources, as an allow-list (BadURL on a bad one)."""
    web = [p for p in check_sources(sources) if p.partition("://")[0].lower() in uris.WEB]
    return AllowList.of(web, SETTING)


def _real(path: str) -> str:
    return os.path.realpath(path).rstrip("/") + "/"


def located(uri: str, sources: Sequence[str], namespace: str) -> URI | str:
    """What to read for ``uri`` (its canonical form; a ``file://`` path with its symlinks
    resolved), or why not: the rule that refused it (pure but for resolving symlinks)."""
    try:
        target = uris.parse(uri, uris.GOLDEN)
    except BadURI as exc:
        return f"refused: {exc}"
    if target.scheme == "file":
        target = replace(target, path=os.path.realpath(target.path))
    for entry in sources:
        rule = prefix(entry, namespace, uris.GOLDEN)
        if rule is None:
            continue
        if rule.scheme == target.scheme == "file":
            if _real(target.path).startswith(_real(rule.path)):
                return target
        elif target.under(rule):
            return target
    return refused_by(sources, SETTING)


def refusal(uri: str, sources: Sequence[str], namespace: str) -> str | None:
    """Why ``uri`` may not be read by a DocParser in ``namespace``, or None."""
    where = located(uri, sources, namespace)
    return where if isinstance(where, str) else None


class _Links(html.parser.HTMLParser):
    """The plain file names an index page links to (``href="inv.png"``)."""

    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for key, value in attrs:
            if tag == "a" and key == "href" and value:
                name = urllib.parse.unquote(value)
                if golden.PLAIN_NAME.fullmatch(name):
                    self.names.append(name)


def _load_http(uri: str, fetcher: Fetcher) -> Documents:
    """A golden folder over http(s): its index page's links, then each chosen file."""
    folder = uri.rstrip("/") + "/"

    def get(url: str, max_bytes: int) -> bytes:
        return fetcher.get(url, timeout_s=HTTP_TIMEOUT_S, max_bytes=max_bytes).ok()

    try:
        links = _Links()
        links.feed(get(folder, LISTING_MAX_BYTES).decode("utf-8", errors="replace"))
        pairs = pair(links.names)
        docs: Documents = {}
        total = 0
        for stem, (document, expected) in pairs.items():
            data = get(folder + urllib.parse.quote(document), MAX_DOCUMENT_BYTES)
            text = get(folder + urllib.parse.quote(expected), MAX_DOCUMENT_BYTES).decode("utf-8")
            total += len(data) + len(text)
            if total > MAX_TOTAL_BYTES:
                raise GoldenUnavailable(f"the golden set is over {MAX_TOTAL_BYTES >> 20} MiB")
            docs[stem] = (document, data, text)
        return docs
    except FetchError as exc:  # a reason code: never the server's words
        raise GoldenUnavailable(str(exc)) from None
    except UnicodeDecodeError:
        raise GoldenUnavailable("UnicodeDecodeError") from None


def _open(uri: str) -> tuple[Any, str]:
    import fsspec  # lazy: only a golden set with a uri needs it

    fs, path = fsspec.core.url_to_fs(uri)
    return fs, path


def load(
    uri: str,
    sources: Sequence[str],
    namespace: str,
    open_fs: Open = _open,
    fetcher: Fetcher | None = None,
) -> Documents:
    """The golden documents of the folder at ``uri`` for a DocParser in ``namespace``;
    GoldenUnavailable says why not. ``fetcher``: the guarded client for http(s) folders
    (default: one for ``sources``)."""
    target = located(uri, sources, namespace)
    if isinstance(target, str):
        raise GoldenUnavailable(target)
    if target.scheme in uris.WEB:
        client = fetcher or Fetcher(http_allow_list(sources))
        return _load_http(str(target), client.scoped(namespace))
    try:
        fs, root = open_fs(str(target))
    except ImportError as exc:  # fsspec names the package the scheme needs
        raise GoldenUnavailable(
            f"no fsspec backend for {target.scheme}:// in the operator image: {exc}"
        ) from exc
    try:
        entries = fs.ls(root, detail=True)
        files = {
            posixpath.basename(str(e["name"]).rstrip("/")): (
                str(e["name"]),
                int(e.get("size") or 0),
            )
            for e in entries
            if e.get("type") != "directory"
        }
        pairs = pair(files)
        chosen = [name for doc in pairs.values() for name in doc]
        too_big = [n for n in chosen if files[n][1] > MAX_DOCUMENT_BYTES]
        if too_big:
            raise GoldenUnavailable(f"a document is over {MAX_DOCUMENT_BYTES >> 20} MiB")
        if sum(files[n][1] for n in chosen) > MAX_TOTAL_BYTES:
            raise GoldenUnavailable(f"the golden set is over {MAX_TOTAL_BYTES >> 20} MiB")
        docs: Documents = {}
        for stem, (document, expected) in pairs.items():
            text = bytes(fs.cat_file(files[expected][0])).decode("utf-8")
            docs[stem] = (document, bytes(fs.cat_file(files[document][0])), text)
        return docs
    except GoldenUnavailable:
        raise
    except Exception as exc:  # a missing folder, denied, not UTF-8, any store's own error
        # The class alone: a store's message quotes its server (an object store's XML error).
        raise GoldenUnavailable(type(exc).__name__) from None


@dataclass(frozen=True)
class GoldenSets:
    """The ``GoldenReader`` (providers/base.py): golden sets by URI under ``sources``, parsed by
    each track's pod through ``post``."""

    sources: tuple[str, ...]
    post: golden.Post
    fetcher: Fetcher | None = None  # for http(s) sets; default: one for ``sources``
    open_fs: Open = _open

    def refusal(self, uri: str, namespace: str) -> str | None:
        reason = refusal(uri, self.sources, namespace)
        return None if reason is None else f"spec.canary.analysis.golden.uri: {reason}"

    def load(self, uri: str, namespace: str) -> Documents:
        return load(uri, self.sources, namespace, self.open_fs, self.fetcher)

    def read(
        self,
        documents: Documents,
        canary_pods: Sequence[Mapping[str, Any]],
        stable_pods: Sequence[Mapping[str, Any]],
    ) -> dict[str, tuple[str, str, str]]:
        return golden.read(documents, canary_pods, stable_pods, self.post)
