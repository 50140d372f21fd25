"""Golden documents from a URI (``golden.uri``): a folder of ``<id>.png`` / ``<id>.pdf`` with
``<id>.txt`` or ``<id>.md``, read by the operator through fsspec.

``file:///golden/...`` is a volume mounted into the operator pod (the chart's
``golden.volume``, which may itself be a CSI bucket mount); ``s3://``, ``gs://``, ``az://``
and ``https://`` are object stores read with the operator's own identity by fsspec's backend
for the scheme, when the image has one. The published image has none: s3fs's aiobotocore pins
``python-dateutil<3`` and the Kubernetes client 37 needs ``>=3``. A ConfigMap is capped at
1 MiB; a folder holds scans up to the limits below.

Why an allow-list (``DOCPARSER_OPERATOR_GOLDEN_SOURCES``, default ``file:///golden/``): a
DocParser's author picks the URI, and the operator reads it with its own identity and sends
the bytes to a pod that author runs. Without the list any namespace could have the operator
read its other files or buckets. ``file://`` paths are compared after resolving symlinks and
``..``; other URIs must not contain a ``..`` segment at all.
"""

from __future__ import annotations

import os
import posixpath
import urllib.parse
from collections.abc import Callable, Sequence
from typing import Any

from docparser_operator.analysis.sources.golden import Documents, GoldenUnavailable, pair

MAX_DOCUMENT_BYTES = 32 * 1024 * 1024
MAX_TOTAL_BYTES = 128 * 1024 * 1024
DEFAULT_SOURCES = ("file:///golden/",)

# uri -> (filesystem, path in it): fsspec.core.url_to_fs by default; tests pass their own.
Open = Callable[[str], tuple[Any, str]]


def _file_path(uri: str) -> str:
    return os.path.realpath(urllib.parse.unquote(urllib.parse.urlsplit(uri).path))


def refusal(uri: str, sources: Sequence[str]) -> str | None:
    """Why ``uri`` may not be read, or None (pure but for resolving file:// symlinks)."""
    scheme = urllib.parse.urlsplit(uri).scheme
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
    allowed = ", ".join(sources) or "none"
    return (
        f"{uri} is not under the operator's golden sources ({allowed}); "
        "an admin adds a prefix with DOCPARSER_OPERATOR_GOLDEN_SOURCES"
    )


def _open(uri: str) -> tuple[Any, str]:
    import fsspec  # lazy: only a golden set with a uri needs it

    fs, path = fsspec.core.url_to_fs(uri)
    return fs, path


def load(uri: str, sources: Sequence[str], open_fs: Open = _open) -> Documents:
    """The golden documents of the folder at ``uri``; GoldenUnavailable says why not."""
    reason = refusal(uri, sources)
    if reason is not None:
        raise GoldenUnavailable(reason)
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
        raise GoldenUnavailable(f"{uri}: {type(exc).__name__}: {exc}") from exc
