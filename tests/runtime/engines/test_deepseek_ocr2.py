"""The DeepSeek-OCR-2 engine on the tiny random-weight model, loaded like production.

The tiny model (``tiny_deepseek.py``) has the real architecture, processor and token
layout, so these tests exercise the real batched ``generate`` path: left padding across
pages with different tile counts, EOS handling, streaming and the repetition guard.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from docparser_runtime.engines.base import PageImage, ParseOptions
from docparser_runtime.engines.deepseek_ocr2.engine import DeepseekOcr2Engine, resolve_device
from docparser_runtime.engines.deepseek_ocr2.grounding import clean_content
from docparser_runtime.engines.deepseek_ocr2.prompts import PROMPTS, prompt_for
from docparser_runtime.errors import Unavailable, WeightsError
from docparser_runtime.settings import Settings
from tiny_deepseek import generated_ids, make_page

# ----------------------------------------------------------------- no torch needed


def test_prompts_are_the_deepseek_ones():
    assert prompt_for("markdown") == "<image>\n<|grounding|>Convert the document to markdown."
    assert prompt_for("text") == "<image>\nFree OCR."
    assert prompt_for("grounding") == "<image>\n<|grounding|>OCR this image."
    assert all(p.count("<image>") == 1 for p in PROMPTS.values())
    with pytest.raises(ValueError):
        prompt_for("poetry")  # type: ignore[arg-type]


def test_from_settings_uses_model_path_device_version_and_guard(tmp_path):
    settings = Settings(
        engine="deepseek-ocr2",
        model_path=tmp_path,
        device="cpu",
        model_version="2026-01-27",
        no_repeat_ngram_size=7,
        no_repeat_ngram_window=40,
    )
    engine = DeepseekOcr2Engine.from_settings(settings)
    assert engine.name == "deepseek-ocr2"
    assert (engine.model_path, engine.requested_device, engine.version) == (
        tmp_path,
        "cpu",
        "2026-01-27",
    )
    assert (engine.no_repeat_ngram_size, engine.no_repeat_ngram_window) == (7, 40)


@pytest.mark.parametrize("kind", ["none", "missing", "no_config"])
def test_missing_weights_raise_weights_error(tmp_path, kind):
    path = {"none": None, "missing": tmp_path / "nope", "no_config": tmp_path}[kind]
    with pytest.raises(WeightsError):
        DeepseekOcr2Engine(path).load()


def test_resolve_device():
    assert resolve_device("auto", cuda_available=False) == "cpu"
    assert resolve_device("auto", cuda_available=True) == "cuda"
    assert resolve_device("cuda:1", cuda_available=True) == "cuda:1"
    with pytest.raises(WeightsError):
        resolve_device("cuda", cuda_available=False)


def test_importing_the_engine_module_does_not_import_torch():
    code = (
        "import sys, docparser_runtime.engines.deepseek_ocr2.engine\n"
        "assert 'torch' not in sys.modules and 'transformers' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_infer_before_load_is_unavailable():
    engine = DeepseekOcr2Engine("/nonexistent")
    with pytest.raises(Unavailable):
        engine.infer_batch([make_page(0, 100, 100, 0)], ParseOptions(tier=0))


# ---------------------------------------------------------------- tiny real model


@pytest.fixture(scope="module")
def engine(tiny_model_dir):
    engine = DeepseekOcr2Engine(tiny_model_dir, device="auto", version="tiny")
    engine.load()
    yield engine
    engine.close()


@pytest.mark.torch
def test_unloadable_directory_is_a_weights_error(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "deepseek_ocr2", "text_config": 5}')
    with pytest.raises(WeightsError, match="cannot load"):
        DeepseekOcr2Engine(tmp_path, device="cpu").load()


@pytest.mark.torch
def test_loads_through_from_pretrained_in_fp32_on_cpu(engine):
    import torch

    assert engine.device == "cpu"
    assert engine.dtype == torch.float32
    assert type(engine._model).__name__ == "DeepseekOcr2ForConditionalGeneration"
    assert engine._processor.tokenizer.padding_side == "left"


@pytest.mark.torch
def test_batch_of_three_pages_matches_unbatched_pages(engine):
    """Different tile counts -> different prompt lengths -> real left padding."""
    options = ParseOptions(tier=2, mode="markdown", max_new_tokens=10)
    pages = [make_page(0, 900, 1200, 2), make_page(1, 500, 400, 2), make_page(2, 1500, 800, 2)]
    assert [p.tiles for p in pages] == [2, 0, 2]
    batched = engine.infer_batch(pages, options)
    assert [r.index for r in batched] == [0, 1, 2]
    for page, result in zip(pages, batched, strict=True):
        assert (result.width, result.height) == (page.width, page.height)
        assert (result.tiles, result.vision_tokens) == (page.tiles, page.vision_tokens)
        assert 1 <= result.output_tokens <= 10
        alone = engine.infer_batch([page], options)[0]
        assert (alone.content, alone.output_tokens, alone.truncated) == (
            result.content,
            result.output_tokens,
            result.truncated,
        )
    # The pages are seen: different images give different text.
    assert len({r.content for r in batched}) == 3


@pytest.mark.torch
def test_tiny_max_new_tokens_flags_truncation(engine):
    results = engine.infer_batch(
        [make_page(0, 300, 300, 0), make_page(1, 400, 200, 0)],
        ParseOptions(tier=0, max_new_tokens=3),
    )
    for result in results:
        assert result.truncated is True
        assert result.output_tokens == 3
        assert "<|" not in result.content


@pytest.mark.torch
def test_eos_ends_a_page_early_while_others_continue(tiny_model_dir):
    """Make a token the model really emits the EOS: that page stops, unflagged."""
    engine = DeepseekOcr2Engine(tiny_model_dir, device="cpu", no_repeat_ngram_size=0)
    engine.load()
    options = ParseOptions(tier=0, max_new_tokens=8)
    pages = [make_page(0, 300, 300, 0), make_page(1, 640, 480, 0)]
    free = generated_ids(engine, pages, options)
    stop_token = free[0][2]
    first_at = free[0].index(stop_token)
    assert stop_token not in free[1], "pick pages whose outputs differ"
    engine._eos_ids = {stop_token}
    engine._drop_ids.add(stop_token)
    results = engine.infer_batch(pages, options)
    assert results[0].truncated is False
    assert results[0].output_tokens == first_at + 1
    assert results[1].truncated is True
    assert results[1].output_tokens == 8


@pytest.mark.torch
def test_streaming_deltas_concatenate_to_the_content(engine):
    page = make_page(0, 900, 1200, 2)
    options = ParseOptions(tier=2, mode="markdown", max_new_tokens=12)
    deltas: list[str] = []
    result = engine.stream_page(page, options, lambda d: deltas.append(d))
    assert deltas and all(deltas)
    assert clean_content("".join(deltas)) == result.content
    assert result == engine.infer_batch([page], options)[0]


@pytest.mark.torch
def test_streaming_stops_when_the_callback_says_so(engine):
    page = make_page(3, 500, 500, 0)
    options = ParseOptions(tier=0, max_new_tokens=40)
    calls: list[str] = []

    def on_delta(delta: str) -> bool:
        calls.append(delta)
        return len(calls) >= 3  # the client went away

    result = engine.stream_page(page, options, on_delta)
    assert len(calls) == 3
    assert result.truncated is True
    assert result.output_tokens < 40


def _repeated_ngrams(ids: list[int], n: int) -> int:
    grams = [tuple(ids[i : i + n]) for i in range(len(ids) - n + 1)]
    return len(grams) - len(set(grams))


@pytest.mark.torch
def test_no_repeat_ngram_guard_breaks_loops(tiny_model_dir):
    pages = [make_page(i, 500, 400, 0) for i in range(4)]
    options = ParseOptions(tier=0, max_new_tokens=32)
    loose = DeepseekOcr2Engine(tiny_model_dir, device="cpu", no_repeat_ngram_size=0)
    loose.load()
    # The random model repeats itself, like the real one sometimes does.
    assert sum(_repeated_ngrams(ids, 2) for ids in generated_ids(loose, pages, options)) > 0
    guarded = DeepseekOcr2Engine(tiny_model_dir, device="cpu", no_repeat_ngram_size=2)
    guarded.load()
    for ids in generated_ids(guarded, pages, options):
        assert len(ids) == 32
        assert _repeated_ngrams(ids, 2) == 0  # window (90) covers all 32 tokens
    # Each page says whether the guard steered it: exactly the pages whose greedy output
    # (the loose engine's) differs from the guarded one.
    steered = [
        a != b
        for a, b in zip(
            generated_ids(loose, pages, options),
            generated_ids(guarded, pages, options),
            strict=True,
        )
    ]
    results = guarded.infer_batch(pages, options)
    assert [r.repetition_trips > 0 for r in results] == steered
    assert any(steered)
    assert all(r.repetition_trips == 0 for r in loose.infer_batch(pages, options))


@pytest.mark.torch
def test_modes_use_different_prompts(engine):
    page = make_page(0, 500, 400, 0)
    outputs = {
        mode: engine.infer_batch([page], ParseOptions(tier=0, mode=mode, max_new_tokens=8))[0]
        for mode in ("markdown", "text", "grounding")
    }
    assert len({r.content for r in outputs.values()}) > 1


@pytest.mark.torch
def test_warmup_runs(engine):
    engine.warmup()


@pytest.mark.torch
def test_grounding_output_becomes_blocks_in_page_pixels(engine):
    """Decoding keeps the grounding tags (they may be special tokens), parsing maps boxes."""
    tokenizer = engine._processor.tokenizer
    raw = "<|ref|>title<|/ref|><|det|>[[0, 0, 499, 99]]<|/det|>\n# Report 表\n"
    ids = tokenizer(raw, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    page = make_page(0, 2000, 1000, 0)
    result = engine._finish(page, ids + [tokenizer.pad_token_id] * 3)
    assert result.content == "# Report 表"
    assert result.output_tokens == len(ids)
    assert result.truncated is False
    [block] = result.blocks
    assert block.type == "title" and block.text == "# Report 表"
    assert block.bbox == pytest.approx((0.0, 0.0, 2000 * 499 / 999, 1000 * 99 / 999))


@pytest.mark.torch
def test_tiling_mismatch_is_logged(engine, caplog):
    page = make_page(0, 500, 400, 0)
    wrong = PageImage(page.index, page.image, tiles=2, vision_tokens=544)
    with caplog.at_level("WARNING", logger="docparser_runtime.engines.deepseek_ocr2.engine"):
        result = engine.infer_batch([wrong], ParseOptions(tier=0, max_new_tokens=1))[0]
    assert "processor inserted 257" in caplog.text
    assert result.vision_tokens == 544  # reported as given; the log points at the bug


@pytest.mark.torch
@pytest.mark.parametrize("tier", [0, 1])
def test_large_page_at_tier_below_two_runs_on_the_global_view_only(engine, tier):
    """Tiers 0/1 switch cropping off; the model must still get a 1024px view (256 + 1)."""
    page = make_page(0, 1654, 2339, tier)
    assert (page.tiles, page.vision_tokens) == (0, 256)
    inputs = engine._prepare([page], ParseOptions(tier=tier))
    assert tuple(inputs["pixel_values"].shape) == (1, 3, 1024, 1024)
    assert "pixel_values_local" not in inputs
    result = engine.infer_batch([page], ParseOptions(tier=tier, max_new_tokens=2))[0]
    assert (result.tiles, result.vision_tokens, result.output_tokens) == (0, 256, 2)
