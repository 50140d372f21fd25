"""SIGTERM on a real server process under load: /readyz turns 503 first, every request
that was already accepted gets its 200, later ones get 503 or connection refused (never
another 5xx, and a reset only for the one request that meets the listener's close), a
running job finishes and a queued one stays in Redis. Before SIGTERM, the preStop hook's
SIGUSR1: requests still served, no job claimed."""

from __future__ import annotations

import asyncio
import io
import re
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from docparser_runtime.jobs.redis_store import RedisJobStore
from engines_for_tests import png_bytes
from live_server import LiveServer
from PIL import Image

pytestmark = [pytest.mark.slow, pytest.mark.redis]

IN_FLIGHT = 4
GRACE_S = 1.5
PAGE_S = 0.5  # engine time per page (one page per batch)


def parse(url: str, data: bytes) -> str:
    """One request; the outcome as a short label."""
    try:
        reply = httpx.post(
            f"{url}/v1/document/parse",
            files={"file": ("p.png", data, "image/png")},
            timeout=120,
        )
    except httpx.ConnectError:
        return "refused"
    except httpx.HTTPError as exc:
        return f"broken:{type(exc).__name__}"
    if reply.status_code == 503:
        assert reply.json()["error"]["code"] == "draining"
    return str(reply.status_code)


def pdf(pages: int) -> bytes:
    images = [Image.new("RGB", (300, 200 + i), "white") for i in range(pages)]
    buf = io.BytesIO()
    images[0].save(buf, format="PDF", save_all=True, append_images=images[1:])
    return buf.getvalue()


def test_sigterm_drains_in_flight_work(redis_url):
    sizes = iter(range(100, 10_000))  # distinct pages: no result-cache shortcuts
    env = {
        "DOCPARSER_DRAIN_GRACE_S": GRACE_S,
        "DOCPARSER_DRAIN_TIMEOUT_S": 45,  # the exit is bounded by it: well inside the wait below
        "DOCPARSER_REDIS_URL": redis_url,
        "DOCPARSER_JOB_WORKERS": 1,
        "DOCPARSER_DEFAULT_TIER": 0,
        "DOCPARSER_MAX_BATCH_SIZE": 1,
        "DOCPARSER_CACHE_MAX_BYTES": 0,
    }
    server = LiveServer(env=env, gated_delay_s=PAGE_S).start()
    try:
        server.wait_ready()
        url = server.url
        # Long enough (8 pages behind the in-flight parses) to be running when SIGTERM comes:
        # the queued job must then still be waiting for its worker.
        running_job = httpx.post(f"{url}/v1/jobs", files={"file": ("d.pdf", pdf(8))}).json()["id"]
        queued_job = httpx.post(f"{url}/v1/jobs", files={"file": ("e.png", png_bytes())}).json()
        queued_job = queued_job["id"]

        pool = ThreadPoolExecutor(max_workers=IN_FLIGHT + 2)
        accepted = [pool.submit(parse, url, png_bytes(next(sizes))) for _ in range(IN_FLIGHT)]
        deadline = time.monotonic() + 30
        while httpx.get(f"{url}/readyz").json()["in_flight"] < IN_FLIGHT + 1:  # + the job
            assert time.monotonic() < deadline, "requests never got in flight"
            time.sleep(0.02)

        # Late load: keeps arriving through the grace window and after the port closes.
        late: list[str] = []
        stop = threading.Event()

        def late_load() -> None:
            for _ in range(200):
                if stop.is_set():
                    return
                late.append(parse(url, png_bytes(next(sizes))))
                time.sleep(0.05)

        loader = threading.Thread(target=late_load)
        states = {
            j: httpx.get(f"{url}/v1/jobs/{j}").json()["status"] for j in (running_job, queued_job)
        }
        assert states == {running_job: "running", queued_job: "queued"}, states
        t_signal = time.monotonic()
        server.signal(signal.SIGTERM)
        ready = httpx.get(f"{url}/readyz", timeout=5)
        t_readyz = time.monotonic() - t_signal
        assert ready.status_code == 503 and ready.json()["status"] == "draining"
        loader.start()

        outcomes = [f.result(timeout=120) for f in accepted]
        code = server.wait_exit(timeout=120)
        stop.set()
        loader.join(30)
        pool.shutdown()
    finally:
        server.stop()

    assert outcomes == ["200"] * IN_FLIGHT, (outcomes, late, server.log())
    # (Answering at all proves readyz flipped while still listening: after the grace
    # window the port is closed and the probe would be refused.)
    print(f"drain: readyz answered 503 {t_readyz * 1000:.0f} ms after SIGTERM")
    # The late load is sequential: 503s through the grace window, then refusals once the port
    # is closed. TCP leaves one moment open: a connection the kernel accepted just before the
    # listener closed is reset (uvicorn closes a connection whose request it has not parsed
    # yet, and the kernel resets its accept queue), so the one request that meets the close
    # may break. A reset anywhere else (inside the grace window, or after the first refusal)
    # fails here.
    shape = "".join({"503": "a", "refused": "r"}.get(outcome, "b") for outcome in late)
    assert re.fullmatch("a+b?r*", shape), late  # a+: the grace window answered clearly
    assert all(o in ("503", "refused") or o.startswith("broken:") for o in late), late
    assert code in (0, -signal.SIGTERM), server.log()

    async def job_states():
        store = RedisJobStore.from_url(redis_url, ttl_s=60)
        try:
            first, second = await store.get(running_job), await store.get(queued_job)
            return first, second, await store.queue_position(queued_job)
        finally:
            await store.close()

    first, second, position = asyncio.run(job_states())
    assert first.status == "succeeded" and first.pages_done == 8
    assert second.status == "queued" and position == 0  # left for another replica


