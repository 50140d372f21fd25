"""A small deterministic engine for server tests (batching, HTTP semantics, metrics).

``GatedEngine`` reports each page's size and options, records every ``infer_batch`` call
and can be held at a gate so tests control exactly when a batch runs (no sleeps-as-sync).
It is a real ``Engine`` subclass: the server code under test cannot tell it apart from a
model. Model-specific behaviour is tested with the real RapidOCR and tiny DeepSeek engines.
"""

from __future__ import annotations

import io
import threading
import time
from collections.abc import Sequence

from docparser_runtime.engines.base import (
    Block,
    DeltaCallback,
    Engine,
    PageImage,
    PageResult,
    ParseOptions,
)
from PIL import Image, ImageDraw


class GatedEngine(Engine):
    name = "gated-test"

    def __init__(self, *, delay_s: float = 0.0, load_s: float = 0.0) -> None:
        self.delay_s = delay_s
        self.load_s = load_s
        self.batches: list[list[int]] = []  # page indices per infer_batch call
        self.batch_options: list[ParseOptions] = []
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()  # set when a batch reached the engine
        self.fail_with: Exception | None = None
        self.broken = False  # every batch after warm-up fails (a release that 500s)
        self.truncate_to: int | None = None  # text cut short (a release that reads worse)
        # page index -> "empty" (no text), "truncated" (hit max_new_tokens) or "looping" (the
        # repetition guard had to steer): the output-quality outcomes a canary is judged on
        self.outcomes: dict[int, str] = {}
        self.load_error: Exception | None = None
        self.loaded = False
        self.warmed = False
        self.closed = False
        self.load_release = threading.Event()
        self.load_release.set()

    @property
    def version(self) -> str:
        return "test-1"

    def load(self) -> None:
        self.load_release.wait(30)
        time.sleep(self.load_s)
        if self.load_error is not None:
            raise self.load_error
        self.loaded = True

    def warmup(self) -> None:
        super().warmup()
        self.batches.clear()
        self.batch_options.clear()
        self.warmed = True

    def infer_batch(self, pages: Sequence[PageImage], options: ParseOptions) -> list[PageResult]:
        self.batches.append([p.index for p in pages])
        self.batch_options.append(options)
        self.entered.set()
        self.gate.wait(30)
        if self.delay_s:
            time.sleep(self.delay_s)
        if self.fail_with is not None:
            raise self.fail_with
        if self.broken and self.warmed:
            raise RuntimeError("injected engine failure")
        results = [self._result(p, options) for p in pages]
        if self.truncate_to is not None:
            for r in results:
                r.content = r.content[: self.truncate_to]
        for r in results:
            outcome = self.outcomes.get(r.index)
            if outcome == "empty":
                r.content, r.blocks = "", []
            r.truncated = outcome == "truncated"
            r.repetition_trips = 3 if outcome == "looping" else 0
        return results

    def stream_page(
        self, page: PageImage, options: ParseOptions, on_delta: DeltaCallback
    ) -> PageResult:
        self.batches.append([page.index])
        self.batch_options.append(options)
        result = self._result(page, options)
        words = result.content.split(" ")
        for i, word in enumerate(words):
            if on_delta(word if i == 0 else " " + word):
                break
        return result

    def close(self) -> None:
        self.closed = True

    @staticmethod
    def _result(page: PageImage, options: ParseOptions) -> PageResult:
        text = f"page {page.index} {page.width}x{page.height} {options.mode} tier {options.tier}"
        return PageResult(
            index=page.index,
            content=f"# {text}",
            width=page.width,
            height=page.height,
            tiles=page.tiles,
            vision_tokens=page.vision_tokens,
            blocks=[Block(text, (0.0, 0.0, float(page.width), float(page.height)), "title")],
            output_tokens=len(text.split()),
        )


def page(index: int = 0, width: int = 32, height: int = 24, tokens: int = 257) -> PageImage:
    return PageImage(index, Image.new("RGB", (width, height), "white"), 0, tokens)


def png_bytes(width: int = 200, height: int = 120, text: str = "Hello") -> bytes:
    img = Image.new("RGB", (width, height), "white")
    ImageDraw.Draw(img).text((10, 10), text, fill="black")
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()
