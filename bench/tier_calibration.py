"""Calibrate ``tier: auto`` against a proxy for "enough resolution" (issue 25).

We have no real weights here, so "the tier reads the page" is judged with the CPU engine:
each generated page of ``tests/runtime/tier_pages.py`` is shrunk to what every distinct tile
plan lets the model see (``preprocess.tiling.plan_tiles``: the 1024 global view alone, or the
grid's canvas of 768 px tiles, each axis on its own, never enlarged), then read by the
RapidOCR engine. The page's error is order-free: each drawn line, cell or formula part is
looked up in the reply (``page_corpus.line_error``), weighted by its length.

Label: the lowest plan whose error is within ``--margin`` of the largest plan's (tier 6);
labels are recomputed from the cached errors, so another margin needs no new OCR. The
smallest and the largest plan are read first; the plans between only when the smallest
fails (otherwise none of them can be the label: at a smaller ``--margin`` than the sweep's
such a page's label can only come out higher, never hiding a page read too low).
The selector (``preprocess.tier_select.choose_tier``) is then scored over distinct plans:
right (the label's plan), too low (a smaller plan: it loses text) or too high (wastes
tokens). Nothing asserts; it prints tables (``--markdown`` for docs/benchmarks.md): every
page, and per kind of page the too-low count, its rate and the rate's 95 % Wilson upper
bound (issue 36 keeps the whole corpus's bound under 2 %: zero of at least 189 pages).
``--cached-only`` reads no page: a page without a label counts only when the selector
gives it the largest plan (it cannot be too low; ``top, unread``).

OCR is slow on a shared CPU (minutes per page and plan on a loaded 2-core box), so the
errors are kept in ``bench/tier_labels.json`` (``--cache``), written after every page; a rerun
only scores the selector again unless ``--relabel``. Entries whose ``engine_s`` is null were
recovered from a sweep's log (the error per plan is exact to 3 decimals).

    .venv/bin/python bench/tier_calibration.py --markdown
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "runtime"))  # tier_pages, page_corpus, documents

import page_corpus  # noqa: E402
import tier_pages  # noqa: E402
from docparser_runtime.engines.base import PageImage, ParseOptions  # noqa: E402
from docparser_runtime.engines.registry import engine_class  # noqa: E402
from docparser_runtime.preprocess.tier_select import (  # noqa: E402
    SELECTOR_VERSION,
    choose_tier,
    distinct_plans,
)
from docparser_runtime.preprocess.tiling import (  # noqa: E402
    GLOBAL_SIZE,
    TILE_SIZE,
    TilePlan,
    plan_tiles,
)
from PIL import Image  # noqa: E402

Z95 = 1.959964  # two-sided 95 % normal quantile
DEFAULT_CACHE = ROOT / "bench" / "tier_labels.json"  # the labels of the last full sweep


def model_view(image: Image.Image, plan: TilePlan) -> Image.Image:
    """The page at the resolution ``plan`` keeps (the larger of global view and tile canvas)."""
    w, h = image.size
    if plan.tiles:
        size = (min(w, plan.cols * TILE_SIZE), min(h, plan.rows * TILE_SIZE))
    else:
        scale = min(1.0, GLOBAL_SIZE / max(w, h))
        size = (round(w * scale), round(h * scale))
    if size == (w, h):
        return image
    return image.resize(size, Image.Resampling.BICUBIC)


def page_error(pieces: list[str], text: str) -> float:
    """Length-weighted share of the drawn text the reply does not contain (order-free)."""
    total = sum(len(p) for p in pieces)
    lost = sum(len(p) * min(1.0, page_corpus.line_error(p, text)) for p in pieces)
    return lost / max(total, 1)


def label_pages(pages, engine, margin: float) -> dict[str, dict]:
    """Per page: error and engine time per distinct plan, and the label (lowest good tier)."""
    labels: dict[str, dict] = {}
    for n, page in enumerate(pages, 1):
        w, h = page.image.size
        todo = distinct_plans(w, h)
        # The smallest and the largest plan first: when the smallest reads the page, the
        # plans between cannot be the label and are not read (OCR is the sweep's cost).
        order = [todo[0], todo[-1], *todo[1:-1]] if len(todo) > 1 else todo
        errors: dict[int, dict] = {}
        for tier, plan in order:
            if (
                len(errors) >= 2
                and errors[todo[0][0]]["error"] <= errors[todo[-1][0]]["error"] + margin
            ):
                break
            view = model_view(page.image, plan)
            t0 = time.perf_counter()
            result = engine.infer_batch([PageImage(0, view, 0, 256)], ParseOptions(mode="text"))
            seconds = time.perf_counter() - t0
            errors[tier] = {
                "tier": tier,
                "tokens": plan.vision_tokens,
                "error": page_error(page.pieces, result[0].content),
                "engine_s": seconds,
                "view": list(view.size),
            }
        plans = [errors[tier] for tier, _ in todo if tier in errors]
        label = label_of(plans, margin)
        labels[page.name] = {
            "kind": page.kind,
            "size": [w, h],
            "plans": plans,
            "label_tier": label["tier"],
            "label_tokens": label["tokens"],
        }
        print(
            f"[{n}/{len(pages)}] {page.name}: "
            + ", ".join(f"t{p['tier']} {p['error']:.3f}" for p in plans)
            + f" -> tier {label['tier']}",
            file=sys.stderr,
            flush=True,
        )
    return labels


def label_of(plans: list[dict], margin: float) -> dict:
    """The lowest plan whose error is within ``margin`` of the largest plan's."""
    top = plans[-1]["error"]
    return next(p for p in plans if p["error"] <= top + margin)


