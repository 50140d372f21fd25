"""One batch line, in and out (pure): the JSONL index, the request line, the result lines.

The index is built while an upload streams in (``LineIndex.feed`` sees each chunk once), so
a worker reads its one line by byte range instead of the whole file, and the line count is
known before a batch is created (``DOCPARSER_BATCH_MAX_LINES`` is checked at upload).
"""

from __future__ import annotations

import json
import posixpath
import struct
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidInput

_PAIR = struct.Struct("<QQ")


class LineIndex:
    """Byte ranges ``[start, end)`` of the non-blank lines of a stream fed chunk by chunk."""

    def __init__(self) -> None:
        self.ranges: list[tuple[int, int]] = []
        self._offset = 0
        self._start = 0
        self._blank = True

    def feed(self, chunk: bytes) -> None:
        pos = 0
        while True:
            nl = chunk.find(b"\n", pos)
            piece = chunk[pos:] if nl < 0 else chunk[pos:nl]
            if piece.strip():
                self._blank = False
            if nl < 0:
                break
            self._end_line(self._offset + nl)
            self._start = self._offset + nl + 1
            pos = nl + 1
        self._offset += len(chunk)

    def _end_line(self, end: int) -> None:
        if not self._blank:
            self.ranges.append((self._start, end))
        self._blank = True

    def close(self) -> list[tuple[int, int]]:
        self._end_line(self._offset)
        return self.ranges

    @staticmethod
    def pack(ranges: list[tuple[int, int]]) -> bytes:
        return b"".join(_PAIR.pack(a, b) for a, b in ranges)

    @staticmethod
    def unpack(data: bytes) -> list[tuple[int, int]]:
        return [_PAIR.unpack_from(data, i) for i in range(0, len(data), _PAIR.size)]


@dataclass(frozen=True)
class RequestLine:
    custom_id: str
    url: str
    body: dict[str, Any]


class LineError(InvalidInput):
    """This line cannot run; it goes to the error file with its ``custom_id`` when known."""

    def __init__(self, message: str, *, code: str, custom_id: str | None = None) -> None:
        super().__init__(message, code=code)
        self.custom_id = custom_id


def parse_line(raw: bytes, endpoint: str) -> RequestLine:
    """``{"custom_id", "method": "POST", "url", "body"}`` with ``url`` the batch's endpoint."""
    try:
        obj = json.loads(raw)
    except (ValueError, RecursionError):
        raise LineError("the line is not valid JSON", code="invalid_json_line") from None
    if not isinstance(obj, dict):
        raise LineError("the line must be a JSON object", code="invalid_json_line")
    custom_id = obj.get("custom_id")
    if not isinstance(custom_id, str) or not custom_id or len(custom_id) > 512:
        raise LineError("custom_id must be a string of 1-512 characters", code="missing_custom_id")
    if obj.get("method", "POST") != "POST":
        raise LineError("method must be POST", code="invalid_method", custom_id=custom_id)
    if obj.get("url") != endpoint:
        raise LineError(
            f"url must be the batch's endpoint {endpoint!r}",
            code="mismatched_url",
            custom_id=custom_id,
        )
    body = obj.get("body")
    if not isinstance(body, dict):
        raise LineError("body must be a JSON object", code="invalid_body", custom_id=custom_id)
    return RequestLine(custom_id, endpoint, body)


def line_ids(batch_id: str, index: int) -> tuple[str, str]:
    """The output line's ``id`` and its ``request_id``: one per (batch, line), so a line
    written again after a pod died has the same ids (it is written once anyway)."""
    tail = f"{batch_id.removeprefix('batch_')}_{index}"
    return f"batch_req_{tail}", f"req_{tail}"


def _with_revision(line: dict[str, Any], revision: str) -> dict[str, Any]:
    """``revision``: the pod revision that ran the line (``DOCPARSER_REVISION``, set by the
    operator), so a batch that spanned a rollout says which lines each revision wrote (the
    ``batch submit`` manifest copies it); an extra key OpenAI's clients ignore."""
    return {**line, "revision": revision} if revision else line


def output_line(
    batch_id: str, index: int, custom_id: str, body: dict[str, Any], *, revision: str = ""
) -> str:
    line_id, request_id = line_ids(batch_id, index)
    response = {"status_code": 200, "request_id": request_id, "body": body}
    line = {"id": line_id, "custom_id": custom_id, "response": response, "error": None}
    return json.dumps(_with_revision(line, revision), ensure_ascii=False)


def error_line(
    batch_id: str,
    index: int,
    custom_id: str | None,
    code: str,
    message: str,
    *,
    revision: str = "",
) -> str:
    line_id, _ = line_ids(batch_id, index)
    error = {"code": code, "message": message}
    line = {"id": line_id, "custom_id": custom_id, "response": None, "error": error}
    return json.dumps(_with_revision(line, revision), ensure_ascii=False)


def uri_allowed(uri: str, prefixes: list[str], key_id: str) -> bool:
    """``uri`` lies under one of the admin's prefixes (``{key_id}`` filled with the
    caller's key id). No dot segments, query or fragment: a prefix check on a path that
    still has ``..`` in it would be no check at all."""
    if any(c in uri for c in "?#\\\x00") or "://" not in uri:
        return False
    path = uri.partition("://")[2]
    if posixpath.normpath("/" + path) != "/" + path.rstrip("/") or "//" in path:
        return False
    for prefix in prefixes:
        if "{key_id}" in prefix and not key_id:
            continue
        expanded = prefix.replace("{key_id}", key_id)
        if not expanded.endswith("/"):
            expanded += "/"
        if uri.startswith(expanded) and len(uri) > len(expanded):
            return True
    return False
