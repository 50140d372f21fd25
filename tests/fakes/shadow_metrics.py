"""A stable pod's shadow metrics as the runtime writes them (its ShadowMetrics: the contract's
series and labels), the text the operator's sources parse. A module of its own so several
test files can use it by a unique name; ``ShadowPod`` serves a growing exposition over HTTP
as a stable pod would."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from docparser_runtime.server.shadow.compare import PageComparison, PageDigest
from docparser_runtime.server.shadow.config import ShadowConfig
from docparser_runtime.server.shadow.metrics import ShadowMetrics
from prometheus_client import CollectorRegistry, generate_latest


@dataclass
class Pages:
    """What one stable pod compared so far (cumulative, as its counters are)."""

    cer: list[float] = field(default_factory=list)  # one entry per compared page
    mirrored: int = 0
    stable_truncated: int = 0
    canary_truncated: int = 0
    structure: int = 0
    dropped: dict[str, int] = field(default_factory=dict)


def _digest(index: int, truncated: bool) -> PageDigest:
    return PageDigest(
        index=index, content="", block_types=(), truncated=truncated, repetition=False
    )


def exposition(pairs: dict[tuple[str, str], Pages]) -> str:
    """The /metrics text of a stable pod that compared ``pairs`` ((stable, canary) -> pages),
    recorded through the runtime's own shadow series (ShadowMetrics)."""
    registry = CollectorRegistry()
    metrics = ShadowMetrics(registry)
    for (stable, canary), pages in pairs.items():
        config = ShadowConfig(enabled=True, stable_revision=stable, canary_revision=canary)
        metrics.export_pair(config)
        metrics.mirrored_pages.labels(**config.labels).inc(pages.mirrored)
        compared = [
            PageComparison(
                index=i,
                cer=value,
                structure_agrees=i >= pages.structure,
                stable=_digest(i, i < pages.stable_truncated),
                canary=_digest(i, i < pages.canary_truncated),
            )
            for i, value in enumerate(pages.cer)
        ]
        metrics.record(config, compared, latency_ratio=1.0)
        for reason, n in pages.dropped.items():
            for _ in range(n):
                metrics.drop(config, reason)
    return generate_latest(registry).decode()


class ShadowPod:
    """A stable pod's /metrics on ``host``:8000 whose comparison grows with time as a live
    shadow's does: ``per_second`` pages compared at ``cer`` (a canary that reads like stable:
    0; one that drops a line in twenty: about 0.05), each also mirrored, and a copy dropped
    for the budget now and then. ``pair`` is (stable, canary) revision, set once known."""

    def __init__(
        self, host: str, port: int, pair: tuple[str, str], cer: float, per_second: int
    ) -> None:
        self.pair, self.value, self.per_second = pair, cer, per_second
        self.started = time.monotonic()
        self.lock = threading.Lock()
        pod = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = pod.scrape().encode() if self.path == "/metrics" else b""
                self.send_response(200 if body else 404)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer((host, port), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def scrape(self) -> str:
        with self.lock:
            n = int(self.per_second * (time.monotonic() - self.started))
            pages = Pages(cer=[self.value] * n, mirrored=n, dropped={"budget": n // 100})
            return exposition({self.pair: pages})

    def __enter__(self) -> ShadowPod:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