def score(page, labels: dict[str, dict], margin: float) -> dict:
    """The selector's choice for one page against its label."""
    entry = labels[page.name]
    label = label_of(entry["plans"], margin)
    entry = {**entry, "label_tier": label["tier"], "label_tokens": label["tokens"]}
    t0 = time.process_time()  # CPU time: a shared, loaded machine inflates wall time
    choice = choose_tier(page.image)
    select_ms = 1000 * (time.process_time() - t0)
    want = entry["label_tokens"]
    got = choice.plan.vision_tokens
    verdict = "right" if got == want else ("too low" if got < want else "too high")
    engine_s = entry["plans"][-1]["engine_s"]  # None: relabelled from a log
    return {
        "page": page.name,
        "kind": entry["kind"],
        "label": entry["label_tier"],
        "label_tokens": want,
        "chosen": choice.tier,
        "tokens": got,
        "verdict": verdict,
        "select_ms": select_ms,
        "tier6_tokens": plan_tiles(*page.image.size, 6).vision_tokens,
        "engine_ms": 1000 * engine_s if engine_s else None,
        "text_px_global": choice.signals.text_height_global,
        "errors": [round(p["error"], 3) for p in entry["plans"]],
        "plan_tiers": [p["tier"] for p in entry["plans"]],
    }


def unread_row(page) -> dict | None:
    """A page with no cached label whose choice is the largest plan: it cannot be too low
    (there is no larger plan to have needed), so it counts in the too-low rate unread.
    None when the choice is smaller: only OCR can tell whether it loses text."""
    choice = choose_tier(page.image)
    _, top = distinct_plans(*page.image.size)[-1]
    if choice.plan.vision_tokens < top.vision_tokens:
        return None
    return {
        "page": page.name,
        "kind": page.kind,
        "label": "-",
        "label_tokens": None,
        "chosen": choice.tier,
        "tokens": choice.plan.vision_tokens,
        "verdict": "top, unread",
        "select_ms": 0.0,
        "tier6_tokens": plan_tiles(*page.image.size, 6).vision_tokens,
        "engine_ms": None,
        "text_px_global": choice.signals.text_height_global,
        "errors": [],
        "plan_tiers": [],
    }


def wilson_upper(k: int, n: int, z: float = Z95) -> float:
    """Upper bound of the Wilson score interval for ``k`` events in ``n`` trials.

    WHY Wilson: at zero or few events the normal approximation gives 0 +- 0, a bound that
    says nothing; Wilson's stays honest (0 of 222 -> 1.7 %, the 'rule of three' region)."""
    if n == 0:
        return 1.0
    p = k / n
    centre = p + z * z / (2 * n)
    spread = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return min(1.0, (centre + spread) / (1 + z * z / n))


def class_table(rows: list[dict], markdown: bool) -> None:
    """Per kind of page: too-low count, rate and its Wilson 95 % upper bound."""
    head = ["class", "pages", "read", "too low", "rate", "upper 95 %", "right", "too high"]
    kinds = [*sorted({r["kind"] for r in rows}), "all"]
    print("| " + " | ".join(head) + " |" if markdown else "  ".join(head))
    if markdown:
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for kind in kinds:
        mine = [r for r in rows if kind in ("all", r["kind"])]
        n, low = len(mine), sum(r["verdict"] == "too low" for r in mine)
        read = sum(r["verdict"] != "top, unread" for r in mine)
        cells = [
            f"**{kind}**" if markdown and kind == "all" else kind,
            n,
            read,
            low,
            f"{100 * low / n:.1f} %",
            f"{100 * wilson_upper(low, n):.1f} %",
            sum(r["verdict"] == "right" for r in mine),
            sum(r["verdict"] == "too high" for r in mine),
        ]
        if markdown:
            print("| " + " | ".join(str(c) for c in cells) + " |")
        else:
            print("{:<32} {:>5} {:>5} {:>7} {:>7} {:>10} {:>6} {:>8}".format(*cells))


