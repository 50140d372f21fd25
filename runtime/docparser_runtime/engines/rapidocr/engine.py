"""The embedded CPU engine: RapidOCR (PP-OCRv4 on onnxruntime) plus a layout pass.

WHY this engine: ``make run`` must serve real OCR on a laptop with no GPU and no model
download; ``rapidocr-onnxruntime`` carries its ONNX models inside the wheel. Slightly
rotated scans are straightened first (``deskew``), upside-down pages turned (RapidOCR's
angle classifier). RapidOCR gives text lines; ``spacing``, ``tables`` and ``layout``
turn them into a document
(reading order by columns, headings, ruled tables as Markdown) so the reply has the
same shape as DeepSeek-OCR-2's.

A ``RapidOCR`` object is not thread-safe, so inference is serialised with a lock; the
server already runs the engine on one worker thread, the lock makes that a guarantee.
"""

from __future__ import annotations

import importlib.metadata
import itertools
import math
import os
import re
import threading
from collections.abc import Sequence
from typing import Any, Self

import numpy as np
from PIL import Image, ImageDraw

from docparser_runtime import audit
from docparser_runtime.engines.base import BBox, Engine, PageImage, PageResult, ParseOptions
from docparser_runtime.engines.rapidocr.deskew import MIN_SKEW_DEG, Rotation, estimate_skew
from docparser_runtime.engines.rapidocr.layout import (
    OcrLine,
    layout_page,
    render_markdown,
    render_text,
    to_blocks,
)
from docparser_runtime.engines.rapidocr.spacing import bbox_x0, ink_box, ink_height, restore_spaces
from docparser_runtime.engines.rapidocr.tables import detect_tables
from docparser_runtime.errors import EngineFailure, Unavailable, WeightsError
from docparser_runtime.settings import Settings

_DIST = "rapidocr-onnxruntime"
# One raw RapidOCR result: ``[quad, text, score, char_boxes?, chars?, ...]`` (untyped library).
RawLine = list[Any]
_TOKEN = re.compile(
    r"[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af]|[^\W\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af]+|[^\w\s]"
)


def rough_token_count(text: str) -> int:
    """Words, CJK characters and punctuation marks: a tokenizer-free usage figure."""
    return len(_TOKEN.findall(text))


