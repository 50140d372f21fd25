"""The HTTP app: parse route (multipart, JSON, raw), probes, lifecycle, batching, errors."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import time

import pytest
from app_for_tests import make_settings, serving, wait_ready
from docparser_runtime.preprocess.tiling import plan_tiles
from docparser_runtime.server.protocol import PAGE_SEPARATOR
from engines_for_tests import GatedEngine, png_bytes
from PIL import Image

PARSE = "/v1/document/parse"


def pdf_bytes(sizes: list[tuple[int, int]]) -> bytes:
    images = [Image.new("RGB", size, "white") for size in sizes]
    buf = io.BytesIO()
    images[0].save(buf, format="PDF", save_all=True, append_images=images[1:], resolution=72)
    return buf.getvalue()


async def until(predicate, timeout: float = 5.0) -> None:
    end = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < end, "condition not reached"
        await asyncio.sleep(0.005)


def json_post_scope(path: str, *, content_length: int | None = None) -> dict:
    """A raw ASGI scope for a JSON POST, for tests that drive the app's receive/send by
    hand (a client that hangs up mid-upload or while queued: no HTTP client can)."""
    headers = [(b"content-type", b"application/json")]
    if content_length is not None:
        headers.append((b"content-length", str(content_length).encode()))
    return {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
        "method": "POST", "scheme": "http", "path": path, "raw_path": path.encode(),
        "query_string": b"", "root_path": "", "client": ("127.0.0.1", 5), "server": None,
        "headers": headers, "state": {},
    }  # fmt: skip


async def test_multipart_parse_reply_has_the_documented_shape():
    async with serving() as (_, client, _engine):
        resp = await client.post(PARSE, files={"file": ("a.png", png_bytes(200, 120), "image/png")})
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["id"].startswith("parse-")
    assert body["model"] == {"engine": "gated-test", "version": "test-1"}
    assert body["cached"] is False
    (page,) = body["pages"]
    assert page["index"] == 0 and (page["width"], page["height"]) == (200, 120)
    plan = plan_tiles(200, 120, 0)  # default_tier=0 in test settings
    assert (page["tiles"], page["vision_tokens"]) == (plan.tiles, plan.vision_tokens)
    assert page["blocks"][0]["bbox"] == [0.0, 0.0, 200.0, 120.0]
    assert body["content"] == page["content"] == "# page 0 200x120 markdown tier 0"
    assert body["vision_tokens"] == plan.vision_tokens
    assert body["usage"] == {
        "vision_tokens": plan.vision_tokens,
        "output_tokens": page["output_tokens"],
        "pages": 1,
    }
    assert set(body["timings_ms"]) == {"queue", "preprocess", "inference", "audit", "total"}
    assert body["timings_ms"]["total"] >= body["timings_ms"]["inference"] >= 0


async def test_options_from_form_fields_json_and_query_reach_the_engine():
    png = png_bytes(64, 64)
    async with serving() as (_, client, engine):
        form = {"tier": "2", "mode": "text", "max_new_tokens": "77"}
        r1 = await client.post(PARSE, files={"file": ("a.png", png, "image/png")}, data=form)
        b64 = base64.b64encode(png).decode()
        r2 = await client.post(PARSE, json={"image": b64, "tier": 3, "mode": "grounding"})
        data_url = "data:image/png;base64," + b64
        r3 = await client.post(PARSE, json={"image": data_url, "max_new_tokens": 5})
        r4 = await client.post(
            PARSE + "?tier=1&mode=text", content=png, headers={"content-type": "image/png"}
        )
    assert [r.status_code for r in (r1, r2, r3, r4)] == [200] * 4
    opts = [(o.tier, o.mode, o.max_new_tokens) for o in engine.batch_options]
    default_mnt = make_settings().default_max_new_tokens
    assert opts == [(2, "text", 77), (3, "grounding", default_mnt), (0, "markdown", 5),
                    (1, "text", default_mnt)]  # fmt: skip
    assert r2.json()["pages"][0]["tiles"] == plan_tiles(64, 64, 3).tiles


async def test_pdf_pages_selection_and_page_separator():
    pdf = pdf_bytes([(300, 200), (320, 200), (340, 200)])
    async with serving() as (_, client, _engine):
        all_pages = await client.post(PARSE, files={"file": ("d.pdf", pdf, "application/pdf")})
        some = await client.post(
            PARSE, files={"file": ("d.pdf", pdf, "application/pdf")}, data={"pages": "1,3"}
        )
    assert all_pages.status_code == 200, all_pages.text
    body = all_pages.json()
    assert [p["index"] for p in body["pages"]] == [0, 1, 2]
    assert body["content"] == PAGE_SEPARATOR.join(p["content"] for p in body["pages"])
    assert body["usage"]["pages"] == 3
    assert body["vision_tokens"] == sum(p["vision_tokens"] for p in body["pages"])
    assert [p["index"] for p in some.json()["pages"]] == [0, 2]


async def test_concurrent_requests_are_batched_together():
    settings = make_settings(max_batch_size=4, max_wait_ms=5000)
    async with serving(settings) as (_, client, engine):
        files = [{"file": (f"{i}.png", png_bytes(50 + i, 40), "image/png")} for i in range(4)]
        replies = await asyncio.gather(*(client.post(PARSE, files=f) for f in files))
    assert [r.status_code for r in replies] == [200] * 4
    assert [len(b) for b in engine.batches] == [4]
    assert [r.json()["pages"][0]["width"] for r in replies] == [50, 51, 52, 53]


async def test_readyz_is_503_while_loading_and_probes_answer_meanwhile():
    engine = GatedEngine()
    engine.load_release.clear()
    async with serving(engine=engine, ready=False) as (_, client, _engine):
        ready = await client.get("/readyz")
        assert ready.status_code == 503
        assert ready.json()["status"] == "starting"
        assert (await client.get("/health")).status_code == 503  # the guides' /health
        assert (await client.get("/livez")).status_code == 200
        parse = await client.post(PARSE, files={"file": ("a.png", png_bytes(), "image/png")})
        assert parse.status_code == 503
        assert parse.json()["error"]["code"] == "starting"
        assert "Retry-After" in parse.headers
        engine.load_release.set()
        await wait_ready(client)
        body = (await client.get("/readyz")).json()
        assert body["status"] == "ready" and body["engine"] == "gated-test"
        assert (await client.get("/health")).json() == body
        assert engine.loaded and engine.warmed


async def test_engine_load_failure_is_reported_not_served():
    engine = GatedEngine()
    engine.load_error = OSError("weights missing at /models")
    async with serving(engine=engine, ready=False) as (app, client, _engine):
        await until(lambda: app.state.runtime.lifecycle.state.value == "failed")
        ready = await client.get("/readyz")
        assert ready.status_code == 503
        assert ready.json()["status"] == "failed"
        assert "weights missing" in ready.json()["reason"]
        assert (await client.get("/livez")).status_code == 200
        parse = await client.post(PARSE, files={"file": ("a.png", png_bytes(), "image/png")})
        assert parse.status_code == 503
        assert parse.json()["error"]["code"] == "engine_unavailable"


async def test_draining_refuses_new_work_and_lets_in_flight_requests_finish():
    async with serving() as (app, client, engine):
        engine.gate.clear()
        engine.entered.clear()
        in_flight = asyncio.create_task(
            client.post(PARSE, files={"file": ("a.png", png_bytes(), "image/png")})
        )
        await asyncio.to_thread(engine.entered.wait, 5)
        lifecycle = app.state.runtime.lifecycle
        assert lifecycle.in_flight == 1
        lifecycle.start_draining()
        ready = await client.get("/readyz")
        assert ready.status_code == 503 and ready.json()["status"] == "draining"
        refused = await client.post(PARSE, files={"file": ("b.png", png_bytes(), "image/png")})
        assert refused.status_code == 503
        assert refused.json()["error"]["code"] == "draining"
        engine.gate.set()
        assert (await in_flight).status_code == 200
        assert await lifecycle.wait_idle(5)
    assert engine.closed


async def test_full_queue_answers_429_with_retry_after():
    settings = make_settings(max_batch_size=1, max_queue_pages=1)
    async with serving(settings) as (app, client, engine):
        engine.gate.clear()
        engine.entered.clear()
        files = {"file": ("a.png", png_bytes(), "image/png")}
        held = asyncio.create_task(client.post(PARSE, files=files))
        await asyncio.to_thread(engine.entered.wait, 5)
        queued = asyncio.create_task(client.post(PARSE, files=files))
        await until(lambda: app.state.runtime.batcher.queued_pages == 1)
        refused = await client.post(PARSE, files=files)
        assert refused.status_code == 429
        assert refused.json()["error"]["code"] == "overloaded"
        assert int(refused.headers["Retry-After"]) >= 1
        engine.gate.set()
        assert [(await t).status_code for t in (held, queued)] == [200, 200]


async def test_deadline_answers_504():
    async with serving(make_settings(request_timeout_s=0.2)) as (_, client, engine):
        engine.gate.clear()
        resp = await client.post(PARSE, files={"file": ("a.png", png_bytes(), "image/png")})
        engine.gate.set()
    assert resp.status_code == 504
    assert resp.json()["error"]["code"] == "deadline_exceeded"


async def test_a_sync_request_never_outlives_the_drain_window():
    """request_timeout_s 600 but a drain window of 0.3 s: the request ends (504) within the
    window, so one accepted just before SIGTERM is never cut off by the pod's kill."""
    settings = make_settings(request_timeout_s=600.0, drain_timeout_s=0.3)
    assert settings.sync_deadline_s == 0.3
    async with serving(settings) as (_, client, engine):
        engine.gate.clear()
        resp = await client.post(PARSE, files={"file": ("a.png", png_bytes(), "image/png")})
        engine.gate.set()
    assert resp.status_code == 504 and resp.json()["error"]["code"] == "deadline_exceeded"
    assert make_settings(request_timeout_s=10.0, drain_timeout_s=0).sync_deadline_s == 10.0


