"""Time batched ``generate`` of a full-size, random-weight DeepSeek-OCR-2 on a GPU (bf16).

Why this exists: ``bench/runtime.py`` measures serving overhead with a tiny model on CPU; it
says nothing about what one GPU does with the real architecture. This script builds the
published DeepSeek-OCR-2 architecture (SAM ViT-B + Qwen2-0.5B-sized encoder + 12-layer
DeepSeek-V2 MoE decoder, ~3.4B parameters) with random weights DIRECTLY on the device in
bf16 (no checkpoint download, no fp32 copy on the host), then times the engine's own batched
path (``DeepseekOcr2Engine._prepare`` / ``_generate_kwargs`` / ``_finish``: processor, left
padding, n-gram guard, greedy) at several batch sizes with a FIXED output length
(``min_new_tokens == max_new_tokens``, so EOS never ends a page early and every batch does
the same work). Random weights decide no shapes: tokens per page and output length are
fixed, so the timings are those of real weights up to MoE routing balance.

``DeepseekOcr2Config()`` with no arguments is not usable as "default size": in transformers
5.24 it cannot even be instantiated (``mlp_layer_types`` is None) and its encoder/decoder
defaults are 4096-wide 32-layer stacks, not DeepSeek-OCR-2. ``full_size_config`` spells out
the released checkpoint's architecture instead.

    .venv/bin/python bench/gpu_generate.py --markdown          # on a CUDA machine
    .venv/bin/python bench/gpu_generate.py --dry-run           # whole code path, tiny, CPU
    .venv/bin/python bench/gpu_generate.py --continuous        # serving: static vs continuous
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "runtime"))  # tiny_deepseek: tokenizer + tiny config
sys.path.insert(0, str(ROOT / "bench"))  # gpu_continuous, also when imported by tests
# A GPU machine may have torch + transformers but no installed docparser-runtime: fall back
# to the working tree's copy (appended, so an installed one wins).
sys.path.append(str(ROOT / "runtime"))

import numpy as np  # noqa: E402
from docparser_runtime.engines.base import PageImage, ParseOptions  # noqa: E402
from docparser_runtime.engines.deepseek_ocr2.engine import DeepseekOcr2Engine  # noqa: E402
from docparser_runtime.preprocess.tiling import plan_tiles  # noqa: E402
from PIL import Image, ImageDraw  # noqa: E402

PAGE_SIZE = (1654, 2339)  # A4 at 200 dpi: tier 6 -> 2x3 tiles -> 1120 vision tokens
COLUMNS = (
    "batch",
    "tier",
    "vision tok/page",
    "new tok/page",
    "preprocess ms",
    "prefill ms",
    "decode tok/s",
    "pages/s",
    "total s",
    "peak GiB",
)


def full_size_config(tokenizer):
    """The released DeepSeek-OCR-2 architecture, with this tokenizer's special ids."""
    from transformers import DeepseekOcr2Config

    sam = {"initializer_range": 0.02}  # ViT-B defaults; 1e-10 would make every patch equal
    encoder = {  # Qwen2-0.5B dimensions
        "hidden_size": 896,
        "intermediate_size": 4864,
        "num_hidden_layers": 24,
        "num_attention_heads": 14,
        "num_key_value_heads": 2,
        "max_position_embeddings": 32768,
    }
    text = {  # DeepSeek-3B-MoE (A570M), as in the checkpoint's text_config
        "vocab_size": 129280,
        "hidden_size": 1280,
        "intermediate_size": 6848,
        "num_hidden_layers": 12,
        "num_attention_heads": 10,
        "num_key_value_heads": 10,
        "max_position_embeddings": 8192,
        "mlp_layer_types": ["dense"] + ["sparse"] * 11,
        "n_routed_experts": 64,
        "num_experts_per_tok": 6,
        "n_shared_experts": 2,
        "moe_intermediate_size": 896,
        "n_group": 1,
        "topk_group": 1,
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
    }
    return DeepseekOcr2Config(
        vision_config={"sam_config": sam, "encoder_config": encoder},
        text_config=text,
        image_token_id=tokenizer.convert_tokens_to_ids("<image>"),
    )


def build_model(config, device: str, dtype):
    """Random init straight on ``device`` in ``dtype``: no host copy of 3B fp32 weights."""
    import torch
    from transformers import DeepseekOcr2ForConditionalGeneration, GenerationConfig

    with torch.device(device):
        model = DeepseekOcr2ForConditionalGeneration._from_config(config, dtype=dtype)
    text = config.text_config
    model.generation_config = GenerationConfig(
        bos_token_id=text.bos_token_id,
        eos_token_id=text.eos_token_id,
        pad_token_id=text.pad_token_id,
        do_sample=False,
    )
    return model.eval()


