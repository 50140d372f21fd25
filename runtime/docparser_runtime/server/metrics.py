"""Prometheus metrics of one app instance.

Each app owns its own ``CollectorRegistry`` so tests (and several apps in one process)
never share counters. Outstanding work is exported three ways because a request is a
poor unit of GPU load: one 300-page PDF is one request but 300 pages and up to
300 x 1121 visual tokens. The autoscaler scales on ``docparser_outstanding_pages``
(or ``docparser_outstanding_vision_tokens``), not on requests; ``docparser_backlog_pages``
adds this pod's share of its revision's queued job pages, so queued async work scales too
(each replica reports the shared queue once, divided by the live pods of its revision:
averaged over pods, as the HPA does, it sums to the whole backlog).
"""

from __future__ import annotations

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Info,
    generate_latest,
)

from docparser_runtime.server.gpu_metrics import GpuCollector

# Seconds: 5 ms .. 10 min; covers a cached hit up to a long PDF on a busy replica.
LATENCY_BUCKETS = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600,
)  # fmt: skip
BATCH_BUCKETS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 128, 256)
STAGES = ("queue", "preprocess", "inference", "audit", "total")


class Metrics:
    """All metrics of the runtime; names are API for dashboards and the HPA."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter(
            "docparser_requests",
            "HTTP requests by route template and status code.",
            ["route", "method", "status"],
            registry=r,
        )
        self.stage_seconds = Histogram(
            "docparser_stage_duration_seconds",
            "Time a parse request spent per stage (queue, preprocess, inference, total).",
            ["stage"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.time_to_first_token = Histogram(
            "docparser_time_to_first_token_seconds",
            "Streamed requests: time from arrival to the first text sent (decode, queue, "
            "vision encoder and the first token).",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        for stage in STAGES:  # export zeros before the first request, for dashboards
            self.stage_seconds.labels(stage=stage)
        self.outstanding_requests = Gauge(
            "docparser_outstanding_requests",
            "Parse requests accepted and not yet answered.",
            registry=r,
        )
        self.outstanding_pages = Gauge(
            "docparser_outstanding_pages",
            "Decoded pages queued or being inferred (the autoscaling signal).",
            registry=r,
        )
        self.outstanding_vision_tokens = Gauge(
            "docparser_outstanding_vision_tokens",
            "Visual tokens of the outstanding pages (GPU work, tier-aware).",
            registry=r,
        )
        # What this process has planned and not settled, and its share of queued job
        # pages (set by the job metrics loop): plain numbers the backlog gauge adds up.
        self.outstanding_page_count = 0
        self.queued_job_pages_share = 0.0
        self.backlog_pages = Gauge(
            "docparser_backlog_pages",
            "Outstanding pages of this pod plus its share of its revision's queued job "
            "pages (the autoscaling signal that sees async jobs).",
            registry=r,
        )
        self.backlog_pages.set_function(
            lambda: self.outstanding_page_count + self.queued_job_pages_share
        )
        self.queue_pages = Gauge(
            "docparser_queue_pages",
            "Pages waiting in the micro-batcher queue (not yet in a batch).",
            registry=r,
        )
        r.register(GpuCollector())
        self.gpu_oom = Counter(
            "docparser_gpu_oom",
            "GPU out-of-memory errors of the engine (each splits its batch and retries).",
            registry=r,
        )
        self.decoder_restarts = Counter(
            "docparser_decoder_restarts_total",
            "Sandboxed decoder processes killed or crashed and replaced, by reason "
            "(wall, cpu, memory, crash, cancelled): hostile or pathological documents.",
            ["reason"],
            registry=r,
        )
        self.queue_pixels = Gauge(
            "docparser_queue_pixels",
            "Decoded pixels of the pages waiting in the queue (what their memory follows).",
            registry=r,
        )
        self.batch_size = Histogram(
            "docparser_batch_size",
            "Pages per engine infer_batch call.",
            buckets=BATCH_BUCKETS,
            registry=r,
        )
        self.pages = Counter("docparser_pages", "Pages parsed.", registry=r)
        self.vision_tokens = Counter(
            "docparser_vision_tokens", "Visual tokens of parsed pages.", registry=r
        )
        self.output_tokens = Counter(
            "docparser_output_tokens", "Tokens generated by the engine.", registry=r
        )
        self.audit_warnings = Counter(
            "docparser_audit_warnings",
            "Coverage-audit warnings by engine and code (uncovered_text: ink that no "
            "returned block accounts for: text possibly missing from a reply).",
            ["engine", "code"],
            registry=r,
        )
        self.incomplete_pages = Counter(
            "docparser_incomplete_pages",
            "Pages answered with audit warnings or truncated, by engine.",
            ["engine"],
            registry=r,
        )
        self.rejected = Counter(
            "docparser_rejected",
            "Requests refused before inference, by error code (overloaded, deadline...).",
            ["code"],
            registry=r,
        )
        self.engine_info = Info("docparser_engine", "Engine name and weights version.", registry=r)
        self.ready = Gauge("docparser_ready", "1 when the engine is loaded and warm.", registry=r)

    def pages_planned(self, count: int) -> None:
        self.outstanding_page_count += count
        self.outstanding_pages.inc(count)

    def pages_settled(self, count: int) -> None:
        self.outstanding_page_count -= count
        self.outstanding_pages.dec(count)

    def set_engine(self, engine: str, version: str) -> None:
        self.engine_info.info({"engine": engine, "version": version})

    def observe_stage(self, stage: str, seconds: float) -> None:
        self.stage_seconds.labels(stage=stage).observe(max(0.0, seconds))

    def render(self) -> bytes:
        return generate_latest(self.registry)
