"""The canary analysis' other metric source: PromQL over a Prometheus that scrapes the pods.

For users who already run one (``spec.canary.analysis.prometheus``). At a window's end each
track's counters over the window come from ``increase(...[<window>s])`` instant queries,
summed over the revision's series: API requests (``/v1/`` routes), those answered 5xx, the
total-stage latency histogram by ``le``, pages and the pages of each output outcome. The
result is the same ``TrackCounters`` the scrape source differences, so the checks are the
same (the latency quantile is computed as PromQL's ``histogram_quantile`` would, over the summed
bucket increases, at the quantile the window's request count supports: counters.py).

Unlike the scrape source nothing is remembered at a window's start: Prometheus holds the
history, so an operator restart judges the window it finds in status without starting over.
``increase`` extrapolates to the window's edges, so counts are not integers, and a series
born inside the window (the first 5xx of a pod) counts from its first scrape on: the usual
PromQL caveats, which the thresholds absorb.
"""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from collections.abc import Callable

from docparser_operator.analysis.counters import OUTCOMES, TrackCounters
from docparser_operator.api.models import PrometheusSource

Fetch = Callable[[str], str]  # URL -> body; raises on any failure
QUERY_TIMEOUT_S = 5.0


class PrometheusUnavailable(Exception):
    """The query failed or Prometheus answered with an error: no verdict this pass."""


def _http_get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=QUERY_TIMEOUT_S) as reply:
        body: bytes = reply.read()
    return body.decode()


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


def _instant(source: PrometheusSource, promql: str, fetch: Fetch) -> Rows:
    url = f"{source.url.rstrip('/')}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    try:
        body = json.loads(fetch(url))
    except Exception as exc:  # unreachable, timed out, not JSON
        raise PrometheusUnavailable(f"{source.url}: {exc}") from exc
    if body.get("status") != "success":
        raise PrometheusUnavailable(f"{source.url}: {body.get('error') or body}")
    return [
        (item.get("metric") or {}, float(item["value"][1]))
        for item in (body.get("data") or {}).get("result") or []
    ]


def window_counters(
    source: PrometheusSource,
    namespace: str,
    revision: str,
    seconds: int,
    fetch: Fetch = _http_get,
) -> TrackCounters:
    """One track's counters over the last ``seconds``; raises PrometheusUnavailable."""
    values: dict[str, float] = {}
    buckets: list[tuple[float, float]] = []
    for name, promql in queries(source, namespace, revision, max(seconds, 1)).items():
        rows = _instant(source, promql, fetch)
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
