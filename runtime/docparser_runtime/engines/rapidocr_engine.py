"""The embedded CPU engine: RapidOCR (PP-OCRv4 on onnxruntime) plus a layout pass.

WHY this engine: ``make run`` must serve real OCR on a laptop with no GPU and no model
download; ``rapidocr-onnxruntime`` carries its ONNX models inside the wheel. RapidOCR
gives text lines; ``spacing``, ``tables`` and ``layout`` turn them into a document
(reading order by columns, headings, ruled tables as Markdown) so the reply has the
same shape as DeepSeek-OCR-2's.

A ``RapidOCR`` object is not thread-safe, so inference is serialised with a lock; the
server already runs the engine on one worker thread, the lock makes that a guarantee.
"""

from __future__ import annotations

import importlib.metadata
import re
import threading
from collections.abc import Sequence

import numpy as np
from PIL import Image

from docparser_runtime.engines.base import Engine, PageImage, PageResult, ParseOptions
from docparser_runtime.engines.layout import (
    OcrLine,
    layout_page,
    render_markdown,
    render_text,
    to_blocks,
)
from docparser_runtime.engines.spacing import restore_spaces
from docparser_runtime.engines.tables import detect_tables, otsu_threshold
from docparser_runtime.errors import EngineFailure, Unavailable, WeightsError

_DIST = "rapidocr-onnxruntime"
_TOKEN = re.compile(
    r"[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af]|[^\W\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af]+|[^\w\s]"
)


def rough_token_count(text: str) -> int:
    """Words, CJK characters and punctuation marks: a tokenizer-free usage figure."""
    return len(_TOKEN.findall(text))


class RapidOcrEngine(Engine):
    """CPU OCR engine; ``load()`` builds the ONNX sessions once."""

    name = "rapidocr"

    def __init__(self, *, threads: int = -1) -> None:
        self._threads = threads
        self._ocr = None
        self._lock = threading.Lock()
        try:
            self._version = f"{_DIST}-{importlib.metadata.version(_DIST)}"
        except importlib.metadata.PackageNotFoundError:
            self._version = f"{_DIST}-unknown"

    @classmethod
    def from_settings(cls, settings) -> RapidOcrEngine:
        """Nothing to configure: the models ship inside the wheel."""
        return cls()

    @property
    def version(self) -> str:
        return self._version

    def load(self) -> None:
        try:
            from rapidocr_onnxruntime import RapidOCR
        except ImportError as exc:
            raise WeightsError(f"{_DIST} is not installed: {exc}") from exc
        try:
            self._ocr = RapidOCR(
                intra_op_num_threads=self._threads, inter_op_num_threads=self._threads
            )
        except Exception as exc:  # broken wheel or onnxruntime: report, don't crash
            raise WeightsError(f"cannot load the RapidOCR models: {exc}") from exc

    def close(self) -> None:
        self._ocr = None

    def infer_batch(self, pages: Sequence[PageImage], options: ParseOptions) -> list[PageResult]:
        return [self._parse_page(page, options) for page in pages]

    def _parse_page(self, page: PageImage, options: ParseOptions) -> PageResult:
        gray = np.asarray(page.image.convert("L"))
        lines = self.recognize(page.image, gray)
        regions = layout_page(lines, detect_tables(gray))
        content = render_text(regions) if options.mode == "text" else render_markdown(regions)
        return PageResult(
            index=page.index,
            content=content,
            width=page.width,
            height=page.height,
            tiles=page.tiles,
            vision_tokens=page.vision_tokens,
            blocks=to_blocks(regions),
            output_tokens=rough_token_count(content),
        )

    def recognize(self, image: Image.Image, gray: np.ndarray | None = None) -> list[OcrLine]:
        """Text lines of one RGB page, spaces between English words restored."""
        if self._ocr is None:
            raise Unavailable("the rapidocr engine is not loaded")
        if gray is None:
            gray = np.asarray(image.convert("L"))
        try:
            with self._lock:
                result, _ = self._ocr(image, return_word_box=True)
        except Exception as exc:
            raise EngineFailure(
                f"RapidOCR failed on a {image.width}x{image.height} page: {exc}"
            ) from exc
        return [line for item in result or [] if (line := _to_line(item, gray)) is not None]


def _to_line(item: list, gray: np.ndarray) -> OcrLine | None:
    """One RapidOCR result ``[quad, text, score, char_boxes?, chars?, ...]``."""
    quad, text, score = item[0], str(item[1]), float(item[2])
    if not text.strip():
        return None
    xs = [float(p[0]) for p in quad]
    ys = [float(p[1]) for p in quad]
    bbox = (min(xs), min(ys), max(xs), max(ys))
    centers: tuple[float, ...] = ()
    ink = _ink_box(gray, bbox)
    char_boxes = item[3] if len(item) > 3 else None
    horizontal = (bbox[2] - bbox[0]) > (bbox[3] - bbox[1])
    if horizontal and char_boxes and len(char_boxes) == len(text):
        centers = tuple(sum(float(p[0]) for p in box) / len(box) for box in char_boxes)
        if ink is not None and list(centers) == sorted(centers):
            text, centers = restore_spaces(text, centers, ink.any(axis=0), bbox_x0(bbox), len(ink))
        else:
            centers = ()
    ink_height = _ink_height(ink) if ink is not None and horizontal else 0.0
    return OcrLine(text=text, bbox=bbox, score=score, char_centers=centers, ink_height=ink_height)


def bbox_x0(bbox) -> int:
    return max(int(bbox[0]), 0)


def _ink_box(gray: np.ndarray, bbox) -> np.ndarray | None:
    """Ink mask of the line's box (Otsu on the crop, so grey scans work too)."""
    x1, y1 = bbox_x0(bbox), max(int(bbox[1]), 0)
    x2, y2 = min(int(np.ceil(bbox[2])), gray.shape[1]), min(int(np.ceil(bbox[3])), gray.shape[0])
    if x2 - x1 < 2 or y2 - y1 < 2:
        return None
    crop = gray[y1:y2, x1:x2]
    return crop < min(otsu_threshold(crop), 200)


def _ink_height(ink: np.ndarray) -> float:
    rows = np.flatnonzero(ink.any(axis=1))
    return float(rows[-1] - rows[0] + 1) if len(rows) else 0.0
