"""``docparser-runtime batch submit SRC --output DST``: a folder of documents through the
server's Batch API, one Markdown and one JSON file per document back under DST.

WHY a state file: a batch of thousands of pages runs for hours and the terminal that started
it may not. ``DST/.docparser-batch.json`` records the input file and batch ids as soon as
each exists, so a rerun of the same command (after Ctrl-C, a lost SSH session) waits on that
batch instead of submitting the folder again; a finished one is not written twice.

The JSONL input is built in a temporary file, one document read at a time (base64 inline),
and streamed to ``POST /v1/files``, so memory stays at one document whatever the folder.
Exit codes: 0 every document parsed, 1 any document failed (see ``manifest.jsonl``) or the
batch ended without completing, 2 a usage or server error before any result, 130 Ctrl-C.
"""

from __future__ import annotations

import base64
import json
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, Any

import fsspec.core
from fsspec import AbstractFileSystem

from docparser_runtime.client.batch_results import write_results
from docparser_runtime.client.http import ApiClient, ApiError

STATE = ".docparser-batch.json"
SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".tif", ".tiff", ".bmp", ".gif", ".pdf")
DONE = ("completed", "failed", "expired", "cancelled")
MAX_WAIT_S = 7 * 24 * 3600.0  # past the server's 24 h window and its expiry, with margin
# While waiting, a server that does not answer (0), is restarting or has lost its Redis for a
# moment (502, 503: batch_store_unavailable, 504) is polled again for up to OUTAGE_S: a batch
# runs for hours, and a pod rollout or a Redis restart in that time must not end the wait.
TRANSIENT = (0, 502, 503, 504)
OUTAGE_S = 600.0


class SubmitError(Exception):
    """A refusal before any result: printed with its reason code, exit 2."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


@dataclass(frozen=True)
class SubmitOptions:
    src: str
    dst: str
    url: str
    api_key: str | None
    endpoint: str = "/v1/document/parse"
    parse_options: tuple[tuple[str, Any], ...] = ()
    wait: bool = True
    poll_s: float = 2.0


def list_documents(src: str) -> tuple[AbstractFileSystem, str, list[str]]:
    """Images and PDFs under ``src`` (any fsspec URL or a local folder), as relative paths."""
    fs, root = fsspec.core.url_to_fs(src)
    root = root.rstrip("/")
    try:
        found = fs.find(root)
    except (OSError, ValueError) as exc:
        raise SubmitError("source_unreadable", f"{src}: {exc}") from None
    docs = sorted(
        p[len(root) + 1 :]
        for p in found
        if p.startswith(root + "/") and p.lower().endswith(SUFFIXES) and STATE not in p
    )
    if not docs:
        raise SubmitError("no_documents", f"no image or PDF under {src}")
    return fs, root, docs


def build_input(
    fs: AbstractFileSystem, root: str, docs: list[str], opts: SubmitOptions, into: IO[bytes]
) -> None:
    """One request line per document, its bytes inline as base64."""
    for doc in docs:
        with fs.open(f"{root}/{doc}", "rb") as f:
            data = f.read()
        body = {"image": base64.b64encode(data).decode(), **dict(opts.parse_options)}
        line = {"custom_id": doc, "method": "POST", "url": opts.endpoint, "body": body}
        into.write(json.dumps(line).encode() + b"\n")


class Submission:
    """One SRC -> DST run: submit (or resume), wait, write the results."""

    def __init__(self, opts: SubmitOptions, api: ApiClient, *, err: IO[str]) -> None:
        self.opts = opts
        self.api = api
        self.err = err
        self.dst_fs, self.dst = fsspec.core.url_to_fs(opts.dst)
        self.dst = self.dst.rstrip("/")

    def run(self) -> int:
        state = self._load_state()
        if state.get("written"):
            self.err.write(
                f"batch {state['batch_id']} is already written under {self.opts.dst}; remove "
                f"{STATE} there to parse the folder again\n"
            )
            return int(state.get("exit_code", 1))
        if "batch_id" not in state:
            self.dst_fs.makedirs(self.dst, exist_ok=True)  # DST unwritable: before any upload
            state = self._submit(state)
        else:
            self.err.write(f"resuming batch {state['batch_id']}\n")
        if not self.opts.wait:
            print(state["batch_id"])
            return 0
        batch = self._wait(state["batch_id"], len(state["documents"]))
        return self._finish(state, batch)

    def _load_state(self) -> dict[str, Any]:
        path = f"{self.dst}/{STATE}"
        if not self.dst_fs.exists(path):
            return {}
        try:
            with self.dst_fs.open(path, "rb") as f:
                state = json.load(f)
            if not isinstance(state, dict) or not _safe_names(state.get("documents")):
                raise ValueError("not a state object with relative document names")
        except ValueError as exc:
            raise SubmitError("bad_state_file", f"{path}: {exc}; remove it to start over") from None
        if state.get("src") != self.opts.src or state.get("url") != self.opts.url:
            raise SubmitError(
                "state_mismatch",
                f"{path} belongs to {state.get('src')!r} on {state.get('url')!r}: "
                "use another --output or remove it",
            )
        return state

    def _save_state(self, state: dict[str, Any]) -> None:
        self.dst_fs.makedirs(self.dst, exist_ok=True)
        with self.dst_fs.open(f"{self.dst}/{STATE}", "wb") as f:
            f.write(json.dumps(state, indent=1).encode())

    def _submit(self, state: dict[str, Any]) -> dict[str, Any]:
        if "input_file_id" not in state:  # interrupted before the upload finished: redo it
            fs, root, docs = list_documents(self.opts.src)
            with tempfile.TemporaryFile() as jsonl:
                build_input(fs, root, docs, self.opts, jsonl)
                jsonl.flush()
                self.err.write(f"uploading {len(docs)} documents\n")
                uploaded = self.api.upload("/v1/files", {"purpose": "batch"}, "input.jsonl", jsonl)
            state = {"src": self.opts.src, "url": self.opts.url, "documents": docs}
            state["input_file_id"] = str(uploaded["id"])
            self._save_state(state)
        batch = self.api.json(
            "POST",
            "/v1/batches",
            {
                "input_file_id": state["input_file_id"],
                "endpoint": self.opts.endpoint,
                "completion_window": "24h",
                "metadata": {"source": "docparser-runtime batch submit"},
            },
        )
        state["batch_id"] = str(batch["id"])
        self._save_state(state)
        self.err.write(f"submitted batch {state['batch_id']}\n")
        return state

    def _wait(self, batch_id: str, total: int) -> dict[str, Any]:
        show = progress_line(self.err, total)
        deadline = time.monotonic() + MAX_WAIT_S
        outage: float | None = None  # when the server stopped answering the poll
        while True:
            try:
                batch: dict[str, Any] = self.api.json("GET", f"/v1/batches/{batch_id}")
            except ApiError as exc:
                now = time.monotonic()
                if exc.status not in TRANSIENT or (outage and now - outage > OUTAGE_S):
                    raise
                if outage is None:
                    outage = now
                    self.err.write(f"\n{exc.code}: {exc.message}; retrying for {OUTAGE_S:.0f}s\n")
                time.sleep(max(self.opts.poll_s, 1.0))
                continue
            if outage is not None:
                self.err.write(f"answering again after {time.monotonic() - outage:.0f}s\n")
                outage = None
            counts = batch.get("request_counts") or {}
            show(int(counts.get("completed", 0)) + int(counts.get("failed", 0)), batch["status"])
            if batch["status"] in DONE:
                self.err.write("\n")
                return batch
            if time.monotonic() > deadline:
                raise SubmitError("wait_timeout", f"batch {batch_id} still {batch['status']}")
            time.sleep(self.opts.poll_s)

    def _finish(self, state: dict[str, Any], batch: dict[str, Any]) -> int:
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as errs:
            for file_id, into in (
                (batch.get("output_file_id"), out),
                (batch.get("error_file_id"), errs),
            ):
                if file_id:
                    self.api.download(f"/v1/files/{file_id}/content", into)
            outcome = write_results(
                self.dst_fs, self.dst, list(state["documents"]), out, errs, _batch_error(batch)
            )
        code = 0 if outcome.failed == 0 and batch["status"] == "completed" else 1
        state.update(written=True, exit_code=code, status=batch["status"])
        self._save_state(state)
        for line in outcome.errors[:20]:
            self.err.write(f"failed: {line}\n")
        self.err.write(
            f"batch {batch['id']} {batch['status']}: {outcome.completed} documents "
            f"({outcome.pages} pages) written, {outcome.failed} failed; manifest: "
            f"{self.opts.dst.rstrip('/')}/manifest.jsonl\n"
        )
        return code


def _safe_names(docs: Any) -> bool:
    """Document names are paths written under DST: relative, no ``..``, no empty segment."""
    return isinstance(docs, list) and all(
        isinstance(d, str)
        and d
        and not d.startswith("/")
        and "\\" not in d
        and all(part not in ("", ".", "..") for part in d.split("/"))
        for d in docs
    )


def _batch_error(batch: dict[str, Any]) -> dict[str, str] | None:
    """Why a document has no line at all: the batch's own error (a failed input)."""
    data = (batch.get("errors") or {}).get("data") or []
    if data and isinstance(data[0], dict):
        return {"code": str(data[0].get("code")), "message": str(data[0].get("message"))}
    if batch.get("status") != "completed":
        return {"code": f"batch_{batch.get('status')}", "message": "the line never ran"}
    return None


