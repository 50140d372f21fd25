"""``docparser-runtime advise DIR``: which tier, how much GPU, how many replicas (issue 25).

WHY: a DocParser defaults to tier 6 (1,120 visual tokens a page) and nothing told an
operator what their documents need. This reads a folder of their own samples (images and
PDFs) through the same decoding and ``tier: auto`` selector as the server, and reports:

* the pages by the tier ``auto`` chose, with visual tokens;
* for every fixed tier, its tokens and how many pages it would read too coarsely, and the
  recommended default: the lowest fixed tier that loses under 2 % of pages when it costs
  within 10 % of ``auto``'s tokens (uniform batches, smaller worst case), else ``auto``;
* GPU memory of a full batch at ``maxBatchSize`` against ``gpuMemory``, sized as the
  operator sizes it (``capacity``), and the largest batch that fits;
* replicas for a target pages/hour from per-tier throughput: measured figures when given
  (``--throughput``), else the marked estimate of ``capacity.estimated_pages_per_s``.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, TextIO

from docparser_runtime.errors import DocParserError
from docparser_runtime.preprocess.pipeline import DecodeLimits, load_document
from docparser_runtime.preprocess.tier_select import SELECTOR_VERSION, choose_tier
from docparser_runtime.preprocess.tiling import MAX_TIER, plan_tiles
from docparser_runtime.sizing import capacity

EXTENSIONS = {".png", ".jpg", ".jpeg", ".webp", ".tif", ".tiff", ".bmp", ".gif", ".pdf"}
TOO_LOW_BUDGET = capacity.TOO_LOW_BUDGET  # share of pages a fixed tier may read too coarsely
FIXED_OVER_AUTO = capacity.FIXED_OVER_AUTO  # a fixed tier within this factor of auto's tokens


@dataclass(frozen=True)
class PageAdvice:
    file: str
    page: int  # 1-based
    width: int
    height: int
    tier: int
    vision_tokens: int
    text_px_global: float


@dataclass(frozen=True)
class AdviseOptions:
    max_tier: int = MAX_TIER
    engine: str = "deepseek-ocr2"
    max_batch_size: int = 8
    max_new_tokens: int = 4096
    gpu_memory: str | None = None
    pages_per_hour: float | None = None
    throughput: dict[int, float] | None = None  # measured pages/s of one replica, by tier


def sample_files(folder: Path) -> list[Path]:
    """Images and PDFs under ``folder``, recursively, in a stable order."""
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix.lower() in EXTENSIONS)


def analyse(
    files: list[Path],
    root: Path,
    limits: DecodeLimits,
    cap: int,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[list[PageAdvice], list[tuple[str, str]]]:
    """Every page's ``auto`` choice; files that cannot be decoded are listed with why."""
    pages: list[PageAdvice] = []
    skipped: list[tuple[str, str]] = []
    for n, path in enumerate(files, 1):
        name = str(path.relative_to(root))
        try:
            decoded = load_document(path.read_bytes(), tier=cap, pages=None, limits=limits)
        except (DocParserError, OSError) as exc:
            skipped.append((name, str(getattr(exc, "message", exc))))
            decoded = []
        for page in decoded:
            choice = choose_tier(page.image, cap)
            pages.append(
                PageAdvice(
                    name,
                    page.index + 1,
                    page.width,
                    page.height,
                    choice.tier,
                    choice.plan.vision_tokens,
                    round(choice.signals.text_height_global, 1),
                )
            )
        if progress:
            progress(n, len(files))
    return pages, skipped


def _fixed_tiers(pages: list[PageAdvice], cap: int) -> list[dict[str, Any]]:
    rows = []
    for tier in range(cap + 1):
        tokens = [plan_tiles(p.width, p.height, tier).vision_tokens for p in pages]
        low = sum(t < p.vision_tokens for t, p in zip(tokens, pages, strict=True))
        rows.append(
            {
                "tier": tier,
                "vision_tokens": sum(tokens),
                "too_low_pages": low,
                "too_low_share": low / len(pages),
            }
        )
    return rows


def _at_tier(pages: list[PageAdvice], tier: int) -> list[PageAdvice]:
    return [
        replace(p, tier=tier, vision_tokens=plan_tiles(p.width, p.height, tier).vision_tokens)
        for p in pages
    ]


def _throughput(pages: list[PageAdvice], measured: dict[int, float] | None) -> tuple[float, bool]:
    """Pages/s of one replica over this mix, and whether every figure was measured."""
    seconds, measured_all = 0.0, True
    for page in pages:
        if measured and page.tier in measured:
            seconds += 1 / measured[page.tier]
        else:
            seconds += 1 / capacity.estimated_pages_per_s(page.vision_tokens)
            measured_all = False
    return len(pages) / seconds, measured_all


