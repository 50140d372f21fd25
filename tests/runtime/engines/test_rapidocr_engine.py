"""The CPU engine end to end on pages rendered by ``documents``: real RapidOCR models.

Each page costs seconds of CPU, so the engine is built once per session and every
document is parsed once; the assertions use character error rate (CER) bounds and
reading-order checks rather than exact strings.
"""

from __future__ import annotations

import os

import documents
import numpy as np
import pytest
from docparser_runtime.engines.base import PageImage, ParseOptions
from docparser_runtime.engines.rapidocr.engine import (
    RapidOcrEngine,
    rough_token_count,
    usable_cpus,
)
from docparser_runtime.errors import Unavailable
from docparser_runtime.preprocess.pipeline import DecodeLimits, load_document
from docparser_runtime.settings import Settings

pytestmark = pytest.mark.slow

LIMITS = DecodeLimits(max_pixels=40_000_000, max_pages=10, pdf_dpi=144)


@pytest.fixture(scope="session")
def rapidocr_engine():
    engine = RapidOcrEngine.from_settings(Settings())
    engine.load()
    yield engine
    engine.close()


def parse(engine, doc: documents.Doc, mode: str = "markdown"):
    page = PageImage(index=0, image=doc.image, tiles=0, vision_tokens=256)
    return engine.infer_batch([page], ParseOptions(mode=mode))[0]


def best_line(content: str, wanted: str) -> tuple[int, float]:
    """Index of the content line closest to ``wanted`` and its CER."""
    lines = content.splitlines()
    scores = [documents.cer(wanted, ln) for ln in lines]
    i = int(np.argmin(scores))
    return i, scores[i]


def test_engine_identity_and_unloaded_state():
    engine = RapidOcrEngine()
    assert engine.name == "rapidocr"
    assert engine.version.startswith("rapidocr-onnxruntime-1.")
    with pytest.raises(Unavailable):
        engine.recognize(documents.single_column().image)


def test_usable_cpus_is_capped_by_the_cgroup_quota(tmp_path):
    affinity = len(os.sched_getaffinity(0))
    quota = tmp_path / "cpu.max"
    quota.write_text("max 100000\n")
    assert usable_cpus(str(quota)) == affinity
    quota.write_text("50000 100000\n")  # half a CPU still gets one thread
    assert usable_cpus(str(quota)) == 1
    quota.write_text(f"{(affinity + 7) * 100000} 100000\n")  # quota above the mask
    assert usable_cpus(str(quota)) == affinity
    assert usable_cpus(str(tmp_path / "missing")) == affinity


def test_onnx_sessions_get_the_configured_thread_count():
    """Not onnxruntime's default (host cores): measured 2x slower per page on a shared
    2-core machine, and the idle pool's spinning steals CPU from other processes."""
    for threads, expected in ((1, 1), (0, usable_cpus())):
        engine = RapidOcrEngine.from_settings(Settings(engine_threads=threads))
        engine.load()
        ocr = engine._ocr
        sessions = (
            ocr.text_det.infer.session,
            ocr.text_cls.infer.session,
            ocr.text_rec.session.session,
        )
        for session in sessions:
            opts = session.get_session_options()
            assert (opts.intra_op_num_threads, opts.inter_op_num_threads) == (expected, 1)
        engine.close()


def test_warmup_on_a_blank_page_returns_nothing(rapidocr_engine):
    rapidocr_engine.warmup()
    result = parse(
        rapidocr_engine, documents.Doc(image=documents.Image.new("RGB", (300, 200), "white"))
    )
    assert (result.content, result.blocks, result.output_tokens) == ("", [], 0)


def test_single_column_markdown_with_heading(rapidocr_engine):
    doc = documents.single_column()
    result = parse(rapidocr_engine, doc)
    assert result.content.startswith("# Quarterly Report\n\n")
    assert documents.cer(doc.text, result.content) <= 0.05
    assert (result.width, result.height) == doc.image.size
    assert result.output_tokens == rough_token_count(result.content) > 50
    title, *rest = result.blocks
    assert (title.type, title.text) == ("title", "Quarterly Report")
    x1, y1, _, y2 = title.bbox
    assert 40 <= x1 <= 70 and 40 <= y1 <= 60 and y2 <= 110  # drawn at (60, 50), 44 px type
    assert [b.type for b in rest] == ["text"] * len(rest)
    assert all(
        0 <= b.bbox[0] < b.bbox[2] <= 1000 and 0 <= b.bbox[1] < b.bbox[3] <= 700 for b in rest
    )