async def test_unexpected_engine_error_is_a_500_without_internals():
    async with serving() as (_, client, engine):
        engine.fail_with = ZeroDivisionError("secret path /opt/model/weights.bin")
        resp = await client.post(PARSE, files={"file": ("a.png", png_bytes(), "image/png")})
        assert resp.status_code == 500
        assert resp.json()["error"]["code"] == "engine_failure"
        assert "secret" not in resp.text and "Traceback" not in resp.text
        engine.fail_with = None
        assert (await client.get("/readyz")).status_code == 200


async def test_unexpected_error_outside_the_engine_is_a_generic_500(monkeypatch):
    async with serving() as (app, client, _engine):

        async def broken(*_args, **_kwargs):
            raise KeyError("internal-detail")

        monkeypatch.setattr(app.state.runtime.parse_service, "parse", broken)
        resp = await client.post(PARSE, files={"file": ("a.png", png_bytes(), "image/png")})
    assert resp.status_code == 500
    assert resp.json() == {"error": {"code": "engine_failure", "message": "internal server error"}}


async def test_stream_option_uses_the_installed_responder_or_is_refused():
    async with serving() as (app, client, _engine):
        files = {"file": ("a.png", png_bytes(), "image/png")}
        app.state.runtime.stream_responder = None  # as if the SSE module were not installed
        refused = await client.post(PARSE, files=files, data={"stream": "true"})
        assert refused.status_code == 400
        assert refused.json()["error"]["code"] == "stream_unsupported"

        async def responder(request, parse_request):
            from fastapi.responses import PlainTextResponse

            return PlainTextResponse(f"stream tier={parse_request.options.tier}")

        app.state.runtime.stream_responder = responder
        streamed = await client.post(PARSE, files=files, data={"stream": "1", "tier": "4"})
    assert streamed.status_code == 200 and streamed.text == "stream tier=4"


