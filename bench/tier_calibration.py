"""Calibrate ``tier: auto`` against a proxy for "enough resolution" (issue 25).

We have no real weights here, so "the tier reads the page" is judged with the CPU engine:
each generated page of ``tests/runtime/tier_pages.py`` is shrunk to what every distinct tile
plan lets the model see (``preprocess.tiling.plan_tiles``: the 1024 global view alone, or the
grid's canvas of 768 px tiles, each axis on its own, never enlarged), then read by the
RapidOCR engine. The page's error is order-free: each drawn line, cell or formula part is
looked up in the reply (``page_corpus.line_error``), weighted by its length.

Label: the lowest plan whose error is within ``--margin`` of the largest plan's (tier 6);
labels are recomputed from the cached errors, so another margin needs no new OCR.
The selector (``preprocess.tier_select.choose_tier``) is then scored over distinct plans:
right (the label's plan), too low (a smaller plan: it loses text) or too high (wastes
tokens). Nothing asserts; it prints tables (``--markdown`` for docs/benchmarks.md).

OCR is slow on a shared CPU (minutes per page and plan on a loaded 2-core box), so the
errors are kept in ``bench/tier_labels.json`` (``--cache``), written after every page; a rerun
only scores the selector again unless ``--relabel``. Entries whose ``engine_s`` is null were
recovered from a sweep's log (the error per plan is exact to 3 decimals).

    .venv/bin/python bench/tier_calibration.py --markdown
"""

from __future__ import annotations

import argparse
import json
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
        plans = []
        for tier, plan in distinct_plans(w, h):
            view = model_view(page.image, plan)
            t0 = time.perf_counter()
            result = engine.infer_batch([PageImage(0, view, 0, 256)], ParseOptions(mode="text"))
            seconds = time.perf_counter() - t0
            error = page_error(page.pieces, result[0].content)
            plans.append(
                {
                    "tier": tier,
                    "tokens": plan.vision_tokens,
                    "error": error,
                    "engine_s": seconds,
                    "view": list(view.size),
                }
            )
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


def score(pages, labels: dict[str, dict], margin: float) -> list[dict]:
    rows = []
    for page in pages:
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
        rows.append(
            {
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
        )
    return rows


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
    count = {v: sum(r["verdict"] == v for r in rows) for v in ("right", "too low", "too high")}
    fixed = sum(r["tier6_tokens"] for r in rows)
    auto = sum(r["tokens"] for r in rows)
    ideal = sum(r["label_tokens"] for r in rows)
    ratio = [r["select_ms"] / r["engine_ms"] for r in rows if r["engine_ms"]] or [0.0]
    print()
    print(
        f"selector v{SELECTOR_VERSION} over {n} pages (distinct plans): "
        f"right {count['right']} ({100 * count['right'] / n:.0f} %), "
        f"too low {count['too low']} ({100 * count['too low'] / n:.1f} %), "
        f"too high {count['too high']} ({100 * count['too high'] / n:.0f} %)"
    )
    print(
        f"vision tokens: fixed tier 6 {fixed}, auto {auto} ({100 * (1 - auto / fixed):.0f} % "
        f"saved), labels {ideal} ({100 * (1 - ideal / fixed):.0f} % saved)"
    )
    print(
        f"selector CPU time: median {statistics.median(r['select_ms'] for r in rows):.1f} ms, "
        f"max {max(r['select_ms'] for r in rows):.1f} ms per page; "
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
    args = parser.parse_args(argv)
    if args.pages:
        chosen = (tier_pages.page(name) for name in args.pages.split(","))
        pages = [p for p in chosen if p is not None]
    else:
        pages = tier_pages.tier_pages()
    labels = json.loads(args.cache.read_text()) if args.cache.exists() else {}
    todo = [p for p in pages if args.relabel or p.name not in labels]
    if todo:
        engine = engine_class("rapidocr")(threads=1)
        engine.load()
        for page in todo:  # the cache is written after every page: a long sweep can stop
            labels.update(label_pages([page], engine, args.margin))
            args.cache.write_text(json.dumps(labels, indent=1))
    rows = score(pages, labels, args.margin)
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    print_tables(rows, args.markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
