"""Static micro-batches against continuous batching on a mixed OCR workload (issue 29).

Why: OCR output lengths spread over one to two orders of magnitude, so a static batch keeps
its slots busy only until its shorter pages end, and a short page waits for the long page
of the batch before it. This measures both schedulers in-process (the same engine thread,
queue and admission; HTTP adds the same cost to both, ``bench/runtime.py`` measures it).

Workload: pages of mixed tiers (0 and 2: 257 and 545 prompt tokens), output lengths drawn
log-uniformly from ``--min-tokens``..``--max-tokens`` (a scaled-down 100..3,000), a share of
the requests streamed (``--stream-share``), ``concurrency`` closed-loop clients. Every page
asks for the same ``max_new_tokens`` and ends at its drawn length with an end-of-sequence
token, as real pages do: ``ScriptedLengths`` masks EOS before that length and forces it
there, in ``generate`` (static) and in the running batch (continuous) alike, so both
produce the same tokens per page and static batches group as they would in production (by
tier and mode, not by length).

Columns: pages/s, output tokens/s, p50/p99 latency (submit to result), TTFT p50/p99 (the
streamed requests: submit to first text), decode slot occupancy (busy slots / slots over all
decode steps; static: a batch holds ``max_batch`` slots for as many steps as its longest
page). Head of line: one long page running, short pages arriving one by one.

    .venv/bin/python bench/runtime.py --workload mixed            # or: bench/mixed_workload.py
"""

from __future__ import annotations

import argparse
import asyncio
import math
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "runtime"))  # tiny_deepseek

from docparser_runtime.engines.base import PageImage, ParseOptions  # noqa: E402
from docparser_runtime.engines.deepseek_ocr2.engine import DeepseekOcr2Engine  # noqa: E402
from docparser_runtime.engines.deepseek_ocr2.running import DeepseekRunningBatch  # noqa: E402
from docparser_runtime.engines.stepping import PageRun  # noqa: E402
from docparser_runtime.preprocess.tiling import plan_tiles  # noqa: E402
from docparser_runtime.server.inference.batcher import MicroBatcher  # noqa: E402
from docparser_runtime.server.inference.continuous import ContinuousBatcher  # noqa: E402
from PIL import Image, ImageDraw  # noqa: E402

TIERS = ((0, (640, 480)), (2, (900, 1200)))  # (tier, page size): 0 and 2 tiles
MAX_NEW_TOKENS = 4096  # what every request asks for; pages end at their drawn length


class ScriptedLengths(DeepseekOcr2Engine):
    """The engine, with each page ending at ``lengths[page.index]`` tokens (EOS included)
    in both paths; counts static decode steps for the occupancy column."""

    lengths: dict[int, int]
    static_steps = 0  # decode steps of static generate calls x their batch size...
    static_busy = 0  # ...and tokens the pages in them really needed
    _rows: list[int]

    def infer_batch(self, pages: Sequence[PageImage], options: ParseOptions) -> list[Any]:
        self._rows = [self.lengths[p.index] for p in pages]
        self.static_steps += max(self._rows)
        self.static_busy += sum(self._rows)
        return super().infer_batch(pages, options)

    def stream_page(self, page: PageImage, options: ParseOptions, on_delta: Any) -> Any:
        self._rows = [self.lengths[page.index]]
        self.static_steps += self._rows[0]
        self.static_busy += self._rows[0]
        return super().stream_page(page, options, on_delta)

    def _generate_kwargs(self, inputs, options, guard, stop_criteria=None) -> dict:  # type: ignore[no-untyped-def]
        kwargs = super()._generate_kwargs(inputs, options, guard, stop_criteria)
        prompt = inputs["input_ids"].shape[1]
        kwargs["logits_processor"].insert(0, _ForceLengths(self._rows, prompt, self._eos()))
        return kwargs

    def new_batch(self) -> Any:
        batch = super().new_batch()
        batch.__class__ = _ScriptedBatch
        batch.lengths, batch.eos = self.lengths, self._eos()
        return batch

    def _eos(self) -> int:
        return min(self._eos_ids)


def force_length(scores: Any, row: int, generated: int, length: int, eos: int) -> None:
    """EOS is impossible before ``length`` tokens and certain at it."""
    if generated < length - 1:
        scores[row, eos] = -math.inf
    elif generated == length - 1:
        scores[row, :] = -math.inf
        scores[row, eos] = 0.0


class _ForceLengths:
    """``generate``'s logits processor for ``force_length`` (rows in batch order)."""

    def __init__(self, rows: list[int], prompt: int, eos: int) -> None:
        self.rows, self.prompt, self.eos = rows, prompt, eos

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        generated = input_ids.shape[1] - self.prompt
        for row, length in enumerate(self.rows):
            force_length(scores, row, generated, length, self.eos)
        return scores


class _ScriptedBatch(DeepseekRunningBatch):
    """The running batch with ``force_length`` applied before the page's own rules."""

    lengths: dict[int, int]
    eos: int

    def _choose(self, runs: Sequence[PageRun], logits: Any) -> Any:
        logits = logits.float().clone()
        for row, run in enumerate(runs):
            force_length(logits, row, len(run.generated), self.lengths[run.page.index], self.eos)
        return super()._choose(runs, logits)