def test_a_process_stuck_past_its_drain_deadline_logs_every_thread_stack():
    """Nothing should hold a draining process past its deadline; if something does (here
    an engine whose close never returns), the log says where before the kubelet's SIGKILL."""
    server = LiveServer(
        env={"DOCPARSER_DRAIN_GRACE_S": 0.2, "DOCPARSER_DRAIN_TIMEOUT_S": 1},
        gated_delay_s=0.01,
        engine_args=("--hang-on-close",),
    ).start()
    try:
        server.wait_ready()
        server.signal(signal.SIGTERM)
        deadline = time.monotonic() + 60  # the report is due 0.2 + 1 + 10 s after SIGTERM
        while "most recent call first" not in server.log() and time.monotonic() < deadline:
            assert server.proc.poll() is None, server.log()
            time.sleep(0.2)
        report = server.log()
        assert "most recent call first" in report, report
        assert "in close_forever" in report, report  # the stuck call is named
    finally:
        server.proc.kill()
        server.stop()


def test_a_leaving_pod_serves_requests_but_claims_no_job(redis_url):
    """The pod's preStop hook sends SIGUSR1 (through tini) before it sleeps while endpoints
    drop the pod: from then on the process still answers parses and /readyz, but a job queued
    then waits in Redis for another replica (one taken now would run on a pod going away, and
    at scale to zero it hid the backlog that wakes the DocParser). SIGTERM still drains."""
    env = {
        "DOCPARSER_REDIS_URL": redis_url,
        "DOCPARSER_JOB_WORKERS": 1,
        "DOCPARSER_DEFAULT_TIER": 0,
        "DOCPARSER_CACHE_MAX_BYTES": 0,
    }
    sizes = iter(range(300, 10_000))
    leaving = LiveServer(env=env, gated_delay_s=0.05).start()
    try:
        url = leaving.wait_ready().url

        def submit() -> str:
            data = png_bytes(next(sizes))
            return httpx.post(f"{url}/v1/jobs", files={"file": ("p.png", data)}).json()["id"]

        def status(job: str) -> str:
            return httpx.get(f"{url}/v1/jobs/{job}", timeout=5).json()["status"]

        before = submit()  # the control: this worker does claim and run jobs
        deadline = time.monotonic() + 60
        while status(before) != "succeeded":
            assert time.monotonic() < deadline, leaving.log()
            time.sleep(0.05)

        leaving.signal(signal.SIGUSR1)
        deadline = time.monotonic() + 30
        while "the pod is leaving" not in leaving.log():
            assert time.monotonic() < deadline and leaving.proc.poll() is None, leaving.log()
            time.sleep(0.05)
        queued = submit()
        seen = set()
        for _ in range(30):  # 3 s: a claim loop polls far more often than that
            seen.add(status(queued))
            time.sleep(0.1)
        assert seen == {"queued"}, (seen, leaving.log())
        assert parse(url, png_bytes(next(sizes))) == "200"  # late clients are still served
        assert httpx.get(f"{url}/readyz", timeout=5).status_code == 200
    finally:
        leaving.signal(signal.SIGTERM)
        code = leaving.wait_exit(timeout=60)
        leaving.stop()
    assert code in (0, -signal.SIGTERM), leaving.log()

    with LiveServer(env=env, gated_delay_s=0.05) as other:  # another replica takes it
        deadline = time.monotonic() + 60
        while (body := httpx.get(f"{other.url}/v1/jobs/{queued}", timeout=5).json())[
            "status"
        ] != "succeeded":
            assert time.monotonic() < deadline, (body, other.log())
            time.sleep(0.05)
