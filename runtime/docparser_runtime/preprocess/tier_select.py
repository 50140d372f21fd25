"""``tier: auto``: the smallest tier whose resolution still reads a page (issue 25).

WHY: a fixed tier 6 spends 1,120 visual tokens on every page, while a plain letter is read
as well from the 1024 global view alone (256). What decides whether a page is readable at a
tier is how many pixels its smallest text keeps once the processor has shrunk the page to
the global view and the tile grid (``tiling.plan_tiles``). So the selector measures the
page's text height once, at native resolution, and walks the tiers upwards through the
*real* tiling plans until that text is at least ``MIN_TEXT_PX`` tall in what the model sees.

Signals (numpy on a grey copy, a few ms on an A4 page; measured by ``bench/tier_calibration.py``):

* **text height** (the deciding one): ink rows of the page cut into vertical strips give
  text-line bands (a strip sits inside one column, so side-by-side columns with different
  baselines do not merge); a low percentile of the band heights is the page's small text.
  Bands thinner than 3 px (rules, specks) and taller than a sixth of the page (pictures)
  are left out.
* **formula-like lines**: a fraction's bar or a stacked sub/superscript makes a tall band
  with a thin full row inside; scripts are set about 0.7x the body, so such a page is judged
  at 0.7x its text height.
* **grey paper** (a scan or photo): blur, noise and JPEG cost legibility, so the text of a
  scan is judged at 0.75x its height (the calibration's scans lost text where clean pages at
  the same height did not).
* **faint ink** (issue 36): when the darkest ink is less than ``FAINT_CONTRAST`` grey levels
  below the paper (light grey print), the text is judged at 0.9x: the widened calibration
  read 7.5 pt low-contrast type worse at the global view than black type of that size.
* **a safety margin** (issue 36): the threshold is where reading starts to fail, so a page
  whose text clears it by less than ``MARGIN`` (15 %) at a plan takes the next one: a tier
  too high costs tokens, one too low loses text. v1 kept it for pages with **ruled lines** or
  **columns** (structure the model must rebuild) only; a held-out plain 6.5 pt page measured
  6.4 px and lost 5 % of its text at tier 0, and the widened calibration (fine print at 6 to
  8 pt) found plain pages, a three-line footnote under body text and a 150 dpi scan
  (blur and skew widen a line's band) read too low inside the 15 % as well.
* **ink density** -> an estimate of the page's text tokens: the DeepSeek-OCR paper reports
  ~97 % decoding precision while text tokens stay under 10x the visual tokens, so no plan
  is chosen whose visual tokens are fewer than a tenth of the estimate (``MAX_COMPRESSION``).

``SELECTOR_VERSION`` names this rule: result-cache keys carry it, so changing thresholds
never serves a page parsed under the previous choice.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
from PIL import Image

from docparser_runtime.preprocess.tiling import (
    GLOBAL_SIZE,
    MAX_TIER,
    TILE_SIZE,
    TilePlan,
    plan_tiles,
)

SELECTOR_VERSION = "2"
MIN_TEXT_PX = 6.2  # smallest text-band height (ascender to descender) the model must see
MARGIN = 1.15  # text within this factor of MIN_TEXT_PX at a plan takes the next plan
SCRIPT_SCALE = 0.7  # sub/superscripts and fraction parts against body text
SCAN_PAPER = 250  # paper darker than this (90th grey percentile) is a scan or a photo
SCAN_SCALE = 0.75  # a scan's text reads like clean text this much smaller
FAINT_CONTRAST = 120  # darkest ink less than this below the paper: faint (low-contrast) text
FAINT_SCALE = 0.8  # faint text reads like clean text this much smaller
INK_QUANTILE = 0.002  # the darkest ink: this share of the page's pixels is darker
MIN_GAIN = 1.25  # a larger plan must keep this much more resolution to be worth choosing
MAX_COMPRESSION = 10.0  # estimated text tokens per visual token, at most
CHARS_PER_TOKEN = 3.5  # BPE on Latin text; CJK is closer to one, the estimate errs low
WORK_LONG_SIDE = 1200  # pages are reduced by an integer factor to about this before measuring
STRIPS = 8
SMALL_TEXT_PERCENTILE = 25  # of the text-line band heights: the page's small text


@dataclass(frozen=True)
class PageSignals:
    """What the selector saw, in the page's own pixels unless named ``*_global``."""

    text_height: float  # small-text band height, page pixels (0: no text found)
    text_height_global: float  # the same at the 1024 global view
    ink: float  # share of inked pixels
    columns: int
    rules: int  # long thin horizontal lines
    formula: bool
    text_tokens: int  # estimated text tokens on the page
    scan: bool = False  # grey paper: a scan or photo, whose blur and noise cost legibility
    contrast: int = 255  # paper grey minus the darkest ink's: faint text reads like smaller

    def to_dict(self) -> dict[str, object]:
        return {k: round(v, 3) if isinstance(v, float) else v for k, v in asdict(self).items()}


