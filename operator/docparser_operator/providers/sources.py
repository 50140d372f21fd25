"""The analysis' sources: the pods' own ``/metrics``, PromQL, golden documents, each behind
the interfaces of base.py and every request through the one guarded client (fetch.py)."""

from __future__ import annotations

from collections.abc import Sequence

from docparser_operator.api import naming
from docparser_operator.api.analysis_spec import PrometheusSource
from docparser_operator.providers import golden, pods, prometheus
from docparser_operator.providers.activity import ActivitySource, PodActivity
from docparser_operator.providers.base import Sources
from docparser_operator.providers.fetch import Fetcher, Resolve, system_resolve
from docparser_operator.providers.golden_uri import DEFAULT_SOURCES as DEFAULT_GOLDEN
from docparser_operator.providers.golden_uri import GoldenSets, http_allow_list
from docparser_operator.providers.urls import AllowList

PROMETHEUS_SETTING = "DOCPARSER_OPERATOR_PROMETHEUS_URLS"
__all__ = ["DEFAULT_GOLDEN", "PROMETHEUS_SETTING", "ActivitySource", "activity", "guarded"]


def activity(
    resolve: Resolve = system_resolve, limits: pods.ReadLimits | None = None
) -> PodActivity:
    """Scale to zero's source: the front's and the runtime pods' own ``/metrics``, reached on
    their IP and the runtime's port only (the pods' rule, as the analysis reads them), all of
    a DocParser's pods at once under one deadline (``limits``, pods.read_pods)."""
    to_pods = Fetcher(AllowList.pods(naming.HTTP_PORT), resolve)
    return PodActivity(pods.guarded(to_pods), limits or pods.ReadLimits())


def guarded(
    prometheus_urls: Sequence[str],
    golden_sources: Sequence[str],
    resolve: Resolve = system_resolve,
    limits: pods.ReadLimits | None = None,
) -> Sources:
    """The production sources: pods reached on their IP and the runtime's port only,
    PromQL only under ``prometheus_urls``, golden sets only under ``golden_sources`` (an
    entry holding ``{namespace}`` is per namespace: urls.py).
    ``limits``: how one reading of a DocParser's pods is bounded (pods.read_pods).
    Raises urls.BadURL for an entry that is not a plain prefix (at start-up)."""
    to_pods = Fetcher(AllowList.pods(naming.HTTP_PORT), resolve)
    to_prometheus = Fetcher(AllowList.of(prometheus_urls, PROMETHEUS_SETTING), resolve)
    to_golden = Fetcher(http_allow_list(golden_sources), resolve)

    def promql(source: PrometheusSource, namespace: str) -> prometheus.PromQL:
        return prometheus.PromQL(source, to_prometheus.scoped(namespace))

    return Sources(
        pods=pods.PodMetrics(pods.guarded(to_pods), limits or pods.ReadLimits()),
        prometheus=promql,
        golden=GoldenSets(tuple(golden_sources), golden.guarded(to_pods), to_golden),
    )
