"""The CPU front (``DOCPARSER_ROLE=front``) with synchronous parses, as real processes.

A DocParser at zero GPU pods answers through its front: a parse is held while no backend
is ready and forwarded once one is (a real rapidocr server started mid-test on the port the
front polls); with hold 0, past the hold or over the hold bound it is a 503 with
``Retry-After``; a front asked to drain answers or hands over what it holds.
"""

from __future__ import annotations

import base64
import json
import signal
import subprocess
import sys
import time

import httpx
import pytest
from docparser_runtime.cli import main
from documents import png_bytes, single_column
from front_processes import FrontAndBackend, InBackground, metric, post_parse, wait_for
from PIL import Image

pytestmark = [pytest.mark.slow, pytest.mark.redis]

HELD = "docparser_front_held_requests"
WANTED = "docparser_front_capacity_wanted_timestamp_seconds"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@pytest.fixture(scope="module")
def page() -> bytes:
    return png_bytes(single_column().image)


def test_a_front_without_redis_refuses_to_start_with_the_reason(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("DOCPARSER_ROLE", "front")
    monkeypatch.setenv("DOCPARSER_FRONT_BACKEND_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("DOCPARSER_TERMINATION_LOG", str(tmp_path / "termination"))
    monkeypatch.delenv("DOCPARSER_REDIS_URL", raising=False)
    assert main(["serve", "--port", "0"]) == 1
    err = capsys.readouterr().err
    assert "DOCPARSER_ROLE=front needs DOCPARSER_REDIS_URL" in err
    assert "DOCPARSER_FRONT_BACKEND_URL" not in err.split("needs", 1)[1]
    assert "DOCPARSER_REDIS_URL" in (tmp_path / "termination").read_text()


def test_the_front_imports_no_engine(redis_url):
    """No model, no ONNX runtime, no torch: the front's memory is the server's alone."""
    code = (
        "import sys\n"
        "from docparser_runtime.server.app import create_app\n"
        "from docparser_runtime.settings import Settings\n"
        f"create_app(Settings(role='front', redis_url={redis_url!r}, "
        "front_backend_url='http://127.0.0.1:9'))\n"
        "heavy = ('onnxruntime', 'rapidocr_onnxruntime', 'torch', 'transformers', "
        "'docparser_runtime.engines.rapidocr', 'docparser_runtime.engines.deepseek_ocr2')\n"
        "print([m for m in heavy if m in sys.modules])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_hold_zero_answers_503_with_the_configured_retry_after(redis_url, page):
    env = {"DOCPARSER_FRONT_HOLD_SECONDS": 0, "DOCPARSER_FRONT_RETRY_AFTER_SECONDS": 7}
    with FrontAndBackend(redis_url, front_env=env) as fb:
        assert metric(fb.front.url, WANTED) == 0
        before = time.time()
        resp = post_parse(fb.front.url, page)
        assert resp.status_code == 503, resp.text
        assert resp.headers["Retry-After"] == "7"
        assert resp.json()["error"]["code"] == "no_capacity"
        image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
        chat_body = {"model": "rapidocr", "messages": [{"role": "user", "content": [image]}]}
        chat = httpx.post(f"{fb.front.url}/v1/chat/completions", json=chat_body, timeout=30)
        assert chat.status_code == 503 and chat.headers["Retry-After"] == "7", chat.text
        # Probes answer and do not count as client requests; the two parses do.
        assert httpx.get(f"{fb.front.url}/readyz").json()["role"] == "front"
        assert metric(fb.front.url, "docparser_front_requests_total") == 2
        assert metric(fb.front.url, HELD) == 0
        # Never held, so the refusal's stamp is what wakes the DocParser (core/idle.py).
        assert before <= metric(fb.front.url, WANTED) <= time.time()


def test_a_held_parse_is_answered_once_a_backend_comes_up(redis_url, page):
    with FrontAndBackend(redis_url, front_env={"DOCPARSER_FRONT_HOLD_SECONDS": 120}) as fb:
        front = fb.front.url
        plain = InBackground(lambda: post_parse(front, page))
        streamed = InBackground(lambda: post_parse(front, page, fields={"stream": "true"}))
        wait_for("two held parses", lambda: metric(front, HELD) == 2)
        backend = fb.start_backend()
        resp = plain.result()
        assert resp.status_code == 200, resp.text
        body = resp.json()
        assert "Quarterly Report" in body["content"] and body["model"]["engine"] == "rapidocr"
        events = streamed.result()
        assert events.status_code == 200 and events.headers["content-type"].startswith(
            "text/event-stream"
        )
        kinds = [line[7:] for line in events.text.splitlines() if line.startswith("event: ")]
        assert kinds[0] == "page" and kinds[-1] == "result" and "page_end" in kinds, kinds
        result = json.loads(events.text.rsplit("data: ", 1)[1])
        assert result["content"] == body["content"]
        assert metric(front, HELD) == 0
        # The pod answered (and counts) the parses; the front counts none as live traffic.
        pod_metrics = httpx.get(f"{backend.url}/metrics").text
        assert 'route="/v1/document/parse"' in pod_metrics
        assert 'route="/v1/document/parse"' not in httpx.get(f"{front}/metrics").text
        before = metric(backend.url, "docparser_last_request_timestamp_seconds")
        assert post_parse(front, page).status_code == 200  # ready: straight through
        assert metric(backend.url, "docparser_last_request_timestamp_seconds") > before
        # Bad input gets the pods' answer (the pod's, or the same check at the front).
        bad = post_parse(front, b"%PDF-1.7 not really")
        assert bad.status_code in (400, 415, 422), bad.text
        assert bad.json()["error"]["code"] != "backend_failed"
        wrong = post_parse(front, page, fields={"tier": "9"})
        assert wrong.status_code == 400 and wrong.json()["error"]["code"] == "invalid_tier"
        image = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + b64(page)}}
        chat_body = {"model": "rapidocr", "messages": [{"role": "user", "content": [image]}]}
        chat = httpx.post(f"{front}/v1/chat/completions", json=chat_body, timeout=120)
        assert chat.status_code == 200, chat.text
        assert chat.json()["choices"][0]["message"]["content"] == body["content"]


def test_a_client_that_leaves_frees_its_hold(redis_url, page):
    with FrontAndBackend(redis_url, front_env={"DOCPARSER_FRONT_HOLD_SECONDS": 120}) as fb:
        front = fb.front.url
        gone = InBackground(lambda: post_parse(front, page, timeout=6))
        wait_for("a held parse", lambda: metric(front, HELD) == 1, 6)
        with pytest.raises(httpx.ReadTimeout):
            gone.result(30)  # the client gives up and closes its connection
        wait_for("the hold to be released", lambda: metric(front, HELD) == 0, 30)


def test_held_parses_are_bounded_in_count_and_bytes(redis_url, page):
    small = png_bytes(Image.new("RGB", (40, 20), "white"))
    assert len(small) * 4 < len(page)
    env = {
        "DOCPARSER_FRONT_HOLD_SECONDS": 4,
        "DOCPARSER_FRONT_MAX_HELD_REQUESTS": 2,
        "DOCPARSER_FRONT_MAX_HELD_BYTES": len(page) + 2 * len(small),
        "DOCPARSER_FRONT_RETRY_AFTER_SECONDS": 3,
    }
    with FrontAndBackend(redis_url, front_env=env) as fb:
        front = fb.front.url
        first = InBackground(lambda: post_parse(front, page))
        wait_for("one held parse", lambda: metric(front, HELD) == 1)
        by_bytes = post_parse(front, page)  # a second page would pass the byte bound
        assert by_bytes.status_code == 503 and by_bytes.json()["error"]["code"] == "front_busy"
        assert by_bytes.headers["Retry-After"] == "3"
        second = InBackground(lambda: post_parse(front, small))
        wait_for("two held parses", lambda: metric(front, HELD) == 2)
        by_count = post_parse(front, small)  # fits the bytes, not the count
        assert by_count.status_code == 503 and by_count.json()["error"]["code"] == "front_busy"
        for held in (first, second):  # no backend within the hold: 503, never dropped
            resp = held.result()
            assert resp.status_code == 503 and resp.json()["error"]["code"] == "no_capacity"
            assert resp.headers["Retry-After"] == "3"


def test_the_front_charges_bodies_to_its_memory_before_reading_them(redis_url, page):
    """The front's own budget (its limit less 10 % and its process): a body it could never
    hold is 413, and one the held parses leave no room for is 503 + Retry-After, before
    either is read (issue 34: the front read every body first)."""
    limit = 300 * 2**20  # leaves the 64 MiB floor: room for one 20 MB raw body (2x)
    padded = page + b"\0" * (20 * 10**6 - len(page))
    env = {"DOCPARSER_FRONT_HOLD_SECONDS": 120, "DOCPARSER_MEMORY_LIMIT_BYTES": limit}
    with FrontAndBackend(redis_url, front_env=env) as fb:
        front = fb.front.url

        def raw(body: bytes) -> httpx.Response:
            return httpx.post(
                f"{front}/v1/document/parse", content=body,
                headers={"Content-Type": "image/png"}, timeout=150,
            )  # fmt: skip

        never = raw(padded + padded)
        assert never.status_code == 413, never.text
        assert never.json()["error"]["code"] == "host_memory_limit"
        held = InBackground(lambda: raw(padded))
        wait_for("one held parse", lambda: metric(front, HELD) == 1)
        busy = raw(padded)
        assert busy.status_code == 503 and busy.json()["error"]["code"] == "upload_memory_busy"
        assert int(busy.headers["Retry-After"]) >= 1
        fb.start_backend()
        answered = held.result()
        assert answered.status_code == 200, answered.text
        assert post_parse(front, page).status_code == 200  # its charge was given back


def test_a_draining_front_hands_held_parses_over(redis_url, page):
    env = {"DOCPARSER_FRONT_HOLD_SECONDS": 120, "DOCPARSER_DRAIN_TIMEOUT_S": 60}
    with FrontAndBackend(redis_url, front_env=env) as fb:
        front = fb.front.url
        held = InBackground(lambda: post_parse(front, page))
        wait_for("a held parse", lambda: metric(front, HELD) == 1)
        fb.front.signal(signal.SIGTERM)
        fb.start_backend()
        resp = held.result()
        assert resp.status_code == 200 and "Quarterly Report" in resp.json()["content"]
        assert fb.front.wait_exit(30) in (0, -signal.SIGTERM), fb.front.log()


def test_a_draining_front_answers_what_it_cannot_hand_over(redis_url, page):
    env = {"DOCPARSER_FRONT_HOLD_SECONDS": 120, "DOCPARSER_DRAIN_TIMEOUT_S": 3}
    with FrontAndBackend(redis_url, front_env=env) as fb:
        front = fb.front.url
        held = InBackground(lambda: post_parse(front, page))
        wait_for("a held parse", lambda: metric(front, HELD) == 1)
        fb.front.signal(signal.SIGTERM)
        resp = held.result(30)  # answered before the process goes, not a reset connection
        assert resp.status_code == 503 and resp.json()["error"]["code"] == "no_capacity"
        assert "Retry-After" in resp.headers
        assert fb.front.wait_exit(30) in (0, -signal.SIGTERM), fb.front.log()
