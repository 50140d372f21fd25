"""What the batch scenario (test_cluster_batch.py) runs beside the cluster: a real S3 gateway and
a real Redis on the host's node bridge address, spot nodes, a paced interactive client, and
the checks of what `batch submit` wrote.

WHY on the bridge address: every namespaced node's default gateway is the host's address on
the node bridge (10.250.0.1), and node 0's pods reach it through the host, so a process there
is reachable from every pod and from this host, as the scale-to-zero scenario's Redis is. A
real `weed` (SeaweedFS's S3 gateway, hack/seaweedfs) and a real `redis-server` with its
append-only file: the scenario kills Redis mid-batch and needs what a restarted one keeps.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import httpx
from cluster_load import Background
from cluster_support import FONT, REPO, Target
from PIL import Image, ImageDraw, ImageFont

CLOUD_PYTHON = REPO / ".venv" / "cloud" / "bin" / "python"  # the runtime with s3fs (make seaweedfs)
SPOT = "docparser.test/spot"  # the spot nodes' label and taint key
SPOT_TOLERATION = {"key": SPOT, "operator": "Equal", "value": "true", "effect": "NoSchedule"}


def code(i: int) -> str:
    """``i`` (0..511) as three digits 2-9: the page's own number, written on it. No 0 or 1: the
    CPU engine read a leading 0 as "o" ("Document oo42") and a leading 1 as "l" ("l12")."""
    digits = []
    for _ in range(3):
        i, digit = divmod(i, 8)
        digits.append(str(digit + 2))
    return "".join(reversed(digits))


def small_page(text: str) -> bytes:
    """A 320x320 PNG with one line of text: the CPU engine's detector scales a page's short side
    up to 736 px, so a square page costs it about a third of `page_png`'s 900x220 line (212
    against 568 ms here), and 200 of them fit the scenario's few minutes on two cores."""
    img = Image.new("RGB", (320, 320), "white")
    ImageDraw.Draw(img).text((10, 140), text, fill="black", font=ImageFont.truetype(FONT, 32))
    buf = io.BytesIO()
    img.save(buf, "PNG")
    return buf.getvalue()


