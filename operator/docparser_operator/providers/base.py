"""What the analysis run reads from, as interfaces: a ``MetricSource`` per way of counting a
track's requests and a ``GoldenReader`` for the golden gate, bundled in ``Sources``.

Why: the run (analysis_run.py) decides *when* to read and what a reading means for the walk;
*how* a reading is made (HTTP to pods, PromQL, fsspec) and where it may go (the allow-lists)
belong to the sources. The controller builds them once from settings
(``providers.sources.guarded``) and passes them in, as Argo Rollouts' analysis controller gets
a ``metricproviders.Provider`` per metric from its factory; tests pass the same public types
with their own transports. The run never reaches for a source's private function.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from docparser_operator.analysis.counters import TrackCounters
from docparser_operator.analysis.shadow_score import ShadowCounters
from docparser_operator.api.analysis_spec import CanaryAnalysis, PrometheusSource
from docparser_operator.providers.golden import Documents


class SourceUnavailable(Exception):
    """No reading this pass. ``str()`` is the status message: the source's own words and
    reason codes, never what a remote server sent."""


@dataclass(frozen=True)
class TrackQuery:
    """One track's reading: which revision, its pods (the pods source reads them) and the
    window's length so far (a source that keeps history answers for that span)."""

    namespace: str
    revision: str
    pods: Sequence[Mapping[str, Any]]
    seconds: int


@dataclass(frozen=True)
class ShadowQuery:
    """The shadow's reading: the stable pods' comparison with one canary revision (stable's
    pods send the copies and compare, so only their ``/metrics`` carry it)."""

    namespace: str
    stable_revision: str
    canary_revision: str
    pods: Sequence[Mapping[str, Any]]  # the stable revision's pods
    seconds: int


class MetricSource(Protocol):
    """Where a window's counters come from (Argo Rollouts: ``metricproviders.Provider``)."""

    @property
    def cumulative(self) -> bool:
        """True: counters since each pod started (the run differences a window's two ends and
        remembers its start); False: counters over ``seconds`` (the source keeps history)."""

    def refusal(self) -> str | None:
        """Why this source may not be read at all (a URL outside the allow-list), or None."""

    def measure(self, query: TrackQuery) -> TrackCounters:
        """One track's counters; raises SourceUnavailable."""

    def measure_shadow(self, query: ShadowQuery) -> ShadowCounters:
        """The stable pods' shadow counters for the canary revision; raises SourceUnavailable."""


class GoldenReader(Protocol):
    """The golden gate's I/O: a golden set by URI, and each track's pod parsing it."""

    def refusal(self, uri: str, namespace: str) -> str | None:
        """Why the golden set at ``uri`` may not be read for a DocParser in ``namespace``
        (the allow-list's entries may be per namespace), or None."""

    def load(self, uri: str, namespace: str) -> Documents:
        """The golden set at ``uri``; raises golden.GoldenUnavailable."""

    def read(
        self,
        documents: Documents,
        canary_pods: Sequence[Mapping[str, Any]],
        stable_pods: Sequence[Mapping[str, Any]],
    ) -> dict[str, tuple[str, str, str]]:
        """document -> (expected, canary's text, stable's text); raises GoldenUnavailable."""


@dataclass(frozen=True)
class Sources:
    """Everything one analysis pass may read, chosen by the controller."""

    pods: MetricSource
    prometheus: Callable[[PrometheusSource, str], MetricSource]  # (source, namespace)
    golden: GoldenReader

    def metrics(self, config: CanaryAnalysis, namespace: str) -> MetricSource:
        """The metric source of a DocParser in ``namespace``: its Prometheus when it names
        one (under the allow-list's rules for that namespace), else the pods."""
        if config.prometheus is None:
            return self.pods
        return self.prometheus(config.prometheus, namespace)

    def refusals(self, config: CanaryAnalysis, namespace: str) -> list[str]:
        """Why the analysis names something the operator may not read (-> Degraded
        ``SourceNotAllowed``); empty when every source it names is allowed. Each reason names
        the field and the rule, never the field's value."""
        found = [self.metrics(config, namespace).refusal()]
        if config.golden is not None and config.golden.uri is not None:
            found.append(self.golden.refusal(config.golden.uri, namespace))
        return [r for r in found if r is not None]