def test_two_columns_are_read_column_by_column(rapidocr_engine):
    doc = documents.two_columns()
    result = parse(rapidocr_engine, doc)
    assert documents.cer(doc.text, result.content) <= 0.05
    left, right = doc.columns
    positions = {}
    for wanted in left + right:
        index, error = best_line(result.content, wanted)
        assert error <= 0.15, (wanted, result.content)
        positions[wanted] = index
    assert max(positions[w] for w in left) < min(positions[w] for w in right)
    assert result.content.startswith("# Two Column Layout")
    text_blocks = [b for b in result.blocks if b.type == "text"]
    assert len(text_blocks) == 2 and text_blocks[0].bbox[2] < text_blocks[1].bbox[0]


def test_ruled_table_becomes_a_markdown_table(rapidocr_engine):
    doc = documents.ruled_table()
    result = parse(rapidocr_engine, doc)
    rows = [ln for ln in result.content.splitlines() if ln.startswith("|")]
    assert len(rows) == len(doc.table) + 1  # + the |---| separator
    assert set(rows[1].replace("|", "").split()) == {"---"}
    cells = [[c.strip() for c in r.strip("|").split("|")] for r in [rows[0], *rows[2:]]]
    assert [len(r) for r in cells] == [3] * len(doc.table)
    flat_got = [c for r in cells for c in r]
    flat_want = [c for r in doc.table for c in r]
    exact = sum(g == w for g, w in zip(flat_got, flat_want, strict=True))
    assert exact >= 0.9 * len(flat_want), cells
    assert documents.cer(" ".join(flat_want), " ".join(flat_got)) <= 0.05
    (table,) = [b for b in result.blocks if b.type == "table"]
    assert np.allclose(table.bbox, (100, 200, 880, 550), atol=4)
    assert result.content.index("The table below") < result.content.index("| Item")


def test_chinese_text(rapidocr_engine):
    doc = documents.chinese()
    if doc is None:
        pytest.skip("no CJK font: install fonts-wqy-microhei (scripts/ensure-system-deps.sh does)")
    result = parse(rapidocr_engine, doc)
    assert documents.cer(doc.text, result.content) <= 0.15
    assert result.output_tokens >= len("".join(doc.lines)) * 0.8  # one token per ideograph


def test_exif_rotated_scan_reads_upright_in_grounding_mode(rapidocr_engine):
    doc = documents.single_column()
    data = documents.exif_rotated_jpeg(doc)
    (page,) = load_document(data, tier=6, pages=None, limits=LIMITS)
    assert (page.width, page.height) == doc.image.size  # stored as 700x1000, shown upright
    result = rapidocr_engine.infer_batch([page], ParseOptions(mode="grounding"))[0]
    assert documents.cer(doc.text, result.content) <= 0.05
    assert result.content.startswith("# Quarterly Report")
    assert result.blocks and (result.tiles, result.vision_tokens) == (
        page.tiles,
        page.vision_tokens,
    )


def two_short_pages() -> list[documents.Doc]:
    first = documents.single_column()
    second = documents.two_columns()
    return [first, second]


def test_two_page_pdf_in_text_mode_and_page_ranges(rapidocr_engine):
    docs = two_short_pages()
    data = documents.pdf_of(docs, resolution=144)  # 1000 px at 144 dpi: same size back
    pages = load_document(data, tier=2, pages=None, limits=LIMITS)
    assert [p.index for p in pages] == [0, 1]
    assert [(p.width, p.height) for p in pages] == [(1000, 700), (1000, 700)]
    results = rapidocr_engine.infer_batch(pages, ParseOptions(mode="text"))
    assert [r.index for r in results] == [0, 1]
    for doc, result in zip(docs, results, strict=True):
        assert "#" not in result.content and "|" not in result.content
        assert documents.cer(doc.text, result.content) <= 0.05
    # text mode: one line per recognised line, second page column by column
    second = results[1].content.splitlines()
    assert len(second) == 1 + len(docs[1].lines)
    assert documents.cer(docs[1].columns[0][-1], second[6]) <= 0.1
    assert documents.cer(docs[1].columns[1][0], second[7]) <= 0.1

    (only_second,) = load_document(data, tier=2, pages="2", limits=LIMITS)
    assert only_second.index == 1
    assert np.array_equal(np.asarray(only_second.image), np.asarray(pages[1].image))


