"""``docparser-runtime advise --from-metrics URL``: the operator's live capacity figures from
a pod's ``/metrics`` or a Prometheus (issue 36).

WHY: ``status.capacity`` tells the owner of a running DocParser what its traffic needs; a
person without the operator (or before creating a DocParser) wants the same answer from a pod
they run, or from their Prometheus. The runtime may not import the operator (separate
distributions), so this reads the same series and computes the same figures and
recommendations with the same rounding, the recommendations through ``capacity``'s
equations (held equal to the operator's by tests/operator/core/plan/test_capacity_parity.py), and
prints the table ``kubectl docparser capacity`` prints (tests/operator/cli/test_capacity_cli.py
runs both on one reading).

- A URL whose path ends in ``/metrics`` is one pod: it is read twice, ``interval_s`` apart,
  and the figures are that interval's (its rate is also the busiest: one interval).
- Any other URL is a Prometheus base URL: the window's figures come from PromQL
  (``increase()`` over the window, the busiest minute as ``max_over_time`` of the per-minute
  rate), over the series ``selector`` matches (e.g. ``namespace="ocr"``).
"""

from __future__ import annotations

import json
import math
import time
import urllib.parse
import urllib.request
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from docparser_runtime.sizing import capacity

MAX_BYTES = 8 * 1024 * 1024
Fetch = Callable[[str], str]


@dataclass(frozen=True)
class LiveOptions:
    """What the recommendations need of the DocParser's spec."""

    tier: int | str = "auto"
    engine: str = "deepseek-ocr2"
    max_batch_size: int = 8
    max_new_tokens: int = 4096
    gpu_memory: str | None = None
    target_wait_s: float = capacity.TARGET_WAIT_S


def http_get(url: str, timeout_s: float = 10.0) -> str:
    """GET ``url`` (http or https only), bounded in time and size."""
    if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
        raise ValueError(f"not an http(s) URL: {url!r}")
    with urllib.request.urlopen(url, timeout=timeout_s) as reply:
        body = reply.read(MAX_BYTES + 1)
    if len(body) > MAX_BYTES:
        raise ValueError(f"{url}: reply larger than {MAX_BYTES} bytes")
    return str(body.decode())


Counters = dict[str, Any]


def parse(text: str) -> Counters:
    """A pod's capacity series (the operator's ``capacity_reading.parse``, as plain data)."""
    out: Counters = defaultdict(float)
    for key in ("auto_pages", "service_seconds", "service_pages", "queue_wait"):
        out[key] = defaultdict(float)
    scalars = {
        "docparser_pages_total": "pages",
        "docparser_vision_tokens_total": "vision_tokens",
        "docparser_output_tokens_total": "output_tokens",
    }
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            name, labels = s.name, s.labels
            if name in scalars:
                out[scalars[name]] += s.value
            elif name == "docparser_tier_pages_total" and labels.get("choice") == "auto":
                out["auto_pages"][int(labels["tier"])] += s.value
            elif name == "docparser_page_service_seconds_sum":
                out["service_seconds"][int(labels["tier"])] += s.value
            elif name == "docparser_page_service_seconds_count":
                out["service_pages"][int(labels["tier"])] += s.value
            elif (
                name == "docparser_stage_duration_seconds_bucket" and labels.get("stage") == "queue"
            ):
                out["queue_wait"][float(labels["le"])] += s.value
            elif name == "docparser_decode_slots":
                out["slots"] = max(out["slots"], s.value)
            elif name == "docparser_memory_bytes" and labels.get("kind") in ("peak", "limit"):
                key = f"memory_{labels['kind']}"
                out[key] = max(out[key], s.value)
    return out


def grown(now: Counters, before: Counters) -> Counters:
    """The counters' growth (gauges as now); all of ``now`` when a counter went down."""
    out: Counters = {k: now.get(k, 0.0) for k in ("slots", "memory_peak", "memory_limit")}
    for key in ("pages", "vision_tokens", "output_tokens"):
        out[key] = now.get(key, 0.0) - before.get(key, 0.0)
    for key in ("auto_pages", "service_seconds", "service_pages", "queue_wait"):
        then = before.get(key) or {}
        out[key] = {k: v - then.get(k, 0.0) for k, v in (now.get(key) or {}).items()}
    values = [out[k] for k in ("pages", "vision_tokens", "output_tokens")]
    values += [v for k in ("auto_pages", "service_seconds", "service_pages", "queue_wait")
               for v in out[k].values()]  # fmt: skip
    return now if any(v < 0 for v in values) else out


def histogram_quantile(buckets: dict[float, float], q: float) -> float:
    """PromQL's histogram_quantile over cumulative (le -> count) buckets."""
    ordered = sorted(buckets.items())
    if not ordered or ordered[-1][1] <= 0:
        return 0.0
    rank = q * ordered[-1][1]
    lower, below = 0.0, 0.0
    for le, count in ordered:
        if count >= rank:
            if math.isinf(le):
                return lower
            inside = count - below
            return lower + (le - lower) * ((rank - below) / inside if inside else 1.0)
        lower, below = le, count
    return lower


