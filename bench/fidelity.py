"""Fidelity benchmark: is every line of ink read, or at least reported? (issue 12)

Over the generated corpus of ``tests/runtime/page_corpus.py`` (clean page types plus a few
hard ones), per page type: character error rate (CER, whole page, reading order included),
lines lost (a line more than a third wrong or absent), how many of the lost lines the
coverage audit reported (a warning box over the line), warnings raised in all, and the
audit's time as a share of the engine's. Engines:

- ``rapidocr``: the embedded CPU engine as served (its own re-read of uncovered ink
  included), then the audit stage;
- ``tiny-deepseek``: the tiny random-weight DeepSeek-OCR-2 (``tests/runtime/tiny_deepseek``),
  markdown mode, cut by ``max_new_tokens``: it reads nothing, so the rows show the audit
  path for truncated pages: every line lost, every lost line should be reported.

Targets: 0 lines lost on clean pages; every lost line on hard pages recovered or reported.
Nothing here asserts; it prints a table (``--markdown`` for docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "runtime"))  # page_corpus, documents, tiny_deepseek

import page_corpus  # noqa: E402
from docparser_runtime.engines.base import Engine, PageImage, ParseOptions  # noqa: E402
from docparser_runtime.engines.coverage import audit_results  # noqa: E402


@dataclass
class Row:
    engine: str
    page: str
    hard: bool
    lines: int
    cer: float
    lost: int
    reported: int
    warnings: int
    engine_s: float
    audit_s: float


def covers(warning_box, line_box) -> bool:
    """A warning reports a line when it overlaps more than half of the line's box."""
    w = min(warning_box[2], line_box[2]) - max(warning_box[0], line_box[0])
    h = min(warning_box[3], line_box[3]) - max(warning_box[1], line_box[1])
    area = (line_box[2] - line_box[0]) * (line_box[3] - line_box[1])
    return max(w, 0) * max(h, 0) > 0.5 * area


def measure(name: str, engine: Engine, page: page_corpus.CorpusPage, options) -> Row:
    pages = [PageImage(0, page.image, 0, 256)]
    t0 = time.perf_counter()
    results = engine.infer_batch(pages, options)
    t1 = time.perf_counter()
    audit_results(engine, pages, results, options)
    result = results[0]
    lost = page_corpus.lost_lines(page, result.content)
    boxes = [w.bbox for w in result.warnings]
    reported = sum(any(covers(b, line.bbox) for b in boxes) for line in lost)
    return Row(
        name, page.name, page.hard, len(page.lines), page_corpus.cer(page.text, result.content),
        len(lost), reported, len(result.warnings), t1 - t0, result.audit_s,
    )  # fmt: skip


def print_table(rows: list[Row], markdown: bool) -> None:
    head = ["engine", "page", "lines", "CER", "lost", "reported", "warnings", "audit/engine"]
    fmt = (
        "| " + " | ".join(["{}"] * len(head)) + " |"
        if markdown
        else "{:<14} {:<20}" + (" {:>8}" * (len(head) - 2))
    )
    print(fmt.format(*head))
    if markdown:
        print("|" + "|".join(["---"] * 2 + ["---:"] * (len(head) - 2)) + "|")
    for r in rows:
        ratio = f"{100 * r.audit_s / r.engine_s:.1f}%"
        page = r.page + (" (hard)" if r.hard else "")
        cells = [r.engine, page, r.lines, f"{r.cer:.3f}", r.lost, r.reported, r.warnings, ratio]
        print(fmt.format(*cells))


def summarize(rows: list[Row]) -> None:
    print()
    for engine in dict.fromkeys(r.engine for r in rows):
        mine = [r for r in rows if r.engine == engine]
        for label, hard in (("clean", False), ("hard", True)):
            group = [r for r in mine if r.hard == hard]
            if not group:
                continue
            cers = [r.cer for r in group]
            worst = max(group, key=lambda r: r.cer)
            lost = sum(r.lost for r in group)
            reported = sum(r.reported for r in group)
            ratio = sum(r.audit_s for r in group) / sum(r.engine_s for r in group)
            print(
                f"{engine} {label}: mean CER {sum(cers) / len(cers):.3f}, worst {worst.cer:.3f} "
                f"({worst.page}); lines lost {lost} of {sum(r.lines for r in group)}, "
                f"reported {reported}; warnings {sum(r.warnings for r in group)}; "
                f"audit time {100 * ratio:.1f}% of the engine's"
            )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--engines", default="rapidocr,tiny-deepseek")
    parser.add_argument("--pages", default="", help="comma-separated page types (default all)")
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args(argv)
    wanted = set(args.engines.split(","))
    corpus = page_corpus.corpus()
    if args.pages:
        corpus = [p for p in corpus if p.name in set(args.pages.split(","))]
    rows: list[Row] = []
    if "rapidocr" in wanted:
        from docparser_runtime.engines.rapidocr.engine import RapidOcrEngine

        engine = RapidOcrEngine()
        engine.load()
        engine.warmup()
        for page in corpus:
            rows.append(measure("rapidocr", engine, page, ParseOptions(mode="markdown")))
            print(f"  rapidocr {page.name} done", file=sys.stderr, flush=True)
        engine.close()
    if "tiny-deepseek" in wanted:
        from docparser_runtime.engines.deepseek_ocr2.engine import DeepseekOcr2Engine
        from tiny_deepseek import build_tiny_model

        with tempfile.TemporaryDirectory(prefix="bench-tiny-") as tmp:
            engine = DeepseekOcr2Engine(build_tiny_model(Path(tmp) / "tiny"), device="cpu")
            engine.load()
            options = ParseOptions(tier=0, mode="markdown", max_new_tokens=32)
            for page in corpus:
                rows.append(measure("tiny-deepseek", engine, page, options))
            engine.close()
    print_table(rows, args.markdown)
    summarize(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
