"""What ``tier: auto`` costs in batching: static batches split by tier (issue 25).

Until continuous batching lands, the engine reads one tier per ``generate`` call, so the
parse service splits the pages of a request by the tier ``auto`` gave them and the
micro-batcher fills one batch per tier. This drives the real app in-process (decoder pool,
micro-batcher, parse service) with the tiny random-weight DeepSeek-OCR-2 on CPU and the same
mixed workload twice: every page at a fixed tier 6 (one batch key), and ``tier: auto``
(pages of tier 0 and tier 6 in separate batches). It prints engine calls, mean pages per
call, visual tokens and pages/s.

The counting wrapper cannot step, so the app runs the static micro-batcher (what ``rapidocr``
and ``DOCPARSER_CONTINUOUS_BATCHING=false`` use; continuous batching mixes tiers in one
running batch). The tiny model's CPU time says nothing about a GPU's; what carries over is the batch
structure (how many more, smaller calls the split makes) and the tokens it saves. Bounded:
``--requests`` concurrent requests of ``--pages`` pages each.

    .venv/bin/python bench/tier_batches.py --requests 8 --pages 4
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "runtime"))  # app_for_tests, tiny_deepseek, tier_pages
sys.path.insert(0, str(ROOT / "tests" / "fakes"))  # engines_for_tests, which app_for_tests uses

import documents  # noqa: E402
import tier_pages  # noqa: E402
from app_for_tests import make_settings, serving  # noqa: E402
from docparser_runtime.engines.base import Engine  # noqa: E402
from docparser_runtime.settings import Settings  # noqa: E402


class Counting(Engine):
    """The real engine, with its calls and batch sizes counted."""

    def __init__(self, inner: Engine) -> None:
        self.inner = inner
        self.name = inner.name
        self.calls: list[tuple[int, int]] = []  # (tier, pages) per infer_batch

    @property
    def version(self) -> str:
        return self.inner.version

    def load(self) -> None:
        self.inner.load()

    def warmup(self) -> None:
        self.inner.warmup()
        self.calls.clear()

    def close(self) -> None:
        self.inner.close()

    def infer_batch(self, pages, options):
        self.calls.append((options.tier, len(pages)))
        return self.inner.infer_batch(pages, options)


def workload(pages_per_request: int) -> bytes:
    """A PDF alternating plain letters (auto: tier 0) and dense pages (auto: tier 6)."""
    letter = documents.Doc(tier_pages.plain_letter().image.resize((620, 877)))
    dense = documents.Doc(tier_pages.dense_two_columns_table().image)
    docs = [letter if i % 2 == 0 else dense for i in range(pages_per_request)]
    return documents.pdf_of(docs, resolution=150)


async def run(engine: Counting, pdf: bytes, tier: str, requests: int, max_batch: int) -> dict:
    settings = make_settings(
        max_batch_size=max_batch,
        max_wait_ms=20.0,
        pdf_dpi=150,
        default_max_new_tokens=8,
    )
    async with serving(settings, engine) as (_, client, _):
        t0 = time.perf_counter()
        replies = await asyncio.gather(
            *(
                client.post(
                    "/v1/document/parse",
                    files={"file": ("d.pdf", pdf, "application/pdf")},
                    data={"tier": tier, "mode": "text", "cache": "false"},
                )
                for _ in range(requests)
            )
        )
        seconds = time.perf_counter() - t0
    for reply in replies:
        assert reply.status_code == 200, reply.text
    pages = sum(len(r.json()["pages"]) for r in replies)
    return {
        "tier": tier,
        "calls": len(engine.calls),
        "pages": pages,
        "pages_per_call": pages / max(len(engine.calls), 1),
        "vision_tokens": sum(r.json()["vision_tokens"] for r in replies),
        "pages_per_s": pages / seconds,
        "tiers": sorted({t for t, _ in engine.calls}),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=8, help="concurrent requests")
    parser.add_argument("--pages", type=int, default=4, help="pages per request")
    parser.add_argument("--max-batch-size", type=int, default=8)
    args = parser.parse_args(argv)
    from docparser_runtime.engines.deepseek_ocr2.engine import DeepseekOcr2Engine
    from tiny_deepseek import build_tiny_model

    pdf = workload(args.pages)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-tier-") as tmp:
        model = build_tiny_model(Path(tmp) / "tiny")
        for tier in ("6", "auto"):
            inner = DeepseekOcr2Engine.from_settings(
                Settings(engine="deepseek-ocr2", model_path=model, device="cpu")
            )
            engine = Counting(inner)
            rows.append(asyncio.run(run(engine, pdf, tier, args.requests, args.max_batch_size)))
    print("| tier | pages | engine calls | pages/call | tiers in calls | vision tokens | pages/s |")
    print("|---|---:|---:|---:|---|---:|---:|")
    for r in rows:
        print(
            f"| {r['tier']} | {r['pages']} | {r['calls']} | {r['pages_per_call']:.2f} | "
            f"{','.join(map(str, r['tiers']))} | {r['vision_tokens']} | {r['pages_per_s']:.2f} |"
        )
    fixed, auto = rows
    print(
        f"\nauto: {auto['calls'] / fixed['calls']:.2f}x the engine calls of a fixed tier 6, "
        f"{100 * (1 - auto['vision_tokens'] / fixed['vision_tokens']):.0f} % fewer visual tokens "
        f"(tiny model on CPU: the timing is not a GPU's)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
