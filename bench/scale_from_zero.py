"""Time from the first job to the first page done, from zero GPU pods (issue 26).

What a DocParser at ``replicas.min: 0`` costs the first job of a batch, with the CPU engine
on this machine, in real processes: a Redis, the CPU front (``DOCPARSER_ROLE=front``) and,
started only after the job was accepted, one GPU-role server (``--engine rapidocr``, the
stand-in for a GPU pod). Per round:

1. ``submit``: ``POST /v1/jobs`` to the front until its 202 (no backend exists);
2. ``start``: the backend process launched (what the operator's scale-up leads to) until its
   ``/readyz`` is 200 (Python imports, engine load and warm-up);
3. ``first page``: from ready until the job reports its first page done (the pod adopts the
   front's queue, claims the job, parses it), polled through the front every 50 ms;
4. ``total``: the first job's submit to its first page.

The operator's part (noticing the backlog, scaling the Deployment, scheduling, the image
pull and the container start) is not in it: those are cluster figures (docs/benchmarks.md
adds them as estimates, with the GPU engine's weights load and warm-up). Nothing here
asserts; it prints a table (``--markdown`` for docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "runtime"))  # real processes, as the tests run them

import httpx  # noqa: E402
from documents import png_bytes, single_column  # noqa: E402
from live_server import LiveServer  # noqa: E402
from redis_server import RedisServer, free_port  # noqa: E402

POLL_S = 0.05


def wait(what: str, check, timeout: float) -> float:
    """Seconds until ``check()``; fails after ``timeout``."""
    start = time.monotonic()
    while not check():
        if time.monotonic() - start > timeout:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(POLL_S)
    return time.monotonic()


def ready(url: str) -> bool:
    try:
        return httpx.get(f"{url}/readyz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def one_round(redis_url: str, document: bytes, timeout: float) -> dict[str, float]:
    port = free_port()
    front = LiveServer(
        env={
            "DOCPARSER_ROLE": "front",
            "DOCPARSER_REDIS_URL": redis_url,
            "DOCPARSER_FRONT_BACKEND_URL": f"http://127.0.0.1:{port}",
        }
    )
    backend = LiveServer(
        env={"DOCPARSER_REDIS_URL": redis_url, "DOCPARSER_REVISION": "r1"}, port=port
    )
    try:
        front.start().wait_ready(timeout)
        t0 = time.monotonic()
        resp = httpx.post(
            f"{front.url}/v1/jobs", files={"file": ("p.png", document, "image/png")}, timeout=30
        )
        if resp.status_code != 202:
            raise SystemExit(f"the front answered {resp.status_code}: {resp.text}")
        job = resp.json()["id"]
        accepted = time.monotonic()
        backend.start()
        launched = time.monotonic()
        up = wait("the backend's readyz", lambda: ready(backend.url), timeout)

        def first_page() -> bool:
            body = httpx.get(f"{front.url}/v1/jobs/{job}", timeout=5).json()
            if body["status"] == "failed":
                raise SystemExit(f"the job failed: {body}")
            return body["status"] == "succeeded" or body["progress"]["pages_done"] >= 1

        done = wait("the first page", first_page, timeout)
        return {
            "submit": accepted - t0,
            "start": up - launched,
            "first page": done - up,
            "total": done - t0,
        }
    finally:
        backend.stop()
        front.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=180.0, help="per wait, seconds")
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    document = png_bytes(single_column().image)
    rows = []
    with RedisServer() as redis:
        for _ in range(args.rounds):
            redis.flushall()
            rows.append(one_round(redis.url, document, args.timeout))
    columns = list(rows[0])
    if args.markdown:
        print("| round | " + " | ".join(f"{c} (s)" for c in columns) + " |")
        print("|---" * (len(columns) + 1) + "|")
        for i, row in enumerate(rows, 1):
            print(f"| {i} | " + " | ".join(f"{row[c]:.2f}" for c in columns) + " |")
        print("| median | " + " | ".join(
            f"{statistics.median(r[c] for r in rows):.2f}" for c in columns) + " |")  # fmt: skip
        return
    print(f"{'round':>6} " + " ".join(f"{c + ' s':>12}" for c in columns))
    for i, row in enumerate(rows, 1):
        print(f"{i:>6} " + " ".join(f"{row[c]:>12.2f}" for c in columns))
    medians = [statistics.median(r[c] for r in rows) for c in columns]
    print(f"{'median':>6} " + " ".join(f"{m:>12.2f}" for m in medians))


if __name__ == "__main__":
    main()
