"""The batch worker of one replica: line claim loops, a heartbeat, a reaper, the
coordinator (validate, finalize, expire, cancel) and the collector of expired files.

Each line runs once in effect: a worker claims ``(batch, index)`` with a lease (its held set
goes back to the queue when the replica dies), and the result is recorded with HSETNX on the
line's index, so a line run twice (a re-queue, two replicas) is written once. The output and
error files are assembled at ``finalizing`` from those records, in line order. A pod that is
leaving (``accepting()`` False: the preStop signal or a drain) claims no new line; the lines
it holds finish or go back to the queue when it stops.

``stop`` lets claimed lines finish until the drain deadline, then requeues the rest: a rollout
loses no begun work, and each output line names its revision (``DOCPARSER_REVISION``). A pod
killed first (a preempted spot node) stops heartbeating: another worker's reaper requeues its
lines once their lease (``DOCPARSER_JOB_LEASE_S``) expires.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from ..errors import DocParserError, NotFound, public_message
from .backlog import count_pages, pages_of
from .lines import LineError, RequestLine, error_line, output_line, parse_line
from .models import Batch, BatchStatus, FileRecord
from .redis_store import RedisBatchStore
from .storage import BatchStorage

log = logging.getLogger("docparser.batches")

# (batch, its line) -> the reply body of the batch's endpoint; a DocParserError fails the line.
LineRunner = Callable[[Batch, RequestLine], Awaitable[dict[str, Any]]]
ASSEMBLE_CHUNK = 500  # results read per Redis call while assembling
FLUSH_BYTES = 1024 * 1024


@dataclass(frozen=True)
class BatchLimits:
    max_lines: int
    max_line_bytes: int
    ttl_s: int  # files and finished batches are collected this long after they were made


class BatchWorker:
    def __init__(
        self,
        store: RedisBatchStore,
        storage: BatchStorage,
        runner: LineRunner,
        limits: BatchLimits,
        *,
        worker_id: str,
        accepting: Callable[[], bool],
        concurrency: int = 1,
        lease_s: float = 15.0,
        poll_s: float = 1.0,
        revision: str = "",
    ) -> None:
        self.store, self.storage, self.runner, self.limits = store, storage, runner, limits
        self.worker_id = worker_id
        self.accepting = accepting
        self.concurrency, self.lease_s, self.poll_s = concurrency, lease_s, poll_s
        self.revision = revision
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = False  # stop(): claim loops end after their line
        self._ranges: dict[str, list[tuple[int, int]]] = {}

    async def start(self) -> None:
        await self.store.heartbeat(self.worker_id, self.lease_s)
        loops: list[tuple[str, Callable[[], Coroutine[Any, Any, None]]]] = [
            ("heartbeat", self._heartbeat_loop),
            ("reaper", self._reaper_loop),
            ("coordinator", self._coordinator_loop),
            ("collector", self._collector_loop),
        ]
        loops += [(f"lines-{i}", self._claim_loop) for i in range(self.concurrency)]
        self._tasks = [asyncio.create_task(fn(), name=f"batch-{n}") for n, fn in loops]

    async def stop(self, deadline: float | None = None) -> None:
        """Stop every loop (cancelled again each second, 10 times: a client's timeout racing a
        cancel can swallow it). ``deadline`` (monotonic): claimed lines may finish until then."""
        self._stopping = True
        lines = [t for t in self._tasks if t.get_name().startswith("batch-lines-")]
        if deadline is not None and lines:
            await asyncio.wait(lines, timeout=max(0.0, deadline - time.monotonic()))
        pending = set(self._tasks)
        for _ in range(10):
            for task in pending:
                task.cancel()
            pending = (await asyncio.wait(pending, timeout=1.0))[1] if pending else pending
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.store.requeue(self.worker_id), 3.0)

    # loops ---------------------------------------------------------------------------
    async def _every(self, what: str, period_s: float, step: Callable[[], Awaitable[Any]]) -> None:
        while True:
            try:
                await step()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("batch %s failed; retrying", what)
            await asyncio.sleep(period_s)

    async def _heartbeat_loop(self) -> None:
        await self._every(
            "heartbeat",
            self.lease_s / 3,
            lambda: self.store.heartbeat(self.worker_id, self.lease_s),
        )

    async def _reaper_loop(self) -> None:
        await self._every("reaper", self.lease_s / 2, self.store.requeue)

    async def _coordinator_loop(self) -> None:
        await self._every("coordinator", self.poll_s, self.coordinate)

    async def _collector_loop(self) -> None:
        await self._every("collector", max(self.poll_s * 30, 1.0), self.collect)

    async def _claim_loop(self) -> None:
        while not self._stopping:
            claimed = None
            if self.accepting():
                try:
                    claimed = await self.store.claim(self.worker_id)
                except asyncio.CancelledError:
                    raise
                except Exception:  # the claim may have run with its reply lost: hand back
                    log.exception("claiming a batch line failed; retrying")
                    await self.store.hand_back(self.worker_id, self.poll_s, lambda: self._stopping)
            if claimed is None:
                await asyncio.sleep(self.poll_s)
                continue
            batch_id, index = claimed
            try:
                await self.run_line(batch_id, index)
            except asyncio.CancelledError:
                raise
            except Exception:
                # The store failed around the line: it goes back to the queue (run again,
                # recorded once) instead of staying held under a live lease.
                log.exception("batch %s line %d could not be recorded; requeueing", *claimed)
                await self.store.hand_back(self.worker_id, self.poll_s, lambda: self._stopping)

    # one line ------------------------------------------------------------------------
    async def run_line(self, batch_id: str, index: int) -> None:
        if not await self.store.recorded(batch_id, index):
            try:
                batch = await self.store.get_batch(batch_id)
            except NotFound:
                batch = None
            if batch is not None:
                ok, text, pages = await self._result(batch, index)
                if await self.store.record(batch_id, index, ok=ok, line=text) and ok:
                    await count_pages(self.store.r, self.store.p, batch_id, pages)
        await self.store.ack(self.worker_id, batch_id, index)

    async def _result(self, batch: Batch, index: int) -> tuple[bool, str, int]:
        """(ok, the output or error line, the pages it parsed)."""
        custom_id: str | None = None
        try:
            ranges = await self._line_ranges(batch)
            start, end = ranges[index]
            if end - start > self.limits.max_line_bytes:
                raise LineError(
                    f"the line is {end - start} bytes, over {self.limits.max_line_bytes}",
                    code="line_too_large",
                )
            raw = await self.storage.read_range(batch.input_file_id, start, end)
            line = parse_line(raw, batch.endpoint)
            custom_id = line.custom_id
            body = await self.runner(batch, line)
            text = output_line(batch.id, index, custom_id, body, revision=self.revision)
            return True, text, pages_of(body)
        except LineError as exc:
            code, message, custom_id = exc.code, exc.message, exc.custom_id or custom_id
        except DocParserError as exc:
            code, message = exc.code, public_message(exc.message)
        except (OSError, IndexError):
            code, message = "input_file_unavailable", "the input file is gone or unreadable"
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("batch %s line %d failed", batch.id, index)
            code, message = "internal_error", f"internal error ({type(exc).__name__})"
        return (
            False,
            error_line(batch.id, index, custom_id, code, message, revision=self.revision),
            0,
        )

    async def _line_ranges(self, batch: Batch) -> list[tuple[int, int]]:
        ranges = self._ranges.get(batch.id)
        if ranges is None:
            ranges = await self.storage.line_index(batch.input_file_id)
            if len(self._ranges) >= 16:
                self._ranges.pop(next(iter(self._ranges)))
            self._ranges[batch.id] = ranges
        return ranges

    # the coordinator -----------------------------------------------------------------
    async def coordinate(self) -> None:
        """One pass over the batches not yet finished (any replica may do it; a lock
        per batch keeps two from doing the same step at once)."""
        for batch_id in await self.store.active_ids():
            try:
                batch = await self.store.get_batch(batch_id)
            except NotFound:
                continue
            if not await self.store.lock(batch.id, self.worker_id, self.lease_s * 2):
                continue
            try:
                await self._advance(batch)
            finally:
                await self.store.unlock(batch.id, self.worker_id)

    async def _advance(self, batch: Batch) -> None:
        now = int(time.time())
        status = batch.status
        if status is BatchStatus.VALIDATING:
            await self._validate(batch)
        elif status is BatchStatus.IN_PROGRESS and now >= batch.expires_at:
            await self._close(batch, BatchStatus.EXPIRED, (status,), missing="batch_expired")
        elif status is BatchStatus.IN_PROGRESS and batch.completed + batch.failed >= batch.total:
            running = (BatchStatus.IN_PROGRESS,)
            if await self.store.transition(batch, BatchStatus.FINALIZING, from_=running):
                await self._close(batch, BatchStatus.COMPLETED, (BatchStatus.FINALIZING,))
        elif status is BatchStatus.FINALIZING:  # the replica that began it went away
            await self._close(batch, BatchStatus.COMPLETED, (status,))
        elif status is BatchStatus.CANCELLING:
            since = batch.stamps.get("cancelling_at", now)
            if await self.store.inflight(batch.id) <= 0 or now - since > 2 * self.lease_s:
                await self._close(
                    batch, BatchStatus.CANCELLED, (status,), missing="batch_cancelled"
                )

    async def _validate(self, batch: Batch) -> None:
        errors: list[dict[str, Any]] = []
        ranges: list[tuple[int, int]] = []
        try:
            record = await self.store.get_file(batch.input_file_id, batch.owner)
            ranges = await self.storage.line_index(record.id)
        except NotFound:
            errors.append(_error("file_not_found", "the input file was deleted or expired"))
        except OSError:
            errors.append(_error("file_unreadable", "the input file cannot be read"))
        if not errors and not ranges:
            errors.append(_error("empty_file", "the input file has no lines"))
        if len(ranges) > self.limits.max_lines:
            errors.append(
                _error(
                    "too_many_lines",
                    f"{len(ranges)} lines, over {self.limits.max_lines} "
                    "(DOCPARSER_BATCH_MAX_LINES)",
                )
            )
        if errors:
            gc_at = int(time.time()) + self.limits.ttl_s
            await self.store.transition(
                batch,
                BatchStatus.FAILED,
                from_=(BatchStatus.VALIDATING,),
                gc_at=gc_at,
                errors=json.dumps(errors),
            )
            return
        self._ranges[batch.id] = ranges
        await self.store.start(batch.id, len(ranges))

    async def _close(
        self,
        batch: Batch,
        to: BatchStatus,
        from_: tuple[BatchStatus, ...],
        *,
        missing: str = "line_lost",
    ) -> None:
        """Write the output and error files from the recorded lines, in line order (a
        line with no record gets ``missing``), then finish the batch."""
        tail = batch.id.removeprefix("batch_")
        out = _Assembly(self.storage, f"file-{tail}o")
        err = _Assembly(self.storage, f"file-{tail}e")
        unrun: list[int] = []
        for start in range(0, batch.total, ASSEMBLE_CHUNK):
            # a long assembly keeps its lock: a second replica writing the same objects
            # at once could interleave them (a local file system has no atomic put)
            await self.store.extend_lock(batch.id, self.lease_s * 2)
            stop = min(start + ASSEMBLE_CHUNK, batch.total)
            for i, result in enumerate(await self.store.results(batch.id, start, stop), start):
                if result is None:
                    unrun.append(i)
                else:
                    await (out if result[0] else err).add(result[1])
        names = await self._custom_ids(batch, unrun) if unrun else {}
        for i in unrun:  # after the lines that ran: each file stays in line order
            message = f"the line did not run (the batch was {to})"
            await err.add(error_line(batch.id, i, names.get(i), missing, message))
        now = int(time.time())
        expires = now + self.limits.ttl_s
        fields: dict[str, str] = {}
        for name, part in (("output_file_id", out), ("error_file_id", err)):
            if part.lines:
                size = await part.commit()
                record = FileRecord(
                    part.file_id,
                    size,
                    now,
                    expires,
                    f"{batch.id}_{name[:-8]}.jsonl",
                    "batch_output",
                    batch.owner,
                    part.lines,
                )
                await self.store.put_file(record)
                fields[name] = part.file_id
        if await self.store.transition(batch, to, from_=from_, gc_at=expires, **fields):
            await self.store.drop_results(batch.id)
            self._ranges.pop(batch.id, None)
            log.info("batch %s %s (%d lines)", batch.id, to, batch.total)

    async def _custom_ids(self, batch: Batch, indices: list[int]) -> dict[int, str | None]:
        """The ``custom_id`` of lines that never ran, from one pass over the input file
        (holding one line at a time): a cancelled batch of 50,000 lines costs one read."""
        try:
            ranges = await self._line_ranges(batch)
            targets = sorted((*ranges[i], i) for i in indices)
            found: dict[int, str | None] = {}
            buf, offset, t = bytearray(), 0, 0
            async for chunk in self.storage.stream(batch.input_file_id):
                buf += chunk
                while t < len(targets) and targets[t][1] <= offset + len(buf):
                    start, end, index = targets[t]
                    found[index] = _custom_id(bytes(buf[start - offset : end - offset]))
                    t += 1
                keep = targets[t][0] if t < len(targets) else offset + len(buf)
                cut = max(0, min(keep - offset, len(buf)))
                del buf[:cut]
                offset += cut
                if t == len(targets):
                    break
            return found
        except (OSError, IndexError):
            return {}  # the input is gone: the lines are still listed, without their ids

    # collection ----------------------------------------------------------------------
    async def collect(self) -> int:
        """Delete files and finished batches whose time is up; returns how many."""
        due = await self.store.due(int(time.time()))
        for member in due:
            kind, _, ident = member.partition(":")
            if kind == "file":
                await self.storage.delete(self.storage.object_name(ident))
                await self.store.delete_file(ident)
            else:
                try:
                    await self.store.forget_batch(await self.store.get_batch(ident))
                except NotFound:
                    await self.store.forget(member)
        return len(due)


def _custom_id(raw: bytes) -> str | None:
    try:
        value = json.loads(raw).get("custom_id")
    except (ValueError, RecursionError, AttributeError):
        return None
    return value if isinstance(value, str) else None


def _error(code: str, message: str) -> dict[str, Any]:
    return {"code": code, "message": message, "param": "input_file_id", "line": None}


class _Assembly:
    """One output or error file being assembled: lines buffered, written in large pieces."""

    def __init__(self, storage: BatchStorage, file_id: str) -> None:
        self.file_id = file_id
        self.writer = storage.writer(file_id, limit=2**62, limit_name="")
        self.buffer = bytearray()
        self.lines = 0

    async def add(self, line: str) -> None:
        self.buffer += line.encode() + b"\n"
        self.lines += 1
        if len(self.buffer) >= FLUSH_BYTES:
            await self.writer.write(bytes(self.buffer))
            self.buffer.clear()

    async def commit(self) -> int:
        await self.writer.write(bytes(self.buffer))
        await self.writer.commit()
        return self.writer.size
