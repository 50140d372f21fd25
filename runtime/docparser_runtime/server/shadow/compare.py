"""Compare two replies to the same document page by page (pure): stable's and the canary's.

Per page:

- **CER** of the canary's text against stable's, after normalising both: Markdown syntax
  (headings, emphasis, list markers, table pipes and rules, links), HTML tags (tables some
  models write as HTML) and whitespace are taken out, so a re-wrapped line or a heading
  written another way is no disagreement while a lost or misread word is. Edit distance by
  rapidfuzz (C++, bit-parallel: a full page in well under a millisecond).
- **Structure**: the blocks by type and the tables by shape (rows x columns, from the
  Markdown or HTML of the page) agree or not.
- **Flags** on each side: ``truncated`` (generation cut at max_new_tokens) and
  ``repetition`` (the repetition guard had to steer the page).

WHY stable is the reference and not a golden text: nobody labelled live documents; the
question a shadow answers is "does the canary read our documents as the serving version
does?", and disagreement on live traffic is the measure of that.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

from rapidfuzz.distance import Levenshtein

_HTML_TAG = re.compile(r"<[^<>]{1,300}>")
_TABLE_RULE = re.compile(r"^\|?\s*:?-{2,}:?\s*(\|\s*:?-{2,}:?\s*)*\|?$")
_LINE_PREFIX = re.compile(r"^(#{1,6}\s+|>\s?|[-*+]\s+|\d{1,3}[.)]\s+)")
_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
_EMPHASIS = re.compile(r"\*\*|__|~~|`|\*")
_HTML_ROW = re.compile(r"<tr[\s>].*?</tr>", re.IGNORECASE | re.DOTALL)
_HTML_CELL = re.compile(r"<t[dh][\s>]", re.IGNORECASE)


def normalise(text: str) -> str:
    """Text as read, without Markdown or HTML syntax and with whitespace folded."""
    text = _HTML_TAG.sub(" ", text)
    lines = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or _TABLE_RULE.match(line):
            continue
        lines.append(_LINE_PREFIX.sub("", line))
    joined = _LINK.sub(r"\1", " ".join(lines)).replace("|", " ")
    return " ".join(_EMPHASIS.sub("", joined).split())


def cer(reference: str, hypothesis: str) -> float:
    """Character error rate of ``hypothesis`` against ``reference`` (normalised), 0..1."""
    a, b = normalise(reference), normalise(hypothesis)
    if not a:
        return 0.0 if not b else 1.0
    return min(1.0, Levenshtein.distance(a, b) / len(a))


def table_shapes(text: str) -> tuple[tuple[int, int], ...]:
    """(rows, columns) of each table in a page's Markdown (pipe tables) or HTML."""
    shapes = []
    rows: list[int] = []
    for raw in [*text.splitlines(), ""]:
        line = raw.strip()
        if line.startswith("|"):
            if not _TABLE_RULE.match(line):
                rows.append(line.strip("|").count("|") + 1)
            continue
        if rows:
            shapes.append((len(rows), max(rows)))
            rows = []
    for table in re.split(r"</table>", text, flags=re.IGNORECASE)[:-1]:
        cells = [len(_HTML_CELL.findall(row)) for row in _HTML_ROW.findall(table)]
        if cells:
            shapes.append((len(cells), max(cells)))
    return tuple(shapes)


@dataclass(frozen=True)
class PageDigest:
    """What the comparison needs of one reply page (references, no copies: made on the
    event loop right after the answer, so it must be cheap)."""

    index: int
    content: str
    block_types: tuple[str, ...]
    truncated: bool
    repetition: bool

    @classmethod
    def of(cls, page: dict[str, Any]) -> PageDigest:
        return cls(
            index=int(page.get("index", 0)),
            content=str(page.get("content") or ""),
            block_types=tuple(str(b.get("type", "")) for b in page.get("blocks") or ()),
            truncated=bool(page.get("truncated")),
            repetition=bool(page.get("repetition_guarded")),
        )

    def structure(self) -> tuple[tuple[tuple[str, int], ...], tuple[tuple[int, int], ...]]:
        return tuple(sorted(Counter(self.block_types).items())), table_shapes(self.content)


def digest_reply(reply: dict[str, Any]) -> list[PageDigest]:
    return [PageDigest.of(page) for page in reply.get("pages") or ()]


@dataclass(frozen=True)
class PageComparison:
    index: int
    cer: float
    structure_agrees: bool
    stable: PageDigest
    canary: PageDigest | None  # None: the canary's reply has no such page


def compare_pages(stable: list[PageDigest], canary: list[PageDigest]) -> list[PageComparison]:
    """One comparison per page of stable's reply, matched by page index; a page the
    canary did not return reads as all wrong (CER 1, structure differs)."""
    theirs = {page.index: page for page in canary}
    out = []
    for ours in stable:
        other = theirs.get(ours.index)
        if other is None:
            out.append(PageComparison(ours.index, 1.0, False, ours, None))
            continue
        out.append(
            PageComparison(
                ours.index,
                cer(ours.content, other.content),
                ours.structure() == other.structure(),
                ours,
                other,
            )
        )
    return out


def reply_seconds(reply: dict[str, Any]) -> float:
    """The server-side time of a reply (``timings_ms.total``), both sides measured alike."""
    timings = reply.get("timings_ms") or {}
    try:
        return max(0.0, float(timings.get("total", 0.0)) / 1000)
    except (TypeError, ValueError):
        return 0.0
