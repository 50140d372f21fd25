"""What one operator run keeps between handler calls (kopf's ``memo.state``): settings read
at start-up, the API client, per-object locks, the latest body of every DocParser, the
analysis windows and the passes DocParsers asked for. No module globals: two operator runs in
one process (tests) share nothing."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from docparser_operator.controller import post_events
from docparser_operator.controller.batch_pool import BatchArgs
from docparser_operator.controller.capacity import CapacityArgs
from docparser_operator.controller.credential import CredentialMemory
from docparser_operator.controller.metrics import OperatorMetrics
from docparser_operator.controller.settings import OperatorSettings
from docparser_operator.core.plan.idle import IdleMemory
from docparser_operator.core.plan.refusals import RefusalMemory
from docparser_operator.core.status.capacity_window import CapacityMemory
from docparser_operator.kube.client import KubeClient
from docparser_operator.kube.nodes import CordonedNodes
from docparser_operator.kube.observer import IndexedObserver, resource_version
from docparser_operator.providers import capacity as capacity_source
from docparser_operator.providers import sources as analysis_sources
from docparser_operator.providers.activity import ActivitySource
from docparser_operator.providers.analysis_run import AnalysisMemory
from docparser_operator.providers.base import Sources
from docparser_operator.providers.pods import ReadLimits


def _generation(body: Mapping[str, Any]) -> int:
    return int((body.get("metadata") or {}).get("generation") or 0)


def _age(body: Mapping[str, Any]) -> tuple[int, int]:
    return _generation(body), resource_version(body) or 0


@dataclass
class OperatorState:
    """Everything one operator run keeps between handler calls (kept in ``memo.state``)."""

    settings: OperatorSettings
    client: KubeClient
    locks: dict[str, threading.Lock] = field(default_factory=dict[str, Any])
    locks_guard: threading.Lock = field(default_factory=threading.Lock)
    deployment_seen: dict[str, tuple[Any, ...]] = field(default_factory=dict[str, Any])
    pod_seen: dict[str, tuple[Any, ...]] = field(default_factory=dict[str, Any])
    known: dict[str, dict[str, Any]] = field(default_factory=dict[str, Any])  # uid -> latest body
    handled: dict[str, int] = field(default_factory=dict[str, int])  # uid -> generation passed
    resync_task: asyncio.Task[None] | None = None
    event_limiter: post_events.EventLimiter = field(
        default_factory=lambda: post_events.EventLimiter(300.0)
    )
    metrics: OperatorMetrics | None = None
    observer: IndexedObserver | None = None  # None: list on every pass
    analysis: AnalysisMemory = field(default_factory=AnalysisMemory)  # canary window starts
    sources: Sources | None = None  # what the analysis may read (from settings at start-up)
    wakeups: dict[str, float] = field(default_factory=dict[str, float])  # uid -> monotonic due
    nodes: CordonedNodes | None = None  # None: nodes unreadable, PDB-only drain protection
    node_task: asyncio.Task[None] | None = None
    credentials: CredentialMemory = field(default_factory=CredentialMemory)  # Secrets made
    idle: IdleMemory = field(default_factory=IdleMemory)  # scale to zero's last readings
    idle_polls: dict[str, float] = field(default_factory=dict[str, float])  # uid -> next read
    activity: ActivitySource | None = None  # what scale to zero reads (built at start-up)
    refusals: RefusalMemory = field(default_factory=RefusalMemory)  # refused children's backoff
    capacity: CapacityArgs | None = None  # spec.capacity's readings and source (built once)
    batch: BatchArgs | None = None  # spec.batch's readings and source (built once)

    def idle_args(self) -> dict[str, Any]:
        """Scale to zero's part of ``reconcile``'s arguments: the memory of the readings, the
        source (the front's and the pods' /metrics, through the guarded client, built once)
        and how often it is read."""
        if self.activity is None:
            self.activity = analysis_sources.activity(limits=self.pod_reads())
        return {
            "idle": self.idle,
            "activity": self.activity,
            "poll_s": self.settings.idle_poll_interval_s,
            "batch": self.batch_args(),  # spec.batch reads the same pods as often
        }

    def batch_args(self) -> BatchArgs:
        """``spec.batch``'s part of ``reconcile``'s arguments: the backlog readings kept
        between passes, read as often as scale to zero's (the same pods' /metrics), and the
        pool's cooldown; built once."""
        if self.batch is None:
            self.batch = BatchArgs(
                poll_s=self.settings.idle_poll_interval_s,
                cooldown_s=self.settings.batch_cooldown_s,
                limits=self.pod_reads(),
            )
        return self.batch

    def capacity_args(self) -> CapacityArgs:
        """``spec.capacity``'s part of ``reconcile``'s arguments: the readings kept between
        passes, the source (the pods through the guarded client, PromQL under the allow-list)
        and how often the pods are read; built once."""
        if self.capacity is None:
            source = capacity_source.guarded(
                self.settings.prometheus_url_prefixes, limits=self.pod_reads()
            )
            self.capacity = CapacityArgs(
                CapacityMemory(), source, self.settings.capacity_poll_interval_s
            )
        return self.capacity

    def analysis_sources(self) -> Sources:
        """The analysis' sources, built once from the settings' allow-lists."""
        if self.sources is None:
            self.sources = analysis_sources.guarded(
                self.settings.prometheus_url_prefixes,
                self.settings.golden_source_prefixes,
                limits=self.pod_reads(),
            )
        return self.sources

    def pod_reads(self) -> ReadLimits:
        """How one reading of a DocParser's pods' /metrics is bounded (the settings' deadline)
        and where its skips are counted (the operator's metric)."""
        return ReadLimits(self.settings.pod_metrics_deadline_s, skipped=self.skipped_pods)

    def skipped_pods(self, reason: str, pods: int) -> None:
        """Count pods a reading left out (``Skipped`` of providers/pods.py)."""
        if self.metrics is not None:
            self.metrics.skipped_pods(reason, pods)

    def lock_for(self, uid: str) -> threading.Lock:
        with self.locks_guard:
            return self.locks.setdefault(uid, threading.Lock())

    def newest(self, resource: dict[str, Any]) -> dict[str, Any]:
        """``resource`` or the newer body we know of (by generation, then resourceVersion)."""
        known = self.known.get(resource["metadata"]["uid"])
        return known if known is not None and _age(known) > _age(resource) else resource

    def saw_event(self, uid: str, body: dict[str, Any]) -> None:
        """A watch event's body: kept unless the one we know is newer. Why: kopf can hand the
        event of a DocParser's creation over again after our first pass wrote its status
        (seen for most of 60 DocParsers created at once); taken as the latest, it made the
        next pass start from no status and write it all again, one status PATCH more."""
        with self.locks_guard:
            known = self.known.get(uid)
            if known is None or _age(body) >= _age(known):
                self.known[uid] = body

    def deleted(self, uid: str, namespace: str, name: str) -> None:
        """The DocParser is gone (or going): forget what this run kept of it, and what the
        observer remembers of its children (``IndexedObserver.forget_owner``), so one created
        again under its name starts from nothing."""
        with self.locks_guard:
            self.known.pop(uid, None)
            self.handled.pop(uid, None)
        self.refusals.forget(uid)
        if self.observer is not None:
            self.observer.forget_owner(namespace, name)

    def saw_write(self, body: dict[str, Any] | None) -> None:
        """Our status write returned ``body``: later passes start from it (their ``previous``
        status), not from an older event's copy. A deleted DocParser is not brought back."""
        if body is None:
            return
        uid = body["metadata"]["uid"]
        with self.locks_guard:
            known = self.known.get(uid)
            if known is not None and _age(body) > _age(known):
                self.known[uid] = body
