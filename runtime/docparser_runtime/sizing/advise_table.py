"""The human-readable form of ``docparser-runtime advise`` (``--json`` prints the data).

Kept apart from ``advise`` so the arithmetic stays testable on plain data and the wording
can change without touching it.
"""

from __future__ import annotations

from typing import Any


def _pct(share: float) -> str:
    return f"{100 * share:.0f} %"


def render(advice: dict[str, Any]) -> str:
    """Sections: pages by chosen tier, fixed tiers, recommendation, GPU memory, replicas."""
    lines = [f"{advice['pages']} pages (selector v{advice['selector_version']})"]
    for name, why in advice["skipped"]:
        lines.append(f"  skipped {name}: {why}")
    if not advice["pages"]:
        return "\n".join([*lines, "no readable pages: nothing to advise"])
    n = advice["pages"]
    lines += ["", "tier auto chose:", f"  {'tier':>4}  {'pages':>6}  {'share':>6}  tokens/page"]
    for row in advice["by_tier"]:
        lines.append(
            f"  {row['tier']:>4}  {row['pages']:>6}  {_pct(row['pages'] / n):>6}  "
            f"{row['vision_tokens'] / row['pages']:.0f}"
        )
    lines.append(f"  auto: {advice['auto_vision_tokens'] / n:.0f} vision tokens a page")
    lines += ["", "fixed tiers:", f"  {'tier':>4}  {'tokens/page':>11}  too coarse for"]
    for row in advice["fixed_tiers"]:
        lines.append(
            f"  {row['tier']:>4}  {row['vision_tokens'] / n:>11.0f}  "
            f"{row['too_low_pages']} pages ({_pct(row['too_low_share'])})"
        )
    rec = advice["recommended"]
    mem = advice["gpu_memory"]
    lines += [
        "",
        f"recommended: tier {rec['tier']}: {rec['vision_tokens'] / n:.0f} vision tokens a page, "
        f"{_pct(rec['tokens_saved_vs_top'])} fewer than the top tier; worst-case GPU memory "
        f"{_pct(rec['worst_case_memory_saved_vs_top'])} lower"
        + (" (auto is sized at its cap)" if rec["tier"] == "auto" else ""),
        "",
        f"GPU memory ({mem['engine']}, maxBatchSize {mem['max_batch_size']}, maxNewTokens "
        f"{mem['max_new_tokens']}): worst case {mem['worst_case_gib']:.1f} GiB, a batch of "
        f"mean pages {mem['mean_page_batch_gib']:.1f} GiB",
    ]
    if "fits" in mem:
        verdict = "fits" if mem["fits"] else "does NOT fit"
        lines.append(
            f"  gpuMemory {mem['gpu_memory']}: {verdict}; largest batch that fits: "
            f"{mem['largest_batch_that_fits']}"
        )
    tp = advice.get("throughput")
    if tp:
        mark = " (ESTIMATE: no measured bench/gpu_generate.py figures)" if tp["estimate"] else ""
        lines += ["", f"throughput: {tp['pages_per_s_per_replica']:.2f} pages/s a replica{mark}"]
        if "replicas" in tp:
            top = next(k for k in tp if k.startswith("replicas_at_tier_"))
            lines.append(
                f"  {tp['pages_per_hour']:.0f} pages/hour: {tp['replicas']} replicas "
                f"({tp[top]} at tier {top.rsplit('_', 1)[1]})"
            )
    return "\n".join(lines)