def report(
    pages: list[PageAdvice], skipped: list[tuple[str, str]], opts: AdviseOptions
) -> dict[str, Any]:
    """The advice as plain data (what ``--json`` prints and the table shows)."""
    out: dict[str, Any] = {
        "selector_version": SELECTOR_VERSION,
        "pages": len(pages),
        "skipped": skipped,
    }
    if not pages:
        return out
    by_tier = Counter(p.tier for p in pages)
    auto_tokens = sum(p.vision_tokens for p in pages)
    fixed = _fixed_tiers(pages, opts.max_tier)
    top = fixed[-1]["vision_tokens"]
    ok = [f for f in fixed if f["too_low_share"] <= TOO_LOW_BUDGET]
    lowest = ok[0] if ok else fixed[-1]
    use_fixed = lowest["vision_tokens"] <= FIXED_OVER_AUTO * auto_tokens
    tier: int | str = lowest["tier"] if use_fixed else "auto"
    tokens = lowest["vision_tokens"] if use_fixed else auto_tokens
    sizing = {
        "engine": opts.engine,
        "max_batch_size": opts.max_batch_size,
        "max_new_tokens": opts.max_new_tokens,
    }
    worst = capacity.estimate_gpu_memory(
        opts.engine,
        tier=tier,
        cap=opts.max_tier,
        max_batch_size=opts.max_batch_size,
        max_new_tokens=opts.max_new_tokens,
    )
    at_top = capacity.estimate_gpu_memory(
        opts.engine,
        tier=opts.max_tier,
        max_batch_size=opts.max_batch_size,
        max_new_tokens=opts.max_new_tokens,
    )
    mean_batch = capacity.estimate_gpu_memory_for_tokens(
        opts.engine,
        vision_tokens=round(tokens / len(pages)),
        max_batch_size=opts.max_batch_size,
        max_new_tokens=opts.max_new_tokens,
    )
    memory: dict[str, Any] = {
        **sizing,
        "worst_case_gib": worst.total / capacity.GIB,
        f"tier_{opts.max_tier}_gib": at_top.total / capacity.GIB,
        "mean_page_batch_gib": mean_batch.total / capacity.GIB,
    }
    if opts.gpu_memory:
        available = capacity.parse_quantity(opts.gpu_memory)
        memory["gpu_memory"] = opts.gpu_memory
        memory["fits"] = worst.total <= available
        memory["largest_batch_that_fits"] = capacity.largest_batch_that_fits(
            opts.engine,
            tier=tier,
            max_batch_size=max(opts.max_batch_size, 256),
            max_new_tokens=opts.max_new_tokens,
            gpu_bytes=available,
        )
    out.update(
        by_tier=[
            {
                "tier": t,
                "pages": by_tier[t],
                "vision_tokens": sum(p.vision_tokens for p in pages if p.tier == t),
            }
            for t in sorted(by_tier)
        ],
        auto_vision_tokens=auto_tokens,
        fixed_tiers=fixed,
        recommended={
            "tier": tier,
            "vision_tokens": tokens,
            "tokens_saved_vs_top": 1 - tokens / top,
            "worst_case_memory_saved_vs_top": 1 - worst.total / at_top.total
            if at_top.total
            else 0.0,
        },
        gpu_memory=memory,
    )
    if opts.engine != "rapidocr":
        served = pages if tier == "auto" else _at_tier(pages, int(tier))
        pps, measured = _throughput(served, opts.throughput)
        top_pps, _ = _throughput(_at_tier(pages, opts.max_tier), opts.throughput)
        tp: dict[str, Any] = {
            "pages_per_s_per_replica": pps,
            "estimate": not measured,
            f"tier_{opts.max_tier}_pages_per_s_per_replica": top_pps,
        }
        if opts.pages_per_hour:
            tp["pages_per_hour"] = opts.pages_per_hour
            tp["replicas"] = capacity.replicas_for(opts.pages_per_hour, pps)
            tp[f"replicas_at_tier_{opts.max_tier}"] = capacity.replicas_for(
                opts.pages_per_hour, top_pps
            )
        out["throughput"] = tp
    out["page_list"] = [asdict(p) for p in pages]
    return out


def progress_bar(stream: TextIO = sys.stderr) -> Callable[[int, int], None]:
    """A one-line bar on a terminal (``\\r`` redraws), ended with a newline."""

    def show(done: int, total: int) -> None:
        width = 30
        filled = width * done // max(total, 1)
        stream.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} files")
        if done == total:
            stream.write("\n")
        stream.flush()

    return show
