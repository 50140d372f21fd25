"""Traffic for the e2e scenarios: bounded client load through a Service and a sampler of its
Ready endpoints, both run while a transition happens and read afterwards."""

from __future__ import annotations

import collections
import threading
import time
from dataclasses import dataclass, field
from typing import ClassVar, Self

import httpx
from cluster_support import Target


@dataclass
class Background:
    """One daemon thread a scenario runs beside its steps (a sampler, a paced client): started
    on enter, told to stop on exit and joined within ``join_s``, so none outlives its scenario.
    A subclass writes ``_run`` and waits on ``_stop`` between its bounded steps."""

    join_s: ClassVar[float] = 30.0
    _stop: threading.Event = field(default_factory=threading.Event, kw_only=True, repr=False)
    _thread: threading.Thread | None = field(default=None, kw_only=True, repr=False)

    def _run(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.join_s)


@dataclass
class Sample:
    started: float
    latency: float
    status: int  # HTTP status, or 0 for a connection error / timeout
    version: str | None
    error: str | None = None


@dataclass
class Load:
    """`clients` threads looping parses against `url` until stopped (bounded by count and time).

    Each request opens a new connection: kube-proxy balances connections, not requests, so
    keep-alive clients would each stick to one pod and hide the split being measured. Each
    client starts a request at most every `pace_s`: unpaced, three clients sent 270 requests a
    second on this 2-core node (answers take milliseconds), took CPU from the pods under test
    and ran into `max_requests` before a long walk ended. A load that stops on its own bounds
    while a test still wants it says so (`ran_out`): a transition it did not cover is no
    evidence."""

    url: str
    document: bytes
    clients: int = 3
    max_requests: int = 20000
    max_seconds: float = 600
    pace_s: float = 0.02
    # A connection to a dead node's pod hangs until this says no (node-loss scenarios: 2 s).
    timeout: httpx.Timeout = field(default_factory=lambda: httpx.Timeout(60))
    ran_out: bool = False
    samples: list[Sample] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    began: float = 0.0

    def _client(self) -> None:
        deadline = time.monotonic() + self.max_seconds
        limits = httpx.Limits(max_keepalive_connections=0)
        with httpx.Client(timeout=self.timeout, limits=limits) as http:
            while not self._stop.is_set():
                with self._lock:
                    if len(self.samples) >= self.max_requests or time.monotonic() >= deadline:
                        self.ran_out = True
                        return
                start = time.monotonic()
                try:
                    reply = http.post(
                        f"{self.url}/v1/document/parse",
                        files={"file": ("page.png", self.document, "image/png")},
                    )
                    version = (
                        reply.json().get("model", {}).get("version")
                        if reply.status_code == 200
                        else None
                    )
                    sample = Sample(
                        start,
                        time.monotonic() - start,
                        reply.status_code,
                        version,
                        None if reply.status_code == 200 else reply.text[:200],
                    )
                except httpx.HTTPError as err:
                    sample = Sample(
                        start, time.monotonic() - start, 0, None, f"{type(err).__name__}: {err}"
                    )
                with self._lock:
                    self.samples.append(sample)
                self._stop.wait(max(0.0, self.pace_s - (time.monotonic() - start)))

    def __enter__(self) -> Load:
        self.began = time.monotonic()
        for _ in range(self.clients):
            thread = threading.Thread(target=self._client, daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=90)

    @property
    def failed(self) -> list[Sample]:
        return [s for s in self.samples if s.status != 200]

    def failures(self) -> str:
        """When the failed requests happened and what they said, for an assertion message:
        a burst at the start reads differently from one in the middle of a transition."""
        failed = self.failed
        if not failed:
            return "no failed request"
        errors = collections.Counter((s.status, (s.error or "")[:80]) for s in failed)
        first, last = failed[0].started - self.began, failed[-1].started - self.began
        return (
            f"{len(failed)} of {len(self.samples)} failed, from +{first:.2f}s to +{last:.2f}s"
            f" after the load began: {dict(errors)}"
        )

    def p(self, quantile: float) -> float:
        latencies = sorted(s.latency for s in self.samples)
        return (
            latencies[min(len(latencies) - 1, int(quantile * len(latencies)))] if latencies else 0.0
        )

    def report(self, what: str) -> str:
        return (
            f"{what}: {len(self.samples)} requests, {len(self.failed)} failed, "
            f"p50 {self.p(0.5) * 1000:.0f} ms, p99 {self.p(0.99) * 1000:.0f} ms"
            + (" (the load ran out of its bounds before it was stopped)" if self.ran_out else "")
        )


@dataclass
class EndpointSampler(Background):
    """Counts the Ready endpoints behind a Service every `interval` seconds while a
    transition runs: a moment with none is a moment the Service could not serve."""

    target: Target
    namespace: str
    service: str
    interval: float = 0.5
    max_samples: int = 2000
    samples: list[int] = field(default_factory=list)

    def ready_endpoints(self) -> int:
        slices = self.target.items(
            "endpointslices", self.namespace, f"kubernetes.io/service-name={self.service}"
        )
        return sum(
            1
            for s in slices
            for e in s.get("endpoints") or []
            if (e.get("conditions") or {}).get("ready")
        )

    def _run(self) -> None:
        while not self._stop.is_set() and len(self.samples) < self.max_samples:
            self.samples.append(self.ready_endpoints())
            self._stop.wait(self.interval)
