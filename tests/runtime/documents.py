"""Test documents rendered with Pillow and real fonts, with their ground truth.

The CPU engine is tested on pages we draw ourselves, so the expected text, the column
each line belongs to and the table cells are known exactly (no checked-in fixtures that
drift from the assertions). Also used by ``examples/documents/make_samples.py``.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from pathlib import Path

from PIL import Image, ImageDraw, ImageFilter, ImageFont  # noqa: F401  (re-exported for tests)

FONT_DIR = Path("/usr/share/fonts/truetype/dejavu")
SANS = FONT_DIR / "DejaVuSans.ttf"
SANS_BOLD = FONT_DIR / "DejaVuSans-Bold.ttf"
CJK_FONTS = (
    Path("/usr/share/fonts/truetype/wqy/wqy-microhei.ttc"),
    Path("/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc"),
    Path("/usr/share/fonts/truetype/wqy/wqy-zenhei.ttc"),
)

INK = (20, 20, 20)
PAPER = (255, 255, 255)


@dataclass
class Doc:
    """A rendered page and what a perfect parser would read from it."""

    image: Image.Image
    title: str = ""
    lines: list[str] = field(default_factory=list)  # body lines in reading order
    columns: list[list[str]] = field(default_factory=list)
    table: list[list[str]] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "\n".join(([self.title] if self.title else []) + self.lines)


def font(size: int, *, bold: bool = False) -> ImageFont.FreeTypeFont:
    return ImageFont.truetype(str(SANS_BOLD if bold else SANS), size)


def cjk_font_path() -> Path | None:
    return next((p for p in CJK_FONTS if p.exists()), None)


SINGLE_COLUMN = [
    "Document parsing turns scanned pages into structured text.",
    "Each page is decoded, checked against size limits and tiled.",
    "The engine finds text lines and reads them in order.",
    "Tables keep their rows and cells in Markdown form.",
    "Headings are recognised from their larger type size.",
    "Results include bounding boxes in page pixels.",
]

LEFT_COLUMN = [
    "The left column starts here",
    "with a short paragraph that",
    "continues over several lines",
    "before the reader moves on",
    "to the top of the right one.",
    "Reading order matters a lot.",
]

RIGHT_COLUMN = [
    "The right column comes next",
    "and its lines must follow all",
    "of the left column lines when",
    "the page is read correctly by",
    "a parser that knows columns.",
    "This is the final sentence.",
]

TABLE = [
    ["Item", "Quantity", "Price"],
    ["Apples", "12", "3.50"],
    ["Bread", "2", "4.20"],
    ["Cheese", "1", "7.95"],
    ["Total", "15", "15.65"],
]

CHINESE = [
    "文档解析将扫描页面转换为文本",
    "每一页都会被解码并检查大小",
    "识别引擎按阅读顺序输出文字",
    "表格按行保留单元格的内容",
]


def single_column(size=(1000, 700)) -> Doc:
    img = Image.new("RGB", size, PAPER)
    draw = ImageDraw.Draw(img)
    title = "Quarterly Report"
    draw.text((60, 50), title, font=font(44, bold=True), fill=INK)
    body = font(24)
    y = 150
    for line in SINGLE_COLUMN:
        draw.text((60, y), line, font=body, fill=INK)
        y += 60
    return Doc(image=img, title=title, lines=list(SINGLE_COLUMN))


def two_columns(size=(1000, 700)) -> Doc:
    img = Image.new("RGB", size, PAPER)
    draw = ImageDraw.Draw(img)
    title = "Two Column Layout"
    draw.text((60, 40), title, font=font(40, bold=True), fill=INK)
    body = font(22)
    for x, lines in ((60, LEFT_COLUMN), (540, RIGHT_COLUMN)):
        y = 140
        for line in lines:
            draw.text((x, y), line, font=body, fill=INK)
            y += 52
    return Doc(
        image=img,
        title=title,
        lines=LEFT_COLUMN + RIGHT_COLUMN,
        columns=[list(LEFT_COLUMN), list(RIGHT_COLUMN)],
    )


def ruled_table(size=(1000, 700)) -> Doc:
    img = Image.new("RGB", size, PAPER)
    draw = ImageDraw.Draw(img)
    title = "Order Summary"
    draw.text((60, 40), title, font=font(40, bold=True), fill=INK)
    body = font(24)
    draw.text((60, 120), "The table below lists the items of the order.", font=body, fill=INK)
    left, top, col_w, row_h = 100, 200, 260, 70
    n_rows, n_cols = len(TABLE), len(TABLE[0])
    right, bottom = left + col_w * n_cols, top + row_h * n_rows
    for r in range(n_rows + 1):
        draw.line([(left, top + r * row_h), (right, top + r * row_h)], fill=INK, width=3)
    for c in range(n_cols + 1):
        draw.line([(left + c * col_w, top), (left + c * col_w, bottom)], fill=INK, width=3)
    for r, row in enumerate(TABLE):
        for c, cell in enumerate(row):
            draw.text((left + c * col_w + 24, top + r * row_h + 20), cell, font=body, fill=INK)
    return Doc(
        image=img,
        title=title,
        lines=["The table below lists the items of the order."],
        table=[list(r) for r in TABLE],
    )


def chinese(size=(1000, 700)) -> Doc | None:
    path = cjk_font_path()
    if path is None:
        return None
    img = Image.new("RGB", size, PAPER)
    draw = ImageDraw.Draw(img)
    body = ImageFont.truetype(str(path), 36)
    y = 80
    for line in CHINESE:
        draw.text((80, y), line, font=body, fill=INK)
        y += 90
    return Doc(image=img, lines=list(CHINESE))


def exif_rotated_jpeg(doc: Doc) -> bytes:
    """The page as a phone would store it: pixels turned, EXIF Orientation=6 to undo it.

    Orientation 6 means "rotate 90 degrees clockwise to display", so the stored pixels
    are the upright page turned 90 degrees counter-clockwise.
    """
    stored = doc.image.transpose(Image.Transpose.ROTATE_90)
    exif = Image.Exif()
    exif[0x0112] = 6
    buf = io.BytesIO()
    stored.save(buf, "JPEG", quality=92, exif=exif.tobytes())
    return buf.getvalue()


def pdf_of(docs: list[Doc], *, resolution: float = 72.0) -> bytes:
    """A multi-page PDF (one raster page per doc, like a scanner writes)."""
    pages = [d.image for d in docs]
    buf = io.BytesIO()
    pages[0].save(buf, "PDF", resolution=resolution, save_all=True, append_images=pages[1:])
    return buf.getvalue()


def png_bytes(img: Image.Image) -> bytes:
    buf = io.BytesIO()
    img.save(buf, "PNG", optimize=True)
    return buf.getvalue()


def edit_distance(a: str, b: str) -> int:
    """Levenshtein distance (insertions, deletions, substitutions all cost 1)."""
    if len(a) < len(b):
        a, b = b, a
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        current = [i]
        for j, cb in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb)))
        previous = current
    return previous[-1]


def normalise(text: str) -> str:
    """Collapse whitespace and drop Markdown heading/table syntax before comparing."""
    kept = []
    for raw in text.splitlines():
        line = raw.strip().lstrip("#").strip()
        if set(line) <= set("|-: "):
            continue
        kept.append(" ".join(line.replace("|", " ").split()))
    return " ".join(k for k in kept if k)


def cer(reference: str, hypothesis: str) -> float:
    """Character error rate of ``hypothesis`` against ``reference`` (normalised)."""
    ref, hyp = normalise(reference), normalise(hypothesis)
    return edit_distance(ref, hyp) / max(len(ref), 1)
