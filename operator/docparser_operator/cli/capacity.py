"""``kubectl docparser capacity NAME``: ``status.capacity`` and its advice as a table.

The table is the one ``docparser-runtime advise --from-metrics`` prints for the same figures
(its ``live_advise`` renders them alike; tests/operator/cli/test_capacity_cli.py holds the two
renderers equal), so an owner can compare what the operator measured with a reading of their
own.
"""

from __future__ import annotations

import sys
from typing import Any, TextIO

from docparser_operator.cli.connection import Connection

ROWS = (
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
RECOMMENDED = (
    ("replicas", "replicas"),
    ("tier", "tier"),
    ("memory", "resources.memory"),
    ("maxBatchSize", "runtime.maxBatchSize"),
    ("targetWaitSeconds", "sized for a p95 wait (s)"),
)


def render_report(report: dict[str, Any], title: str) -> str:
    """The report (``status.capacity``'s shape) as aligned rows: figures, tiers, recommended."""
    lines = [
        f"{title}: {report.get('window', '?')} to {report.get('since', '?')} "
        f"(from {report.get('source', '?')}, {report.get('pods', 0)} pod(s))",
        "",
    ]
    lines += [f"  {label:<30} {report[key]}" for key, label in ROWS if key in report]
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
            f"  {label:<30} {recommended[key]}" for key, label in RECOMMENDED if key in recommended
        ]
    return "\n".join(lines) + "\n"


def render(dp: dict[str, Any]) -> str:
    """A DocParser's report and its CapacityAdvice, or why there is none yet."""
    meta, status = dp.get("metadata") or {}, dp.get("status") or {}
    named = f"DocParser {meta.get('namespace')}/{meta.get('name')}"
    report = status.get("capacity")
    if not (dp.get("spec") or {}).get("capacity"):
        return f"{named}: spec.capacity is not set (add capacity: {{window: 1h}})\n"
    if not report:
        window = ((dp.get("spec") or {}).get("capacity") or {}).get("window", "1h")
        return f"{named}: no report yet (the first comes a window, {window}, after start)\n"
    out = render_report(report, f"{named}: capacity over")
    advice = next(
        (c for c in status.get("conditions") or [] if c.get("type") == "CapacityAdvice"), None
    )
    if advice is not None:
        out += f"\nCapacityAdvice ({advice.get('reason')}): {advice.get('message')}\n"
    else:
        out += "\nno advice: the spec fits this traffic (within 25 %)\n"
    return out


def run(name: str, connection: Connection, out: TextIO = sys.stdout) -> int:
    """Read the DocParser and print its report; 1 when it is missing or unreadable."""
    from docparser_operator.api.kinds import DOCPARSER
    from docparser_operator.kube.client import ApiError, KubeClient

    client = KubeClient(connection.configuration, user_agent="docparser-operator-cli")
    try:
        dp = client.get(DOCPARSER, connection.namespace, name)
    except ApiError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if dp is None:
        print(f"error: DocParser {connection.namespace}/{name} not found", file=sys.stderr)
        return 1
    out.write(render(dp))
    return 0
