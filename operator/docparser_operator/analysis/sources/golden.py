"""The golden-document gate's I/O: read the documents, have each track's pod parse them.

The ConfigMap holds ``<id>.png`` / ``<id>.pdf`` (binaryData) and ``<id>.txt`` (data: the
expected text). Each document is sent to one Ready canary pod and one Ready stable pod
(``POST <podIP>:8000/v1/document/parse``, the API clients use) and their ``content`` is
kept for scoring (analysis.score_golden). Any failure raises ``GoldenUnavailable`` with a
message for status: the gate then waits, and the canary still gets no traffic.
"""

from __future__ import annotations

import base64
import json
import re
import urllib.request
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from docparser_operator.api import naming

MAX_DOCUMENTS = 20
PARSE_TIMEOUT_S = 120.0
DOCUMENT_SUFFIXES = (".png", ".jpg", ".jpeg", ".pdf", ".tiff", ".webp")

Post = Callable[[str, str, bytes], str]  # (URL, filename, document) -> the reply's content


class GoldenUnavailable(Exception):
    """The gate cannot run now (no ConfigMap, no Ready pod, a parse failed)."""


Documents = dict[str, tuple[str, bytes, str]]  # id -> (filename, bytes, expected text)


EXPECTED_SUFFIXES = (".txt", ".md")  # the expected text, or the expected Markdown


def pair(filenames: Iterable[str]) -> dict[str, tuple[str, str]]:
    """id -> (document file, expected-text file) among ``filenames`` (pure; any source).

    A document is ``<id>.png`` / ``.pdf`` / ...; its expectation ``<id>.txt`` or ``<id>.md``.
    A document without one is an error, not a skip: a golden set that silently shrank
    would pass a canary on fewer documents than its author meant."""
    names = set(filenames)
    pairs: dict[str, tuple[str, str]] = {}
    for filename in sorted(names):
        stem, dot, suffix = filename.rpartition(".")
        if not dot or f".{suffix.lower()}" not in DOCUMENT_SUFFIXES:
            continue
        expected = next((stem + s for s in EXPECTED_SUFFIXES if stem + s in names), None)
        if expected is None:
            raise GoldenUnavailable(f"{filename} has no expected text {stem}.txt (or {stem}.md)")
        if stem in pairs:
            raise GoldenUnavailable(f"two documents named {stem}: {pairs[stem][0]}, {filename}")
        pairs[stem] = (filename, expected)
    if not pairs:
        raise GoldenUnavailable("no documents (ID.png or ID.pdf, with ID.txt or ID.md)")
    if len(pairs) > MAX_DOCUMENTS:
        raise GoldenUnavailable(f"{len(pairs)} documents; at most {MAX_DOCUMENTS}")
    return pairs


def documents_of(config_map: Mapping[str, Any]) -> Documents:
    """The golden documents of a ConfigMap object (pure): documents in binaryData, their
    expected text in data."""
    binary = config_map.get("binaryData") or {}
    data = config_map.get("data") or {}
    pairs = pair([*binary, *(name for name in data if name not in binary)])
    docs: Documents = {}
    for stem, (filename, expected) in pairs.items():
        if filename not in binary or expected not in data:
            raise GoldenUnavailable(f"{stem}: the document goes in binaryData, its text in data")
        docs[stem] = (filename, base64.b64decode(binary[filename]), data[expected])
    return docs


def _post(url: str, filename: str, document: bytes) -> str:
    """Parse one golden document. ``cache=false``: the gate measures the model, never a
    result cached before; the request id ``golden-<file>-<random>`` finds it in the pod's
    request log."""
    boundary = uuid.uuid4().hex
    head = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="cache"\r\n\r\nfalse\r\n'
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{filename}"\r\n'
        "Content-Type: application/octet-stream\r\n\r\n"
    ).encode()
    body = head + document + f"\r\n--{boundary}--\r\n".encode()
    request_id = "golden-" + re.sub(r"[^A-Za-z0-9._:-]", "-", filename)[:80] + "-" + boundary[:8]
    request = urllib.request.Request(
        url,
        data=body,
        headers={
            "Content-Type": f"multipart/form-data; boundary={boundary}",
            "X-Request-Id": request_id,
        },
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=PARSE_TIMEOUT_S) as reply:
        content: str = json.loads(reply.read())["content"]
    return content


def _ready_ip(pods: Sequence[Mapping[str, Any]]) -> str | None:
    for pod in pods:
        status = pod.get("status") or {}
        ready = any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in status.get("conditions") or []
        )
        if ready and status.get("podIP") and not pod["metadata"].get("deletionTimestamp"):
            return str(status["podIP"])
    return None


def read(
    documents: Documents,
    canary_pods: Sequence[Mapping[str, Any]],
    stable_pods: Sequence[Mapping[str, Any]],
    post: Post = _post,
) -> dict[str, tuple[str, str, str]]:
    """document -> (expected, canary's text, stable's text)."""
    canary, stable = _ready_ip(canary_pods), _ready_ip(stable_pods)
    if canary is None or stable is None:
        raise GoldenUnavailable(
            "waiting for a Ready " + ("canary" if canary is None else "stable") + " pod"
        )
    results = {}
    for doc, (filename, data, expected) in documents.items():
        texts = []
        for ip in (canary, stable):
            url = f"http://{ip}:{naming.HTTP_PORT}/v1/document/parse"
            try:
                texts.append(post(url, filename, data))
            except Exception as exc:  # unreachable, timed out, an error reply
                raise GoldenUnavailable(f"{doc}: {url}: {type(exc).__name__}: {exc}") from exc
        results[doc] = (expected, texts[0], texts[1])
    return results