def test_upside_down_page_is_read_upright_with_boxes_on_the_page_as_sent(rapidocr_engine):
    doc = documents.single_column()
    upright = documents.Image.new("RGB", doc.image.size, "white")
    upright.paste(doc.image.crop((0, 0, 1000, 330)))  # title + 3 lines keep this test quick
    flipped = upright.transpose(documents.Image.Transpose.ROTATE_180)
    result = parse(rapidocr_engine, documents.Doc(image=flipped))
    expected = "\n".join([doc.title, *doc.lines[:3]])
    assert result.content.startswith("# Quarterly Report")
    assert documents.cer(expected, result.content) <= 0.05
    title = result.blocks[0]
    # upright the title sits at the top left; on the page as sent, at the bottom right
    assert title.bbox[1] > 550 and title.bbox[0] > 450


@pytest.mark.parametrize("size", [(20, 3000), (1, 1)])
def test_extreme_page_shapes_do_not_fail(rapidocr_engine, size):
    result = parse(rapidocr_engine, documents.Doc(image=documents.Image.new("RGB", size, "white")))
    assert result.content == "" and (result.width, result.height) == size


def degraded_scan(img, angle: float = 1.2):
    """A page as a cheap scanner returns it: turned a little, blurred, grey, noisy."""
    turned = img.rotate(angle, resample=documents.Image.Resampling.BICUBIC, fillcolor="white")
    soft = np.asarray(turned.filter(documents.ImageFilter.GaussianBlur(0.8)), dtype=np.float32)
    noise = np.random.default_rng(0).normal(0, 8, (*soft.shape[:2], 1))
    return documents.Image.fromarray(np.clip(soft * 0.8 + 30 + noise, 0, 255).astype(np.uint8))


def test_skewed_noisy_scan_of_a_table_is_straightened(rapidocr_engine):
    doc = documents.ruled_table()
    result = parse(rapidocr_engine, documents.Doc(image=degraded_scan(doc.image)))
    rows = [ln for ln in result.content.splitlines() if ln.startswith("|")]
    got = [[c.strip() for c in r.strip("|").split("|")] for r in [rows[0], *rows[2:]]]
    assert got == doc.table
    assert result.content.startswith("# Order Summary\n\nThe table below")
    (table,) = [b for b in result.blocks if b.type == "table"]
    assert np.allclose(table.bbox, (100, 200, 880, 550), atol=20)  # on the page as sent


def test_single_turned_lines_on_an_upright_page_are_read_upright(rapidocr_engine):
    """Orientation is checked closely only where a line looks turned (its middle piece says
    180, or it read poorly); digits upside down read as other digits with a high score, so
    the middle piece must catch them: every line here must come back right."""
    lines = [
        "Quarterly revenue grew in every region this year",
        "890 1234 6180 9168 0896",
        "Shipping and delivery terms are listed below",
        "Payment is due within thirty days of the invoice date",
    ]
    page = documents.Image.new("RGB", (1000, 330), "white")
    font = documents.font(26)
    for row, text in enumerate(lines):
        strip = documents.Image.new("RGB", (960, 60), "white")
        documents.ImageDraw.Draw(strip).text((10, 12), text, fill="black", font=font)
        if row in (1, 3):
            strip = strip.transpose(documents.Image.Transpose.ROTATE_180)
        page.paste(strip, (20, 20 + 75 * row))
    result = parse(rapidocr_engine, documents.Doc(image=page), mode="text")
    read = [line.replace(" ", "") for line in result.content.splitlines()]
    for text in lines:  # a turned line is read without word boxes: spaces may go
        assert min(documents.cer(text.replace(" ", ""), line) for line in read) <= 0.1, read
