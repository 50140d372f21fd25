"""Turn a finished batch's output and error files into one Markdown and one JSON file per
document, plus ``manifest.jsonl``.

WHY the document list comes from the state file, not from the server's lines: a line's
``custom_id`` is a path we write to, so only the names we submitted are trusted; a line
naming anything else (``../x``, a name given twice) is ignored. Each submitted document gets
exactly one manifest line: its result, its error, or ``missing_result`` when neither file
has it (a batch that failed before running any line), with the pod revision that ran it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Any

from fsspec import AbstractFileSystem

MANIFEST = "manifest.jsonl"


@dataclass
class Outcome:
    """What became of the documents: counts for the summary and the exit code."""

    completed: int = 0
    failed: int = 0
    pages: int = 0
    errors: list[str] = field(default_factory=list)


def read_lines(file: IO[bytes]) -> Iterator[dict[str, Any]]:
    """Each JSON object of a JSONL file (a line that is not one is skipped)."""
    file.seek(0)
    for raw in file:
        try:
            obj = json.loads(raw)
        except ValueError:
            continue
        if isinstance(obj, dict):
            yield obj


def write_results(
    fs: AbstractFileSystem,
    dst: str,
    documents: list[str],
    output: IO[bytes] | None,
    errors: IO[bytes] | None,
    batch_error: dict[str, str] | None,
) -> Outcome:
    """Write ``<doc>.md`` / ``<doc>.json`` for each document that parsed, and the manifest."""
    wanted = set(documents)
    rows: dict[str, dict[str, Any]] = {}
    for line in read_lines(output) if output is not None else iter(()):
        doc = line.get("custom_id")
        response = line.get("response")
        if doc not in wanted or doc in rows or not isinstance(response, dict):
            continue
        body = response.get("body")
        if not isinstance(body, dict):
            continue
        _write(fs, f"{dst}/{doc}.md", str(body.get("content", "")).encode())
        _write(fs, f"{dst}/{doc}.json", json.dumps(body, ensure_ascii=False).encode())
        pages = [p for p in body.get("pages") or [] if isinstance(p, dict)]
        tiers = [p["tier"] for p in pages if isinstance(p.get("tier"), int)]
        tier = max(tiers, default=None)
        rows[str(doc)] = _row(str(doc), len(pages), tier, None, _revision(line))
    for line in read_lines(errors) if errors is not None else iter(()):
        doc = line.get("custom_id")
        if doc not in wanted or doc in rows:
            continue
        error = line.get("error")
        failure = _error(error if isinstance(error, dict) else {})
        rows[str(doc)] = _row(str(doc), 0, None, failure, _revision(line))
    fallback = batch_error or {"code": "missing_result", "message": "the batch has no result"}
    outcome = Outcome()
    with fs.open(f"{dst}/{MANIFEST}", "wb") as manifest:
        for doc in documents:
            row = rows.get(doc) or _row(doc, 0, None, fallback)
            if row["status"] == "completed":
                outcome.completed += 1
                outcome.pages += row["pages"]
            else:
                outcome.failed += 1
                outcome.errors.append(f"{doc}: {row['error']['code']}: {row['error']['message']}")
            manifest.write(json.dumps(row, ensure_ascii=False).encode() + b"\n")
    return outcome


def _error(error: dict[str, Any]) -> dict[str, str]:
    return {
        "code": str(error.get("code") or "unknown_error"),
        "message": str(error.get("message") or ""),
    }


def _revision(line: dict[str, Any]) -> str | None:
    """The pod revision that ran the line (the runtime adds it; None for a line that never
    ran, or from a server that does not say): a batch that spanned a rollout is auditable."""
    revision = line.get("revision")
    return revision if isinstance(revision, str) and revision else None


def _row(
    doc: str,
    pages: int,
    tier: int | None,
    error: dict[str, str] | None,
    revision: str | None = None,
) -> dict[str, Any]:
    status = "completed" if error is None else "failed"
    return {
        "document": doc,
        "pages": pages,
        "tier": tier,
        "status": status,
        "error": error,
        "revision": revision,
    }


def _write(fs: AbstractFileSystem, path: str, data: bytes) -> None:
    parent = path.rsplit("/", 1)[0]
    fs.makedirs(parent, exist_ok=True)
    with fs.open(path, "wb") as f:
        f.write(data)
