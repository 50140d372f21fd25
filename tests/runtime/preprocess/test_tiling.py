"""Tier -> tiles -> visual tokens, checked against the real transformers code.

Pure checks run everywhere; the ``torch`` ones call the HF DeepSeek-OCR-2 image processor
and processor (loaded with ``AutoProcessor.from_pretrained`` from the tiny model dir) and
prove that what we report is what the model is actually fed.
"""

from __future__ import annotations

import itertools

import pytest
from docparser_runtime.preprocess.tiling import (
    GLOBAL_VIEW_TOKENS,
    TILE_SIZE,
    TILE_TOKENS,
    TilePlan,
    plan_tiles,
    processor_image_kwargs,
)
from PIL import Image

# Sizes chosen to hit every branch: below/at/just above the 768 tile, A4 portrait and
# landscape at common DPIs, extreme strips (aspect beyond 6:1), near-square, and sizes
# whose aspect ratio ties between two grids.
PROCESSOR_SIZES = [
    (500, 400),
    (768, 768),
    (769, 300),
    (1654, 2339),
    (2339, 1654),
    (1900, 250),
    (300, 1700),
    (1000, 1000),
]


def _sweep_sizes():
    sides = [1, 64, 700, 768, 769, 800, 1024, 1240, 1536, 1654, 2339, 3000, 4961, 9000]
    return list(itertools.product(sides, sides))


# ---------------------------------------------------------------- pure properties


@pytest.mark.parametrize("tier", range(7))
def test_tokens_are_global_plus_tiles_and_tiles_bounded(tier):
    for width, height in _sweep_sizes():
        plan = plan_tiles(width, height, tier)
        assert plan.vision_tokens == GLOBAL_VIEW_TOKENS + TILE_TOKENS * plan.tiles
        assert plan.tiles == plan.cols * plan.rows
        assert plan.tiles == 0 or 2 <= plan.tiles <= tier
        assert 256 <= plan.vision_tokens <= 1120
        assert plan.processor_image_tokens == plan.vision_tokens + 1


def test_no_tiles_for_tier_below_two_or_pages_within_one_tile():
    assert plan_tiles(3000, 4000, 0) == TilePlan(0, 0, 0, 256)
    assert plan_tiles(3000, 4000, 1) == TilePlan(0, 0, 0, 256)
    assert plan_tiles(TILE_SIZE, TILE_SIZE, 6).tiles == 0
    assert plan_tiles(TILE_SIZE + 1, 10, 6).tiles > 0


def test_grid_follows_aspect_ratio():
    # Portrait A4 -> 2 columns x 3 rows at tier 6; landscape -> 3 x 2; a strip -> 6 x 1.
    assert (plan_tiles(1654, 2339, 6).cols, plan_tiles(1654, 2339, 6).rows) == (2, 3)
    assert (plan_tiles(2339, 1654, 6).cols, plan_tiles(2339, 1654, 6).rows) == (3, 2)
    assert (plan_tiles(6000, 900, 6).cols, plan_tiles(6000, 900, 6).rows) == (6, 1)
    assert plan_tiles(6000, 900, 3).tiles == 3


def test_more_tier_never_means_fewer_tiles():
    for width, height in _sweep_sizes():
        counts = [plan_tiles(width, height, tier).tiles for tier in range(7)]
        assert counts == sorted(counts), (width, height, counts)


@pytest.mark.parametrize("tier", [-1, 7, 2.0, True, "6", None])
def test_invalid_tier_rejected(tier):
    with pytest.raises(ValueError):
        plan_tiles(1000, 1000, tier)
    with pytest.raises(ValueError):
        processor_image_kwargs(tier)


@pytest.mark.parametrize("size", [(0, 10), (10, 0), (-5, 100)])
def test_invalid_size_rejected(size):
    with pytest.raises(ValueError):
        plan_tiles(*size, 6)


# ------------------------------------------------------ against the real transformers


@pytest.mark.torch
def test_grid_equals_hf_optimal_canvas_over_a_size_sweep():
    pytest.importorskip("transformers")
    from transformers.models.deepseek_ocr2.image_processing_pil_deepseek_ocr2 import (
        get_optimal_tiled_canvas,
    )

    checked = 0
    for (width, height), tier in itertools.product(_sweep_sizes(), range(2, 7)):
        plan = plan_tiles(width, height, tier)
        if max(width, height) <= TILE_SIZE:
            assert plan.tiles == 0
            continue
        cols, rows = get_optimal_tiled_canvas((height, width), (TILE_SIZE, TILE_SIZE), 2, tier)
        assert (plan.cols, plan.rows) == (cols, rows), (width, height, tier)
        checked += 1
    assert checked > 500


@pytest.mark.torch
@pytest.mark.parametrize("tier", range(7))
def test_processor_inserts_vision_tokens_plus_separator(tiny_model_dir, tier):
    """The real processor, called the way the engine calls it, for every tier."""
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(tiny_model_dir)
    images = [Image.new("RGB", size, (240, 240, 240)) for size in PROCESSOR_SIZES]
    prompts = ["<image>\nFree OCR."] * len(images)
    # Normalisation does not change shapes or counts; skipping it keeps the test fast.
    out = processor(
        images=images,
        text=prompts,
        padding=True,
        do_rescale=False,
        do_normalize=False,
        **processor_image_kwargs(tier),
    )
    image_token_id = processor.image_token_id
    for i, (width, height) in enumerate(PROCESSOR_SIZES):
        plan = plan_tiles(width, height, tier)
        n_image_tokens = sum(1 for t in out["input_ids"][i] if t == image_token_id)
        assert n_image_tokens == plan.vision_tokens + 1, (width, height, tier)
        assert out["num_local_patches"][i] == plan.tiles, (width, height, tier)
        # The global view is always the 1024px one (256 tokens), whatever the tier.
        assert out["pixel_values"][i].shape[-2:] == (1024, 1024)
    local = out.get("pixel_values_local", [])
    assert len(local) == sum(plan_tiles(w, h, tier).tiles for w, h in PROCESSOR_SIZES)
    assert all(patch.shape[-2:] == (TILE_SIZE, TILE_SIZE) for patch in local)
