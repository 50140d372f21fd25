"""The activity source of scale to zero: the front's and the runtime pods' ``/metrics``.

Each Ready pod (the front's, and every runtime pod of the DocParser) is read at
``<podIP>:8000/metrics`` through the one guarded client with the pods' rule (an IP literal on
the runtime's port, never a metadata address), bounded in time and bytes, as the canary
analysis reads its pods (pods.py). No API request: the pod addresses come from the
operator's watch-backed pod index. A pod that does not answer makes the reading unusable
(a DocParser neither sleeps nor wakes on a partial view).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from docparser_operator.analysis.activity import Activity, PodReading, parse
from docparser_operator.analysis.sources.base import SourceUnavailable
from docparser_operator.analysis.sources.pods import Fetch, ready_address
from docparser_operator.api import naming

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

    def read(
        self, front: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]]
    ) -> Activity:
        readings: dict[str, PodReading] = {}
        for pod in [*front, *pods]:
            address = ready_address(pod)
            if address is None:
                continue
            name = str((pod.get("metadata") or {}).get("name", address))
            try:
                readings[name] = parse(self.fetch(f"http://{address}/metrics"))
            except Exception:  # unreachable, timed out, not our exposition
                raise SourceUnavailable(
                    UNREADABLE.format(pod=name, port=naming.HTTP_PORT)
                ) from None
        return Activity(readings)
