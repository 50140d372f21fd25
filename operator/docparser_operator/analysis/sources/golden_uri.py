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

Why an allow-list (``DOCPARSER_OPERATOR_GOLDEN_SOURCES``, default ``file:///golden/``): a
DocParser's author picks the URI, and the operator reads it with its own identity and sends
the bytes to a pod that author runs. Without the list any namespace could have the operator
read its other files or buckets. ``file://`` paths are compared after resolving symlinks and
``..``; http(s) URIs after normalisation (urls.py: scheme, host, port, path prefix, no
userinfo); other URIs must not contain a ``..`` segment at all. A failure's message names
the URI and an error class, never what the store or server said.
"""

from __future__ import annotations

import html.parser
import os
import posixpath
import re
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from docparser_operator.analysis.sources import golden
from docparser_operator.analysis.sources.fetch import Fetcher, FetchError
from docparser_operator.analysis.sources.golden import Documents, GoldenUnavailable, pair
from docparser_operator.analysis.sources.urls import AllowList, BadURL

MAX_DOCUMENT_BYTES = 32 * 1024 * 1024
MAX_TOTAL_BYTES = 128 * 1024 * 1024
DEFAULT_SOURCES = ("file:///golden/",)
SETTING = "DOCPARSER_OPERATOR_GOLDEN_SOURCES"
LISTING_MAX_BYTES = 1024 * 1024
HTTP_TIMEOUT_S = 60.0
_PLAIN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")  # a ConfigMap key, as short

# uri -> (filesystem, path in it): fsspec.core.url_to_fs by default; tests pass their own.
Open = Callable[[str], tuple[Any, str]]


def _file_path(uri: str) -> str:
    return os.path.realpath(urllib.parse.unquote(urllib.parse.urlsplit(uri).path))


def http_allow_list(sources: Sequence[str]) -> AllowList:
    """The http(s) entries of the golden sources, as an allow-list (BadURL on a bad one)."""
    web = [p for p in sources if urllib.parse.urlsplit(p).scheme.lower() in ("http", "https")]
    return AllowList.of(web, SETTING)


def refusal(uri: str, sources: Sequence[str]) -> str | None:
    """Why ``uri`` may not be read, or None (pure but for resolving file:// symlinks)."""
    scheme = urllib.parse.urlsplit(uri).scheme
    if scheme.lower() in ("http", "https"):
        try:
            allow = http_allow_list(sources)
        except BadURL as exc:
            return str(exc)
        return None if allow.refusal(uri) is None else _refused(uri, sources)
    for prefix in sources:
        if scheme == "file" and urllib.parse.urlsplit(prefix).scheme == "file":
            root = _file_path(prefix).rstrip("/") + "/"
            if (_file_path(uri).rstrip("/") + "/").startswith(root):
                return None
        elif (
            scheme != "file"
            and ".." not in uri.split("/")
            and (uri + "/").startswith(prefix.rstrip("/") + "/")
        ):
            return None
    return _refused(uri, sources)


def _refused(uri: str, sources: Sequence[str]) -> str:
    allowed = ", ".join(sources) or "none"
    shown = uri if "@" not in uri else "a URI with userinfo"
    return (
        f"{shown} is not under the operator's golden sources ({allowed}); "
        f"an admin adds a prefix with {SETTING}"
    )


class _Links(html.parser.HTMLParser):
    """The plain file names an index page links to (``href="inv.png"``)."""

    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for key, value in attrs:
            if tag == "a" and key == "href" and value:
                name = urllib.parse.unquote(value)
                if _PLAIN_NAME.match(name):
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
        raise GoldenUnavailable(f"{uri}: {exc}") from None
    except UnicodeDecodeError:
        raise GoldenUnavailable(f"{uri}: UnicodeDecodeError") from None


def _open(uri: str) -> tuple[Any, str]:
    import fsspec  # lazy: only a golden set with a uri needs it

    fs, path = fsspec.core.url_to_fs(uri)
    return fs, path


def load(
    uri: str, sources: Sequence[str], open_fs: Open = _open, fetcher: Fetcher | None = None
) -> Documents:
    """The golden documents of the folder at ``uri``; GoldenUnavailable says why not.
    ``fetcher``: the guarded client for http(s) folders (default: one for ``sources``)."""
    reason = refusal(uri, sources)
    if reason is not None:
        raise GoldenUnavailable(reason)
    if urllib.parse.urlsplit(uri).scheme.lower() in ("http", "https"):
        return _load_http(uri, fetcher or Fetcher(http_allow_list(sources)))
    try:
        fs, root = open_fs(uri)
    except ImportError as exc:  # fsspec names the package the scheme needs
        raise GoldenUnavailable(f"{uri}: no fsspec backend in the operator image: {exc}") from exc
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
            raise GoldenUnavailable(f"{too_big[0]} is over {MAX_DOCUMENT_BYTES >> 20} MiB")
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
        raise GoldenUnavailable(f"{uri}: {type(exc).__name__}") from None


@dataclass(frozen=True)
class GoldenSets:
    """The ``GoldenReader`` (sources/base.py): golden sets by URI under ``sources``, parsed by
    each track's pod through ``post``."""

    sources: tuple[str, ...]
    post: golden.Post
    fetcher: Fetcher | None = None  # for http(s) sets; default: one for ``sources``
    open_fs: Open = _open

    def refusal(self, uri: str) -> str | None:
        reason = refusal(uri, self.sources)
        return None if reason is None else f"spec.canary.analysis.golden.uri: {reason}"

    def load(self, uri: str) -> Documents:
        return load(uri, self.sources, self.open_fs, self.fetcher)

    def read(
        self,
        documents: Documents,
        canary_pods: Sequence[Mapping[str, Any]],
        stable_pods: Sequence[Mapping[str, Any]],
    ) -> dict[str, tuple[str, str, str]]:
        return golden.read(documents, canary_pods, stable_pods, self.post)