class FixedLengthEngine(DeepseekOcr2Engine):
    """The production engine over an in-memory model, forced to ``max_new_tokens`` per page."""

    def attach(self, processor, model, device: str, dtype) -> None:
        self.device, self.dtype = device, dtype
        self._configure_tokens(processor, model)
        self._processor, self._model = processor, model

    def _generate_kwargs(self, inputs, options, guard=None, stop_criteria=None) -> dict:
        kwargs = super()._generate_kwargs(inputs, options, guard, stop_criteria)
        kwargs["min_new_tokens"] = options.max_new_tokens  # EOS suppressed until the cap
        return kwargs


def synthetic_page(index: int, tier: int) -> PageImage:
    """A distinct page-sized image (noise + lines) so no two pages are identical."""
    rng = np.random.default_rng(index)
    pixels = rng.integers(200, 256, size=(PAGE_SIZE[1], PAGE_SIZE[0], 3), dtype=np.uint8)
    image = Image.fromarray(pixels, "RGB")
    draw = ImageDraw.Draw(image)
    for row in range(40):
        draw.text((80, 80 + row * 55), f"page {index} line {row}: lorem ipsum", fill=(0, 0, 0))
    plan = plan_tiles(image.width, image.height, tier)
    return PageImage(index, image, plan.tiles, plan.vision_tokens)


@dataclass
class Row:
    batch: int
    tier: int
    vision_tokens: int
    new_tokens: int
    preprocess_ms: float
    prefill_ms: float
    decode_tok_s: float
    pages_s: float
    total_s: float
    peak_gib: float | None

    def cells(self) -> list[str]:
        peak = "n/a" if self.peak_gib is None else f"{self.peak_gib:.1f}"
        return [
            str(self.batch),
            str(self.tier),
            str(self.vision_tokens),
            str(self.new_tokens),
            f"{self.preprocess_ms:.0f}",
            f"{self.prefill_ms:.0f}",
            f"{self.decode_tok_s:.0f}",
            f"{self.pages_s:.2f}",
            f"{self.total_s:.2f}",
            peak,
        ]


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _timed_generate(engine, inputs, options) -> tuple[float, object]:
    import torch

    _sync(engine.device)
    start = time.perf_counter()
    with torch.inference_mode():
        guard = engine._repetition_guard(inputs)  # the production path's guard, as timed
        output = engine._model.generate(**engine._generate_kwargs(inputs, options, guard))
    _sync(engine.device)
    return time.perf_counter() - start, output


def time_batch(engine, batch: int, tier: int, max_new_tokens: int, prefill_repeats: int) -> Row:
    """Preprocess, prefill (1 new token) and a full fixed-length generate for ``batch`` pages."""
    import torch

    pages = [synthetic_page(i, tier) for i in range(batch)]
    cuda = engine.device.startswith("cuda")
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    full = ParseOptions(tier=tier, mode="markdown", max_new_tokens=max_new_tokens)
    first = ParseOptions(tier=tier, mode="markdown", max_new_tokens=1)

    start = time.perf_counter()
    inputs = engine._prepare(pages, full)
    _sync(engine.device)
    preprocess_s = time.perf_counter() - start
    prompt_length = inputs["input_ids"].shape[1]

    _timed_generate(engine, inputs, ParseOptions(tier=tier, max_new_tokens=2))  # warm-up
    prefill_s = statistics.median(
        _timed_generate(engine, inputs, first)[0] for _ in range(prefill_repeats)
    )
    generate_s, output = _timed_generate(engine, inputs, full)

    start = time.perf_counter()
    generated = output[:, prompt_length:].tolist()
    results = [engine._finish(p, ids) for p, ids in zip(pages, generated, strict=True)]
    finish_s = time.perf_counter() - start
    bad = [r.index for r in results if r.output_tokens != max_new_tokens or not r.truncated]
    if bad:
        raise RuntimeError(f"pages {bad} did not run to exactly {max_new_tokens} new tokens")

    total_s = preprocess_s + generate_s + finish_s
    decode_s = max(generate_s - prefill_s, 1e-9)
    return Row(
        batch=batch,
        tier=tier,
        vision_tokens=pages[0].vision_tokens,
        new_tokens=max_new_tokens,
        preprocess_ms=preprocess_s * 1000,
        prefill_ms=prefill_s * 1000,
        decode_tok_s=batch * (max_new_tokens - 1) / decode_s,
        pages_s=batch / total_s,
        total_s=total_s,
        peak_gib=torch.cuda.max_memory_allocated() / 2**30 if cuda else None,
    )