class RapidOcrEngine(Engine):
    """CPU OCR engine; ``load()`` builds the ONNX sessions once."""

    name = "rapidocr"

    def __init__(
        self, *, threads: int = 0, version: str | None = None, drop_line_every: int = 0
    ) -> None:
        self._threads = threads if threads > 0 else usable_cpus()
        self._drop_line_every = drop_line_every  # TEST-ONLY fault (settings)
        self._ocr: Any = None  # a RapidOCR (untyped) once loaded
        self._lock = threading.Lock()
        if version:
            self._version = version
            return
        try:
            self._version = f"{_DIST}-{importlib.metadata.version(_DIST)}"
        except importlib.metadata.PackageNotFoundError:
            self._version = f"{_DIST}-unknown"

    @classmethod
    def from_settings(cls, settings: Settings) -> Self:
        """The models ship inside the wheel; the reported version is the one the operator
        deployed (``DOCPARSER_MODEL_VERSION``) when set, so replies match the DocParser's
        status, else the wheel's own version."""
        return cls(
            threads=settings.engine_threads,
            version=settings.model_version,
            drop_line_every=settings.test_drop_line_every,
        )

    @property
    def version(self) -> str:
        return self._version

    def load(self) -> None:
        try:
            from rapidocr_onnxruntime import RapidOCR
        except ImportError as exc:
            raise WeightsError(f"{_DIST} is not installed: {exc}") from exc
        try:
            # Explicit counts: onnxruntime's default is the host's physical cores, which
            # in a container with a CPU quota oversubscribes (and gets throttled).
            # inter-op threads only serve parallel graph execution, which is off.
            self._ocr = RapidOCR(intra_op_num_threads=self._threads, inter_op_num_threads=1)
        except Exception as exc:  # broken wheel or onnxruntime: report, don't crash
            raise WeightsError(f"cannot load the RapidOCR models: {exc}") from exc

    def close(self) -> None:
        self._ocr = None

    def infer_batch(self, pages: Sequence[PageImage], options: ParseOptions) -> list[PageResult]:
        return [self._parse_page(page, options) for page in pages]

    def _parse_page(self, page: PageImage, options: ParseOptions) -> PageResult:
        # The page itself when RGB (no copy): the coverage stage audits the same object.
        image = page.image if page.image.mode == "RGB" else page.image.convert("RGB")
        rotation = None
        angle = estimate_skew(np.asarray(image.convert("L")))
        if abs(angle) >= MIN_SKEW_DEG:
            rotation = Rotation(image.size, angle)
            image = rotation.apply(image)
        lines, upside_down = self._read(image)
        if upside_down:
            # Most detected lines are upside down: so is the page. Read it turned, so
            # reading order runs top to bottom, and map the boxes back to the page as sent.
            image = image.transpose(Image.Transpose.ROTATE_180)
            lines, _ = self._read(image)
        lines += self._recover(image, lines)
        if self._drop_line_every > 0:  # a release that reads worse (shadow canary tests)
            n = self._drop_line_every
            lines = [line for i, line in enumerate(lines, 1) if i % n]
        regions = layout_page(lines, detect_tables(np.asarray(image.convert("L"))))
        content = render_text(regions) if options.mode == "text" else render_markdown(regions)
        blocks = to_blocks(regions)
        w, h = image.size

        def to_page(bbox: BBox) -> BBox:
            if upside_down:
                x1, y1, x2, y2 = bbox
                bbox = (w - x2, h - y2, w - x1, h - y1)
            return bbox if rotation is None else rotation.bbox_to_original(bbox)

        for block in blocks:
            block.bbox = to_page(block.bbox)
        return PageResult(
            index=page.index,
            content=content,
            width=page.width,
            height=page.height,
            tiles=page.tiles,
            vision_tokens=page.vision_tokens,
            blocks=blocks,
            output_tokens=rough_token_count(content),
            coverage=[to_page(line.bbox) for line in lines],
        )

    def locates_text(self, options: ParseOptions) -> bool:
        return True  # every line it reads has a box (``PageResult.coverage``)

    def _recover(self, image: Image.Image, lines: list[OcrLine]) -> list[OcrLine]:
        """Re-read ink that no line covers: crop it (other lines whited out), upscale
        small text, read again. Cheap when nothing is missing (one audit pass)."""
        regions = audit.audit(image, [line.bbox for line in lines])[:MAX_REREADS]
        if not regions:
            return []
        blank = image.copy()
        draw = ImageDraw.Draw(blank)
        for line in lines:
            draw.rectangle(line.bbox, fill="white")
        found = []
        for region in regions:
            found += self._read_region(blank, region.bbox)
        return found

    def _read_region(self, page: Image.Image, bbox: BBox) -> list[OcrLine]:
        x1, y1, x2, y2 = bbox
        pad = max(8.0, 0.5 * (y2 - y1))
        box = (
            max(int(x1 - pad), 0),
            max(int(y1 - pad), 0),
            min(int(x2 + pad) + 1, page.width),
            min(int(y2 + pad) + 1, page.height),
        )
        crop = page.crop(box)
        zoom = max(1.0, min(REREAD_TEXT_PX / max(y2 - y1, 1.0), 4.0))
        if zoom > 1.0:
            size = (round(crop.width * zoom), round(crop.height * zoom))
            crop = crop.resize(size, Image.Resampling.BICUBIC)
        lines, _ = self._read(crop)
        return [_moved(line, box[0], box[1], zoom) for line in lines]

    def recognize(self, image: Image.Image) -> list[OcrLine]:
        """Text lines of one RGB page (raster order), spaces between words restored."""
        return self._read(image)[0]

    def _read(self, image: Image.Image) -> tuple[list[OcrLine], bool]:
        """OCR lines, and whether most detected lines are upside down (then they are not
        read: the caller turns the page)."""
        if self._ocr is None:
            raise Unavailable("the rapidocr engine is not loaded")
        image = image if image.mode == "RGB" else image.convert("RGB")
        gray = np.asarray(image.convert("L"))
        try:
            with self._lock:
                # use_cls=False: RapidOCR's own angle classifier squeezes each line crop to
                # 48x192, so a long line (aspect 30:1) is a smear that it often calls
                # "180"; the crop is then turned and read as garbage that the score filter
                # drops: whole lines vanished without a trace (issue 12). Orientation is
                # decided here on undistorted pieces of each line instead, on every
                # detected line (text_score 0: an upside-down line reads as low-score junk).
                settings = {**DETECTION, "text_score": 0.0}
                result, _ = self._ocr(
                    _pad_extreme_aspect(image), use_cls=False, return_word_box=True, **settings
                )
                result = result or []
                rgb = np.asarray(image)
                flips = self._flipped(rgb, result)
                if sum(flips) > len(result) / 2:
                    return [], True
                if any(flips):
                    result = self._read_turned(rgb, result, flips)
        except Exception as exc:
            raise EngineFailure(
                f"RapidOCR failed on a {image.width}x{image.height} page: {exc}"
            ) from exc
        lines = []
        for item, flipped in zip(result, flips, strict=True):
            if float(item[2]) < DETECTION["text_score"]:
                continue
            line = _to_line(item, gray, image.size, respace=not flipped)
            if line is not None:
                lines.append(line)
        return lines, False

    def _flipped(self, rgb: np.ndarray, result: list[RawLine]) -> list[bool]:
        """Which lines are upside down, by majority over pieces of each line.

        The classifier was trained on 48x192 crops (aspect 4); each line is cut into
        pieces of about that aspect so none is distorted. Used to detect upside-down
        pages (most lines flipped). Paid only where a line looks turned: the middle piece
        of every line is classified first (one crop a line, what RapidOCR's own classifier
        costs); the other pieces only of lines whose middle piece says 180 or whose text
        read poorly (an upside-down line reads as low-score junk, except digits that read
        as other digits, which the middle piece catches).
        """
        pieces = []
        for item in result:
            x1, y1, x2, y2 = _int_box(item[0], rgb.shape[1], rgb.shape[0])
            ok = x2 - x1 >= 2 and y2 - y1 >= 2
            pieces.append(_orientation_pieces(x1, x2, y2 - y1) if ok else [])
        votes = [0] * len(result)
        counts = [0] * len(result)
        middle = {i: len(p) // 2 for i, p in enumerate(pieces) if p}
        suspects = []
        jobs = [(i, pieces[i][m]) for i, m in middle.items()]
        for i, (flipped, label) in self._classify(rgb, result, jobs):
            counts[i] += 1
            votes[i] += flipped
            if "180" in label or float(result[i][2]) < LOW_SCORE:
                suspects.append(i)
        rest = [(i, piece) for i in suspects for j, piece in enumerate(pieces[i]) if j != middle[i]]
        for i, (flipped, _) in self._classify(rgb, result, rest):
            counts[i] += 1
            votes[i] += flipped
        return [c > 0 and 2 * v > c for v, c in zip(votes, counts, strict=True)]

    def _classify(
        self, rgb: np.ndarray, result: list[RawLine], jobs: list[tuple[int, tuple[int, int]]]
    ) -> list[tuple[int, tuple[bool, str]]]:
        """``(line, (flipped, label))`` for each ``(line, (a, b))`` piece in ``jobs``."""
        if not jobs:
            return []
        crops = []
        for i, (a, b) in jobs:
            _, y1, _, y2 = _int_box(result[i][0], rgb.shape[1], rgb.shape[0])
            crops.append(np.ascontiguousarray(rgb[y1:y2, a:b, ::-1]))  # BGR
        _, labels, _ = self._ocr.text_cls(crops)
        threshold = self._ocr.text_cls.cls_thresh
        return [
            (i, ("180" in str(label) and float(score) > threshold, str(label)))
            for (i, _), (label, score) in zip(jobs, labels, strict=True)
        ]

    def _read_turned(
        self, rgb: np.ndarray, result: list[RawLine], flips: list[bool]
    ) -> list[RawLine]:
        """Recognise the upside-down lines of an upright page again, turned 180 degrees
        (their character boxes would be mirrored, so they are dropped)."""
        index = [i for i, flipped in enumerate(flips) if flipped]
        crops = []
        for i in index:
            x1, y1, x2, y2 = _int_box(result[i][0], rgb.shape[1], rgb.shape[0])
            crops.append(np.ascontiguousarray(rgb[y1:y2, x1:x2, ::-1][::-1, ::-1]))
        texts, _ = self._ocr.text_rec(crops)
        result = list(result)
        for i, (text, score, *_) in zip(index, texts, strict=True):
            result[i] = [result[i][0], text, score]
        return result


# RapidOCR's per-call detection settings (it resets them on every call with keyword
# arguments): the wheel's defaults. With line orientation decided here, the corpus of
# bench/fidelity.py loses no line with them; the lower box threshold / larger unclip
# ratio first suspected in issue 12 were not the cause (docs/benchmarks.md, "Fidelity").
DETECTION = {"box_thresh": 0.5, "unclip_ratio": 1.6, "text_score": 0.5}


MAX_REREADS = 8  # uncovered regions re-read per page; the rest are reported
# Upright lines of the fidelity corpus read at 0.89 or more (0.95 for 95 % of them); a line
# below this gets its orientation checked on every piece.
LOW_SCORE = 0.9
REREAD_TEXT_PX = 40.0  # re-read regions are upscaled to about this text height


def _moved(line: OcrLine, dx: float, dy: float, zoom: float) -> OcrLine:
    """A line read on a crop (offset ``dx, dy``, upscaled ``zoom``) in page pixels."""
    x1, y1, x2, y2 = line.bbox
    return OcrLine(
        text=line.text,
        bbox=(dx + x1 / zoom, dy + y1 / zoom, dx + x2 / zoom, dy + y2 / zoom),
        score=line.score,
        char_centers=tuple(dx + c / zoom for c in line.char_centers),
        ink_height=line.ink_height / zoom,
    )


def usable_cpus(cgroup_cpu_max: str = "/sys/fs/cgroup/cpu.max") -> int:
    """CPUs this process may really use: its affinity mask, capped by a cgroup v2 quota."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    cpus = cpus or 1
    try:
        with open(cgroup_cpu_max) as f:
            quota, period = f.read().split()[:2]
        if quota != "max":
            cpus = min(cpus, max(1, math.ceil(int(quota) / int(period))))
    except (OSError, ValueError):
        pass
    return cpus


def _orientation_pieces(x1: int, x2: int, height: int) -> list[tuple[int, int]]:
    """Split ``[x1, x2)`` into about-equal pieces of roughly 4x ``height`` each."""
    n = max(1, round((x2 - x1) / max(4 * height, 1)))
    edges = np.linspace(x1, x2, n + 1).round().astype(int)
    return [(int(a), int(b)) for a, b in itertools.pairwise(edges) if b - a >= 2]


def _pad_extreme_aspect(image: Image.Image) -> Image.Image:
    """Pad very thin pages with white (right/bottom, so coordinates stay valid).

    RapidOCR rounds resized sides to multiples of 32 and fails on a 20x3000 strip, and
    its detector scales the *short* side up to 736 px, so a 1:20 strip would become a
    huge image. Up to 1:4 pages are left alone.
    """
    w, h = image.size
    min_side = max(64, max(w, h) // 4)
    if min(w, h) >= min_side:
        return image
    padded = Image.new("RGB", (max(w, min_side), max(h, min_side)), (255, 255, 255))
    padded.paste(image, (0, 0))
    return padded


def _int_box(quad: Sequence[Sequence[float]], width: int, height: int) -> tuple[int, int, int, int]:
    xs = [float(p[0]) for p in quad]
    ys = [float(p[1]) for p in quad]
    return (
        max(int(min(xs)), 0),
        max(int(min(ys)), 0),
        min(int(np.ceil(max(xs))), width),
        min(int(np.ceil(max(ys))), height),
    )


def _to_line(
    item: RawLine, gray: np.ndarray, size: tuple[int, int], *, respace: bool
) -> OcrLine | None:
    """One RapidOCR result ``[quad, text, score, char_boxes?, chars?, ...]``."""
    quad, text, score = item[0], str(item[1]), float(item[2])
    if not text.strip():
        return None
    x1, y1, x2, y2 = _int_box(quad, *size)
    if x2 <= x1 or y2 <= y1:  # only on the white padding
        return None
    xs = [min(float(p[0]), size[0]) for p in quad]
    ys = [min(float(p[1]), size[1]) for p in quad]
    bbox = (min(xs), min(ys), max(xs), max(ys))
    centers: tuple[float, ...] = ()
    ink = ink_box(gray, bbox)
    char_boxes = item[3] if len(item) > 3 else None
    horizontal = (bbox[2] - bbox[0]) > (bbox[3] - bbox[1])
    if respace and horizontal and char_boxes and len(char_boxes) == len(text):
        centers = tuple(sum(float(p[0]) for p in box) / len(box) for box in char_boxes)
        if ink is not None and list(centers) == sorted(centers):
            text, centers = restore_spaces(
                text, centers, np.asarray(ink.any(axis=0)), bbox_x0(bbox), len(ink)
            )
        else:
            centers = ()
    height = ink_height(ink) if ink is not None and horizontal else 0.0
    return OcrLine(text=text, bbox=bbox, score=score, char_centers=centers, ink_height=height)
