"""The batch pool's source: the DocParser's stable pods' and front's ``/metrics``.

Read like scale to zero's activity (activity.py): each Ready pod of the DocParser's own
ReplicaSets at ``<podIP>:8000/metrics`` through the guarded client with the pods' rule, all at
once under one deadline (pods.read_pods). Unlike that reading, a pod that does not answer does
not spoil it: every pod reports the same shared backlog, so one answer is enough; none is a
``SourceUnavailable`` (the pool then keeps its size).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from docparser_operator.analysis.batch_reading import BatchReading, combine, parse
from docparser_operator.api import naming
from docparser_operator.providers.base import SourceUnavailable
from docparser_operator.providers.fetch import Fetcher, Resolve, system_resolve
from docparser_operator.providers.pods import Fetch, ReadLimits, guarded, read_pods
from docparser_operator.providers.urls import AllowList

UNREADABLE = (
    f"no Ready stable pod (or front) reports the batch backlog on /metrics (port "
    f"{naming.HTTP_PORT}): the pods need runtime.redisUrlSecretRef, and with "
    "traffic.allowFrom the operator's namespace must be admitted"
)


class BatchSource(Protocol):
    """Where the pool's readings come from (tests hand in their own)."""

    def read(self, pods: Iterable[Mapping[str, Any]]) -> BatchReading:
        """The backlog as the Ready ones of ``pods`` report it; raises SourceUnavailable
        when none of them does."""


@dataclass(frozen=True)
class PodBacklog:
    """The production source: each Ready pod's own ``/metrics``."""

    fetch: Fetch
    limits: ReadLimits = field(default_factory=ReadLimits)

    def read(self, pods: Iterable[Mapping[str, Any]]) -> BatchReading:
        found = read_pods(pods, self.fetch, parse, self.limits)
        reading = combine(r for _, r in found if r is not None)
        if reading is None:
            raise SourceUnavailable(UNREADABLE)
        return reading


def pod_backlog(resolve: Resolve = system_resolve, limits: ReadLimits | None = None) -> PodBacklog:
    """The pods reached on their IP and the runtime's port only (the pods' rule)."""
    to_pods = Fetcher(AllowList.pods(naming.HTTP_PORT), resolve)
    return PodBacklog(guarded(to_pods), limits or ReadLimits())