def page(index: int, tier: int, size: tuple[int, int]) -> PageImage:
    image = Image.new("RGB", size, "white")
    draw = ImageDraw.Draw(image)
    for line in range(10):
        draw.rectangle(
            (20 + index % 50, 30 + line * 40, size[0] // 2 + line * 9, 44 + line * 40), "black"
        )
    plan = plan_tiles(size[0], size[1], tier)
    return PageImage(index, image, plan.tiles, plan.vision_tokens)


@dataclass
class Job:
    page: PageImage
    options: ParseOptions
    stream: bool
    length: int


def workload(count: int, lo: int, hi: int, stream_share: float, seed: int, base: int) -> list[Job]:
    rng = random.Random(seed)
    jobs = []
    for i in range(count):
        tier, size = TIERS[rng.randrange(len(TIERS))]
        length = round(math.exp(rng.uniform(math.log(lo), math.log(hi))))
        options = ParseOptions(tier=tier, mode="markdown", max_new_tokens=MAX_NEW_TOKENS)
        jobs.append(Job(page(base + i, tier, size), options, rng.random() < stream_share, length))
    return jobs


@dataclass
class Cell:
    name: str
    mode: str
    concurrency: int
    slots: int
    pages: int = 0
    tokens: int = 0
    wall_s: float = 0.0
    latencies: list[float] = field(default_factory=list)
    ttfts: list[float] = field(default_factory=list)
    occupancy: float = 0.0
    cpu_s: float = 0.0  # CPU time of this process (all threads) during the cell

    def row(self) -> list[str]:
        def pct(values: list[float], q: float) -> str:
            if not values:
                return "-"
            ordered = sorted(values)
            return f"{ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] * 1000:.0f}"

        return [
            self.name, self.mode, str(self.concurrency), str(self.slots), str(self.pages),
            f"{self.pages / self.wall_s:.2f}", f"{self.tokens / self.wall_s:.0f}",
            pct(self.latencies, 0.5), pct(self.latencies, 0.99),
            pct(self.ttfts, 0.5), pct(self.ttfts, 0.99),
            f"{100 * self.occupancy:.0f}%" if self.occupancy else "-",
            f"{self.cpu_s / max(1, self.pages) * 1000:.0f}",
        ]  # fmt: skip


COLUMNS = ["workload", "mode", "conc", "slots", "pages", "pages/s", "tok/s", "p50 ms",
           "p99 ms", "TTFT p50", "TTFT p99", "occupancy", "cpu ms/p"]  # fmt: skip


def make_batcher(engine: ScriptedLengths, mode: str, slots: int) -> MicroBatcher:
    common: dict[str, Any] = {"max_batch_size": slots, "max_queue_pages": 4096, "audit": False}
    if mode == "continuous":
        return ContinuousBatcher(engine, **common)
    return MicroBatcher(engine, max_wait_ms=5.0, **common)


async def submit(batcher: MicroBatcher, job: Job, cell: Cell) -> None:
    start = time.perf_counter()
    if job.stream:
        first: list[float] = []

        def on_delta(_text: str) -> bool:
            if not first:
                first.append(time.perf_counter())
            return False

        result = await batcher.submit_stream(job.page, job.options, on_delta)
        cell.ttfts.append((first[0] if first else time.perf_counter()) - start)
    else:
        [result] = await batcher.submit([job.page], job.options)
    cell.latencies.append(time.perf_counter() - start)
    if result.output_tokens != job.length:
        raise RuntimeError(f"page {job.page.index}: {result.output_tokens} != {job.length}")
    cell.pages += 1
    cell.tokens += result.output_tokens


async def closed_loop(engine: ScriptedLengths, jobs: list[Job], mode: str, conc: int, slots: int,
                      name: str) -> Cell:  # fmt: skip
    cell = Cell(name, mode, conc, slots)
    batcher = make_batcher(engine, mode, slots)
    batcher.start()
    engine.static_steps = engine.static_busy = 0
    queue = list(jobs)

    async def client() -> None:
        while queue:
            await submit(batcher, queue.pop(0), cell)

    start, cpu0 = time.perf_counter(), time.process_time()
    try:
        await asyncio.gather(*(client() for _ in range(conc)))
    finally:
        cell.wall_s = time.perf_counter() - start
        cell.cpu_s = time.process_time() - cpu0
        await batcher.close()
    if isinstance(batcher, ContinuousBatcher):
        cell.occupancy = batcher.occupancy()
    elif engine.static_steps:
        cell.occupancy = engine.static_busy / (engine.static_steps * slots)
    return cell


async def head_of_line(engine: ScriptedLengths, mode: str, long_tokens: int, shorts: int,
                       short_tokens: int, base: int) -> tuple[Cell, float, float]:  # fmt: skip
    """One long page starts; ``shorts`` short pages then arrive 50 ms apart. Also returns
    a short page's latency on the idle scheduler (its own prefill and steps)."""
    options = ParseOptions(tier=0, max_new_tokens=MAX_NEW_TOKENS)
    long_page = page(base, 0, (640, 480))
    engine.lengths[base] = long_tokens
    batcher = make_batcher(engine, mode, 8)
    batcher.start()
    alone = page(base + 99, 0, (500, 400))
    engine.lengths[alone.index] = short_tokens
    idle = Cell("alone", mode, 1, 8)
    await submit(batcher, Job(alone, options, False, short_tokens), idle)
    cell = Cell("head-of-line", mode, 1 + shorts, 8)
    start, cpu0 = time.perf_counter(), time.process_time()
    long_task = asyncio.create_task(batcher.submit([long_page], options))
    long_done: list[float] = []
    long_task.add_done_callback(lambda _t: long_done.append(time.perf_counter()))
    await asyncio.sleep(0.2)
    tasks = []
    for i in range(shorts):
        short = page(base + 1 + i, 0, (500, 400))
        engine.lengths[short.index] = short_tokens
        tasks.append(
            asyncio.create_task(submit(batcher, Job(short, options, False, short_tokens), cell))
        )
        await asyncio.sleep(0.05)
    await asyncio.gather(*tasks)
    await long_task
    cell.wall_s, cell.cpu_s = time.perf_counter() - start, time.process_time() - cpu0
    long_s = long_done[0] - start
    await batcher.close()
    return cell, long_s, idle.latencies[0]


def print_table(cells: list[Cell]) -> None:
    rows = [COLUMNS] + [c.row() for c in cells]
    widths = [max(len(r[i]) for r in rows) for i in range(len(COLUMNS))]
    for n, r in enumerate(rows):
        print("  ".join(v.rjust(w) for v, w in zip(r, widths, strict=True)))
        if n == 0:
            print("  ".join("-" * w for w in widths))


def build_engine(model_dir: Path) -> ScriptedLengths:
    engine = ScriptedLengths(model_dir, device="cpu")
    engine.lengths = {}
    engine.load()
    return engine


def run(args: argparse.Namespace) -> int:
    import torch
    from tiny_deepseek import build_tiny_model

    torch.set_num_threads(args.threads)
    cells: list[Cell] = []
    with tempfile.TemporaryDirectory(prefix="bench-mixed-") as tmp:
        engine = build_engine(build_tiny_model(Path(tmp) / "tiny"))
        warm = workload(4, args.min_tokens, args.min_tokens + 4, 0.5, 0, 900_000)
        engine.lengths.update({j.page.index: j.length for j in warm})
        for mode in ("static", "continuous"):  # code paths warm, not timed
            asyncio.run(closed_loop(engine, warm, mode, 4, 4, "warm-up"))
        for conc in args.concurrency:
            jobs = workload(args.mixed_pages, args.min_tokens, args.max_tokens, args.stream_share,
                            args.seed + conc, conc * 10_000)  # fmt: skip
            engine.lengths.update({j.page.index: j.length for j in jobs})
            for mode in ("static", "continuous"):
                cell = asyncio.run(
                    closed_loop(engine, jobs, mode, conc, args.slots or conc, "mixed")
                )
                cells.append(cell)
                print(f"  mixed c={conc} {mode} done", file=sys.stderr, flush=True)
        hol = {}
        for mode in ("static", "continuous"):
            hol_run = head_of_line(engine, mode, args.long_tokens, 8, 8, 800_000)
            cell, long_s, alone_s = asyncio.run(hol_run)
            cells.append(cell)
            hol[mode] = (statistics.median(cell.latencies), max(cell.latencies), long_s, alone_s)
        engine.close()
    print(f"tiny DeepSeek-OCR-2 (fp32, CPU, {args.threads} torch thread(s)); output lengths "
          f"log-uniform {args.min_tokens}..{args.max_tokens}; {args.stream_share:.0%} streamed; "
          f"tiers 0 and 2")  # fmt: skip
    print_table(cells)
    print()
    for mode, (p50, worst, long_s, alone_s) in hol.items():
        print(
            f"head of line, {mode}: short pages (8 tokens) p50 {p50 * 1000:.0f} ms, "
            f"max {worst * 1000:.0f} ms (one alone on the idle server: {alone_s * 1000:.0f} ms); "
            f"long page ({args.long_tokens} tokens) {long_s:.2f} s"
        )
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_arguments(p)
    return p


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--mixed-pages", type=int, default=64, help="pages per cell")
    p.add_argument("--concurrency", type=lambda s: [int(c) for c in s.split(",")], default=[8, 32])
    p.add_argument("--slots", type=int, default=0, help="decode slots (0: = concurrency)")
    p.add_argument("--min-tokens", type=int, default=8)
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--long-tokens", type=int, default=400, help="head-of-line long page")
    p.add_argument("--stream-share", type=float, default=0.25)
    p.add_argument("--seed", type=int, default=29)
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads")


if __name__ == "__main__":
    sys.exit(run(parser().parse_args()))
