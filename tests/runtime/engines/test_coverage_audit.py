"""No silent text loss (issue 12): the coverage audit stays silent on complete output and
fires, at the right place, when text is missing from what an engine returned.

The pure audit runs on generated pages whose line boxes are known exactly; the serving
path runs the real RapidOCR engine wrapped by ``DroppingEngine`` (a public ``Engine`` that
deletes one line from the real output, as a detector miss would), and the tiny DeepSeek
model truncated by ``max_new_tokens``.
"""

from __future__ import annotations

from collections.abc import Sequence

import documents
import page_corpus
import pytest
from app_for_tests import make_settings, scrape, serving, value
from docparser_runtime import audit
from docparser_runtime.engines.base import Engine, PageImage, PageResult, ParseOptions
from docparser_runtime.engines.coverage import audit_page, audit_results
from docparser_runtime.engines.deepseek_ocr2.grounding import parse_output
from PIL import Image, ImageDraw


def overlap(a, b) -> float:
    """Intersection over the area of ``b``."""
    w = min(a[2], b[2]) - max(a[0], b[0])
    h = min(a[3], b[3]) - max(a[1], b[1])
    return max(w, 0) * max(h, 0) / ((b[2] - b[0]) * (b[3] - b[1]))


def reported(line_box, warnings_boxes) -> bool:
    return any(overlap(w, line_box) > 0.5 for w in warnings_boxes)


# ------------------------------------------------------------------ the pure audit


@pytest.mark.parametrize("make", page_corpus.CLEAN, ids=lambda f: f.__name__)
def test_silent_when_every_line_is_covered(make):
    page = make()
    if page is None:
        pytest.skip("no CJK font")
    assert audit.audit(page.image, [line.bbox for line in page.lines]) == []


@pytest.mark.parametrize("make", page_corpus.CLEAN, ids=lambda f: f.__name__)
def test_a_missing_line_is_reported_where_it_is(make):
    page = make()
    if page is None:
        pytest.skip("no CJK font")
    missing = len(page.lines) // 2
    boxes = [line.bbox for i, line in enumerate(page.lines) if i != missing]
    regions = audit.audit(page.image, boxes)
    assert len(regions) == 1
    assert overlap(regions[0].bbox, page.lines[missing].bbox) > 0.8
    assert overlap(page.lines[missing].bbox, regions[0].bbox) > 0.6  # and not much more


def test_rules_frames_and_specks_are_not_text():
    img = Image.new("RGB", (900, 600), "white")
    draw = ImageDraw.Draw(img)
    draw.rectangle((20, 20, 880, 580), outline="black", width=3)  # page frame
    draw.line((60, 300, 840, 300), fill="black", width=2)  # a rule
    draw.rectangle((100, 350, 700, 550), outline="black", width=2)  # an empty box
    for x in range(100, 800, 37):
        draw.point((x, 200), fill="black")  # specks
    text_at = (100, 100)
    draw.text(text_at, "Only this line is text", font=documents.font(28), fill="black")
    box = draw.textbbox(text_at, "Only this line is text", font=documents.font(28))
    assert audit.audit(img, [box]) == []
    (region,) = audit.audit(img, [])
    assert overlap(region.bbox, box) > 0.8


def test_blank_and_dark_pages():
    assert audit.audit(Image.new("RGB", (640, 480), "white"), []) == []
    dark = Image.new("RGB", (640, 200), (15, 15, 15))
    draw = ImageDraw.Draw(dark)
    draw.text((40, 60), "White on black", font=documents.font(40), fill="white")
    box = draw.textbbox((40, 60), "White on black", font=documents.font(40))
    assert audit.audit(dark, [box]) == []
    assert len(audit.audit(dark, [])) == 1


def test_large_pages_are_audited_downscaled_with_boxes_in_page_pixels():
    img = Image.new("RGB", (3000, 2000), "white")  # 6 MP > audit.MAX_PIXELS
    draw = ImageDraw.Draw(img)
    font = documents.font(60)
    boxes = []
    for i, text in enumerate(["First line of the page", "Second line, not read"]):
        draw.text((200, 300 + 200 * i), text, font=font, fill="black")
        boxes.append(draw.textbbox((200, 300 + 200 * i), text, font=font))
    assert audit.ink_map(img).scale < 1.0
    (region,) = audit.audit(img, boxes[:1])
    assert overlap(region.bbox, boxes[1]) > 0.8 and overlap(boxes[1], region.bbox) > 0.6


def test_otsu_splits_two_tones():
    hist = [0] * 256
    hist[30], hist[220] = 100, 900
    assert 30 < audit.otsu(__import__("numpy").array(hist)) <= 220


# ------------------------------------------------------------------ DeepSeek output


def test_truncated_grounding_output_reports_the_regions_without_output():
    """A generation cut after the first block (what ``max_new_tokens`` does): the audit
    says which lines got no output."""
    page = page_corpus.a4_sentences()
    w, h = page.image.size
    x1, y1, x2, y2 = page.lines[0].bbox  # the title
    grid = [round(x1 / w * 999), round(y1 / h * 999), round(x2 / w * 999), round(y2 / h * 999)]
    raw = f"<|ref|>title<|/ref|><|det|>[{grid}]<|/det|>\n# {page.lines[0].text}\n\n<|ref|>te"
    parsed = parse_output(raw, w, h)
    result = PageResult(0, parsed.content, w, h, 0, 256, parsed.blocks, truncated=True)
    audit_page(PageImage(0, page.image, 0, 256), result)
    boxes = [warning.bbox for warning in result.warnings]
    assert not reported(page.lines[0].bbox, boxes)
    assert all(reported(line.bbox, boxes) for line in page.lines[1:])
    assert {warning.code for warning in result.warnings} == {"uncovered_text"}


