"""Open-loop page traffic and the queue waits it measured, for the latency autoscaler's
tests (tests/operator/controller/test_realcluster_latency_hpa.py, e2e/cluster's scenario).

WHY open loop: a closed loop (each client waits for its answer before the next request)
slows down as the queue grows, so it can never show a queue outrunning its pods. Here pages
arrive at a fixed rate whatever the answers, as independent users' uploads do.

A page's queue wait is the runtime's own measurement (``timings_ms.queue``: from the page's
arrival in its pod's scheduler queue to its decode slot), and it becomes known at
``sent + wait``. The *measured p95* at a moment is the nearest-rank p95 of the waits known in
the ``window_s`` before it: what a dashboard of the pods' queue waits would show then.
"""

from __future__ import annotations

import io
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

import httpx
from PIL import Image

SETTLE_S = 240.0  # how long answers may take after the last arrival


@dataclass
class Page:
    sent: float  # monotonic
    url: str | None  # where it went (None: no Ready endpoint then)
    status: int = 0  # HTTP status (0: no answer)
    queue_s: float | None = None
    done_at: float | None = None  # monotonic: answered, refused or failed

    @property
    def known_at(self) -> float | None:
        """When the page's wait was over (it got its slot)."""
        return None if self.queue_s is None else self.sent + self.queue_s


@dataclass
class Sample:
    """The scaling chain at one moment."""

    at: float  # monotonic
    scale: int  # the DocParser's spec.replicas.desired: the HPA's decision
    replicas: int  # the runtime Deployments' spec.replicas: the operator's sizing
    ready: int  # Ready runtime pods (the Service's endpoints)
    gauge: float | None  # the pods' average estimated wait, as the adapter last answered


def png() -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (64, 32), "white").save(buf, format="PNG")
    return buf.getvalue()


def _send(client: httpx.Client, page: Page, body: bytes) -> None:
    try:
        if page.url is None:
            return
        try:
            reply = client.post(
                f"{page.url}/v1/document/parse", files={"file": ("p.png", body, "image/png")}
            )
        except httpx.HTTPError:
            return
        page.status = reply.status_code
        if reply.status_code == 200:
            page.queue_s = reply.json()["timings_ms"]["queue"] / 1000
    finally:
        page.done_at = time.monotonic()


def predicted_wait(pages: list[Page], now: float, over_s: float = 10.0) -> float:
    """How long a page sent now would wait: the pages still unanswered over the answers per
    second of the last ``over_s`` (what the pods really serve now, whatever was measured
    before); infinite when pages wait and none was answered in that time."""
    waiting = sum(1 for p in pages if p.done_at is None and p.url is not None)
    served = sum(1 for p in pages if p.done_at is not None and now - p.done_at <= over_s)
    if not waiting:
        return 0.0
    return waiting * over_s / served if served else float("inf")


def open_loop(
    next_url: Callable[[], str | None],
    phases: list[tuple[float, float]],
    *,
    documents: list[bytes] | None = None,
    keepalive: bool = True,
    cut_after_s: float | None = None,
) -> tuple[list[Page], float]:
    """``rate`` pages/s for ``seconds``, phase after phase, each page to ``next_url()``; returns
    every page once answered (at most ``SETTLE_S`` after the last arrival) and when the last
    phase began. The k-th page is ``documents[k]`` (cycled; distinct ones get past a result
    cache), by default one blank page. ``keepalive=False``: a new connection per page
    (kube-proxy balances connections, so kept-alive ones would stick to one pod).
    ``cut_after_s``: the last phase stops sending once a page sent then would wait longer
    (``predicted_wait``). Its rate is sized from a service time measured before it; when the
    machine's other work slows the pods under it, the queue would otherwise outgrow the pods'
    own deadline (504)."""
    documents = documents or [png()]
    pages: list[Page] = []
    futures: list[Future[None]] = []
    pool = ThreadPoolExecutor(max_workers=200, thread_name_prefix="arrival")
    limits = httpx.Limits(max_connections=200, max_keepalive_connections=None if keepalive else 0)
    client = httpx.Client(timeout=SETTLE_S, limits=limits)
    last_phase = 0.0
    try:
        for index, (rate, seconds) in enumerate(phases):
            last_phase = start = time.monotonic()
            last = index == len(phases) - 1
            for k in range(int(rate * seconds)):
                time.sleep(max(0.0, start + k / rate - time.monotonic()))
                if last and cut_after_s and predicted_wait(pages, time.monotonic()) > cut_after_s:
                    break
                page = Page(time.monotonic(), next_url())
                pages.append(page)
                body = documents[len(pages) % len(documents)]
                futures.append(pool.submit(_send, client, page, body))
        late = wait(futures, timeout=SETTLE_S).not_done
        assert not late, f"{len(late)} pages unanswered {SETTLE_S:g} s after the last arrival"
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
        client.close()
    return pages, last_phase


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[max(0, -(-95 * len(ordered) // 100) - 1)]  # nearest rank


def measured_p95(pages: list[Page], at: float, window_s: float) -> float | None:
    """The p95 of the waits known in the ``window_s`` before ``at`` (None: none known)."""
    known = [
        p.queue_s
        for p in pages
        if p.queue_s is not None and p.known_at is not None and at - window_s < p.known_at <= at
    ]
    return p95(known) if known else None


def p95_crossing(pages: list[Page], after: float, target_s: float, window_s: float) -> float | None:
    """The first moment after ``after`` that the measured p95 exceeds ``target_s``."""
    moments = sorted(p.known_at for p in pages if p.known_at is not None and p.known_at > after)
    return next((m for m in moments if (measured_p95(pages, m, window_s) or 0.0) > target_s), None)


def first(samples: list[Sample], test: Callable[[Sample], Any]) -> float | None:
    return next((s.at for s in samples if test(s)), None)


def timeline(
    title: str,
    samples: list[Sample],
    pages: list[Page],
    step: float,
    window_s: float,
    moments: dict[str, float | None],
) -> str:
    """One row per second from 5 s before the step, then the moments (relative to it)."""
    rows = [title, "   t(s)  sent/s  ready  replicas  scale  gauge(avg s)  measured p95(s)"]
    end = max([p.known_at or p.sent for p in pages] + [s.at for s in samples] + [step])
    for second in range(-5, int(end - step) + 1):
        at = step + second
        sample = next((s for s in reversed(samples) if s.at <= at), None)
        if sample is None:
            continue
        sent = sum(1 for p in pages if at - 1 < p.sent <= at)
        measured = measured_p95(pages, at, window_s)
        gauge = "-" if sample.gauge is None else f"{sample.gauge:.2f}"
        shown = "-" if measured is None else f"{measured:.2f}"
        rows.append(
            f"{second:7d}  {sent:6d}  {sample.ready:5d}  {sample.replicas:8d}  "
            f"{sample.scale:5d}  {gauge:>12}  {shown:>15}"
        )
    for what, at in moments.items():
        rows.append(f"{what}: {'never' if at is None else f't = {at - step:+.2f} s'}")
    return "\n".join(rows)
