"""Generated pages of every kind for the ``tier: auto`` selector, with their text (issue 25).

WHY: the selector is judged by how small a tier still reads a page, which depends on the
text's size in pixels, the page's size and aspect (they decide the tile grid) and how it
was made (clean render or scan). These pages span that: letters in large type, body text
from 12 to 42 px, dense pages, 2 and 3 columns, ruled and borderless tables, formulas,
CJK (when a CJK font is installed), scans, slides, receipts and small low-resolution pages,
and (issue 36) 192 fine-print pages: 6 to 8 pt in DejaVu serif, sans and mono at 150, 200
and 300 dpi, in black, grey and low-contrast ink, scanned (150 and 200 dpi), and a few lines
of fine print under body text (mixed sizes). A family whose font is missing is skipped with
one line on stderr, never a failure.
``bench/tier_calibration.py`` labels them with the CPU engine; tests use a few of them with
the labels the sweep found (see ``tests/runtime/preprocess/test_tier_select.py``).

Everything is deterministic: words come from ``random.Random(seed)``.
"""

from __future__ import annotations

import functools
import io
import random
import sys
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field

import documents
import numpy as np
from page_corpus import CJK_PHRASES, WORDS, full_line, sentence
from PIL import Image, ImageDraw, ImageFilter, ImageFont


def a4(dpi: int) -> tuple[int, int]:
    return round(8.27 * dpi), round(11.69 * dpi)


@dataclass
class TierPage:
    """A page and its text as a list of drawn pieces (lines, cells, formula parts)."""

    name: str
    kind: str
    image: Image.Image
    pieces: list[str] = field(default_factory=list)


class Pen:
    """Draws text and remembers it."""

    def __init__(self, size: tuple[int, int], paper: int = 255, ink: int = 20) -> None:
        self.image = Image.new("RGB", size, (paper, paper, paper))
        self.draw = ImageDraw.Draw(self.image)
        self.pieces: list[str] = []
        self.ink = (ink, ink, ink)

    def text(self, xy, text: str, font: ImageFont.FreeTypeFont) -> None:
        self.draw.text(xy, text, font=font, fill=self.ink)
        self.pieces.append(text)

    def rule(self, x0: int, y0: int, x1: int, y1: int, width: int = 2) -> None:
        self.draw.line([(x0, y0), (x1, y1)], fill=documents.INK, width=width)

    def page(self, name: str, kind: str) -> TierPage:
        return TierPage(name, kind, self.image, self.pieces)


def _font(px: int, bold: bool = False) -> ImageFont.FreeTypeFont:
    return documents.font(px, bold=bold)


def column_text(pen: Pen, rng, px: int, x: int, y: int, width: int, bottom: int) -> int:
    font = _font(px)
    step = round(px * 1.45)
    while y + step < bottom:
        pen.text((x, y), full_line(rng, font, width), font)
        y += step
    return y


