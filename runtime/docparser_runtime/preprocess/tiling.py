"""Tier -> local tiles -> visual tokens, exactly as the HF DeepSeek-OCR-2 processor does it.

DeepSeek-OCR-2 always encodes a 1024x1024 global view (256 visual tokens: 1024/16 SAM
patches, 4x conv downsampling -> 16x16 queries) and, for pages larger than one 768px tile,
a grid of 768x768 local tiles (144 tokens each: 12x12 queries). This module predicts the
grid *without* torch or transformers so the CPU engine, the HTTP layer, metrics and the
autoscaler can all report the same ``tiles`` / ``vision_tokens`` the model would see.

Reproduced from ``transformers.models.deepseek_ocr2.image_processing*_deepseek_ocr2``
(transformers 5.24):

* No local tiles when ``max(width, height) <= 768`` (the processor only crops when the
  longest side exceeds ``tile_size``).
* Otherwise the candidate grids are every ``(cols, rows)`` with ``2 <= cols*rows <= tier``,
  stably sorted by tile count; the grid whose ``cols/rows`` is closest to the page aspect
  ratio wins; on an exact tie the later (larger) grid wins while the page area exceeds half
  the grid's canvas area (``get_optimal_tiled_canvas``).
* ``tier`` 0 and 1 mean no local tiles (DESIGN: tiles are 0 or 2..6). The HF processor has
  no "max 0/1 crops" setting (an empty candidate list falls back to a 1x1 grid), so the
  engine asks it for ``crop_to_patches=False`` with ``tile_size`` equal to the global size,
  which keeps the 1024 global view and inserts 256 + 1 tokens; see ``processor_image_kwargs``.

``vision_tokens`` is what we report: ``256 + 144 * tiles`` (256..1120). The processor
inserts one more ``<image>`` placeholder per image, filled by the model's learned
``view_separator`` embedding, so ``processor image tokens == vision_tokens + 1``
(``IMAGE_SEPARATOR_TOKENS``); ``tests/runtime/preprocess/test_tiling.py`` proves it on the real
processor over a grid of sizes, aspect ratios and all tiers.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

GLOBAL_SIZE = 1024
TILE_SIZE = 768
GLOBAL_VIEW_TOKENS = 256
TILE_TOKENS = 144
IMAGE_SEPARATOR_TOKENS = 1
MIN_TILES = 2
MAX_TIER = 6


@dataclass(frozen=True)
class TilePlan:
    """How one page is cut: ``cols`` x ``rows`` local tiles (0 x 0 when none)."""

    tiles: int
    cols: int
    rows: int
    vision_tokens: int

    @property
    def processor_image_tokens(self) -> int:
        """``<image>`` placeholders the HF processor inserts for this page."""
        return self.vision_tokens + IMAGE_SEPARATOR_TOKENS


@lru_cache(maxsize=16)
def _candidate_grids(min_tiles: int, max_tiles: int) -> tuple[tuple[int, int], ...]:
    """All (cols, rows) with min..max tiles, stably sorted by tile count (HF order)."""
    grids = [
        (cols, rows)
        for cols in range(1, max_tiles + 1)
        for rows in range(1, max_tiles + 1)
        if min_tiles <= cols * rows <= max_tiles
    ]
    return tuple(sorted(grids, key=lambda g: g[0] * g[1]))


def _best_grid(width: int, height: int, max_tiles: int) -> tuple[int, int]:
    """``get_optimal_tiled_canvas`` from the HF image processor, same tie-breaking."""
    aspect = width / height
    area = width * height
    best_diff = float("inf")
    best = (1, 1)
    for cols, rows in _candidate_grids(MIN_TILES, max_tiles):
        diff = abs(aspect - cols / rows)
        if diff < best_diff:
            best_diff = diff
            best = (cols, rows)
        elif diff == best_diff and area > 0.5 * TILE_SIZE * TILE_SIZE * cols * rows:
            best = (cols, rows)
    return best


def validate_tier(tier: int) -> int:
    """Return ``tier`` if it is an int in 0..6, else raise ``ValueError``."""
    if isinstance(tier, bool) or not isinstance(tier, int) or not 0 <= tier <= MAX_TIER:
        raise ValueError(f"tier must be an integer 0..{MAX_TIER}, got {tier!r}")
    return tier


def plan_tiles(width: int, height: int, tier: int) -> TilePlan:
    """Tiles and visual tokens for a ``width`` x ``height`` page with at most ``tier`` tiles."""
    validate_tier(tier)
    if width <= 0 or height <= 0:
        raise ValueError(f"image size must be positive, got {width}x{height}")
    if tier < MIN_TILES or max(width, height) <= TILE_SIZE:
        return TilePlan(tiles=0, cols=0, rows=0, vision_tokens=GLOBAL_VIEW_TOKENS)
    cols, rows = _best_grid(width, height, tier)
    tiles = cols * rows
    return TilePlan(
        tiles=tiles, cols=cols, rows=rows, vision_tokens=GLOBAL_VIEW_TOKENS + TILE_TOKENS * tiles
    )


def processor_image_kwargs(tier: int) -> dict[str, bool | int]:
    """``images_kwargs`` that make the HF processor tile exactly like ``plan_tiles``.

    Tiers 2..6 cap the crops (``min_patches=2, max_patches=tier``). Tiers 0/1 turn
    cropping off; the processor then sizes the global view by ``tile_size``, so we set it
    to the global size to keep the 1024px view (256 tokens) the model expects.
    """
    validate_tier(tier)
    if tier < MIN_TILES:
        return {"crop_to_patches": False, "tile_size": GLOBAL_SIZE}
    return {"crop_to_patches": True, "min_patches": MIN_TILES, "max_patches": tier}
