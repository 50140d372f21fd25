"""The CPU engine's own cost: the whole path against the raw RapidOCR library (issue 29).

Over the pages of the fidelity corpus (``tests/runtime/page_corpus.py``), each encoded as
the PNG a user would upload, one page at a time (no batching, no result cache):

- ``raw``: ``RapidOCR()(png_bytes)`` from ``rapidocr-onnxruntime``, its defaults (angle
  classifier on), the same onnxruntime thread count as the engine (``--threads``, 1 by
  default: onnxruntime's threads spin while they wait, so on a shared machine a
  multi-threaded run's CPU time counts the neighbours' load too); decode included;
- ``engine``: what the server does with the same bytes outside HTTP: ``load_document``
  (sniff, decode, tile plan), ``RapidOcrEngine.infer_batch`` (orientation, re-reads, word
  boxes, layout) and the coverage audit stage; ``grounding`` mode too when asked.

The two paths alternate page by page and every page runs ``--rounds`` times, so machine
load hits both alike; the table reports the median CPU time per page (the process's, all
onnxruntime threads included: on a shared machine wall time mostly measures the
neighbours) and the ratio, plus the lines lost (``page_corpus.lost_lines``) by the engine;
the summary gives the wall-clock ratio too. Target (issue 29): engine/raw at
most 1.10 with no line lost. ``--profile`` writes a pyinstrument profile of the engine
path instead (pip install pyinstrument). Nothing here asserts; it prints a table
(``--markdown`` for docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "runtime"))  # page_corpus

import page_corpus  # noqa: E402
from docparser_runtime.engines.base import ParseOptions  # noqa: E402
from docparser_runtime.engines.coverage import audit_results  # noqa: E402
from docparser_runtime.preprocess.pipeline import DecodeLimits, load_document  # noqa: E402

LIMITS = DecodeLimits(max_pixels=80_000_000, max_pages=1, pdf_dpi=144)


def png(page: page_corpus.CorpusPage) -> bytes:
    buf = io.BytesIO()
    page.image.save(buf, "PNG")
    return buf.getvalue()


def run_engine(engine, data: bytes, options: ParseOptions):
    pages = load_document(data, tier=options.tier, pages=None, limits=LIMITS)
    results = engine.infer_batch(pages, options)
    audit_results(engine, pages, results, options)
    return results[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pages", default="", help="comma-separated page types (default all)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--modes", default="markdown", help="markdown,text,grounding")
    parser.add_argument("--profile", default="", help="write a pyinstrument HTML profile here")
    parser.add_argument("--threads", type=int, default=1, help="onnxruntime threads, both paths")
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args(argv)

    from docparser_runtime.engines.rapidocr.engine import RapidOcrEngine
    from rapidocr_onnxruntime import RapidOCR

    corpus = page_corpus.corpus()
    if args.pages:
        corpus = [p for p in corpus if p.name in set(args.pages.split(","))]
    engine = RapidOcrEngine(threads=args.threads)
    engine.load()
    engine.warmup()
    raw = RapidOCR(intra_op_num_threads=args.threads, inter_op_num_threads=1)
    inputs = [(p, png(p)) for p in corpus]
    raw(inputs[0][1])  # warm both
    modes = args.modes.split(",")
    if args.profile:
        from pyinstrument import Profiler

        profiler = Profiler(interval=0.002)
        profiler.start()
        for _ in range(args.rounds):
            for _page, data in inputs:
                for mode in modes:
                    run_engine(engine, data, ParseOptions(mode=mode))  # type: ignore[arg-type]
        profiler.stop()
        Path(args.profile).write_text(profiler.output_html())
        print(profiler.output_text(unicode=False, color=False, show_all=False))
        return 0

    times: dict[tuple[str, str], list[float]] = {}
    walls: dict[str, float] = {}
    lost: dict[tuple[str, str], int] = {}

    def timed(key: tuple[str, str], fn, *fn_args):
        t0, c0 = time.perf_counter(), time.process_time()
        out = fn(*fn_args)
        times.setdefault(key, []).append(time.process_time() - c0)
        walls[key[1]] = walls.get(key[1], 0.0) + time.perf_counter() - t0
        return out

    for _ in range(args.rounds):
        for page, data in inputs:
            timed((page.name, "raw"), raw, data)
            for mode in modes:
                options = ParseOptions(mode=mode)  # type: ignore[arg-type]
                result = timed((page.name, mode), run_engine, engine, data, options)
                lost[(page.name, mode)] = len(page_corpus.lost_lines(page, result.content))
        print("  round done", file=sys.stderr, flush=True)

    head = ["page", "lines", "raw cpu ms", *[f"{m} ms" for m in modes]]
    head += [f"{m}/raw" for m in modes]
    head += [f"lost ({m})" for m in modes]
    if args.markdown:
        print("| " + " | ".join(head) + " |")
        print("|---|" + "---:|" * (len(head) - 1))
    else:
        print(("{:<16}" + " {:>12}" * (len(head) - 1)).format(*head))
    totals = {m: 0.0 for m in ["raw", *modes]}
    for page, _ in inputs:
        med = {m: statistics.median(times[(page.name, m)]) for m in ["raw", *modes]}
        for m in totals:
            totals[m] += med[m]
        cells = [page.name + (" (hard)" if page.hard else ""), len(page.lines)]
        cells += [f"{1000 * med['raw']:.0f}", *[f"{1000 * med[m]:.0f}" for m in modes]]
        cells += [f"{med[m] / med['raw']:.2f}" for m in modes]
        cells += [lost[(page.name, m)] for m in modes]
        if args.markdown:
            print("| " + " | ".join(str(c) for c in cells) + " |")
        else:
            print(("{:<16}" + " {:>12}" * (len(head) - 1)).format(*cells))
    for m in modes:
        all_lost = sum(lost[(p.name, m)] for p, _ in inputs)
        ratios = [
            statistics.median(times[(p.name, m)]) / statistics.median(times[(p.name, "raw")])
            for p, _ in inputs
        ]
        print(
            f"{m}: per-page ratio geometric mean {statistics.geometric_mean(ratios):.3f}, "
            f"median {statistics.median(ratios):.3f} (robust to one page's noise)"
        )
        print(
            f"{m}: whole path / raw RapidOCR = {totals[m] / totals['raw']:.3f} CPU time over "
            f"{len(inputs)} pages (sum of per-page medians, {args.rounds} rounds), "
            f"{walls[m] / walls['raw']:.3f} wall clock; "
            f"lines lost {all_lost} of {sum(len(p.lines) for p, _ in inputs)} (target <= 1.10, 0)"
        )
    engine.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
