"""The canary analysis' other metric source: PromQL over a Prometheus that scrapes the pods.

For users who already run one (``spec.canary.analysis.prometheus``). At a window's end each
track's counters over the window come from ``increase(...[<window>s])`` instant queries,
summed over the revision's series: API requests (``/v1/`` routes), those answered 5xx, the
total-stage latency histogram by ``le``, pages and the pages of each output outcome; with
``canary.shadow`` the stable revision's shadow counters for the canary revision the same way
(shadow_queries). The
result is the same ``TrackCounters`` the scrape source differences, so the checks are the
same (the latency quantile is computed as PromQL's ``histogram_quantile`` would, over the summed
bucket increases, at the quantile the window's request count supports: counters.py).

Unlike the scrape source nothing is remembered at a window's start: Prometheus holds the
history, so an operator restart judges the window it finds in status without starting over.
``increase`` extrapolates to the window's edges, so counts are not integers, and a series
born inside the window (the first 5xx of a pod) counts from its first scrape on: the usual
PromQL caveats, which the thresholds absorb.

The URL is the DocParser author's choice, so it is fetched only when a cluster admin allowed it
(``DOCPARSER_OPERATOR_PROMETHEUS_URLS``, optionally per namespace with ``{namespace}``;
fetch.py never follows a redirect and bounds every reply). It may not carry a query: each
request is rebuilt from its parsed scheme, host, port and path plus ``query=<our PromQL>``,
because Prometheus evaluates the first ``query`` it reads, and one in the author's URL would
replace the operator's, reading any series of any namespace into status (through the window's
counts). A failed query is reported as the HTTP status and Prometheus' ``errorType`` alone:
an error body could be any internal endpoint's JSON, and status is readable by the author.
Nothing of the URL itself goes to status either: the field's name stands for it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace

from docparser_operator.analysis import shadow_score as shadow
from docparser_operator.analysis.counters import OUTCOMES, TrackCounters
from docparser_operator.analysis.shadow_score import ShadowCounters
from docparser_operator.api.analysis_spec import PrometheusSource
from docparser_operator.api.uri import BadURI
from docparser_operator.providers.base import ShadowQuery, SourceUnavailable, TrackQuery
from docparser_operator.providers.fetch import Fetcher, FetchError
from docparser_operator.providers.urls import parse

QUERY_TIMEOUT_S = 5.0
QUERY_MAX_BYTES = 8 * 1024 * 1024  # a few summed series; anything near this is not ours
# Prometheus' HTTP API error types (web/api/v1); anything else is reported as "unknown".
ERROR_TYPES = frozenset(
    {"timeout", "canceled", "execution", "bad_data", "internal", "unavailable", "not_found"}
    | {"not_acceptable"}
)


class PrometheusUnavailable(Exception):
    """The query failed or Prometheus answered with an error: no verdict this pass. The
    message is reason codes only: never the URL, never the reply's text."""


def query_url(source: PrometheusSource) -> str:
    """The instant-query endpoint under ``source.url``, rebuilt from its parsed parts (no
    query, fragment or userinfo survives: the parser refuses them); raises BadURI."""
    base = parse(source.url)
    return str(replace(base, path=base.path.rstrip("/") + "/api/v1/query", query=""))


def selector(source: PrometheusSource, namespace: str, revision: str, **extra: str) -> str:
    """The label matchers of one revision's series (values are DNS labels and hex: no
    quoting beyond PromQL's string syntax is needed, json.dumps gives exactly that)."""
    matchers = {source.namespace_label: namespace, source.revision_label: revision}
    parts = [f"{k}={json.dumps(v)}" for k, v in matchers.items()]
    parts += [f"{k}=~{json.dumps(v)}" for k, v in extra.items()]
    return "{" + ",".join(parts) + "}"


def queries(
    source: PrometheusSource, namespace: str, revision: str, seconds: int
) -> dict[str, str]:
    """name -> PromQL for one track's window (pure)."""

    def increase(metric: str, by: str = "", **extra: str) -> str:
        group = f" by ({by})" if by else ""
        sel = selector(source, namespace, revision, **extra)
        return f"sum{group}(increase({metric}{sel}[{seconds}s]))"

    out = {
        "requests": increase("docparser_requests_total", route="/v1/.*"),
        "errors": increase("docparser_requests_total", route="/v1/.*", status="5.."),
        "latency": increase("docparser_stage_duration_seconds_bucket", "le", stage="total"),
        "pages": increase("docparser_pages_total"),
    }
    for outcome in OUTCOMES:
        out[outcome] = increase(f"docparser_pages_{outcome}_total")
    return out


Rows = list[tuple[dict[str, str], float]]


