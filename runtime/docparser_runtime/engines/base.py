"""The engine interface: the only thing the HTTP layer and the batcher know about models.

An engine turns a batch of decoded pages into page results. Engines are synchronous and
blocking (they run on a worker thread, never on the event loop); the batcher guarantees
that every page of one ``infer_batch`` call shares the same ``ParseOptions``.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Self

from PIL import Image

from docparser_runtime.pages import PageImage as PageImage  # re-exported: the engine seam

if TYPE_CHECKING:
    from docparser_runtime.settings import Settings

Mode = Literal["markdown", "text", "grounding"]
BBox = tuple[float, float, float, float]


@dataclass(frozen=True)
class ParseOptions:
    """Per-request options that change what the engine does with a page."""

    tier: int = 6
    mode: Mode = "markdown"
    max_new_tokens: int = 4096
    # Not an API option: benchmarks set it to give the random tiny model output lengths.
    min_new_tokens: int = 0
    # ``tier: auto``: ``tier`` is the cap and each page gets the selector's tier (resolved
    # before queueing; the batcher only ever sees resolved options, auto False).
    auto: bool = False

    def batch_key(self) -> tuple[int, str, int, int]:
        """Pages may share one generate() call only when this key is equal (a continuous
        batch mixes any options: each page keeps its own)."""
        return (self.tier, self.mode, self.max_new_tokens, self.min_new_tokens)


@dataclass
class Block:
    """A located piece of the page: ``bbox`` is (x1, y1, x2, y2) in page pixels."""

    text: str
    bbox: BBox
    type: str = "text"

    def to_dict(self) -> dict[str, Any]:
        return {"text": self.text, "bbox": [round(v, 1) for v in self.bbox], "type": self.type}


@dataclass(frozen=True)
class PageWarning:
    """Something the reply may be missing; ``uncovered_text``: ink at ``bbox`` (page
    pixels) that no block accounts for (see ``engines.coverage``)."""

    code: str
    bbox: BBox

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "bbox": [round(v, 1) for v in self.bbox]}


@dataclass
class PageResult:
    """What an engine returns for one page.

    ``coverage``: boxes of everything the engine read, when finer than ``blocks`` (a
    paragraph block's box would hide a line missing from its middle); ``None`` means the
    blocks' boxes. ``warnings`` and ``audit_s`` are filled by the coverage audit.
    """

    index: int
    content: str
    width: int
    height: int
    tiles: int
    vision_tokens: int
    blocks: list[Block] = field(default_factory=list)
    output_tokens: int = 0
    truncated: bool = False
    repetition_trips: int = 0  # tokens the repetition guard changed (the model was looping)
    coverage: list[BBox] | None = None
    warnings: list[PageWarning] = field(default_factory=list)
    audit_s: float = 0.0
    tier: int | None = None  # the tier the page was read at (set by the parse service)

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "content": self.content,
            "width": self.width,
            "height": self.height,
            "tier": self.tier,
            "tiles": self.tiles,
            "vision_tokens": self.vision_tokens,
            "blocks": [b.to_dict() for b in self.blocks],
            "output_tokens": self.output_tokens,
            "truncated": self.truncated,
            "repetition_guarded": self.repetition_trips > 0,
            "warnings": [w.to_dict() for w in self.warnings],
        }


# Called with each decoded text delta while a page generates; returning True asks the
# engine to stop early (the client went away).
DeltaCallback = Callable[[str], bool | None]


class Engine(abc.ABC):
    """A loaded model. Subclasses: ``rapidocr.engine.RapidOcrEngine``,
    ``deepseek_ocr2.engine.DeepseekOcr2Engine``."""

    name: str = "engine"

    @classmethod
    def from_settings(cls, settings: Settings) -> Self:
        """A new, not yet loaded engine configured by ``settings``: how ``engines.registry``
        builds the engine a process serves. Engines built only by hand (tests) need not
        override it."""
        raise NotImplementedError(f"{cls.__name__} cannot be built from settings")

    @property
    @abc.abstractmethod
    def version(self) -> str:
        """Model/weights version reported in replies and metrics."""

    @abc.abstractmethod
    def load(self) -> None:
        """Load weights; blocking, may take minutes. Raises ``WeightsError``."""

    def warmup(self) -> None:
        """Run one tiny inference so the first request pays no compile/alloc cost."""
        img = Image.new("RGB", (64, 64), "white")
        self.infer_batch([PageImage(0, img, 0, 256)], ParseOptions(tier=0, max_new_tokens=8))

    @abc.abstractmethod
    def infer_batch(self, pages: Sequence[PageImage], options: ParseOptions) -> list[PageResult]:
        """Parse pages that share ``options``; results in input order."""

    def locates_text(self, options: ParseOptions) -> bool:
        """Whether results for ``options`` locate all the text they read (blocks or
        ``coverage`` boxes), so that ink outside them was not read. Only then is a page
        audited (``engines.coverage``)."""
        return False

    def stream_page(
        self, page: PageImage, options: ParseOptions, on_delta: DeltaCallback
    ) -> PageResult:
        """Parse one page, reporting text deltas as they are produced.

        Engines that cannot stream token by token emit the whole content as one delta.
        """
        result = self.infer_batch([page], options)[0]
        on_delta(result.content)
        return result

    def release_cached_memory(self) -> None:  # noqa: B027 - optional hook
        """Give cached accelerator memory back after an out-of-memory error (the batcher
        then retries smaller batches); engines without an accelerator hold none."""

    def close(self) -> None:  # noqa: B027 - optional hook, most engines hold nothing
        """Release resources (GPU memory, sessions)."""
