"""Sandboxed decoding: untrusted documents are decoded in a small pool of worker processes.

WHY: a few kilobytes of PDF (Form XObjects nested ten deep, each drawing the next ten
times) render for minutes and grow to tens of GB inside PDFium, which cannot be
interrupted from Python. In the server process that took the whole replica down while
its probes stayed green. Browsers isolate PDFium the same way: here every page decode
runs in a worker with an address-space limit (``RLIMIT_AS``, set once at start), a CPU
time budget (``RLIMIT_CPU``, re-armed before every job; the kernel's SIGXCPU ends it) and
a wall-clock deadline enforced by the parent, which kills the worker when the deadline
passes or the waiting request is cancelled (its client left). A dead worker is replaced
and the request gets ``422 document_too_complex`` naming the limit that was hit; the
server and the other requests carry on.

Protocol (``multiprocessing`` pipe, one job at a time per worker): ``("plan", token,
data|None, pages, limits)`` -> ``("ok", (fmt, indices, costs))``; ``("render", token, data|None,
(fmt, index), limits)`` -> ``("page", (width, height))`` + the raw RGB bytes. ``data`` is
sent only when the worker does not hold the document ``token`` already, so rendering a
PDF page by page does not re-send (or re-parse) it for every page.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import multiprocessing
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from PIL import Image

from docparser_runtime import errors
from docparser_runtime.errors import DeadlineExceeded, DocumentTooComplex, Unavailable
from docparser_runtime.preprocess.pipeline import DecodeLimits, DocumentPlan

log = logging.getLogger("docparser.sandbox")
_MB = 1024 * 1024
_START_TIMEOUT_S = 120.0  # imports of a fresh worker on a loaded machine


def release_memory() -> None:
    """Give freed heap back to the OS (glibc keeps it in arenas otherwise, so the RSS of
    a process that once decoded a huge page stays high)."""
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


@dataclass(frozen=True)
class SandboxLimits:
    """Per-worker limits (from ``Settings``: decode_timeout_s, decode_cpu_s, ...)."""

    timeout_s: float
    cpu_s: int
    memory_bytes: int


# -- the worker process ----------------------------------------------------------------
def _arm_cpu_budget(resource: Any, cpu_s: int) -> None:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    soft = int(usage.ru_utime + usage.ru_stime) + cpu_s
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))


def _worker_main(conn: Any, limits: SandboxLimits) -> None:  # pragma: no cover - subprocess
    import resource

    from docparser_runtime.errors import DocParserError
    from docparser_runtime.preprocess.pdf import open_pdf
    from docparser_runtime.preprocess.pipeline import plan_document, render_page

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when we stop
    resource.setrlimit(resource.RLIMIT_AS, (limits.memory_bytes, limits.memory_bytes))
    conn.send(("ready", None))  # imports done: decode budgets start counting from here
    held: dict[str, Any] = {"token": None, "data": b"", "doc": None}
    while True:
        try:
            op, token, data, args, decode_limits = conn.recv()
        except (EOFError, OSError):
            return
        try:
            if data is not None:
                if held["doc"] is not None:
                    held["doc"].close()
                held.update(token=token, data=data, doc=None)
            _arm_cpu_budget(resource, limits.cpu_s)
            if op == "plan":
                plan = plan_document(held["data"], args, decode_limits)
                conn.send(("ok", (plan.fmt, plan.indices, plan.costs)))
            else:
                fmt, index = args
                if fmt == "pdf" and held["doc"] is None:
                    held["doc"] = open_pdf(held["data"])
                image = render_page(held["data"], fmt, index, decode_limits, doc=held["doc"])
                raw = image.tobytes()
                size = image.size
                image.close()
                del image
                conn.send(("page", size))
                conn.send_bytes(raw)
                del raw
        except DocParserError as exc:
            conn.send(("err", (type(exc).__name__, exc.code, exc.message)))
        except MemoryError:
            held.update(token=None, data=b"", doc=None)
            conn.send(("err", ("DocumentTooComplex", "document_too_complex", "memory")))
        except Exception as exc:
            name = type(exc).__name__
            message = f"the document could not be decoded ({name})"
            conn.send(("err", ("InvalidInput", "undecodable_document", message)))
        release_memory()


# -- the parent side -------------------------------------------------------------------
class _Died(Exception):
    """The worker process ended (or was killed) before answering."""


class _Worker:
    def __init__(self, ctx: Any, limits: SandboxLimits) -> None:
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(
            target=_worker_main, args=(child, limits), name="docparser-decode", daemon=True
        )
        self.process.start()
        child.close()
        self.token: str | None = None  # the document the worker holds
        self.killed_for: str | None = None

    def wait_ready(self, timeout_s: float) -> bool:
        """Runs on a helper thread: True once the worker finished its imports."""
        try:
            return bool(self.conn.poll(timeout_s) and self.conn.recv()[0] == "ready")
        except (EOFError, OSError):
            return False

    def kill(self, reason: str) -> None:
        self.killed_for = self.killed_for or reason
        with contextlib.suppress(Exception):
            self.process.kill()

    def reap(self) -> None:
        self.process.join(timeout=5)
        with contextlib.suppress(Exception):
            self.conn.close()
        with contextlib.suppress(Exception):
            self.process.close()

    def exchange(self, message: tuple[Any, ...], timeout_s: float) -> tuple[Any, ...]:
        """Runs on a helper thread: send, wait for the answer (``_Died`` when the process
        is gone, ``TimeoutError`` past ``timeout_s``)."""
        try:
            self.conn.send(message)
            if not self.conn.poll(timeout_s):
                raise TimeoutError
            kind, payload = self.conn.recv()
            if kind == "page":
                raw = self.conn.recv_bytes()
                return kind, Image.frombuffer("RGB", payload, raw, "raw", "RGB", 0, 1)
            return kind, payload
        except TimeoutError:  # an OSError subclass: not a death
            raise
        except (EOFError, OSError):
            log.debug("decoder pipe closed", exc_info=True)
            raise _Died() from None


def _error_from(payload: tuple[str, str, str]) -> errors.DocParserError:
    name, code, message = payload
    cls = getattr(errors, name, None)
    if not (isinstance(cls, type) and issubclass(cls, errors.InvalidInput)):
        cls = errors.InvalidInput
    return cls(message, code=code)


class DecodePool:
    """``size`` sandboxed decoder processes shared by all requests (started lazily)."""

    def __init__(
        self,
        size: int,
        limits: SandboxLimits,
        on_replace: Callable[[str], None] | None = None,
    ) -> None:
        """``on_replace(reason)`` is told of every worker killed or crashed and replaced:
        ``wall``, ``cpu``, ``memory``, ``crash`` or ``cancelled`` (the server counts them)."""
        self.size = size
        self.limits = limits
        self.on_replace = on_replace
        self._ctx = multiprocessing.get_context("spawn")  # never fork a threaded server
        self._idle: asyncio.Queue[_Worker] | None = None
        self._all: set[_Worker] = set()
        self._executor = ThreadPoolExecutor(max_workers=2 * size, thread_name_prefix="sandbox")
        self._lock = threading.Lock()
        self._closed = False
        self.replaced = 0  # workers killed or crashed and replaced (for tests and logs)

    def start(self) -> None:
        """Spawn the workers now (call on the event loop); idempotent. A worker joins the
        idle queue once its imports are done, so its start-up never eats a decode budget."""
        if self._idle is None:
            self._idle = asyncio.Queue()
            self._first_ready = asyncio.Event()
            for _ in range(self.size):
                self._spawn()

    def _spawn(self) -> None:
        worker = _Worker(self._ctx, self.limits)
        self._all.add(worker)
        loop = asyncio.get_running_loop()
        ready = loop.run_in_executor(self._executor, worker.wait_ready, _START_TIMEOUT_S)

        def joined(fut: asyncio.Future[bool]) -> None:
            if self._closed:
                return
            if not fut.cancelled() and fut.exception() is None and fut.result():
                assert self._idle is not None  # made by start(), which spawns
                self._idle.put_nowait(worker)
                self._first_ready.set()
                return
            log.error("decoder worker %s failed to start; starting another", worker.process.pid)
            worker.kill("start")
            self._all.discard(worker)
            self._executor.submit(worker.reap)
            loop.call_later(1.0, self._spawn)

        ready.add_done_callback(joined)

    async def wait_started(self, timeout_s: float = _START_TIMEOUT_S) -> None:
        """Until one worker can decode (readiness must not claim what cannot be served)."""
        self.start()
        await asyncio.wait_for(self._first_ready.wait(), timeout_s)

    def pids(self) -> list[int]:
        return [w.process.pid for w in self._all if w.process.pid is not None]

    async def plan(self, token: str, data: bytes, pages: str | None, limits: DecodeLimits,
                   deadline: float) -> DocumentPlan:  # fmt: skip
        fmt, indices, costs = await self._call("plan", token, data, pages, limits, deadline)
        return DocumentPlan(fmt, tuple(indices), tuple(costs))

    async def render(self, token: str, data: bytes, fmt: str, index: int,
                     limits: DecodeLimits, deadline: float) -> Image.Image:  # fmt: skip
        image: Image.Image = await self._call("render", token, data, (fmt, index), limits, deadline)
        return image

    async def _call(
        self, op: str, token: str, data: bytes, args: object, limits: DecodeLimits, deadline: float
    ) -> Any:  # what the worker answered for ``op`` (a plan or an image)
        self.start()
        assert self._idle is not None
        if self._closed:
            raise Unavailable("server shutting down", code="draining")
        try:
            worker = await asyncio.wait_for(self._idle.get(), max(0.0, deadline - time.monotonic()))
        except TimeoutError:
            raise DeadlineExceeded("the deadline passed while waiting for a decoder") from None
        budget = min(self.limits.timeout_s, max(0.0, deadline - time.monotonic()))
        message = (op, token, None if worker.token == token else data, args, limits)
        healthy = False
        reason = "cancelled"  # unless we learn better below: the client left mid-decode
        try:
            loop = asyncio.get_running_loop()
            kind, payload = await loop.run_in_executor(
                self._executor, worker.exchange, message, budget
            )
            worker.token = token
            healthy = kind != "err" or payload[1] != "document_too_complex"
            if kind == "err":
                reason = "memory"
                raise _error_from(payload) if healthy else self._memory_error()
            return payload
        except TimeoutError:
            reason = "wall"
            worker.kill("wall")
            if budget < self.limits.timeout_s:
                raise DeadlineExceeded("the deadline passed while decoding the document") from None
            raise DocumentTooComplex(
                f"decoding one page took longer than the {self.limits.timeout_s:g} s wall-clock "
                "limit (DOCPARSER_DECODE_TIMEOUT_S)"
            ) from None
        except _Died:
            await loop.run_in_executor(self._executor, worker.process.join, 5)
            reason = "cpu" if worker.process.exitcode == -signal.SIGXCPU else "crash"
            raise self._death_error(worker) from None
        finally:
            if not healthy:  # cancelled (client left), timed out, crashed or out of memory
                worker.kill("cancelled")
                self._replace(worker, reason)
            else:
                self._idle.put_nowait(worker)

    def _replace(self, worker: _Worker, reason: str) -> None:
        self._all.discard(worker)
        self._executor.submit(worker.reap)
        if not self._closed:
            self.replaced += 1
            if self.on_replace is not None:
                self.on_replace(reason)
            self._spawn()

    def _memory_error(self) -> DocumentTooComplex:
        mb = self.limits.memory_bytes // _MB
        return DocumentTooComplex(
            f"decoding the document exceeded the decoder's {mb} MB memory limit "
            "(DOCPARSER_DECODE_MEMORY_BYTES)"
        )

    def _death_error(self, worker: _Worker) -> DocumentTooComplex:
        code = worker.process.exitcode
        if code == -signal.SIGXCPU:
            log.warning("decoder %s hit its CPU limit", worker.process.pid)
            return DocumentTooComplex(
                f"decoding one page used more than the {self.limits.cpu_s} s CPU-time limit "
                "(DOCPARSER_DECODE_CPU_S)"
            )
        log.warning("decoder %s died (exit code %s)", worker.process.pid, code)
        return DocumentTooComplex(
            f"the decoder crashed on this document (most likely its "
            f"{self.limits.memory_bytes // _MB} MB memory limit, DOCPARSER_DECODE_MEMORY_BYTES)"
        )

    def close(self) -> None:
        self._closed = True
        for worker in list(self._all):
            worker.kill("shutdown")
            worker.reap()
        self._all.clear()
        self._executor.shutdown(wait=False, cancel_futures=True)