def _instant(source: PrometheusSource, promql: str, fetcher: Fetcher) -> Rows:
    where = "spec.canary.analysis.prometheus.url"
    try:
        url = query_url(source)
        reply = fetcher.get(
            url, params={"query": promql}, timeout_s=QUERY_TIMEOUT_S, max_bytes=QUERY_MAX_BYTES
        )
    except BadURI as exc:
        raise PrometheusUnavailable(f"{where}: refused: {exc}") from None
    except FetchError as exc:  # refused, unreachable, timed out, too large, a redirect
        raise PrometheusUnavailable(f"{exc}") from None
    try:
        body = json.loads(reply.body)
    except ValueError:
        body = None
    if not isinstance(body, dict):
        raise PrometheusUnavailable(f"HTTP {reply.status}, not a Prometheus API reply")
    if body.get("status") != "success" or reply.status != 200:
        error_type = body.get("errorType")
        said = error_type if error_type in ERROR_TYPES else "unknown"
        raise PrometheusUnavailable(f"HTTP {reply.status}, errorType {said}")
    try:
        rows = [
            (
                {str(k): str(v) for k, v in (item.get("metric") or {}).items()},
                float(item["value"][1]),
            )
            for item in (body.get("data") or {}).get("result") or []
        ]
    except (AttributeError, KeyError, IndexError, TypeError, ValueError):
        raise PrometheusUnavailable("HTTP 200, a malformed vector") from None
    return rows


def window_counters(
    source: PrometheusSource,
    namespace: str,
    revision: str,
    seconds: int,
    fetcher: Fetcher,
) -> TrackCounters:
    """One track's counters over the last ``seconds``; raises PrometheusUnavailable."""
    values: dict[str, float] = {}
    buckets: list[tuple[float, float]] = []
    for name, promql in queries(source, namespace, revision, max(seconds, 1)).items():
        rows = _instant(source, promql, fetcher)
        if name == "latency":
            buckets = sorted((float(m["le"]), v) for m, v in rows if "le" in m)
        else:
            values[name] = sum(v for _, v in rows)
    return TrackCounters(
        requests=values["requests"],
        errors=values["errors"],
        latency=tuple(buckets),
        pages=values["pages"],
        outcomes=tuple((outcome, values[outcome]) for outcome in OUTCOMES),
    )


def shadow_queries(source: PrometheusSource, query: ShadowQuery) -> dict[str, str]:
    """name -> PromQL for the stable pods' shadow counters over the span (pure): the stable
    revision's series (the pod label) for the canary revision (the metric's own label)."""

    def increase(metric: str, by: str = "", **extra: str) -> str:
        group = f" by ({by})" if by else ""
        sel = selector(source, query.namespace, query.stable_revision, **extra)
        return f"sum{group}(increase({metric}{sel}[{max(query.seconds, 1)}s]))"

    canary = {"canary_revision": query.canary_revision}
    return {
        "mirrored": increase("docparser_shadow_mirrored_pages_total", **canary),
        "compared": increase("docparser_shadow_pages_compared_total", **canary),
        "structure": increase("docparser_shadow_structure_disagreements_total", **canary),
        "cer": increase("docparser_shadow_page_cer_bucket", "le", **canary),
        "truncated": increase(
            "docparser_shadow_flagged_pages_total", "side", flag="truncated", **canary
        ),
        "dropped": increase("docparser_shadow_dropped_total", "reason"),
    }


def shadow_counters(
    source: PrometheusSource, query: ShadowQuery, fetcher: Fetcher
) -> ShadowCounters:
    """The shadow's counters over the span; raises PrometheusUnavailable."""
    rows = {name: _instant(source, q, fetcher) for name, q in shadow_queries(source, query).items()}

    def total(name: str) -> float:
        return sum(v for _, v in rows[name])

    def by(name: str, label: str) -> dict[str, float]:
        return {m[label]: v for m, v in rows[name] if label in m}

    sides = by("truncated", "side")
    return ShadowCounters(
        mirrored=total("mirrored"),
        compared=total("compared"),
        structure=total("structure"),
        cer=tuple(sorted((float(le), v) for le, v in by("cer", "le").items())),
        stable_truncated=sides.get("stable", 0.0),
        canary_truncated=sides.get("canary", 0.0),
        dropped=tuple(
            sorted({**dict.fromkeys(shadow.DROP_REASONS, 0.0), **by("dropped", "reason")}.items())
        ),
    )


@dataclass(frozen=True)
class PromQL:
    """The ``MetricSource`` of one DocParser's Prometheus: counters over the window."""

    source: PrometheusSource
    fetcher: Fetcher

    @property
    def cumulative(self) -> bool:
        return False

    def refusal(self) -> str | None:
        reason = self.fetcher.refusal(self.source.url)
        return None if reason is None else f"spec.canary.analysis.prometheus.url: {reason}"

    def measure(self, query: TrackQuery) -> TrackCounters:
        try:
            return window_counters(
                self.source, query.namespace, query.revision, query.seconds, self.fetcher
            )
        except PrometheusUnavailable as exc:
            raise SourceUnavailable(f"cannot query Prometheus: {exc}") from None

    def measure_shadow(self, query: ShadowQuery) -> ShadowCounters:
        try:
            return shadow_counters(self.source, query, self.fetcher)
        except PrometheusUnavailable as exc:
            raise SourceUnavailable(f"cannot query Prometheus: {exc}") from None
