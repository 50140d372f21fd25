"""``docparser-runtime serve`` as a real process on 127.0.0.1 with the RapidOCR engine."""

from __future__ import annotations

import base64
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from documents import font, png_bytes, single_column
from PIL import Image, ImageDraw

pytestmark = pytest.mark.slow

SCRIPT = Path(sys.executable).with_name("docparser-runtime")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[tuple[str, subprocess.Popen]]:
    port = free_port()
    log_path = tmp_path_factory.mktemp("server") / "server.log"
    env = {
        **os.environ,
        "DOCPARSER_DRAIN_GRACE_S": "0.2",
        # Also the sync deadline (settings.sync_deadline_s): at 10 s a page parsed on a machine
        # at load 10 came back 504. An idle server's SIGTERM does not wait for it.
        "DOCPARSER_DRAIN_TIMEOUT_S": "60",
        "DOCPARSER_MAX_WAIT_MS": "5",
    }
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [str(SCRIPT), "serve", "--engine", "rapidocr", "--host", "127.0.0.1",
             "--port", str(port)],
            stdout=log, stderr=subprocess.STDOUT, env=env,
        )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, log_path.read_text()
            try:
                resp = httpx.get(base + "/readyz", timeout=2)
                if resp.status_code == 200:
                    break
                assert resp.status_code == 503 and resp.json()["status"] == "starting"
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "server never became ready"
            time.sleep(0.1)
        proc.log_path = log_path  # type: ignore[attr-defined]
        yield base, proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def test_parses_a_rendered_page_over_real_http(server):
    base, _ = server
    doc = single_column()
    data = png_bytes(doc.image)
    with httpx.Client(base_url=base, timeout=120) as client:
        resp = client.post("/v1/document/parse", files={"file": ("page.png", data, "image/png")})
        assert resp.status_code == 200, resp.text
        body = resp.json()
        assert body["model"]["engine"] == "rapidocr"
        page = body["pages"][0]
        assert (page["width"], page["height"]) == doc.image.size
        for line in doc.lines[:3]:
            # OCR may drop or swap a character; require most words of each line.
            words = [w for w in line.split() if len(w) > 3]
            found = sum(w.lower() in body["content"].lower() for w in words)
            assert found >= len(words) // 2, (line, body["content"])
        assert page["blocks"] and all(len(b["bbox"]) == 4 for b in page["blocks"])

        small = Image.new("RGB", (520, 90), "white")
        ImageDraw.Draw(small).text((20, 20), "Invoice 2026", font=font(40), fill="black")
        as_json = client.post(
            "/v1/document/parse",
            json={"image": base64.b64encode(png_bytes(small)).decode(), "mode": "text"},
        )
        assert as_json.status_code == 200
        assert "Invoice" in as_json.json()["content"]
        bad = client.post("/v1/document/parse", files={"file": ("x.png", b"nope", "image/png")})
        assert bad.status_code == 415
        assert client.get("/readyz").status_code == 200
        metrics = client.get("/metrics").text
    assert 'docparser_engine_info{engine="rapidocr"' in metrics
    version = next(  # the rapidocr wheel's version, on the request series too
        line.split('version="')[1].split('"')[0]
        for line in metrics.splitlines()
        if line.startswith("docparser_engine_info{")
    )
    labels = (
        f'method="POST",model="rapidocr",route="/v1/document/parse",status="200",'
        f'version="{version}"'
    )
    assert f"docparser_requests_total{{{labels}}} 2.0" in metrics


def test_sigterm_stops_the_process_cleanly(server):
    base, proc = server
    assert httpx.get(base + "/livez", timeout=5).status_code == 200
    proc.send_signal(signal.SIGTERM)
    # uvicorn re-raises the captured signal after a clean shutdown, so -SIGTERM is normal.
    assert proc.wait(30) in (0, -signal.SIGTERM)
    log = proc.log_path.read_text()
    assert "Application shutdown complete" in log, log
    assert "Traceback" not in log, log