def letter(name: str, size, px: int, lines: int, seed: int) -> TierPage:
    """A plain one-column letter: heading, a few short paragraphs, wide margins."""
    rng = random.Random(seed)
    w, h = size
    pen = Pen(size)
    margin = w // 9
    pen.text((margin, h // 14), "Dear Customer,", _font(round(px * 1.2), bold=True))
    y = h // 14 + px * 3
    for i in range(lines):
        pen.text((margin, y), sentence(rng, rng.randrange(5, 8)), _font(px))
        y += round(px * (2.4 if i % 4 == 3 else 1.6))
    return pen.page(name, "letter")


def body(name: str, size, px: int, seed: int, columns: int = 1, kind: str = "text") -> TierPage:
    """Full pages of running text in ``columns`` columns."""
    rng = random.Random(seed)
    w, h = size
    pen = Pen(size)
    margin = w // 16
    gutter = max(px * 2, w // 30)
    pen.text((margin, margin), sentence(rng, 4), _font(round(px * 1.6), bold=True))
    col_w = (w - 2 * margin - gutter * (columns - 1)) // columns
    for c in range(columns):
        x = margin + c * (col_w + gutter)
        column_text(pen, rng, px, x, margin + px * 4, col_w, h - margin)
    return pen.page(name, kind)


def table(name: str, size, px: int, seed: int, *, ruled: bool, rows: int = 16) -> TierPage:
    """A heading, a paragraph and a table of words and numbers, ruled or borderless."""
    rng = random.Random(seed)
    w, h = size
    pen = Pen(size)
    margin = w // 12
    font = _font(px)
    pen.text((margin, margin), "Quarterly figures by region", _font(round(px * 1.5), bold=True))
    pen.text((margin, margin + px * 3), sentence(rng, 8), font)
    top = margin + px * 6
    cols = 5
    col_w = (w - 2 * margin) // cols
    row_h = round(px * 2.1)
    for r in range(rows):
        cells = [rng.choice(WORDS).capitalize()] + [
            f"{rng.randrange(10, 99999):,}" for _ in range(cols - 1)
        ]
        for c, cell in enumerate(cells):
            pen.text((margin + c * col_w + px // 2, top + r * row_h + px // 2), cell, font)
    if ruled:
        for r in range(rows + 1):
            pen.rule(margin, top + r * row_h, margin + cols * col_w, top + r * row_h)
        for c in range(cols + 1):
            x = margin + c * col_w
            pen.rule(x, top, x, top + rows * row_h)
    y = top + rows * row_h + px * 2
    column_text(pen, rng, px, margin, y, w - 2 * margin, min(h - margin, y + px * 12))
    return pen.page(name, "ruled table" if ruled else "borderless table")


def formulas(name: str, size, px: int, seed: int) -> TierPage:
    """Text lines between display formulas: fractions with bars, super- and subscripts."""
    rng = random.Random(seed)
    w, h = size
    pen = Pen(size)
    margin = w // 10
    font, small = _font(px), _font(round(px * 0.68))
    y = margin
    while y + px * 8 < h - margin:
        pen.text((margin, y), full_line(rng, font, w - 2 * margin), font)
        y += round(px * 2.2)
        a, b = rng.randrange(2, 99), rng.randrange(2, 99)
        x = margin + px * 3
        pen.text((x, y + px // 2), f"f(x) = {a}x", font)
        x += round(font.getlength(f"f(x) = {a}x"))
        pen.text((x, y - px // 4), f"n+{b}", small)
        x += round(small.getlength(f"n+{b}")) + px
        pen.text((x, y + px // 2), "+", font)
        x += px * 2
        num, den = f"{a} + y", f"{b} - z"
        pen.text((x, y - px // 3), num, small)
        bar = round(max(small.getlength(num), small.getlength(den)))
        pen.rule(x, y + px, x + bar, y + px, max(1, px // 12))
        pen.text((x, y + px + px // 4), den, small)
        x += bar + px
        pen.text((x, y + px // 2), "y", font)
        pen.text((x + round(font.getlength("y")), y + px), f"k{a}", small)
        y += round(px * 3.4)
    return pen.page(name, "formulas")


def cjk(name: str, size, px: int, seed: int) -> TierPage | None:
    path = documents.cjk_font_path()
    if path is None:
        return None
    rng = random.Random(seed)
    w, h = size
    pen = Pen(size)
    font = ImageFont.truetype(str(path), px)
    margin = w // 10
    y = margin
    while y + px * 2 < h - margin:
        parts = [rng.choice(CJK_PHRASES) for _ in range(max(2, (w - 2 * margin) // (px * 5)))]
        pen.text((margin, y), "".join(parts), font)
        y += round(px * 1.7)
    return pen.page(name, "cjk")


def scan(page: TierPage, seed: int) -> TierPage:
    """The page printed and scanned: grey paper, a slight turn, blur, noise, JPEG."""
    rng = np.random.default_rng(seed)
    image = page.image.rotate(0.6, resample=Image.Resampling.BICUBIC, fillcolor=(255,) * 3)
    image = image.filter(ImageFilter.GaussianBlur(0.8))
    pixels = np.asarray(image).astype(np.float32) * 0.9 + 8
    pixels += rng.normal(0, 9, pixels.shape[:2])[..., None]
    buf = io.BytesIO()
    Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8)).save(buf, "JPEG", quality=60)
    scanned = Image.open(io.BytesIO(buf.getvalue())).convert("RGB")
    return TierPage(page.name, "scan", scanned, page.pieces)


def dense_two_columns_table(name: str = "dense-2col-table", seed: int = 60) -> TierPage:
    """The issue's high-tier page: small type in two columns with a ruled table."""
    rng = random.Random(seed)
    w, h = a4(150)
    px = 13
    pen = Pen((w, h))
    margin, gutter = 70, 40
    col_w = (w - 2 * margin - gutter) // 2
    pen.text((margin, 50), "Annual report: operations and results", _font(26, bold=True))
    column_text(pen, rng, px, margin, 110, col_w, h - 70)
    x = margin + col_w + gutter
    y = column_text(pen, rng, px, x, 110, col_w, 700)
    cell_w, row_h = col_w // 3, 30
    for r in range(12):
        cells = [rng.choice(WORDS), f"{rng.randrange(100, 99999):,}", f"{rng.randrange(1, 99)}%"]
        for c, cell in enumerate(cells):
            pen.text((x + c * cell_w + 6, y + 20 + r * row_h + 7), cell, _font(px))
    for r in range(13):
        pen.rule(x, y + 20 + r * row_h, x + 3 * cell_w, y + 20 + r * row_h, 1)
    for c in range(4):
        pen.rule(x + c * cell_w, y + 20, x + c * cell_w, y + 20 + 12 * row_h, 1)
    column_text(pen, rng, px, x, y + 60 + 12 * row_h, col_w, h - 70)
    return pen.page(name, "dense 2 columns + table")


def plain_letter() -> TierPage:
    """The issue's low-tier page: a short letter in 12 pt at 150 dpi."""
    return letter("letter-150dpi-25px", a4(150), 25, 12, 1)


FAMILIES = {  # DejaVu (fonts-dejavu-core): serif, sans and monospace
    "serif": documents.FONT_DIR / "DejaVuSerif.ttf",
    "sans": documents.SANS,
    "mono": documents.FONT_DIR / "DejaVuSansMono.ttf",
}
SKIPPED: set[str] = set()  # fonts found missing, reported once


def family_font(family: str, px: int) -> ImageFont.FreeTypeFont | None:
    """``family``'s font at ``px``, or None (and one line on stderr) when it is not installed."""
    path = FAMILIES[family]
    if not path.exists():
        if family not in SKIPPED:
            SKIPPED.add(family)
            print(
                f"tier_pages: skipping {family} pages: {path} is missing "
                "(apt-get install fonts-dejavu-core)",
                file=sys.stderr,
            )
        return None
    return ImageFont.truetype(str(path), px)


def fine_print(
    name: str, dpi: int, pt: float, family: str, tone: str = "black", mixed: bool = False
) -> TierPage | None:
    """A page of fine print (issue 36): ``pt`` point type at ``dpi`` in one font ``family``.

    ``tone``: black ink, grey ink (100), low contrast (ink 165 on white) or a scan of the
    black page. ``mixed``: a page of 10.5 pt body text whose last paragraph is the fine
    print (a contract's footnotes), so the small text is a minority of the lines. Pages keep
    a few lines: the proxy's OCR cost grows with the text, the legibility does not.
    """
    px = round(pt * dpi / 72)
    font = family_font(family, px)
    body_font = family_font(family, round(10.5 * dpi / 72))
    if font is None or body_font is None:
        return None
    seed = zlib.crc32(name.encode())
    rng = random.Random(seed)
    w, h = a4(dpi)
    pen = Pen((w, h), ink={"grey": 100, "low contrast": 165}.get(tone, 20))
    margin = w // 10
    y = margin
    pen.text((margin, y), sentence(rng, 4), _font(round(12 * dpi / 72), bold=True))
    y += round(2.5 * 12 * dpi / 72)
    for _ in range(4 if mixed else 0):
        pen.text((margin, y), full_line(rng, body_font, w - 2 * margin), body_font)
        y += round(body_font.size * 1.5)
    y += px * 2
    for _ in range(3 if mixed else 6):
        pen.text((margin, y), full_line(rng, font, w - 2 * margin), font)
        y += round(px * 1.4)
    kind = f"fine print {'mixed' if mixed else tone} {dpi}dpi"
    made = pen.page(name, kind)
    return TierPage(name, kind, scan(made, seed).image, made.pieces) if tone == "scan" else made


def fine_print_pages() -> dict[str, Callable[[str], TierPage | None]]:
    """Fine print at 6 to 8 pt, three families, 150/200/300 dpi, four tones, mixed sizes."""
    out: dict[str, Callable[[str], TierPage | None]] = {}
    for family in FAMILIES:
        for dpi in (150, 200, 300):
            for pt in (6, 6.5, 7, 7.5, 8):
                for tone in ("black", "grey", "low contrast", "scan"):
                    if tone == "scan" and dpi == 300:
                        continue  # scans at 150 and 200 dpi
                    name = f"fine-{family}-{dpi}dpi-{pt}pt-{tone.replace(' ', '')}"
                    out[name] = functools.partial(
                        fine_print, dpi=dpi, pt=pt, family=family, tone=tone
                    )
            for pt in (6, 7, 8):
                out[f"mixed-{family}-{dpi}dpi-{pt}pt"] = functools.partial(
                    fine_print, dpi=dpi, pt=pt, family=family, mixed=True
                )
    return out


PAGES: dict[str, Callable[[str], TierPage | None]] = {
    "letter-150dpi-25px": lambda n: plain_letter(),
    "letter-200dpi-33px": lambda n: letter(n, a4(200), 33, 14, 2),
    "letter-300dpi-42px": lambda n: letter(n, a4(300), 42, 16, 3),
    "text-150dpi-24px": lambda n: body(n, a4(150), 24, 4),
    "text-150dpi-20px": lambda n: body(n, a4(150), 20, 5),
    "text-150dpi-17px": lambda n: body(n, a4(150), 17, 6),
    "text-150dpi-14px": lambda n: body(n, a4(150), 14, 7, kind="dense text"),
    "text-150dpi-12px": lambda n: body(n, a4(150), 12, 8, kind="dense text"),
    "text-300dpi-42px": lambda n: body(n, a4(300), 42, 9),
    "text-300dpi-30px": lambda n: body(n, a4(300), 30, 10, kind="dense text"),
    "2col-150dpi-18px": lambda n: body(n, a4(150), 18, 11, columns=2, kind="2 columns"),
    "2col-150dpi-14px": lambda n: body(n, a4(150), 14, 12, columns=2, kind="2 columns"),
    "3col-150dpi-14px": lambda n: body(n, a4(150), 14, 13, columns=3, kind="3 columns"),
    "3col-200dpi-24px": lambda n: body(n, a4(200), 24, 14, columns=3, kind="3 columns"),
    "ruled-150dpi-20px": lambda n: table(n, a4(150), 20, 15, ruled=True),
    "ruled-150dpi-14px": lambda n: table(n, a4(150), 14, 16, ruled=True, rows=24),
    "borderless-150dpi-18px": lambda n: table(n, a4(150), 18, 17, ruled=False),
    "borderless-150dpi-13px": lambda n: table(n, a4(150), 13, 18, ruled=False, rows=26),
    "formulas-150dpi-26px": lambda n: formulas(n, a4(150), 26, 19),
    "formulas-150dpi-18px": lambda n: formulas(n, a4(150), 18, 20),
    "cjk-150dpi-26px": lambda n: cjk(n, a4(150), 26, 21),
    "cjk-150dpi-17px": lambda n: cjk(n, a4(150), 17, 22),
    "scan-letter-200dpi-30px": lambda n: scan(letter(n, a4(200), 30, 14, 23), 23),
    "scan-text-200dpi-22px": lambda n: scan(body(n, a4(200), 22, 24), 24),
    "scan-2col-300dpi-30px": lambda n: scan(body(n, a4(300), 30, 25, columns=2), 25),
    "slide-1920x1080-40px": lambda n: body(n, (1920, 1080), 40, 26, kind="slide"),
    "slide-1920x1080-22px": lambda n: body(n, (1920, 1080), 22, 27, columns=2, kind="slide"),
    "receipt-600x1800-18px": lambda n: body(n, (600, 1800), 18, 28, kind="receipt"),
    "small-700x990-14px": lambda n: body(n, (700, 990), 14, 29, kind="small page"),
    "dense-2col-table": dense_two_columns_table,
    **fine_print_pages(),
}


def page(name: str) -> TierPage | None:
    """One page by name (None: a CJK page without a CJK font)."""
    return PAGES[name](name)


def tier_pages() -> list[TierPage]:
    """Every page (CJK pages only with a CJK font installed)."""
    return [p for p in (page(name) for name in PAGES) if p is not None]