def test_tiny_deepseek_truncated_page_is_audited_in_markdown_not_in_text_mode(tiny_model_dir):
    from docparser_runtime.engines.deepseek_ocr2.engine import DeepseekOcr2Engine

    engine = DeepseekOcr2Engine(tiny_model_dir, device="cpu")
    engine.load()
    doc = documents.single_column()
    pages = [PageImage(0, doc.image, 0, 256)]
    for mode, audited in (("markdown", True), ("text", False)):
        options = ParseOptions(tier=0, mode=mode, max_new_tokens=4)
        results = engine.infer_batch(pages, options)
        audit_results(engine, pages, results, options)
        assert results[0].truncated
        # random weights write no located block: every printed line had no output
        assert bool(results[0].warnings) is audited
        assert len(results[0].warnings) == (len(doc.lines) + 1 if audited else 0)
    engine.close()


# ------------------------------------------------------------------ serving, real OCR


class DroppingEngine(Engine):
    """The real RapidOCR engine, minus every line that contains ``drop`` (a test hook)."""

    name = "rapidocr"

    def __init__(self, inner: Engine, drop: str) -> None:
        self.inner, self.drop = inner, drop

    @property
    def version(self) -> str:
        return self.inner.version

    def load(self) -> None:
        self.inner.load()

    def warmup(self) -> None:
        self.inner.warmup()  # a blank page: nothing to drop

    def locates_text(self, options: ParseOptions) -> bool:
        return self.inner.locates_text(options)

    def infer_batch(self, pages: Sequence[PageImage], options: ParseOptions) -> list[PageResult]:
        results = self.inner.infer_batch(pages, options)
        for page, result in zip(pages, results, strict=True):
            lines = self.inner.recognize(page.image)
            kept = [line.bbox for line in lines if self.drop not in line.text]
            assert len(kept) < len(lines), "the hook must remove something"
            result.coverage = kept
            result.content = result.content.replace(self.drop, "")
        return results


SHORT = documents.SINGLE_COLUMN[:3]
# Real OCR on a shared machine: no request deadline may turn slowness into a failure.
SLOW_OK = make_settings(request_timeout_s=600.0, drain_timeout_s=600.0)


def short_page() -> tuple[Image.Image, list[tuple]]:
    img = Image.new("RGB", (900, 260), "white")
    draw = ImageDraw.Draw(img)
    boxes = []
    for i, line in enumerate(SHORT):
        draw.text((40, 30 + 70 * i), line, font=documents.font(24), fill=documents.INK)
        boxes.append(draw.textbbox((40, 30 + 70 * i), line, font=documents.font(24)))
    return img, boxes


@pytest.fixture(scope="module")
def rapidocr_engine():
    from docparser_runtime.engines.rapidocr.engine import RapidOcrEngine

    engine = RapidOcrEngine(threads=1)
    engine.load()
    yield engine
    engine.close()


@pytest.mark.slow
def test_the_issue_page_is_read_whole_and_the_audit_stays_silent(rapidocr_engine):
    """Issue 12: a clean A4 page of a title and 14 sentences lost 2 lines silently."""
    page = page_corpus.a4_sentences()
    pages = [PageImage(0, page.image, 0, 256)]
    options = ParseOptions(mode="markdown")
    results = rapidocr_engine.infer_batch(pages, options)
    audit_results(rapidocr_engine, pages, results, options)
    assert page_corpus.lost_lines(page, results[0].content) == []
    assert results[0].warnings == []
    assert page_corpus.cer(page.text, results[0].content) < 0.02


@pytest.mark.slow
async def test_a_line_removed_from_the_output_is_reported_in_the_reply_and_metrics(
    rapidocr_engine,
):
    img, boxes = short_page()
    engine = DroppingEngine(rapidocr_engine, drop="checked")
    async with serving(SLOW_OK, engine) as (_, client, _):
        files = {"file": ("p.png", documents.png_bytes(img), "image/png")}
        body = (await client.post("/v1/document/parse", files=files)).json()
        samples = await scrape(client)
    assert "pages" in body, body
    page = body["pages"][0]
    assert "checked" not in body["content"]
    assert body["complete"] is False and body["warnings"] == 1
    (warning,) = page["warnings"]
    assert warning["code"] == "uncovered_text"
    assert overlap(warning["bbox"], boxes[1]) > 0.8
    assert not reported(boxes[0], [warning["bbox"]]) and not reported(boxes[2], [warning["bbox"]])
    labels = {"engine": "rapidocr", "code": "uncovered_text"}
    assert value(samples, "docparser_audit_warnings_total", **labels) == 1
    assert value(samples, "docparser_incomplete_pages_total", engine="rapidocr") == 1
    assert body["timings_ms"]["audit"] > 0


@pytest.mark.slow
async def test_complete_output_is_flagged_complete(rapidocr_engine):
    img, _ = short_page()
    async with serving(SLOW_OK, rapidocr_engine) as (_, client, _):
        files = {"file": ("p.png", documents.png_bytes(img), "image/png")}
        body = (await client.post("/v1/document/parse", files=files)).json()
    assert body["complete"] is True and body["warnings"] == 0
    assert body["pages"][0]["warnings"] == []
    assert all(page_corpus.line_error(line, body["content"]) < 0.05 for line in SHORT)