def significant(value: float, digits: int = 2) -> float:
    if value == 0 or not math.isfinite(value):
        return 0.0
    return float(f"{value:.{digits}g}")


def gib(n_bytes: float) -> str:
    return f"{significant(n_bytes / capacity.GIB):g}Gi"


def report(
    c: Counters, seconds: float, peak: float, pods: int, opts: LiveOptions, *, source: str,
    window: str, since: str,
) -> dict[str, Any]:  # fmt: skip
    """The figures and recommendations in ``status.capacity``'s shape and rounding."""
    pages = c["pages"]
    timed = sum(c["service_pages"].values())
    spp = sum(c["service_seconds"].values()) / timed if timed else 0.0
    per_tier = {t: s / c["service_pages"][t] for t, s in c["service_seconds"].items()
                if c["service_pages"].get(t)}  # fmt: skip
    auto = {t: n for t, n in c["auto_pages"].items() if n > 0}
    chosen = sum(auto.values())
    rec: dict[str, Any] = {}
    slots = int(c["slots"]) or opts.max_batch_size
    if spp > 0:
        rec["replicas"] = capacity.replicas_at_peak(peak, spp, slots, opts.target_wait_s)
        rec["targetWaitSeconds"] = opts.target_wait_s
    tier: int | str | None = None
    if opts.tier == "auto" and chosen > 0:
        tier = capacity.tier_for_mix(auto)
        rec["tier"] = str(tier)
    if c["memory_peak"] > 0:
        rec["memory"] = gib(capacity.memory_for_peak(c["memory_peak"]))
    if opts.gpu_memory and capacity.WEIGHTS_BYTES.get(opts.engine):
        sized = tier if isinstance(tier, int) else (6 if opts.tier == "auto" else int(opts.tier))
        rec["maxBatchSize"] = capacity.batch_for_gpu(
            opts.engine, sized, opts.max_new_tokens, capacity.parse_quantity(opts.gpu_memory)
        )
    out: dict[str, Any] = {
        "window": window,
        "since": since,
        "source": source,
        "pods": pods,
        "pagesPerSecond": significant(pages / seconds if seconds > 0 else 0.0),
        "peakPagesPerSecond": significant(peak),
        "visionTokensPerPage": significant(c["vision_tokens"] / pages if pages else 0.0),
        "outputTokensPerPage": significant(c["output_tokens"] / pages if pages else 0.0),
        "secondsPerPage": significant(spp),
    }
    if c["slots"]:
        out["slots"] = int(c["slots"])
    out["queueWaitP95Seconds"] = significant(histogram_quantile(c["queue_wait"], 0.95))
    if c["memory_peak"]:
        out["memoryPeak"] = gib(c["memory_peak"])
    if c["memory_limit"]:
        out["memoryLimit"] = gib(c["memory_limit"])
    tiers = []
    for t in sorted(set(per_tier) | set(auto)):
        row: dict[str, Any] = {"tier": t}
        if chosen:
            row["autoShare"] = significant(auto.get(t, 0.0) / chosen)
        if t in per_tier:
            row["secondsPerPage"] = significant(per_tier[t])
        tiers.append(row)
    if tiers:
        out["tiers"] = tiers
    out["recommended"] = rec
    return out


def from_pod(
    url: str, opts: LiveOptions, *, interval_s: float = 60.0, fetch: Fetch = http_get,
    sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.time,
) -> dict[str, Any]:  # fmt: skip
    """One pod's figures over ``interval_s`` between two reads of its ``/metrics``."""
    first, at = parse(fetch(url)), clock()
    sleep(interval_s)
    second, end = parse(fetch(url)), clock()
    seconds = max(end - at, 1e-9)
    c = grown(second, first)
    since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(end))
    return report(
        c, seconds, c["pages"] / seconds, 1, opts,
        source="pod", window=f"{round(seconds)}s", since=since,
    )  # fmt: skip


