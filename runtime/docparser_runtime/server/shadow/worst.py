"""The few worst disagreements of the current canary, in memory, for an admin to read.

WHY keep any text at all: a CER histogram says *that* the canary reads worse, not *how*
(a dropped line, a misread digit, a table flattened); a person deciding whether to promote
wants to see two or three pages. Live documents stay as private as the golden set, so the
store is bounded in count and bytes, holds excerpts only, is never logged or written
anywhere, is readable only with the admin key (``GET /admin/v1/shadow/worst``) and is
cleared when the canary changes or the shadow turns off.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, replace
from typing import Any

from docparser_runtime.server.shadow.compare import PageComparison, PageDigest
from docparser_runtime.server.shadow.config import ShadowConfig

MAX_ENTRIES = 8
MAX_EXCERPT_CHARS = 4000  # of each side's text
MAX_TOTAL_CHARS = 64_000


@dataclass(frozen=True)
class Disagreement:
    cer: float
    structure_agrees: bool
    page: int
    at: float
    latency_ratio: float | None
    stable: PageDigest
    canary: PageDigest | None

    @property
    def chars(self) -> int:
        return len(self.stable.content) + (0 if self.canary is None else len(self.canary.content))

    @property
    def severity(self) -> tuple[float, bool]:
        return (self.cer, not self.structure_agrees)

    def to_dict(self) -> dict[str, Any]:
        def side(page: PageDigest | None) -> dict[str, Any] | None:
            if page is None:
                return None
            return {
                "text": page.content,
                "blocks": len(page.block_types),
                "truncated": page.truncated,
                "repetition_guarded": page.repetition,
            }

        return {
            "page": self.page,
            "cer": round(self.cer, 4),
            "structure_agrees": self.structure_agrees,
            "latency_ratio": None if self.latency_ratio is None else round(self.latency_ratio, 3),
            "at": round(self.at, 3),
            "stable": side(self.stable),
            "canary": side(self.canary),
        }


def _excerpt(page: PageDigest) -> PageDigest:
    """A copy holding at most MAX_EXCERPT_CHARS of the text (the full page is released)."""
    if len(page.content) <= MAX_EXCERPT_CHARS:
        return page
    return replace(page, content=page.content[:MAX_EXCERPT_CHARS])


class WorstStore:
    """The ``MAX_ENTRIES`` worst pages of one revision pair, at most ``MAX_TOTAL_CHARS``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: list[Disagreement] = []
        self.pair: dict[str, str] = {}

    def clear(self, config: ShadowConfig) -> None:
        with self._lock:
            self._entries = []
            self.pair = config.labels if config.enabled else {}

    def offer(self, pages: list[PageComparison], latency_ratio: float | None) -> None:
        now = time.time()
        candidates = [
            Disagreement(
                cer=p.cer,
                structure_agrees=p.structure_agrees,
                page=p.index,
                at=now,
                latency_ratio=latency_ratio,
                stable=_excerpt(p.stable),
                canary=None if p.canary is None else _excerpt(p.canary),
            )
            for p in pages
            if p.cer > 0 or not p.structure_agrees
        ]
        if not candidates:
            return
        with self._lock:
            entries = sorted([*self._entries, *candidates], key=lambda d: d.severity, reverse=True)[
                :MAX_ENTRIES
            ]
            while entries and sum(d.chars for d in entries) > MAX_TOTAL_CHARS:
                entries.pop()
            self._entries = entries

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            entries = list(self._entries)
            pair = dict(self.pair)
        return {**pair, "pages": [d.to_dict() for d in entries]}

    def __len__(self) -> int:
        return len(self._entries)