def format_row(cells: list[str], markdown: bool) -> str:
    """One table line; fixed widths so rows can be printed as soon as they are measured."""
    if markdown:
        return "| " + " | ".join(cells) + " |"
    return "  ".join(c.rjust(max(len(h), 6)) for c, h in zip(cells, COLUMNS, strict=True))


def table_header(markdown: bool) -> str:
    lines = [format_row(list(COLUMNS), markdown)]
    if markdown:
        lines.append("|" + "---|" * len(COLUMNS))
    return "\n".join(lines)


def failed_row(batch: int, tier: int, reason: str) -> list[str]:
    return [str(batch), str(tier)] + [reason] * (len(COLUMNS) - 2)


def environment(engine, model, dry_run: bool) -> str:
    import torch
    import transformers

    gpu = torch.cuda.get_device_name(0) if engine.device.startswith("cuda") else "none (CPU)"
    params = sum(p.numel() for p in model.parameters()) / 1e9
    size = "tiny (dry run)" if dry_run else "full-size"
    return (
        f"model: DeepSeek-OCR-2 {size}, random weights, {params:.2f}B params, "
        f"{str(engine.dtype).removeprefix('torch.')} on {engine.device}; "
        f"attention: {model.config._attn_implementation}; "
        f"experts: {getattr(model.config, '_experts_implementation', 'n/a')}\n"
        f"gpu: {gpu}; torch {torch.__version__}; transformers {transformers.__version__}; "
        f"n-gram guard: {engine.no_repeat_ngram_size or 'off'}"
    )


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", default="1,8,32", help="comma-separated batch sizes")
    parser.add_argument("--max-new-tokens", type=int, default=256, help="fixed output length")
    parser.add_argument("--tier", type=int, default=6, help="tile cap (6 -> 1120 tokens/page)")
    parser.add_argument("--prefill-repeats", type=int, default=3, help="median of N prefills")
    parser.add_argument("--no-ngram-guard", action="store_true", help="time without the guard")
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table")
    parser.add_argument(
        "--dry-run", action="store_true", help="tiny model on CPU: checks the code path only"
    )
    import gpu_continuous  # bench/, next to this script

    gpu_continuous.add_arguments(parser)
    args = parser.parse_args(argv)
    if args.continuous:
        gpu_continuous.check_arguments(args, parser.error)
    args.batches = [int(b) for b in args.batches.split(",") if b.strip()]
    if not args.batches or min(args.batches) < 1 or args.max_new_tokens < 2:
        parser.error("batches must be >= 1 and --max-new-tokens >= 2")
    return args


def main(argv=None) -> int:
    import torch
    from tiny_deepseek import SEED, _build_config, _build_tokenizer
    from transformers import DeepseekOcr2ImageProcessorPil, DeepseekOcr2Processor

    args = parse_args(argv)
    if not args.dry_run and not torch.cuda.is_available():
        print("no CUDA device: run on a GPU machine, or pass --dry-run", file=sys.stderr)
        return 2
    device, dtype = ("cpu", torch.float32) if args.dry_run else ("cuda", torch.bfloat16)
    tokenizer = _build_tokenizer()
    processor = DeepseekOcr2Processor(
        image_processor=DeepseekOcr2ImageProcessorPil(), tokenizer=tokenizer
    )
    config = _build_config(tokenizer) if args.dry_run else full_size_config(tokenizer)
    torch.manual_seed(SEED)
    started = time.perf_counter()
    model = build_model(config, device, dtype)
    _sync(device)
    build_s = time.perf_counter() - started

    guard = 0 if args.no_ngram_guard else 20
    engine = FixedLengthEngine(None, device=device, no_repeat_ngram_size=guard)
    engine.attach(processor, model, device, dtype)
    if args.continuous:
        import gpu_continuous

        return gpu_continuous.run(
            args, processor, model, device, dtype, synthetic_page, environment
        )
    print(environment(engine, model, args.dry_run) + f"; model built in {build_s:.1f} s")
    print(table_header(args.markdown), flush=True)
    failures = 0
    for batch in args.batches:
        try:
            row = time_batch(engine, batch, args.tier, args.max_new_tokens, args.prefill_repeats)
            cells = row.cells()
        except torch.OutOfMemoryError:  # report it and keep the smaller batches' figures
            failures += 1
            cells = failed_row(batch, args.tier, "OOM")
            torch.cuda.empty_cache()
        print(format_row(cells, args.markdown), flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
