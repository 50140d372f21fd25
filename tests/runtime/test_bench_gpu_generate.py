"""``bench/gpu_generate.py``: the GPU benchmark's whole code path, run here on CPU.

No GPU is available to the test suite, so ``--dry-run`` (tiny model, CPU, fp32) runs the same
engine path, timing and table code as the real bf16 CUDA run; the full-size architecture is
checked by building it on the ``meta`` device (shapes only, no memory).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "gpu_generate.py"

pytestmark = [
    pytest.mark.torch,
    pytest.mark.skipif(
        importlib.util.find_spec("transformers") is None, reason="needs the deepseek extra"
    ),
]


def _load_bench():
    """Import the script as a module (``bench/`` is not a package)."""
    if "gpu_generate" not in sys.modules:
        spec = importlib.util.spec_from_file_location("gpu_generate", SCRIPT)
        module = importlib.util.module_from_spec(spec)
        sys.modules["gpu_generate"] = module  # dataclasses look their module up here
        spec.loader.exec_module(module)
    return sys.modules["gpu_generate"]


@pytest.mark.slow
def test_dry_run_prints_one_row_per_batch_with_the_fixed_output_length():
    from docparser_runtime.preprocess.tiling import plan_tiles

    bench = _load_bench()
    batches, tier, new_tokens = [1, 2], 2, 3
    env = {**os.environ, "OMP_NUM_THREADS": "1"}  # tiny ops: threads only add hand-off cost
    options = ["--tier", str(tier), "--max-new-tokens", str(new_tokens), "--prefill-repeats", "1"]
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--dry-run", "--markdown", "--batches", "1,2", *options],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [line for line in proc.stdout.splitlines() if line.startswith("|")]
    header, separator, *rows = lines
    assert [c.strip() for c in header.strip("|").split("|")] == list(bench.COLUMNS)
    assert separator == "|" + "---|" * len(bench.COLUMNS)
    assert len(rows) == len(batches)
    expected_tokens = plan_tiles(*bench.PAGE_SIZE, tier).vision_tokens
    for batch, row in zip(batches, rows, strict=True):
        values = [c.strip() for c in row.strip("|").split("|")]
        cells = dict(zip(bench.COLUMNS, values, strict=True))
        assert int(cells["batch"]) == batch
        assert int(cells["tier"]) == tier
        assert int(cells["vision tok/page"]) == expected_tokens
        assert int(cells["new tok/page"]) == new_tokens
        for column in ("prefill ms", "decode tok/s", "pages/s", "total s"):
            assert float(cells[column]) > 0, column
        assert cells["peak GiB"] == "n/a"  # CPU: no CUDA allocator to ask
    environment = proc.stdout.splitlines()[:2]
    assert "tiny (dry run)" in environment[0] and "float32 on cpu" in environment[0]
    assert "transformers" in environment[1] and "torch" in environment[1]


@pytest.mark.slow
def test_continuous_dry_run_serves_every_page_to_its_length_in_both_modes():
    """``--continuous``: static and continuous schedulers over the same scripted pages (the
    bench itself fails when a page does not end at its drawn length)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    argv = ["--continuous", "--dry-run", "--markdown", "--pages", "3", "--slots", "2"]
    argv += ["--tier", "0", "--min-tokens", "3", "--max-tokens", "6"]
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), *argv],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| ")][1:]
    modes = [row.strip("|").split("|")[0].strip() for row in rows]
    assert modes == ["static", "continuous"]
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[2] == "3" and float(cells[4]) > 0  # pages, output tok/s


@pytest.mark.slow
def test_full_size_config_is_the_published_3_4b_architecture():
    import torch
    from tiny_deepseek import _build_tokenizer

    bench = _load_bench()
    tokenizer = _build_tokenizer()
    config = bench.full_size_config(tokenizer)
    model = bench.build_model(config, "meta", torch.bfloat16)
    params = sum(p.numel() for p in model.parameters())
    assert 3.3e9 < params < 3.5e9  # DeepSeek-OCR-2 is ~3.4B parameters
    # bf16 everywhere except the MoE routers, which the model class pins to fp32
    # (``_keep_in_fp32_modules_strict``), exactly as ``from_pretrained`` loads them.
    fp32 = {name for name, p in model.named_parameters() if p.dtype != torch.bfloat16}
    assert fp32 and all(name.endswith("mlp.gate.weight") for name in fp32), sorted(fp32)[:3]
    assert {p.device.type for p in model.parameters()} == {"meta"}
    assert config.image_token_id == tokenizer.convert_tokens_to_ids("<image>")
    assert model.generation_config.eos_token_id == tokenizer.eos_token_id


def test_plain_rows_line_up_with_the_header_and_bad_arguments_are_refused():
    bench = _load_bench()
    header = bench.format_row(list(bench.COLUMNS), markdown=False)
    row = bench.format_row(bench.failed_row(32, 6, "OOM"), markdown=False)
    assert len(header) == len(row)
    assert bench.parse_args(["--batches", "1,8,32"]).batches == [1, 8, 32]
    bad = (["--batches", "0"], ["--max-new-tokens", "1"], ["--batches", ","])
    bad += (["--continuous", "--slots", "0"], ["--continuous", "--min-tokens", "1"])
    for argv in bad:
        with pytest.raises(SystemExit):
            bench.parse_args(argv)