async def test_unknown_routes_and_methods_use_the_error_shape():
    async with serving() as (_, client, _engine):
        missing = await client.get("/v1/nope")
        wrong = await client.get(PARSE)
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
    assert wrong.status_code == 405 and wrong.json()["error"]["code"] == "method_not_allowed"


async def test_client_disconnect_drops_its_queued_pages():
    """Drive the ASGI app directly so the client can 'hang up' mid-request."""
    settings = make_settings(max_batch_size=1)
    async with serving(settings) as (app, client, engine):
        engine.gate.clear()
        engine.entered.clear()
        files = {"file": ("a.png", png_bytes(), "image/png")}
        held = asyncio.create_task(client.post(PARSE, files=files))
        await asyncio.to_thread(engine.entered.wait, 5)

        body = base64.b64encode(png_bytes(77, 77)).decode()
        payload = json.dumps({"image": body}).encode()
        hang_up = asyncio.Event()
        sent = []

        async def receive():
            if not sent:
                sent.append(True)
                return {"type": "http.request", "body": payload, "more_body": False}
            await hang_up.wait()
            return {"type": "http.disconnect"}

        messages = []

        async def send(message):
            messages.append(message)

        scope = json_post_scope(PARSE, content_length=len(payload))
        gone = asyncio.create_task(app(scope, receive, send))
        await until(lambda: app.state.runtime.batcher.queued_pages == 1)
        hang_up.set()
        await gone
        assert app.state.runtime.batcher.queued_pages == 0
        assert messages[0]["status"] == 499
        engine.gate.set()
        assert (await held).status_code == 200
        await asyncio.sleep(0.05)
    assert len(engine.batches) == 1  # the 77x77 page never reached the engine


