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

import time

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Info,
    generate_latest,
)

from docparser_runtime.server.guards.auth import UNAUTHORIZED_REASONS
from docparser_runtime.server.ops.gpu_metrics import GpuCollector
from docparser_runtime.server.ops.pod_memory_metrics import PodMemoryCollector

# Seconds: 5 ms .. 10 min; covers a cached hit up to a long PDF on a busy replica.
LATENCY_BUCKETS = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600,
)  # fmt: skip
IDENTITY = ("model", "version")  # on every request series: canary vs stable without joins
BATCH_BUCKETS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 128, 256)
STAGES = ("queue", "preprocess", "inference", "audit", "total")


class Metrics:
    """All metrics of the runtime; names are API for dashboards and the HPA."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self, *, model: str = "", version: str = "", front: bool = False) -> None:
        """``model`` / ``version``: the engine and weights version this process serves,
        as labels of every request series (``set_engine`` confirms them once the engine
        has loaded; the operator sets the version up front, DOCPARSER_MODEL_VERSION).
        ``front``: this process is the CPU front (``FrontMetrics``): client requests count
        there, not in ``docparser_requests`` (the pod that answers a forwarded parse counts
        it, so live traffic is never counted twice)."""
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.front = FrontMetrics(r) if front else None
        # Idleness, for scale to zero: the operator reads how long ago a client last called.
        # Starts at the process's start, so a pod that just woke is not idle at once.
        self.last_request = Gauge(
            "docparser_last_request_timestamp_seconds",
            "Unix time of the last authenticated client API request (/v1) this pod got (its "
            "start, before the first).",
            registry=r,
        )
        self.last_request.set(time.time())
        # /v1 requests that did not pass routing and the API-key check: never activity.
        self.unauthorized = Counter(
            "docparser_unauthorized_requests",
            "Client API requests (/v1) refused before reaching an endpoint, by reason "
            "(missing_key, malformed_key, wrong_key, unknown_route); not counted as requests, "
            "nor as activity for scale to zero.",
            ["reason"],
            registry=r,
        )
        for reason in UNAUTHORIZED_REASONS:
            self.unauthorized.labels(reason=reason)
        self.identity = {"model": model, "version": version}
        self._requests = Counter(
            "docparser_requests",
            "HTTP requests by route template and status code.",
            ["route", "method", "status", *IDENTITY],
            registry=r,
        )
        self.stage_seconds = Histogram(
            "docparser_stage_duration_seconds",
            "Time a parse request spent per stage (queue, preprocess, inference, total).",
            ["stage", *IDENTITY],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self._time_to_first_token = Histogram(
            "docparser_time_to_first_token_seconds",
            "Streamed requests: time from arrival to the first text sent (decode, queue, "
            "vision encoder and the first token).",
            IDENTITY,
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
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
        self.estimated_wait = Gauge(
            "docparser_estimated_wait_seconds",
            "Seconds a page queued now would wait for a decode slot: the queued pages times "
            "the measured seconds per page of their tiers, over the slots (the latency "
            "autoscaling signal; 0 without a scheduler).",
            registry=r,
        )
        r.register(GpuCollector())
        r.register(PodMemoryCollector())
        # What status.capacity (issue 36) sizes replicas from: how long a page of each tier
        # holds a decode slot, and how many slots run side by side.
        self.page_service_seconds = Histogram(
            "docparser_page_service_seconds",
            "Seconds a page held a decode slot, by the tier it was read at (its service time).",
            ["tier"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.decode_slots = Gauge(
            "docparser_decode_slots",
            "Pages the scheduler runs side by side (maxBatchSize).",
            registry=r,
        )
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
        # Continuous batching (engines that step): decode slot occupancy is
        # rate(slot_steps) / (rate(steps) * slots); evictions are OOMs it recovered from.
        self.decode_steps = Counter(
            "docparser_decode_steps", "Decode steps of the running batch.", registry=r
        )
        self.decode_slot_steps = Counter(
            "docparser_decode_slot_steps",
            "Pages decoded, summed over decode steps (busy slots x steps).",
            registry=r,
        )
        self.running_pages = Gauge(
            "docparser_running_pages", "Pages in the running batch (decode slots busy).", registry=r
        )
        self.cache_tokens = Gauge(
            "docparser_kv_cache_tokens",
            "Cache slots the running batch holds (pages x padded length).",
            registry=r,
        )
        self.cache_budget_tokens = Gauge(
            "docparser_kv_cache_budget_tokens",
            "Cache slots the scheduler admits pages against (from free GPU memory).",
            registry=r,
        )
        self.evicted_pages = Counter(
            "docparser_evicted_pages",
            "Pages taken out of the running batch after a GPU out-of-memory error, to resume "
            "later (their tokens are kept, their cache recomputed).",
            registry=r,
        )
        self._pages = Counter("docparser_pages", "Pages parsed.", IDENTITY, registry=r)
        self._vision_tokens = Counter(
            "docparser_vision_tokens", "Visual tokens of parsed pages.", IDENTITY, registry=r
        )
        self._output_tokens = Counter(
            "docparser_output_tokens", "Tokens generated by the engine.", IDENTITY, registry=r
        )
        # Which tiers pages are read at (choice: auto = the selector's, fixed = named by the
        # request or the default): the distribution `tier: auto` saves against.
        self._tier_pages = Counter(
            "docparser_tier_pages",
            "Pages parsed by the tier they were read at and how it was chosen (auto, fixed).",
            ["tier", "choice", *IDENTITY],
            registry=r,
        )
        self._tier_vision_tokens = Counter(
            "docparser_tier_vision_tokens",
            "Visual tokens of parsed pages by tier and how it was chosen (auto, fixed).",
            ["tier", "choice", *IDENTITY],
            registry=r,
        )
        # Output quality per version, what a canary analysis compares with stable: pages cut
        # at max_new_tokens, pages with no text, pages the repetition guard had to steer.
        self._truncated_pages = Counter(
            "docparser_pages_truncated",
            "Pages whose generation hit max_new_tokens without an end of sequence (cut short).",
            IDENTITY,
            registry=r,
        )
        self._empty_pages = Counter(
            "docparser_pages_empty", "Pages answered with no text.", IDENTITY, registry=r
        )
        self._repetition_pages = Counter(
            "docparser_pages_repetition_guarded",
            "Pages on which the repetition guard changed at least one token (a decoding loop).",
            IDENTITY,
            registry=r,
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
        self._rejected = Counter(
            "docparser_rejected",
            "Requests refused before inference, by error code (overloaded, deadline...).",
            ["code", *IDENTITY],
            registry=r,
        )
        self.engine_info = Info("docparser_engine", "Engine name and weights version.", registry=r)
        self.ready = Gauge("docparser_ready", "1 when the engine is loaded and warm.", registry=r)
        self._export_zeros()

    def _export_zeros(self) -> None:
        """Series dashboards divide by exist before the first request."""
        for stage in STAGES:
            self.stage_seconds.labels(stage=stage, **self.identity)
        for family in (
            self._pages,
            self._vision_tokens,
            self._output_tokens,
            self._truncated_pages,
            self._empty_pages,
            self._repetition_pages,
        ):
            family.labels(**self.identity)

    # Request series, labelled with this process's model and version ---------------
    def client_request(self) -> None:
        """A client API request (/v1) that passed authentication arrived or ended: the
        idleness clocks restart."""
        now = time.time()
        if self.front is not None:
            self.front.last_request.set(now)
        else:
            self.last_request.set(now)

    def count_request(self, *, route: str, method: str, status: str, client: bool = False) -> None:
        """One answered HTTP request; ``client``: a /v1 API request (not a probe)."""
        if self.front is not None:
            if client:
                self.front.requests.inc()
            return
        self._requests.labels(route=route, method=method, status=status, **self.identity).inc()

    def count_unauthorized(self, reason: str) -> None:
        self.unauthorized.labels(reason=reason).inc()

    def reject(self, code: str) -> None:
        self._rejected.labels(code=code, **self.identity).inc()

    def count_parsed(self, *, pages: int, vision_tokens: int, output_tokens: int) -> None:
        self._pages.labels(**self.identity).inc(pages)
        self._vision_tokens.labels(**self.identity).inc(vision_tokens)
        self._output_tokens.labels(**self.identity).inc(output_tokens)

    def count_tier(self, *, tier: int, auto: bool, vision_tokens: int) -> None:
        labels = {"tier": str(tier), "choice": "auto" if auto else "fixed", **self.identity}
        self._tier_pages.labels(**labels).inc()
        self._tier_vision_tokens.labels(**labels).inc(vision_tokens)

    def count_page_outcomes(self, *, truncated: int, empty: int, repetition: int) -> None:
        self._truncated_pages.labels(**self.identity).inc(truncated)
        self._empty_pages.labels(**self.identity).inc(empty)
        self._repetition_pages.labels(**self.identity).inc(repetition)

    def observe_service(self, tier: int, seconds: float) -> None:
        self.page_service_seconds.labels(tier=str(tier)).observe(max(0.0, seconds))

    def observe_first_token(self, seconds: float) -> None:
        self._time_to_first_token.labels(**self.identity).observe(max(0.0, seconds))

    def pages_planned(self, count: int) -> None:
        self.outstanding_page_count += count
        self.outstanding_pages.inc(count)

    def pages_settled(self, count: int) -> None:
        self.outstanding_page_count -= count
        self.outstanding_pages.dec(count)

    def set_engine(self, engine: str, version: str) -> None:
        """The loaded engine's name and version: the identity of later request series."""
        self.engine_info.info({"engine": engine, "version": version})
        self.identity = {"model": engine, "version": version}
        self._export_zeros()

    def observe_stage(self, stage: str, seconds: float) -> None:
        self.stage_seconds.labels(stage=stage, **self.identity).observe(max(0.0, seconds))

    def render(self) -> bytes:
        return generate_latest(self.registry)


