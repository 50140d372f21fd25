"""Parse DeepSeek-OCR grounding output into located blocks and clean Markdown.

With a ``<|grounding|>`` prompt the model writes, before each layout block::

    <|ref|>title<|/ref|><|det|>[[114, 76, 883, 124]]<|/det|>
    # Annual report

Boxes are on a 0..999 grid relative to the page (the official post-processing maps
``x / 999 * width``). Everything here is pure and total: model output is untrusted text
(random weights, repetition loops, truncation mid-tag), so malformed or unclosed tags are
dropped, never raised on.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from docparser_runtime.engines.base import BBox, Block

GRID_MAX = 999.0

_NUM = r"\s*(-?\d+(?:\.\d+)?)\s*"
_BOX = re.compile(r"\[" + ",".join([_NUM] * 4) + r"\]")
# A complete block header: label, then its boxes (whitespace allowed between the tags).
_HEADER = re.compile(r"<\|ref\|>(.*?)<\|/ref\|>\s*<\|det\|>(.*?)<\|/det\|>", re.DOTALL)
# A header cut off by max_new_tokens: "<|ref|>text<|/ref|><|det|>[[1, 2" up to the end.
_TRUNCATED_HEADER = re.compile(r"<\|ref\|>[^<]*(?:<\|/ref\|>\s*)?(?:<\|det\|>[^<]*)?$")
# An opened <|det|> whose boxes never close: drop the tag and the coordinates after it.
_UNCLOSED_DET = re.compile(r"<\|det\|>[\[\]\d\s,.\-]*")
_STRAY_TAG = re.compile(r"<\|/?(?:ref|det|grounding)\|>")
_MANY_BLANK_LINES = re.compile(r"\n{3,}")


@dataclass
class ParsedOutput:
    """Cleaned page text plus the blocks its grounding headers located."""

    content: str
    blocks: list[Block] = field(default_factory=list)


def rescale_box(box: tuple[float, float, float, float], width: int, height: int) -> BBox | None:
    """Map a 0..999 grid box to page pixels, ordered and clamped; None if it has no area."""
    x1, y1, x2, y2 = box
    x1, x2 = sorted((x1, x2))
    y1, y2 = sorted((y1, y2))

    def scale(v: float, size: int) -> float:
        return min(max(v, 0.0), GRID_MAX) / GRID_MAX * size

    out = (scale(x1, width), scale(y1, height), scale(x2, width), scale(y2, height))
    if out[2] <= out[0] or out[3] <= out[1]:
        return None
    return out


def parse_boxes(det: str, width: int, height: int) -> list[BBox]:
    """Every well-formed ``[x1, y1, x2, y2]`` in a ``<|det|>`` body, in page pixels."""
    boxes = []
    for match in _BOX.finditer(det):
        try:
            raw = tuple(float(v) for v in match.groups())
        except ValueError:  # pragma: no cover - the regex only admits numbers
            continue
        box = rescale_box(raw, width, height)  # type: ignore[arg-type]
        if box is not None:
            boxes.append(box)
    return boxes


def clean_text(text: str) -> str:
    """Remove every grounding tag (complete, truncated or stray) from ``text``.

    A stray ``<|ref|>x<|/ref|>`` without boxes keeps ``x``: it is referenced text.
    """
    text = _HEADER.sub("", text)
    text = _TRUNCATED_HEADER.sub("", text)
    text = _UNCLOSED_DET.sub("", text)
    text = _STRAY_TAG.sub("", text)
    return text


def clean_content(raw: str) -> str:
    """Page Markdown without grounding tags, blank-line runs collapsed, ends stripped."""
    return _MANY_BLANK_LINES.sub("\n\n", clean_text(raw)).strip()


def parse_output(raw: str, width: int, height: int) -> ParsedOutput:
    """Split model output into blocks (one per located box) and clean content.

    A block's text is what follows its header up to the next header. A header with
    several boxes (the same thing found in several places) yields one block per box.
    """
    blocks: list[Block] = []
    headers = list(_HEADER.finditer(raw))
    for i, header in enumerate(headers):
        end = headers[i + 1].start() if i + 1 < len(headers) else len(raw)
        label = clean_text(header.group(1)).strip() or "text"
        text = clean_content(raw[header.end() : end])
        for box in parse_boxes(header.group(2), width, height):
            blocks.append(Block(text=text, bbox=box, type=label))
    return ParsedOutput(content=clean_content(raw), blocks=blocks)
