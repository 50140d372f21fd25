"""Local end to end: the operator's rendered pod spec drives a real runtime process.

The contract between operator and runtime is a set of names: CLI arguments, ``DOCPARSER_*``
environment variables, the container port, probe paths and the metric the HPA scales
on. Unit tests on each side cannot see a rename on the other. Here we render a DocParser
with ``docparser-operator render``, start the runtime container's exact command and env
as a real process on 127.0.0.1, then follow the rendered probes, parse a document and
read the HPA's metric from ``/metrics``.
"""

from __future__ import annotations

import io
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml
from PIL import Image, ImageDraw, ImageFont

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _render(manifest: Path) -> list[dict]:
    out = subprocess.run(
        [str(BIN / "docparser-operator"), "render", "-f", str(manifest)],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return [doc for doc in yaml.safe_load_all(out.stdout) if doc]


def _page_png() -> bytes:
    font = ImageFont.truetype("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf", 36)
    img = Image.new("RGB", (900, 300), "white")
    draw = ImageDraw.Draw(img)
    draw.text((40, 60), "Invoice number 4711", fill="black", font=font)
    draw.text((40, 160), "Total due 1280 EUR", fill="black", font=font)
    buf = io.BytesIO()
    img.save(buf, "PNG")
    return buf.getvalue()


def _container(children: list[dict], track: str) -> dict:
    deployments = [
        c
        for c in children
        if c["kind"] == "Deployment" and c["metadata"]["labels"]["docparser.io/track"] == track
    ]
    assert len(deployments) == 1, [c["metadata"]["name"] for c in children]
    containers = deployments[0]["spec"]["template"]["spec"]["containers"]
    return next(c for c in containers if c["name"] == "runtime")


def _wait(url: str, proc: subprocess.Popen, timeout: float) -> httpx.Response:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"runtime exited with {proc.returncode}"
        try:
            last = httpx.get(url, timeout=2)
            if last.status_code == 200:
                return last
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"{url} not 200 within {timeout}s (last: {last})")


@pytest.fixture
def rendered_runtime(tmp_path):
    """Start the stable track's runtime container as rendered, on a free local port."""
    children = _render(REPO / "examples" / "rapidocr-minimal.yaml")
    container = _container(children, "stable")
    # No command: the image's ENTRYPOINT (tini -- docparser-runtime) runs the args.
    assert "command" not in container, container["command"]
    argv = ["docparser-runtime", *container["args"]]
    port = _free_port()
    # Bind to loopback on a free port; everything else is exactly what the pod runs.
    argv[argv.index("--host") + 1] = "127.0.0.1"
    argv[argv.index("--port") + 1] = str(port)
    env = {
        **os.environ,
        **{e["name"]: e["value"] for e in container.get("env", []) if "value" in e},
    }
    env["HOME"] = str(tmp_path)
    env["HF_HOME"] = str(tmp_path / "hf")
    log = (tmp_path / "runtime.log").open("w")
    proc = subprocess.Popen(
        [str(BIN / argv[0]), *argv[1:]], env=env, stdout=log, stderr=subprocess.STDOUT
    )
    try:
        yield children, container, f"http://127.0.0.1:{port}", proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        log.close()


def test_rendered_pod_spec_serves_and_exposes_the_hpa_metric(rendered_runtime):
    children, container, base, proc = rendered_runtime

    # Probes: exactly the rendered paths, on the rendered container port.
    assert container["ports"][0]["containerPort"] == 8000
    startup = container["startupProbe"]["httpGet"]["path"]
    liveness = container["livenessProbe"]["httpGet"]["path"]
    readiness = container["readinessProbe"]["httpGet"]["path"]
    _wait(base + liveness, proc, 60)
    _wait(base + startup, proc, 120)
    assert httpx.get(base + readiness, timeout=5).status_code == 200

    # The service answers a real parse with the rendered settings.
    reply = httpx.post(
        base + "/v1/document/parse",
        files={"file": ("page.png", _page_png(), "image/png")},
        timeout=120,
    )
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert "4711" in body["content"]
    assert body["model"]["engine"] == "rapidocr"
    env = {e["name"]: e.get("value") for e in container.get("env", [])}
    if "DOCPARSER_MODEL_VERSION" in env:
        assert body["model"]["version"] == env["DOCPARSER_MODEL_VERSION"]

    # Every Pods metric the rendered HPA scales on is exported by the runtime.
    metrics_text = httpx.get(base + "/metrics", timeout=5).text
    hpas = [c for c in children if c["kind"] == "HorizontalPodAutoscaler"]
    pod_metrics = [
        m["pods"]["metric"]["name"]
        for hpa in hpas
        for m in hpa["spec"].get("metrics", [])
        if m["type"] == "Pods"
    ]
    for name in pod_metrics:
        assert f"\n{name} " in metrics_text or f"\n{name}{{" in metrics_text, name

    # SIGTERM drains: readiness flips to 503 at once (the pod leaves the Service while it
    # still answers), then the process ends within the rendered grace period. uvicorn
    # re-raises the signal after a clean shutdown, so -SIGTERM is a normal exit here.
    grace = next(c for c in children if c["kind"] == "Deployment")["spec"]["template"]["spec"][
        "terminationGracePeriodSeconds"
    ]
    proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 10
    status = 200
    while time.monotonic() < deadline and status == 200:
        try:
            status = httpx.get(base + readiness, timeout=2).status_code
        except httpx.HTTPError:
            status = -1
        time.sleep(0.05)
    assert status == 503, "readiness did not turn 503 while draining"
    assert proc.wait(grace) in (0, -signal.SIGTERM)