class FrontMetrics:
    """The CPU front's own series (role front): what the operator reads to wake a DocParser
    at zero GPU pods and to tell when it is idle (names shared with the operator)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.held = Gauge(
            "docparser_front_held_requests",
            "Synchronous parses waiting at the front for a ready backend.",
            registry=registry,
        )
        self.queued_jobs = Gauge(
            "docparser_front_queued_jobs",
            "Jobs waiting in the DocParser's Redis queues (every revision's).",
            registry=registry,
        )
        self.requests = Counter(
            "docparser_front_requests",
            "Authenticated client API requests (/v1) the front got.",
            registry=registry,
        )
        self.last_request = Gauge(
            "docparser_front_last_request_timestamp_seconds",
            "Unix time of the last authenticated client API request the front got (its start, "
            "before the first).",
            registry=registry,
        )
        self.last_request.set(time.time())
        self.wanted = Gauge(
            "docparser_front_capacity_wanted_timestamp_seconds",
            "Unix time a synchronous parse last found no ready backend at the front (held, or "
            "answered 503 at once: holdSeconds 0 or over the hold bound); 0 before the first.",
            registry=registry,
        )
        self.forwarded = Counter(
            "docparser_front_forwarded",
            "Synchronous parses the front forwarded to a backend, by outcome (answered: the "
            "backend replied, any status; busy: over the hold bound; timeout: no backend ready "
            "within the hold; failed: the backend could not be reached or broke off).",
            ["outcome"],
            registry=registry,
        )
