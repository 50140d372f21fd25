"""``bench/gpu_generate.py --continuous``: serving throughput of the full-size architecture,
static micro-batches against continuous batching, on one GPU (bf16).

Why: the published reference is vLLM serving DeepSeek-OCR (v1) at about 2,500 output
tokens/s on one A100-40G (model authors). That figure is a serving figure (many pages, each
ending at its own length), not one fixed-length ``generate``; this measures the same shape
through our schedulers in-process (``server/inference/batcher.py`` and ``continuous.py``):
``--pages`` A4 pages at tier 6 (1120 vision tokens) submitted at once, output lengths drawn
log-uniformly from ``--min-tokens``..``--max-tokens`` (each page ends at its length with EOS:
``mixed_workload.ScriptedLengths``), ``--slots`` decode slots. Output tokens/s counts every
generated token over the wall time of the whole run, prefill included, as vLLM's
throughput benchmark does.

    .venv/bin/python bench/gpu_generate.py --continuous --markdown          # CUDA machine
    .venv/bin/python bench/gpu_generate.py --continuous --dry-run           # tiny, CPU
"""

from __future__ import annotations

import argparse
import asyncio
import math
import random
import sys
import time
from typing import Any

from docparser_runtime.engines.base import ParseOptions
from docparser_runtime.server.inference.continuous import ContinuousBatcher
from mixed_workload import MAX_NEW_TOKENS, ScriptedLengths, make_batcher

COLUMNS = ("mode", "slots", "pages", "new tok/page", "output tok/s", "pages/s", "p50 s",
           "p99 s", "occupancy", "cache budget", "peak GiB")  # fmt: skip


class ScriptedGpuEngine(ScriptedLengths):
    """The production engine over an in-memory model, pages ending at scripted lengths."""

    def attach(self, processor: Any, model: Any, device: str, dtype: Any) -> None:
        self.device, self.dtype = device, dtype
        self.lengths = {}
        self._configure_tokens(processor, model)
        self._processor, self._model = processor, model


def lengths(count: int, lo: int, hi: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [round(math.exp(rng.uniform(math.log(lo), math.log(hi)))) for _ in range(count)]


def format_row(cells: list[str], markdown: bool) -> str:
    if markdown:
        return "| " + " | ".join(cells) + " |"
    return "  ".join(c.rjust(max(len(h), 6)) for c, h in zip(cells, COLUMNS, strict=True))


async def serve_all(
    engine: ScriptedGpuEngine, pages: list[Any], tier: int, mode: str, slots: int
) -> dict[str, Any]:
    batcher = make_batcher(engine, mode, slots)
    batcher.start()
    options = ParseOptions(tier=tier, max_new_tokens=MAX_NEW_TOKENS)
    latencies: list[float] = []

    async def one(page: Any) -> int:
        t0 = time.perf_counter()
        [result] = await batcher.submit([page], options)
        latencies.append(time.perf_counter() - t0)
        if result.output_tokens != engine.lengths[page.index]:
            raise RuntimeError(f"page {page.index} did not end at its scripted length")
        return int(result.output_tokens)

    engine.static_steps = engine.static_busy = 0
    start = time.perf_counter()
    try:
        tokens = sum(await asyncio.gather(*(one(p) for p in pages)))
    finally:
        wall = time.perf_counter() - start
        await batcher.close()
    if isinstance(batcher, ContinuousBatcher):
        occupancy, budget = batcher.occupancy(), f"{batcher.budget_tokens}"
    else:
        occupancy, budget = engine.static_busy / max(1, engine.static_steps * slots), "-"
    latencies.sort()
    return {
        "tokens": tokens,
        "wall": wall,
        "p50": latencies[len(latencies) // 2],
        "p99": latencies[min(len(latencies) - 1, round(0.99 * (len(latencies) - 1)))],
        "occupancy": occupancy,
        "budget": budget,
    }


def run(args: argparse.Namespace, processor: Any, model: Any, device: str, dtype: Any,
        synthetic_page: Any, environment: Any) -> int:  # fmt: skip
    import torch

    guard = 0 if args.no_ngram_guard else 20
    engine = ScriptedGpuEngine(None, device=device, no_repeat_ngram_size=guard)
    engine.attach(processor, model, device, dtype)
    print(environment(engine, model, args.dry_run))
    pages = [synthetic_page(i, args.tier) for i in range(args.pages)]
    drawn = lengths(args.pages, args.min_tokens, args.max_tokens, seed=29)
    engine.lengths.update({p.index: n for p, n in zip(pages, drawn, strict=True)})
    mean = sum(drawn) / len(drawn)
    spread = f"{args.min_tokens}..{args.max_tokens} (mean {mean:.0f})"
    print(
        f"{args.pages} pages at tier {args.tier} ({pages[0].vision_tokens} vision tokens), "
        f"output lengths log-uniform {spread}"
    )
    print(format_row(list(COLUMNS), args.markdown))
    if args.markdown:
        print("|" + "---|" * len(COLUMNS))
    warm = pages[: min(2, len(pages))]
    for mode in args.modes:
        asyncio.run(serve_all(engine, warm, args.tier, mode, 2))  # code paths and kernels warm
        for slots in args.slots:
            cuda = device.startswith("cuda")
            if cuda:
                torch.cuda.reset_peak_memory_stats()
            try:
                m = asyncio.run(serve_all(engine, pages, args.tier, mode, slots))
            except torch.OutOfMemoryError:
                print(format_row([mode, str(slots)] + ["OOM"] * 9, args.markdown))
                torch.cuda.empty_cache()
                continue
            peak = f"{torch.cuda.max_memory_allocated() / 2**30:.1f}" if cuda else "n/a"
            cells = [mode, str(slots), str(len(pages)), f"{mean:.0f}",
                     f"{m['tokens'] / m['wall']:.0f}", f"{len(pages) / m['wall']:.2f}",
                     f"{m['p50']:.2f}", f"{m['p99']:.2f}", f"{100 * m['occupancy']:.0f}%",
                     m["budget"], peak]  # fmt: skip
            print(format_row(cells, args.markdown), flush=True)
    return 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--continuous", action="store_true",
                        help="serving throughput: static vs continuous batching")  # fmt: skip
    parser.add_argument("--pages", type=int, default=256, help="--continuous: pages")
    parser.add_argument("--slots", default="32,64", help="--continuous: decode slots")
    parser.add_argument("--min-tokens", type=int, default=100, help="--continuous: shortest")
    parser.add_argument("--max-tokens", type=int, default=3000, help="--continuous: longest")
    parser.add_argument("--modes", default="static,continuous", help="--continuous: schedulers")


def check_arguments(args: argparse.Namespace, error: Any) -> None:
    args.slots = [int(s) for s in str(args.slots).split(",") if s.strip()]
    args.modes = [m for m in str(args.modes).split(",") if m.strip()]
    if not args.slots or min(args.slots) < 1 or args.pages < 1:
        error("--slots must be >= 1 and --pages >= 1")
    if args.min_tokens < 2 or args.max_tokens < args.min_tokens:
        error("need 2 <= --min-tokens <= --max-tokens")
    if set(args.modes) - {"static", "continuous"}:
        error("--modes: static and/or continuous")


if __name__ == "__main__":
    sys.exit("run it through bench/gpu_generate.py --continuous")