def print_tables(rows: list[dict], markdown: bool) -> None:
    head = ["page", "kind", "errors by plan (tier: error)", "label", "auto", "verdict", "tokens"]
    if markdown:
        print("| " + " | ".join(head) + " |")
        print("|---|---|---|---:|---:|---|---:|")
    for r in rows:
        errors = " ".join(f"{t}:{e:.3f}" for t, e in zip(r["plan_tiers"], r["errors"], strict=True))
        cells = [r["page"], r["kind"], errors, r["label"], r["chosen"], r["verdict"], r["tokens"]]
        if markdown:
            print("| " + " | ".join(str(c) for c in cells) + " |")
        else:
            print("{:<26} {:<24} {:<32} {:>5} {:>5} {:<9} {:>6}".format(*cells))
    n = len(rows)
    verdicts = ("right", "too low", "too high", "top, unread")
    count = {v: sum(r["verdict"] == v for r in rows) for v in verdicts}
    fixed = sum(r["tier6_tokens"] for r in rows)
    auto = sum(r["tokens"] for r in rows)
    ideal = sum(r["label_tokens"] or r["tokens"] for r in rows)  # unread: as chosen
    ratio = [r["select_ms"] / r["engine_ms"] for r in rows if r["engine_ms"]] or [0.0]
    timed = [r["select_ms"] for r in rows if r["verdict"] != "top, unread"] or [0.0]
    print()
    print(
        f"selector v{SELECTOR_VERSION} over {n} pages (distinct plans): "
        f"right {count['right']} ({100 * count['right'] / n:.0f} %), "
        f"too low {count['too low']} ({100 * count['too low'] / n:.1f} %), "
        f"too high {count['too high']} ({100 * count['too high'] / n:.0f} %), "
        f"largest plan unread {count['top, unread']}; too low at most "
        f"{100 * wilson_upper(count['too low'], n):.1f} % (Wilson 95 % upper bound)"
    )
    print(
        f"vision tokens: fixed tier 6 {fixed}, auto {auto} ({100 * (1 - auto / fixed):.0f} % "
        f"saved), labels {ideal} ({100 * (1 - ideal / fixed):.0f} % saved)"
    )
    print(
        f"selector CPU time: median {statistics.median(timed):.1f} ms, "
        f"max {max(timed):.1f} ms per page; "
        f"{100 * statistics.median(ratio):.2f} % of the CPU engine's wall time (median)"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--margin", type=float, default=0.02, help="error margin over tier 6")
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    parser.add_argument("--relabel", action="store_true", help="OCR again even if cached")
    parser.add_argument("--pages", default="", help="comma-separated page names (default all)")
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--json", action="store_true", help="print the scored rows as JSON")
    parser.add_argument(
        "--cached-only",
        action="store_true",
        help="no OCR: pages without a label count only if their choice is the largest plan",
    )
    args = parser.parse_args(argv)
    names = args.pages.split(",") if args.pages else list(tier_pages.PAGES)
    labels = json.loads(args.cache.read_text()) if args.cache.exists() else {}
    engine = None
    rows: list[dict] = []
    skipped = 0
    for name in names:  # one page in memory at a time: 300 dpi pages are 26 MB each
        page = tier_pages.page(name)
        if page is None:  # a CJK page without a CJK font, a family whose font is missing
            continue
        if args.cached_only and name not in labels:
            row = unread_row(page)
            skipped += row is None
            rows += [row] if row else []
            continue
        if args.relabel or name not in labels:
            if engine is None:
                engine = engine_class("rapidocr")(threads=1)
                engine.load()
            labels.update(label_pages([page], engine, args.margin))
            args.cache.write_text(json.dumps(labels, indent=1))  # a long sweep can stop
        rows.append(score(page, labels, args.margin))
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    print_tables(rows, args.markdown)
    print()
    class_table(rows, args.markdown)
    if skipped:
        print(f"\n{skipped} pages chosen below the largest plan have no label yet (not counted)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