@dataclass(frozen=True)
class TierChoice:
    """The tier ``auto`` resolved to, its tiling plan and why."""

    tier: int
    plan: TilePlan
    signals: PageSignals
    reason: str
    version: str = SELECTOR_VERSION


def _otsu(hist: np.ndarray) -> int:
    """Otsu's threshold of a 256-bin grey histogram."""
    total = hist.sum()
    levels = np.arange(256, dtype=np.float64)
    w0 = np.cumsum(hist)
    m0 = np.cumsum(hist * levels)
    w1 = total - w0
    with np.errstate(divide="ignore", invalid="ignore"):
        between = (m0[-1] * w0 / total - m0) ** 2 / (w0 * w1)
    between[~np.isfinite(between)] = 0.0
    return int(np.argmax(between))


def _ink_mask(image: Image.Image) -> tuple[np.ndarray, int, int, int]:
    """Ink of a grey copy reduced by an integer factor (isolated specks dropped), the
    factor, the paper's grey and the contrast of the darkest ink against it."""
    gray_image = image.convert("L")
    factor = max(1, max(gray_image.size) // WORK_LONG_SIDE)
    if factor > 1:
        gray_image = gray_image.reduce(factor)
    hist = np.asarray(gray_image.histogram(), dtype=np.float64)
    cumulative = np.cumsum(hist)
    paper = int(np.searchsorted(cumulative, 0.9 * hist.sum()))
    darkest = int(np.searchsorted(cumulative, INK_QUANTILE * hist.sum()))
    threshold = _otsu(hist)
    if paper - threshold < 40:  # no real contrast: a blank or flat page
        threshold = paper - 40
    ink = np.asarray(gray_image) < threshold
    # A pixel with no inked right or lower neighbour is a speck (scan noise), not a stroke.
    kept = np.zeros_like(ink)
    kept[:-1, :-1] = ink[:-1, :-1] & (ink[:-1, 1:] | ink[1:, :-1])
    return kept, factor, paper, paper - darkest


def _bands(strip_rows: np.ndarray) -> list[tuple[int, int, int]]:
    """(strip, top, height) of every run of inked rows in each strip."""
    padded = np.zeros((strip_rows.shape[0] + 2, strip_rows.shape[1]), dtype=np.int8)
    padded[1:-1] = strip_rows
    edges = np.diff(padded, axis=0)
    out: list[tuple[int, int, int]] = []
    for strip in range(strip_rows.shape[1]):
        starts = np.flatnonzero(edges[:, strip] == 1)
        ends = np.flatnonzero(edges[:, strip] == -1)
        out.extend((strip, int(s), int(e - s)) for s, e in zip(starts, ends, strict=True))
    return out


def _columns(ink: np.ndarray, text_height: float) -> int:
    """Most side-by-side blocks separated by white gutters, over four horizontal slabs."""
    if text_height <= 0:
        return 0
    h, w = ink.shape
    gutter = max(int(1.5 * text_height), w // 60)
    best = 0
    for top in range(0, h - h // 4 + 1, max(h // 4, 1)):
        profile = ink[top : top + h // 4].sum(axis=0) > 0
        if profile.sum() < w // 10:
            continue
        padded = np.concatenate(([False], profile, [False])).astype(np.int8)
        edges = np.diff(padded)
        starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
        blocks = 1
        for gap_start, gap_end in zip(ends[:-1], starts[1:], strict=True):
            blocks += int(gap_end - gap_start >= gutter)
        best = max(best, blocks)
    return best


def _text_columns(ink: np.ndarray, bands: list[tuple[int, int, int]], strip_w: int) -> int:
    """Pixel columns with ink inside text bands, summed over strips (~ text line length)."""
    total = 0
    h = ink.shape[0]
    for strip in range(STRIPS):
        mine = sorted((top, top + height) for s, top, height in bands if s == strip)
        if not mine:
            continue
        cuts = [edge for top, end in mine for edge in (top, end) if edge < h]
        part = ink[:, strip * strip_w : (strip + 1) * strip_w]
        segments = np.logical_or.reduceat(part, cuts, axis=0)
        total += int(segments[::2].sum())
    return total


def _fraction_bars(ink: np.ndarray, rule_rows: np.ndarray, text_height: float) -> int:
    """Thin strokes (blank two rows above and below) longer than 1.5 text heights that are
    not table rules: fraction bars (and underlines, which err towards a higher tier)."""
    longest = max(int(1.5 * text_height), 2)
    thin = ink[2:-2] & ~ink[:-4] & ~ink[4:]
    rows = thin[(np.count_nonzero(thin, axis=1) >= longest) & ~rule_rows[2:-2]]
    if not rows.size:
        return 0
    padded = np.zeros((rows.shape[0], rows.shape[1] + 2), dtype=np.int8)
    padded[:, 1:-1] = rows
    edges = np.diff(padded, axis=1).ravel()  # each row's runs start (+1) and end (-1) in it
    runs = np.flatnonzero(edges == -1) - np.flatnonzero(edges == 1)
    return int(np.count_nonzero(runs >= longest))


def measure(image: Image.Image) -> PageSignals:
    """The page's signals (see the module docstring)."""
    ink, factor, paper, contrast = _ink_mask(image)
    if ink.shape[1] < STRIPS:  # a sliver narrower than the strips: blank columns change no signal
        ink = np.pad(ink, ((0, 0), (0, STRIPS - ink.shape[1])))
    h, w = ink.shape
    strip_w = max(w // STRIPS, 1)
    counts = ink[:, : strip_w * STRIPS].reshape(h, STRIPS, strip_w).sum(axis=2)
    full = counts >= 0.85 * strip_w
    rule_rows = full.sum(axis=1) >= 2
    text_rows = (counts >= max(2, strip_w // 200)) & ~full
    all_bands = _bands(text_rows)
    bands = [b for b in all_bands if 3 <= b[2] <= h // 6]
    heights = np.array([b[2] for b in bands], dtype=np.float64)
    text_height = float(np.percentile(heights, SMALL_TEXT_PERCENTILE)) if heights.size >= 3 else 0.0
    bars = _fraction_bars(ink, rule_rows, text_height) if text_height else 0
    ink_cols = _text_columns(ink, bands, strip_w) if text_height else 0
    chars = ink_cols / max(0.55 * text_height, 1.0)
    long_side = max(image.size)
    return PageSignals(
        text_height=text_height * factor,
        text_height_global=text_height * factor * min(1.0, GLOBAL_SIZE / long_side),
        ink=float(ink.mean()),
        columns=_columns(ink, text_height),
        rules=int(np.count_nonzero(np.diff(rule_rows.astype(np.int8)) == 1)),
        formula=bars >= 2,
        text_tokens=int(chars / CHARS_PER_TOKEN),
        scan=paper < SCAN_PAPER,
        contrast=contrast,
    )


def view_scale(width: int, height: int, plan: TilePlan) -> float:
    """How much of the page's resolution the model keeps under ``plan`` (at most 1).

    The global view fits the page into 1024 x 1024; tiles resize it to the grid's canvas
    (``cols`` x ``rows`` tiles of 768), each axis on its own, and the smaller axis scale
    limits how legible a glyph stays. The model sees both, so the larger of the two counts.
    """
    scale = min(1.0, GLOBAL_SIZE / max(width, height))
    if plan.tiles:
        tiled = min(1.0, plan.cols * TILE_SIZE / width, plan.rows * TILE_SIZE / height)
        scale = max(scale, tiled)
    return scale


def distinct_plans(width: int, height: int, cap: int = MAX_TIER) -> list[tuple[int, TilePlan]]:
    """The lowest tier of each distinct tile plan up to ``cap``, smallest first."""
    seen: dict[tuple[int, int], tuple[int, TilePlan]] = {}
    for tier in range(cap + 1):
        plan = plan_tiles(width, height, tier)
        seen.setdefault((plan.cols, plan.rows), (tier, plan))
    return list(seen.values())


def useful_plans(width: int, height: int, cap: int = MAX_TIER) -> list[tuple[int, TilePlan]]:
    """The distinct plans that each keep clearly more resolution than the one before.

    A plan whose grid barely beats the global view (an A4 page in one column of two tiles:
    0.62x against 0.58x) costs 288 more tokens and, squeezed to the grid's aspect, read
    *worse* in the calibration; it is never chosen.
    """
    kept: list[tuple[int, TilePlan]] = []
    for tier, plan in distinct_plans(width, height, cap):
        scale = view_scale(width, height, plan)
        if not kept or scale >= MIN_GAIN * view_scale(width, height, kept[-1][1]):
            kept.append((tier, plan))
    return kept


def choose_tier(image: Image.Image, cap: int = MAX_TIER) -> TierChoice:
    """The smallest tier up to ``cap`` that keeps the page's small text legible."""
    signals = measure(image)
    width, height = image.size
    plans = useful_plans(width, height, cap)
    if signals.text_height == 0:
        tier, plan = plans[0]
        return TierChoice(tier, plan, signals, "no text found")
    need = signals.text_height * (SCRIPT_SCALE if signals.formula else 1.0)
    need *= SCAN_SCALE if signals.scan else 1.0
    need *= FAINT_SCALE if signals.contrast < FAINT_CONTRAST else 1.0
    structured = signals.formula or signals.rules >= 3 or signals.columns >= 2
    for i, (tier, plan) in enumerate(plans):
        seen = need * view_scale(width, height, plan)
        if seen < MIN_TEXT_PX:
            continue
        if plan.vision_tokens * MAX_COMPRESSION < signals.text_tokens:
            continue
        if seen < MIN_TEXT_PX * MARGIN and i + 1 < len(plans):
            tier, plan = plans[i + 1]
            kind = "structured" if structured else "scan" if signals.scan else "near the threshold"
            return TierChoice(tier, plan, signals, f"text {seen:.1f}px, {kind}: one up")
        return TierChoice(tier, plan, signals, f"text {seen:.1f}px at this plan")
    tier, plan = distinct_plans(width, height, cap)[-1]  # unsure: the most the cap allows
    return TierChoice(tier, plan, signals, "small text: the largest plan allowed")