def promql(selector: str, seconds: int) -> dict[str, str]:
    """name -> PromQL over the window, for the series ``selector`` matches (the operator's
    queries, with the person's matchers instead of a DocParser's)."""

    def sel(**kw: str) -> str:
        parts = [p for p in [selector.strip().strip("{}")] if p]
        parts += [f"{k}={json.dumps(v)}" for k, v in kw.items()]
        return "{" + ",".join(parts) + "}"

    def increase(metric: str, by: str = "", **kw: str) -> str:
        group = f" by ({by})" if by else ""
        return f"sum{group}(increase({metric}{sel(**kw)}[{seconds}s]))"

    return {
        "pages": increase("docparser_pages_total"),
        "vision_tokens": increase("docparser_vision_tokens_total"),
        "output_tokens": increase("docparser_output_tokens_total"),
        "auto_pages": increase("docparser_tier_pages_total", "tier", choice="auto"),
        "service_seconds": increase("docparser_page_service_seconds_sum", "tier"),
        "service_pages": increase("docparser_page_service_seconds_count", "tier"),
        "queue_wait": increase("docparser_stage_duration_seconds_bucket", "le", stage="queue"),
        "peak": f"max_over_time(sum(rate(docparser_pages_total{sel()}[1m]))[{seconds}s:15s])",
        "slots": f"max(docparser_decode_slots{sel()})",
        "pods": f"count(docparser_decode_slots{sel()})",
        "memory_peak": f"max(max_over_time(docparser_memory_bytes{sel(kind='peak')}[{seconds}s]))",
        "memory_limit": f"max(docparser_memory_bytes{sel(kind='limit')})",
    }


def from_prometheus(
    url: str, opts: LiveOptions, *, window: str = "1h", selector: str = "",
    fetch: Fetch = http_get, clock: Callable[[], float] = time.time,
) -> dict[str, Any]:  # fmt: skip
    """The window's figures from a Prometheus HTTP API at ``url``."""
    seconds = int(window[:-1]) * {"s": 1, "m": 60, "h": 3600}[window[-1]]
    base = url.rstrip("/") + "/api/v1/query?"
    rows: dict[str, list[tuple[dict[str, str], float]]] = {}
    for name, query in promql(selector, seconds).items():
        body = json.loads(fetch(base + urllib.parse.urlencode({"query": query})))
        if body.get("status") != "success":
            raise ValueError(f"Prometheus refused {name}: {body.get('errorType', 'unknown')}")
        rows[name] = [
            ({str(k): str(v) for k, v in (r.get("metric") or {}).items()}, float(r["value"][1]))
            for r in (body.get("data") or {}).get("result") or []
        ]

    def total(name: str) -> float:
        return sum(v for _, v in rows[name])

    def by(name: str, label: str, kind: type = int) -> dict[Any, float]:
        return {kind(m[label]): v for m, v in rows[name] if label in m}

    c: Counters = {
        "pages": total("pages"),
        "vision_tokens": total("vision_tokens"),
        "output_tokens": total("output_tokens"),
        "auto_pages": by("auto_pages", "tier"),
        "service_seconds": by("service_seconds", "tier"),
        "service_pages": by("service_pages", "tier"),
        "queue_wait": by("queue_wait", "le", float),
        "slots": total("slots"),
        "memory_peak": total("memory_peak"),
        "memory_limit": total("memory_limit"),
    }
    since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(clock()))
    return report(
        c, float(seconds), total("peak"), round(total("pods")), opts,
        source="prometheus", window=window, since=since,
    )  # fmt: skip


def render_report(report: dict[str, Any], title: str) -> str:
    """The table ``kubectl docparser capacity`` prints (its ``render_report``, line for line)."""
    rows = (
        ("pagesPerSecond", "pages/s"),
        ("peakPagesPerSecond", "pages/s, busiest minute"),
        ("visionTokensPerPage", "visual tokens a page"),
        ("outputTokensPerPage", "output tokens a page"),
        ("secondsPerPage", "seconds a page holds a slot"),
        ("slots", "slots a pod"),
        ("queueWaitP95Seconds", "queue wait p95 (s)"),
        ("memoryPeak", "pod memory peak"),
        ("memoryLimit", "pod memory limit"),
    )
    recommended_rows = (
        ("replicas", "replicas"),
        ("tier", "tier"),
        ("memory", "resources.memory"),
        ("maxBatchSize", "runtime.maxBatchSize"),
        ("targetWaitSeconds", "sized for a p95 wait (s)"),
    )
    lines = [
        f"{title}: {report.get('window', '?')} to {report.get('since', '?')} "
        f"(from {report.get('source', '?')}, {report.get('pods', 0)} pod(s))",
        "",
    ]
    lines += [f"  {label:<30} {report[key]}" for key, label in rows if key in report]
    tiers = report.get("tiers") or []
    if tiers:
        lines += ["", f"  {'tier':>4}  {'auto chose':>10}  {'s a page':>8}"]
        for row in tiers:
            share = row.get("autoShare")
            shown = f"{100 * share:.0f} %" if share is not None else "-"
            lines.append(
                f"  {row.get('tier', '?'):>4}  {shown:>10}  {row.get('secondsPerPage', '-'):>8}"
            )
    recommended = report.get("recommended") or {}
    if recommended:
        lines += ["", "  recommended:"]
        lines += [
            f"  {label:<30} {recommended[key]}"
            for key, label in recommended_rows
            if key in recommended
        ]
    return "\n".join(lines) + "\n"
