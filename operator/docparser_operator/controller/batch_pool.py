"""One pass's part of the batch pool (``spec.batch``): read the backlog when a reading is due,
size the pool (core/plan/batch_pool.py) and build ``status.batch``.

A reading is due every ``poll_s`` (the scale-to-zero poll, ``DOCPARSER_OPERATOR_IDLE_POLL_S``,
5 s by default) and the pass asks to be woken for the next one, so a batch submitted to an
idle pool starts pods within seconds. It costs one bounded HTTP request per Ready stable pod
(and front) and no API request; at rest (no batch, the pool at its minimum) the pass writes
nothing: the pool's Deployment is unchanged and ``status.batch`` rounds to the same figures.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from docparser_operator.api import naming
from docparser_operator.api.models import DocParser
from docparser_operator.core.plan.batch_pool import (
    COOLDOWN_S,
    PoolMemory,
    PoolStep,
    decide_pool,
    pool_status,
)
from docparser_operator.core.plan.children import Observed, owned_by, readable_pods
from docparser_operator.providers.base import SourceUnavailable
from docparser_operator.providers.batch import BatchSource, pod_backlog
from docparser_operator.providers.pods import ReadLimits, Skipped


@dataclass
class BatchArgs:
    """What the pool's passes keep and read: the readings' memory, the source, how often it
    is read and how long the backlog must ask for fewer pods before the pool shrinks."""

    memory: PoolMemory = field(default_factory=PoolMemory)
    source: BatchSource | None = None  # None: the pods through the guarded client
    poll_s: float = 5.0
    cooldown_s: float = COOLDOWN_S
    limits: ReadLimits = field(default_factory=ReadLimits)

    def reader(self) -> BatchSource:
        if self.source is None:
            self.source = pod_backlog(limits=self.limits)
        return self.source


def batch_step(
    model: DocParser,
    observed: Observed,
    args: BatchArgs,
    *,
    now: str,
    skipped: Skipped | None = None,
    clock: Callable[[], float] = time.time,
) -> PoolStep | None:
    """The pool's size and ``status.batch`` for this pass (None without ``spec.batch``: its
    memory is dropped, and the pool's Deployment and status section go with the spec)."""
    uid = model.metadata.uid or ""
    spec = model.spec.batch
    if spec is None:
        args.memory.forget(uid)
        return None
    seen = args.memory.of(uid)
    at = clock()
    if seen.due(at, args.poll_s):
        readable = readable_pods(observed, uid)
        if readable.not_owned and skipped is not None:
            skipped("not_owned", readable.not_owned)
        try:
            seen.record(args.reader().read([*readable.front, *readable.pods]), at)
        except SourceUnavailable as exc:
            seen.failed(str(exc), at)
    live = observed.children.get(("Deployment", naming.batch_pool(model.metadata.name)))
    live = live if live is not None and owned_by(live, uid) else None
    have: int | None = None
    ready = 0
    if live is not None:
        have = int((live.get("spec") or {}).get("replicas") or 0)
        ready = int((live.get("status") or {}).get("readyReplicas") or 0)
    size, reason = decide_pool(spec, seen, have, now=at, cooldown_s=args.cooldown_s)
    previous = model.status.batch if model.status is not None else None
    scaled = now if have is not None and size != have else None
    status = pool_status(size, ready, seen, previous, scaled_at=scaled)
    next_read = max(1.0, args.poll_s - (at - seen.read_at)) if seen.read_at is not None else 1.0
    return PoolStep(size, reason, status, next_read, seen.error)