def free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class AofRedis:
    """One `redis-server` on ``host`` with the append-only file on (fsync every second), in a
    temp dir; ``crash`` SIGKILLs it (no shutdown save) and ``start`` brings it back on the same
    port and dir, from its AOF."""

    def __init__(self, host: str) -> None:
        self.host = host
        self.port = free_port(host)
        self.url = f"redis://{host}:{self.port}/0"
        self._dir = tempfile.TemporaryDirectory(prefix="docparser-e2e-redis-")
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 15) -> AofRedis:
        binary = shutil.which("redis-server") or "/usr/bin/redis-server"
        log = Path(self._dir.name) / "redis.log"
        self.proc = subprocess.Popen(
            [
                *(binary, "--bind", self.host, "--port", str(self.port)),
                *("--save", "", "--appendonly", "yes", "--appendfsync", "everysec"),
                *("--dir", self._dir.name, "--protected-mode", "no", "--logfile", str(log)),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"redis-server exited: {log.read_text(errors='replace')}")
            if self.ping():
                return self
            time.sleep(0.05)
        raise AssertionError(f"redis-server on {self.host}:{self.port} did not answer PING")

    def ping(self) -> bool:
        try:
            with socket.create_connection((self.host, self.port), timeout=0.5) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def crash(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._dir.cleanup()


@contextmanager
def spot_nodes(target: Target, nodes: list[str]) -> Iterator[list[str]]:
    """``nodes`` labelled and tainted spot (NoSchedule: only pods that tolerate it land there);
    both removed afterwards, whatever happened, so the next scenario finds plain nodes."""
    try:
        for node in nodes:
            target.kubectl("label", "node", node, f"{SPOT}=true", "--overwrite")
            target.kubectl("taint", "node", node, f"{SPOT}=true:NoSchedule", "--overwrite")
        yield nodes
    finally:
        for node in nodes:
            target.kubectl("taint", "node", node, f"{SPOT}:NoSchedule-", check=False)
            target.kubectl("label", "node", node, f"{SPOT}-", check=False)


@dataclass
class Interactive(Background):
    """One paced client parsing through the DocParser's Service while the batch runs, bounded
    in count and time. Each request is a new page (its number written on it, so the result
    cache never answers it) on a new connection; every answer is recorded, and one is right
    only when it is a 200 whose text has the page's number."""

    url: str
    pace_s: float = 1.5
    max_requests: int = 300
    max_seconds: float = 330
    samples: list[tuple[float, int, float, str]] = field(default_factory=list)
    join_s: ClassVar[float] = 90.0

    def _run(self) -> None:
        deadline = time.monotonic() + self.max_seconds
        limits = httpx.Limits(max_keepalive_connections=0)
        with httpx.Client(timeout=60, limits=limits) as http:
            for i in range(self.max_requests):
                if self._stop.is_set() or time.monotonic() > deadline:
                    return
                number = code(i)
                page = small_page(f"Question {number}")
                start = time.monotonic()
                try:
                    reply = http.post(
                        f"{self.url}/v1/document/parse",
                        files={"file": ("q.png", page, "image/png")},
                        data={"tier": "0"},
                    )
                    ok = reply.status_code == 200 and number in reply.json().get("content", "")
                    said = "" if ok else f"{reply.status_code}: {reply.text[:160]}"
                    status = reply.status_code if ok or reply.status_code != 200 else -1
                except httpx.HTTPError as err:
                    status, said = 0, f"{type(err).__name__}: {err}"
                self.samples.append((start, status, time.monotonic() - start, said))
                self._stop.wait(max(0.0, self.pace_s - (time.monotonic() - start)))

    @property
    def failed(self) -> list[tuple[float, int, float, str]]:
        return [s for s in self.samples if s[1] != 200]

    def p(self, quantile: float) -> float:
        latencies = sorted(s[2] for s in self.samples)
        return (
            latencies[min(len(latencies) - 1, int(quantile * len(latencies)))] if latencies else 0
        )


def submit_process(
    src: str, dst: str, url: str, env: dict[str, str], log: Path
) -> subprocess.Popen:
    """`docparser-runtime batch submit SRC --output DST` as a user runs it, from the venv with
    s3fs (the test venv cannot hold botocore), its stderr (progress, retries) into ``log``."""
    args = [str(CLOUD_PYTHON), "-m", "docparser_runtime", "batch", "submit", src, "--output", dst]
    args += ["--url", url, "--tier", "0", "--poll", "1"]
    with log.open("wb") as err:
        return subprocess.Popen(
            args, env={**os.environ, **env}, stdout=subprocess.DEVNULL, stderr=err
        )


def latest_batch(url: str) -> dict[str, Any] | None:
    """The newest batch through the Service (no API keys: one caller), or None while the
    server does not answer (Redis restarting: 503)."""
    try:
        reply = httpx.get(f"{url}/v1/batches", params={"limit": 1}, timeout=10)
        data = reply.json().get("data") if reply.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None
    return data[0] if data else None


def lines_running(url: str) -> int:
    """Batch lines held by a worker now, every pod's (``docparser_batch_lines_running`` from
    Redis, on the pod the Service reaches; refreshed every 2 s); 0 when it does not answer."""
    try:
        text = httpx.get(f"{url}/metrics", timeout=10).text
    except httpx.HTTPError:
        return 0
    for line in text.splitlines():
        if line.startswith("docparser_batch_lines_running "):
            return int(float(line.split()[1]))
    return 0


def completed(batch: dict[str, Any] | None) -> int:
    return int(((batch or {}).get("request_counts") or {}).get("completed") or 0)


def pool_pods(target: Target, namespace: str, name: str) -> list[dict[str, Any]]:
    """The pool's pods that are not being deleted."""
    pods = target.items("pods", namespace, "app.kubernetes.io/name=docparser-batch")
    return [
        p
        for p in pods
        if p["metadata"]["labels"].get("app.kubernetes.io/instance") == name
        and not p["metadata"].get("deletionTimestamp")
    ]


def ready_on(pod: dict[str, Any]) -> str | None:
    """The node of a Ready pod, None while it is not Ready."""
    conds = (pod.get("status") or {}).get("conditions") or []
    if any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds):
        return pod["spec"].get("nodeName")
    return None


def written(s3: Any, bucket: str, prefix: str, docs: list[str]) -> list[str]:
    """What is wrong with `batch submit`'s results under ``prefix``: each document exactly one
    Markdown and one JSON object (its own: the number on the page is in its text), a manifest
    with one completed row per document in ``docs``' (sorted) order, nothing else. Empty when
    all is right."""
    problems: list[str] = []
    keys = s3.list(bucket, prefix)
    want = {f"{prefix}{d}{ext}" for d in docs for ext in (".md", ".json")}
    want |= {f"{prefix}manifest.jsonl", f"{prefix}.docparser-batch.json"}
    if sorted(keys) != sorted(want):
        extra, missing = sorted(set(keys) - want), sorted(want - set(keys))
        problems.append(f"objects: {len(keys)}, extra {extra[:5]}, missing {missing[:5]}")
    rows = [json.loads(x) for x in s3.get(bucket, f"{prefix}manifest.jsonl").splitlines()]
    if [r["document"] for r in rows] != docs:
        problems.append(f"manifest: {len(rows)} rows for {len(docs)} documents")
    bad = [r for r in rows if r["status"] != "completed" or r["error"] or r["pages"] != 1]
    if bad:
        problems.append(f"{len(bad)} rows not completed with 1 page: {bad[:3]}")
    for doc in docs:
        number = doc.rsplit("-", 1)[-1].removesuffix(".png")
        markdown = s3.get(bucket, f"{prefix}{doc}.md").decode()
        reply = json.loads(s3.get(bucket, f"{prefix}{doc}.json"))
        if number not in markdown or reply.get("content") != markdown:
            problems.append(f"{doc}: {markdown[:80]!r} is not its own page's text")
    return problems
