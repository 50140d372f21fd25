"""A generated corpus of varied pages with line-level ground truth (text and box).

WHY: issue 12 found clean single-column pages where the CPU engine silently lost whole
lines. Tuning detection on one page would only move the failure elsewhere, so this module
draws many kinds of ordinary pages (long and short lines, wide margins, small and large
type, light grey ink, dense pages, one-word and numbers-only lines, mixed scripts) plus a
few hard ones (tiny, faint, blurred, noisy), each with every line's text and box known
exactly. ``bench/fidelity.py`` measures the engines on it; tests use single pages.

Everything is deterministic: a page's words come from ``random.Random(seed)``.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

import documents
from PIL import Image, ImageDraw, ImageFilter, ImageFont

BBox = tuple[float, float, float, float]
A4 = (1240, 1754)  # 150 dpi

_VOCABULARY = (
    "the of and to in is that for it as with was on be by this are from at or an which "
    "report page table value total order customer invoice amount payment date number "
    "service account balance period quarter annual revenue growth market product price "
    "shipping delivery address contract terms section figure result analysis method data "
    "model system process review summary note policy budget office project team manager "
    "client request approval status update version document record entry detail item "
    "include require provide receive follow describe increase reduce compare measure "
    "complete general special public final current previous annual monthly weekly daily "
    "important available different possible several certain major local national"
)
WORDS = tuple(_VOCABULARY.split())
CJK_PHRASES = ("文档解析", "扫描页面", "识别引擎", "阅读顺序", "表格内容", "每一页", "检查大小")


@dataclass(frozen=True)
class TruthLine:
    """One drawn line: exact text and the box its ink occupies (page pixels)."""

    text: str
    bbox: BBox


@dataclass
class CorpusPage:
    """A rendered page of one ``kind``; ``hard`` pages are degraded on purpose."""

    name: str
    image: Image.Image
    lines: list[TruthLine] = field(default_factory=list)
    hard: bool = False

    @property
    def text(self) -> str:
        return "\n".join(line.text for line in self.lines)


def sentence(rng: random.Random, words: int) -> str:
    chosen = [rng.choice(WORDS) for _ in range(words)]
    return " ".join(chosen).capitalize() + "."


def full_line(rng: random.Random, font: ImageFont.FreeTypeFont, width: int) -> str:
    """A sentence as long as fits in ``width`` pixels of ``font``."""
    words = [rng.choice(WORDS).capitalize()]
    while True:
        word = rng.choice(WORDS)
        if font.getlength(" ".join([*words, word]) + ".") > width:
            return " ".join(words) + "."
        words.append(word)


def number_line(rng: random.Random) -> str:
    kind = rng.randrange(4)
    if kind == 0:
        return f"{rng.randrange(1, 99999):,}.{rng.randrange(100):02d}"
    if kind == 1:
        return f"20{rng.randrange(10, 40)}-{rng.randrange(1, 13):02d}-{rng.randrange(1, 29):02d}"
    if kind == 2:
        return " ".join(str(rng.randrange(10, 999)) for _ in range(rng.randrange(2, 5)))
    return str(rng.randrange(1, 10_000_000))


class _Writer:
    """Draws lines top to bottom and records each line's ink box."""

    def __init__(self, size=A4, paper=(255, 255, 255)) -> None:
        self.image = Image.new("RGB", size, paper)
        self.draw = ImageDraw.Draw(self.image)
        self.lines: list[TruthLine] = []

    def line(self, xy, text: str, font: ImageFont.FreeTypeFont, fill=documents.INK) -> None:
        self.draw.text(xy, text, font=font, fill=fill)
        box = self.draw.textbbox(xy, text, font=font)
        self.lines.append(TruthLine(text, tuple(float(v) for v in box)))

    def column(self, texts, font, *, x: int, y: int, step: int, fill=documents.INK) -> int:
        for text in texts:
            self.line((x, y), text, font, fill)
            y += step
        return y


def _sans(size: int, bold: bool = False) -> ImageFont.FreeTypeFont:
    return documents.font(size, bold=bold)


def a4_sentences(seed: int = 1) -> CorpusPage:
    """The issue's page: a title and 14 sentences, black on white, one column."""
    rng = random.Random(seed)
    w = _Writer()
    w.line((110, 120), "Annual Review of Operations", _sans(44, bold=True))
    texts = [sentence(rng, rng.randrange(6, 11)) for _ in range(14)]
    w.column(texts, _sans(26), x=110, y=230, step=62)
    return CorpusPage("a4_sentences", w.image, w.lines)


