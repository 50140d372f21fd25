"""The activity source of scale to zero: the front's and the runtime pods' ``/metrics``.

Each Ready pod (the front's, and every runtime pod of the DocParser's own ReplicaSets:
core/plan/children.readable_pods) is read at ``<podIP>:8000/metrics`` through the one guarded
client with the pods' rule (an IP literal on the runtime's port, never a metadata address),
bounded in time and bytes, all of them in parallel under one deadline, as the canary analysis
reads its pods (pods.read_pods). No API request: the pod addresses come from the operator's
watch-backed pod index. A pod that does not answer makes the reading unusable (a DocParser
neither sleeps nor wakes on a partial view).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from docparser_operator.analysis.activity import Activity, PodReading, parse
from docparser_operator.api import naming
from docparser_operator.providers.base import SourceUnavailable
from docparser_operator.providers.pods import Fetch, ReadLimits, read_pods

UNREADABLE = (
    "cannot read the /metrics of {pod} (port {port}); with traffic.allowFrom, admit the "
    "operator's namespace"
)


class ActivitySource(Protocol):
    """Where the idle decision's readings come from (tests hand in their own)."""

    def read(
        self, front: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]]
    ) -> Activity:
        """One reading of the front's and the runtime pods' Ready pods; raises
        SourceUnavailable when one of them cannot be read."""


@dataclass(frozen=True)
class PodActivity:
    """The production source: each Ready pod's own ``/metrics``."""

    fetch: Fetch
    limits: ReadLimits = field(default_factory=ReadLimits)

    def read(
        self, front: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]]
    ) -> Activity:
        readings: dict[str, PodReading] = {}
        for name, reading in read_pods([*front, *pods], self.fetch, parse, self.limits):
            if reading is None:  # unreachable, timed out, not our exposition
                raise SourceUnavailable(UNREADABLE.format(pod=name, port=naming.HTTP_PORT))
            readings[name] = reading
        return Activity(readings)
