"""``stream: true`` on /v1/document/parse as Server-Sent Events, over a real socket:
page events, text deltas as the engine generates them (tiny DeepSeek-OCR-2 through its
transformers streamer; RapidOCR through the one-delta default), a final ``result``, early
errors as plain HTTP errors, and a client that hangs up stops the generation."""

from __future__ import annotations

import io
import json
import time

import httpx
import pytest
from docparser_runtime.server.app import create_app
from docparser_runtime.server.protocol import PAGE_SEPARATOR
from docparser_runtime.settings import Settings
from documents import png_bytes, single_column
from engines_for_tests import png_bytes as blank_png
from live_server import ThreadedServer
from PIL import Image

PARSE = "/v1/document/parse"
SETTINGS = {"default_tier": 0, "cache_max_bytes": 0, "max_wait_ms": 1.0, "job_workers": 0}


def read_events(response: httpx.Response) -> list[tuple[str, dict]]:
    events, kind = [], None
    for line in response.iter_lines():
        if line.startswith("event: "):
            kind = line[len("event: ") :]
        elif line.startswith("data: "):
            events.append((kind, json.loads(line[len("data: ") :])))
    return events


def stream(url: str, data: bytes, **fields) -> list[tuple[str, dict]]:
    with httpx.stream(
        "POST",
        f"{url}{PARSE}",
        files={"file": ("doc", data, "application/octet-stream")},
        data={"stream": "true", **fields},
        timeout=120,
    ) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        return read_events(response)


def check_consistent(events: list[tuple[str, dict]], pages: int) -> dict:
    """Page events precede their deltas; each page's deltas add up to its content."""
    kinds = [k for k, _ in events]
    assert kinds[-1] == "result" and kinds.count("result") == 1 and "error" not in kinds
    result = events[-1][1]
    assert [d["index"] for k, d in events if k == "page"] == list(range(pages))
    started: set[int] = set()
    texts: dict[int, str] = {i: "" for i in range(pages)}
    for kind, data in events:
        if kind == "page":
            started.add(data["index"])
        elif kind == "delta":
            assert data["page"] in started  # a page starts before its text
            texts[data["page"]] += data["text"]
    assert [texts[i] for i in range(pages)] == [p["content"] for p in result["pages"]]
    assert result["content"] == PAGE_SEPARATOR.join(texts[i] for i in range(pages))
    return result


def pdf(*images: Image.Image) -> bytes:
    buf = io.BytesIO()
    images[0].save(buf, format="PDF", save_all=True, append_images=list(images[1:]))
    return buf.getvalue()


# -- tiny DeepSeek-OCR-2: token-by-token streaming ----------------------------------------
@pytest.fixture(scope="module")
def deepseek_url(tiny_model_dir):
    from docparser_runtime.engines.deepseek_ocr2.engine import DeepseekOcr2Engine

    engine = DeepseekOcr2Engine(tiny_model_dir, device="cpu", version="tiny")
    engine.load()
    app = create_app(Settings(engine="deepseek-ocr2", **SETTINGS), engine, engine_loaded=True)
    with ThreadedServer(app) as server:
        yield server.url


@pytest.mark.torch
def test_deepseek_deltas_add_up_to_every_page_and_the_result(deepseek_url):
    doc = pdf(Image.new("RGB", (300, 200), "white"), Image.new("RGB", (200, 300), "white"))
    events = stream(deepseek_url, doc, max_new_tokens="24")
    result = check_consistent(events, pages=2)
    deltas = [d for k, d in events if k == "delta"]
    assert len(deltas) > 4  # many small deltas, not one blob per page
    assert result["model"]["engine"] == "deepseek-ocr2"
    assert [k for k, _ in events].count("page_end") == 2


@pytest.mark.torch
def test_early_errors_are_plain_http_errors_not_streams(deepseek_url):
    reply = httpx.post(
        f"{deepseek_url}{PARSE}",
        files={"file": ("x.bin", b"definitely not a document", "application/octet-stream")},
        data={"stream": "true"},
        timeout=30,
    )
    assert reply.status_code == 415
    assert reply.json()["error"]["code"] == "unsupported_media_type"


@pytest.mark.torch
def test_client_disconnect_stops_the_generation(deepseek_url):
    tokens = 300
    # Baseline: how long the engine is busy when nobody hangs up.
    t0 = time.monotonic()
    full = stream(deepseek_url, blank_png(301, 200), max_new_tokens=str(tokens))
    busy_s = time.monotonic() - t0
    result = full[-1][1]
    assert result["usage"]["output_tokens"] >= tokens * 0.9  # precondition: no early EOS

    # Hang up after the first delta of an identical-cost request...
    with httpx.stream(
        "POST",
        f"{deepseek_url}{PARSE}",
        files={"file": ("a.png", blank_png(302, 200))},
        data={"stream": "true", "max_new_tokens": str(tokens)},
        timeout=60,
    ) as response:
        for line in response.iter_lines():
            if line.startswith("event: delta"):
                break
    # ... then the engine must be free for the next request long before the abandoned
    # generation would have finished.
    t1 = time.monotonic()
    follow_up = httpx.post(
        f"{deepseek_url}{PARSE}",
        files={"file": ("b.png", blank_png(303, 200))},
        data={"max_new_tokens": "1"},
        timeout=60,
    )
    waited_s = time.monotonic() - t1
    assert follow_up.status_code == 200
    assert waited_s < busy_s / 2, (waited_s, busy_s)


# -- RapidOCR: an engine without token streaming (one delta per page) ---------------------
@pytest.fixture(scope="module")
def rapidocr_url():
    from docparser_runtime.engines.rapidocr.engine import RapidOcrEngine

    app = create_app(Settings(engine="rapidocr", **SETTINGS), RapidOcrEngine())
    with ThreadedServer(app, ready_timeout=180) as server:
        yield server.url


@pytest.mark.slow
def test_rapidocr_stream_matches_its_result(rapidocr_url):
    page = single_column((600, 300)).image
    events = stream(rapidocr_url, png_bytes(page))
    result = check_consistent(events, pages=1)
    assert "Document parsing" in result["content"]
    metrics = httpx.get(f"{rapidocr_url}/metrics", timeout=10).text
    count = next(
        float(line.split()[-1])
        for line in metrics.splitlines()
        if line.startswith("docparser_time_to_first_token_seconds_count")
    )
    assert count >= 1  # the streamed request's first text was timed