def long_lines(seed: int = 2) -> CorpusPage:
    rng = random.Random(seed)
    w = _Writer()
    font = _sans(21)
    texts = [full_line(rng, font, 1140) for _ in range(22)]
    w.column(texts, font, x=50, y=80, step=44)
    return CorpusPage("long_lines", w.image, w.lines)


def short_lines(seed: int = 3) -> CorpusPage:
    rng = random.Random(seed)
    w = _Writer()
    texts = [sentence(rng, rng.randrange(1, 4)) for _ in range(20)]
    w.column(texts, _sans(26), x=140, y=100, step=70)
    return CorpusPage("short_lines", w.image, w.lines)


def wide_margins(seed: int = 4) -> CorpusPage:
    rng = random.Random(seed)
    w = _Writer()
    texts = [sentence(rng, rng.randrange(3, 5)) for _ in range(16)]
    w.column(texts, _sans(22), x=380, y=420, step=50)
    return CorpusPage("wide_margins", w.image, w.lines)


def small_font(seed: int = 5) -> CorpusPage:
    rng = random.Random(seed)
    w = _Writer()
    texts = [sentence(rng, rng.randrange(8, 14)) for _ in range(30)]
    w.column(texts, _sans(15), x=100, y=100, step=30)
    return CorpusPage("small_font", w.image, w.lines)


def large_font(seed: int = 6) -> CorpusPage:
    rng = random.Random(seed)
    w = _Writer()
    texts = [sentence(rng, rng.randrange(2, 4)) for _ in range(10)]
    w.column(texts, _sans(60), x=90, y=120, step=140)
    return CorpusPage("large_font", w.image, w.lines)


def light_grey(seed: int = 7) -> CorpusPage:
    rng = random.Random(seed)
    w = _Writer()
    texts = [sentence(rng, rng.randrange(5, 10)) for _ in range(15)]
    w.column(texts, _sans(24), x=110, y=150, step=60, fill=(165, 165, 165))
    return CorpusPage("light_grey", w.image, w.lines)


def dense(seed: int = 8) -> CorpusPage:
    rng = random.Random(seed)
    w = _Writer()
    texts = [sentence(rng, rng.randrange(9, 13)) for _ in range(58)]
    w.column(texts, _sans(18), x=70, y=60, step=28)
    return CorpusPage("dense", w.image, w.lines)


def one_word(seed: int = 9) -> CorpusPage:
    rng = random.Random(seed)
    w = _Writer()
    font = _sans(26)
    for i in range(22):
        word = rng.choice([x for x in WORDS if len(x) > 2]).capitalize()
        w.line((110, 90 + i * 72), word, font)
    return CorpusPage("one_word", w.image, w.lines)


def numbers_only(seed: int = 10) -> CorpusPage:
    rng = random.Random(seed)
    w = _Writer()
    texts = [number_line(rng) for _ in range(20)]
    w.column(texts, _sans(26), x=150, y=100, step=70)
    return CorpusPage("numbers_only", w.image, w.lines)


def mixed_scripts(seed: int = 11) -> CorpusPage | None:
    path = documents.cjk_font_path()
    if path is None:
        return None
    rng = random.Random(seed)
    w = _Writer()
    font = ImageFont.truetype(str(path), 30)
    texts = []
    for _ in range(14):
        parts = [rng.choice(CJK_PHRASES), rng.choice(WORDS), str(rng.randrange(10, 999))]
        rng.shuffle(parts)
        texts.append(" ".join(parts))
    w.column(texts, font, x=120, y=120, step=80)
    return CorpusPage("mixed_scripts", w.image, w.lines)


def upscaled_a4(seed: int = 12) -> CorpusPage:
    """A 72-dpi raster page rendered at 144 dpi, like a scanned PDF through pdfium."""
    rng = random.Random(seed)
    w = _Writer(size=(595, 842))
    w.line((55, 60), "Meeting Minutes", _sans(22, bold=True))
    texts = [sentence(rng, rng.randrange(6, 10)) for _ in range(14)]
    w.column(texts, _sans(13), x=55, y=110, step=30)
    image = w.image.resize((1190, 1684), Image.Resampling.BICUBIC)
    lines = [TruthLine(t.text, tuple(v * 2 for v in t.bbox)) for t in w.lines]
    return CorpusPage("upscaled_a4", image, lines)


# ---------------------------------------------------------------- hard pages