def progress_line(err: IO[str], total: int) -> Callable[[int, str], None]:
    """Documents done, documents per minute and an ETA: redrawn in place on a terminal, a
    line every 30 s otherwise (a log file gets no carriage returns)."""
    start = time.monotonic()
    tty = err.isatty()
    last = [-1e9, -1.0]

    def show(done: int, status: str) -> None:
        now = time.monotonic()
        if not tty and now - last[0] < 30 and done == last[1] and status not in DONE:
            return
        last[:] = [now, done]
        rate = done / max((now - start) / 60, 1e-9)
        eta = f"{(total - done) / rate:.1f} min" if 0 < done < total else "-"
        text = f"{status}: {done}/{total} documents, {rate:.1f}/min, ETA {eta}"
        err.write(f"\r{text}" if tty else f"{text}\n")
        err.flush()

    return show


def submit(opts: SubmitOptions, *, err: IO[str] | None = None) -> int:
    """The CLI's entry: an exit code, a reason on stderr for every refusal."""
    err = err or sys.stderr  # read at call time: tests and callers swap sys.stderr
    try:
        return Submission(opts, ApiClient(opts.url, opts.api_key), err=err).run()
    except (SubmitError, ApiError) as exc:
        err.write(f"batch submit: {exc.code}: {exc.message}\n")
        return 2
    except OSError as exc:  # SRC or DST unreadable / unwritable (a file where a folder goes)
        err.write(f"batch submit: storage_error: {exc}\n")
        return 2
    except (KeyError, TypeError, ValueError) as exc:  # a reply without the batch API's fields
        err.write(f"batch submit: invalid_reply: {exc!r}\n")
        return 2
    except KeyboardInterrupt:
        err.write(f"\ninterrupted: rerun the same command to resume ({opts.dst}/{STATE})\n")
        return 130