@pytest.mark.parametrize("path", ["/livez", "/readyz", "/metrics", "/openapi.json"])
async def test_open_endpoints_answer(path):
    async with serving() as (_, client, _engine):
        assert (await client.get(path)).status_code == 200


async def test_livez_reports_a_wedged_engine_call():
    async with serving(make_settings(engine_stall_s=0.2)) as (_, client, engine):
        assert (await client.get("/livez")).status_code == 200
        engine.gate.clear()
        engine.entered.clear()
        held = asyncio.create_task(
            client.post(PARSE, files={"file": ("a.png", png_bytes(), "image/png")})
        )
        await asyncio.to_thread(engine.entered.wait, 5)
        await asyncio.sleep(0.3)
        stalled = await client.get("/livez")
        assert stalled.status_code == 503
        assert stalled.json()["status"] == "stalled"
        engine.gate.set()
        assert (await held).status_code == 200
        assert (await client.get("/livez")).status_code == 200


async def test_large_json_body_is_decoded_off_the_loop_and_parsed():
    noisy = Image.effect_noise((900, 900), 80).convert("RGB")  # incompressible: ~2.4 MB PNG
    buf = io.BytesIO()
    noisy.save(buf, format="PNG")
    assert buf.tell() > 1024 * 1024
    async with serving() as (_, client, _engine):
        resp = await client.post(PARSE, json={"image": base64.b64encode(buf.getvalue()).decode()})
    assert resp.status_code == 200, resp.text
    assert resp.json()["pages"][0]["width"] == 900


async def test_client_gone_during_upload_is_499_not_500():
    async with serving() as (app, _client, engine):
        messages = []

        async def receive():
            if not messages:
                messages.append("first")
                return {"type": "http.request", "body": b'{"image": "iVBO', "more_body": True}
            return {"type": "http.disconnect"}

        sent = []

        async def send(message):
            sent.append(message)

        scope = json_post_scope(PARSE)
        await app(scope, receive, send)
    assert sent[0]["status"] == 499
    assert engine.batches == []


async def test_documents_waiting_for_decode_are_bounded():
    import threading

    from docparser_runtime.preprocess.pipeline import DecodeLimits, load_document

    release = threading.Event()
    entered = threading.Event()
    limits = DecodeLimits(max_pixels=10**7, max_pages=10, pdf_dpi=72)

    def slow_loader(data, tier, pages):
        entered.set()
        release.wait(10)
        return load_document(data, tier=tier, pages=pages, limits=limits)

    settings = make_settings(max_queue_pages=1)
    async with serving(settings, document_loader=slow_loader) as (_, client, _engine):
        files = {"file": ("a.png", png_bytes(), "image/png")}
        first = asyncio.create_task(client.post(PARSE, files=files))
        await asyncio.to_thread(entered.wait, 5)
        refused = await client.post(PARSE, files=files)
        release.set()
        assert (await first).status_code == 200
    assert refused.status_code == 429
    assert refused.json()["error"]["code"] == "overloaded"