def tiny_font(seed: int = 20) -> CorpusPage:
    rng = random.Random(seed)
    w = _Writer()
    texts = [sentence(rng, rng.randrange(8, 12)) for _ in range(30)]
    w.column(texts, _sans(11), x=100, y=100, step=24)
    return CorpusPage("tiny_font", w.image, w.lines, hard=True)


def faint(seed: int = 21) -> CorpusPage:
    rng = random.Random(seed)
    w = _Writer()
    texts = [sentence(rng, rng.randrange(5, 9)) for _ in range(15)]
    w.column(texts, _sans(22), x=110, y=150, step=60, fill=(212, 212, 212))
    return CorpusPage("faint", w.image, w.lines, hard=True)


def blurred(seed: int = 22) -> CorpusPage:
    page = a4_sentences(seed)
    image = page.image.filter(ImageFilter.GaussianBlur(2.2))
    return CorpusPage("blurred", image, page.lines, hard=True)


def noisy(seed: int = 23) -> CorpusPage:
    """Salt-and-pepper specks and JPEG artefacts over a small-type page."""
    import io

    import numpy as np

    page = small_font(seed)
    rng = np.random.default_rng(seed)
    pixels = np.asarray(page.image).copy()
    specks = rng.random(pixels.shape[:2])
    pixels[specks < 0.01] = 0
    pixels[specks > 0.99] = 255
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, "JPEG", quality=25)
    image = Image.open(io.BytesIO(buf.getvalue())).convert("RGB")
    return CorpusPage("noisy", image, page.lines, hard=True)


CLEAN: tuple[Callable[[], CorpusPage | None], ...] = (
    a4_sentences, long_lines, short_lines, wide_margins, small_font, large_font, light_grey,
    dense, one_word, numbers_only, mixed_scripts, upscaled_a4,
)  # fmt: skip
HARD: tuple[Callable[[], CorpusPage | None], ...] = (tiny_font, faint, blurred, noisy)


def corpus(*, hard: bool = True) -> list[CorpusPage]:
    """Every page type (hard ones too unless ``hard=False``); CJK pages need a CJK font."""
    makers = CLEAN + (HARD if hard else ())
    return [page for page in (make() for make in makers) if page is not None]


# ---------------------------------------------------------------- scoring


def _bit_masks(pattern: str) -> dict[str, int]:
    masks: dict[str, int] = {}
    for i, ch in enumerate(pattern):
        masks[ch] = masks.get(ch, 0) | (1 << i)
    return masks


def _myers(pattern: str, text: str, *, anywhere: bool) -> int:
    """Myers/Hyyrö bit-parallel edit distance: O(len(text)) big-integer steps.

    ``anywhere``: the best match of ``pattern`` against any substring of ``text``
    (approximate search); else the plain Levenshtein distance of the two strings.
    Pure Python Levenshtein is quadratic, too slow for whole dense pages.
    """
    m = len(pattern)
    if m == 0:
        return 0 if anywhere else len(text)
    peq, full, top = _bit_masks(pattern), (1 << m) - 1, 1 << (m - 1)
    pv, mv, score = full, 0, m
    best = m
    for ch in text:
        eq = peq.get(ch, 0)
        xv = eq | mv
        xh = ((((eq & pv) + pv) & full) ^ pv) | eq
        ph = (mv | ~(xh | pv)) & full
        mh = pv & xh
        if ph & top:
            score += 1
        elif mh & top:
            score -= 1
        ph = ((ph << 1) | (0 if anywhere else 1)) & full
        mh = (mh << 1) & full
        pv = (mh | ~(xv | ph)) & full
        mv = ph & xv
        best = min(best, score)
    return best if anywhere else score


def levenshtein(a: str, b: str) -> int:
    return _myers(a, b, anywhere=False)


def cer(reference: str, hypothesis: str) -> float:
    """Character error rate after ``documents.normalise`` (Markdown syntax dropped)."""
    ref, hyp = documents.normalise(reference), documents.normalise(hypothesis)
    return levenshtein(ref, hyp) / max(len(ref), 1)


def line_error(line: str, text: str) -> float:
    """How badly ``line`` is found anywhere in ``text``: 0 exact, 1 absent."""
    needle, hay = documents.normalise(line), documents.normalise(text)
    return _myers(needle, hay, anywhere=True) / max(len(needle), 1)


LOST_AT = 0.34  # a line more than a third wrong (or absent) was not read


def lost_lines(page: CorpusPage, text: str) -> list[TruthLine]:
    """The page's lines that ``text`` does not contain (see ``LOST_AT``)."""
    return [line for line in page.lines if line_error(line.text, text) > LOST_AT]
