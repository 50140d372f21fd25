"""The golden-document gate's I/O: read the documents, have each track's pod parse them.

The ConfigMap holds ``<id>.png`` / ``<id>.pdf`` (binaryData) and ``<id>.txt`` (data: the
expected text). Each document is sent to one Ready canary pod and one Ready stable pod
(``POST <podIP>:8000/v1/document/parse``, the API clients use) and their ``content`` is
kept for scoring (analysis.score_golden). Any failure raises ``GoldenUnavailable`` with a
message for status: the gate then waits, and the canary still gets no traffic. That message
names the track, its pod's IP and a reason code (the guarded client's, fetch.py), never what
the pod answered (the pod belongs to whoever may create pods in the namespace) nor a file
name (the set's author chose it).
"""

from __future__ import annotations

import base64
import json
import re
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from docparser_operator.api import naming
from docparser_operator.providers.fetch import Fetcher, FetchError

MAX_DOCUMENTS = 20
PARSE_TIMEOUT_S = 120.0
PARSE_MAX_BYTES = 16 * 1024 * 1024  # a parse reply: the document's Markdown and its blocks
DOCUMENT_SUFFIXES = (".png", ".jpg", ".jpeg", ".pdf", ".tiff", ".webp")

Post = Callable[[str, str, bytes], str]  # (URL, filename, document) -> the reply's content


class GoldenUnavailable(Exception):
    """The gate cannot run now (no ConfigMap, no Ready pod, a parse failed)."""


Documents = dict[str, tuple[str, bytes, str]]  # id -> (filename, bytes, expected text)


EXPECTED_SUFFIXES = (".txt", ".md")  # the expected text, or the expected Markdown


# A document's file name: its id is shown in status (the scores), so it is plain and short.
PLAIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def pair(filenames: Iterable[str]) -> dict[str, tuple[str, str]]:
    """id -> (document file, expected-text file) among ``filenames`` (pure; any source).

    A document is ``<id>.png`` / ``.pdf`` / ...; its expectation ``<id>.txt`` or ``<id>.md``.
    A document without one is an error, not a skip: a golden set that silently shrank
    would pass a canary on fewer documents than its author meant. The errors name the rule
    and a count, never a file: the names are the folder's (or the ConfigMap's), and status
    carries no text that a tenant or a store chose."""
    names = set(filenames)
    documents: dict[str, list[str]] = {}
    for filename in sorted(names):
        stem, dot, suffix = filename.rpartition(".")
        if dot and f".{suffix.lower()}" in DOCUMENT_SUFFIXES:
            documents.setdefault(stem, []).append(filename)
    if not all(PLAIN_NAME.fullmatch(f) for files in documents.values() for f in files):
        raise GoldenUnavailable(
            "a document's file name is not plain (A-Z, a-z, 0-9, '.', '_', '-'; 128 at most)"
        )
    if any(len(files) > 1 for files in documents.values()):
        raise GoldenUnavailable("two documents share one ID (e.g. ID.png and ID.pdf)")
    pairs: dict[str, tuple[str, str]] = {}
    missing = 0
    for stem, (filename,) in documents.items():
        expected = next((stem + s for s in EXPECTED_SUFFIXES if stem + s in names), None)
        if expected is None:
            missing += 1
        else:
            pairs[stem] = (filename, expected)
    if missing:
        raise GoldenUnavailable(
            f"{missing} document(s) with no expected text (ID.txt or ID.md beside ID.png)"
        )
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
            raise GoldenUnavailable("a document goes in binaryData, its expected text in data")
        docs[stem] = (filename, base64.b64decode(binary[filename]), data[expected])
    return docs


def multipart(filename: str, document: bytes) -> tuple[bytes, dict[str, str]]:
    """The parse request for one golden document (body, headers). ``cache=false``: the gate
    measures the model, never a result cached before; the request id
    ``golden-<file>-<random>`` finds it in the pod's request log."""
    boundary = uuid.uuid4().hex
    head = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="cache"\r\n\r\nfalse\r\n'
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{filename}"\r\n'
        "Content-Type: application/octet-stream\r\n\r\n"
    ).encode()
    body = head + document + f"\r\n--{boundary}--\r\n".encode()
    request_id = "golden-" + re.sub(r"[^A-Za-z0-9._:-]", "-", filename)[:80] + "-" + boundary[:8]
    headers = {
        "Content-Type": f"multipart/form-data; boundary={boundary}",
        "X-Request-Id": request_id,
    }
    return body, headers


def guarded(fetcher: Fetcher) -> Post:
    """Parsing through the guarded client: 2xx only, bounded, the reply's ``content``."""

    def post(url: str, filename: str, document: bytes) -> str:
        body, headers = multipart(filename, document)
        reply = fetcher.request(
            "POST",
            url,
            body=body,
            headers=headers,
            timeout_s=PARSE_TIMEOUT_S,
            max_bytes=PARSE_MAX_BYTES,
        ).ok()
        try:
            content = json.loads(reply)["content"]
        except (ValueError, KeyError, TypeError):
            raise FetchError("BadReply") from None
        if not isinstance(content, str):
            raise FetchError("BadReply")
        return content

    return post


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
    post: Post,
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
        for role, ip in (("canary", canary), ("stable", stable)):
            url = f"http://{ip}:{naming.HTTP_PORT}/v1/document/parse"
            try:
                texts.append(post(url, filename, data))
            except FetchError as exc:  # refused, unreachable, timed out, an error reply
                raise GoldenUnavailable(f"the {role} pod {ip}: {exc}") from None
            except Exception as exc:  # a caller's own transport: its class, never its text
                raise GoldenUnavailable(f"the {role} pod {ip}: {type(exc).__name__}") from None
        results[doc] = (expected, texts[0], texts[1])
    return results
