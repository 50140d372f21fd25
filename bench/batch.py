"""Batch lines beside interactive traffic on the same pods (issue 35): docs/benchmarks.md.

Why: a million-page backfill must not slow the interactive API, and a pod that also serves it
must run batch lines about as fast as a batch-only pod when nobody else is there. Real
``serve`` pods of the tiny DeepSeek-OCR-2 and a real ``redis-server``: ``shared`` takes a paced
interactive client alone, then beside a batch backlog; ``batch-only`` never does. Targets, ratios
of one run: interactive p99 beside the backlog at most +10 % (``engine p99``: in the engine
thread's CPU time), ``shared`` batch pages/min with no traffic at least 90 % of ``batch-only``.
``--batch-yield slots,rows``: one shared pod per policy, in alternating order.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import io
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "runtime"))  # live_server, redis_server, tiny_deepseek

PAGE_SIZE = (640, 480)
COLUMNS = ("phase", "server", "requests", "p50 ms", "p99 ms", "queue p99 ms", "engine p99 ms",
           "out tok", "batch pages/min", "pages/device-h", "backlog left")  # fmt: skip
TERMINAL = {"completed", "failed", "expired", "cancelled"}
BATCH_ONLY = ("no traffic", "batch-only")


def redis_binary() -> str | None:
    """``redis-server`` on PATH or where the Debian package puts it; None if absent."""
    found = shutil.which("redis-server")
    return found or ("/usr/bin/redis-server" if Path("/usr/bin/redis-server").exists() else None)


def page_png(seed: int) -> bytes:
    """A page of drawn lines that differs per seed (distinct documents, distinct outputs)."""
    from PIL import Image, ImageDraw

    image = Image.new("RGB", PAGE_SIZE, "white")
    draw = ImageDraw.Draw(image)
    for line in range(10):
        x = 20 + (seed * 7 + line * 13) % 90
        draw.rectangle((x, 30 + line * 40, 300 + (seed * 31 + line * 17) % 300, 44 + line * 40),
                       "black")  # fmt: skip
    out = io.BytesIO()
    image.save(out, "PNG")
    return out.getvalue()


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


@dataclass
class Phase:
    name: str
    server: str
    latencies: list[float] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    queued: list[float] = field(default_factory=list)  # the pod's queue time of each page
    engine: list[float] = field(default_factory=list)  # engine thread CPU s over each request
    pages: int = 0  # batch lines done during the phase
    seconds: float = 0.0
    left: int | None = None  # batch lines not yet done at the phase's end
    device_s: float = 0.0  # the device's time over a batch window (CPU: the engine thread's)

    def rate(self) -> float | None:
        return 60 * self.pages / self.seconds if self.seconds and self.name != "alone" else None

    def per_device_h(self) -> float | None:
        return 3600 * self.pages / self.device_s if self.device_s else None


def merge(phases: list[Phase], name: str, server: str) -> Phase:
    """The rounds of one phase pooled (latencies together, pages over total seconds)."""
    same = [p for p in phases if p.name == name and p.server == server]
    out = Phase(name, server)
    for p in same:
        out.latencies, out.tokens = out.latencies + p.latencies, out.tokens + p.tokens
        out.queued, out.engine = out.queued + p.queued, out.engine + p.engine
        out.pages, out.seconds, out.device_s = (out.pages + p.pages, out.seconds + p.seconds,
                                                out.device_s + p.device_s)  # fmt: skip
    out.left = min((p.left for p in same if p.left is not None), default=None)
    return out


def row(p: Phase) -> list[str]:
    rate = p.rate()
    lat = [f"{1000 * pct(p.latencies, q):.0f}" for q in (0.5, 0.99)] if p.latencies else ["-"] * 2
    queue = f"{1000 * pct(p.queued, 0.99):.0f}" if p.queued else "-"
    engine = f"{1000 * pct(p.engine, 0.99):.0f}" if p.engine else "-"
    return [p.name, p.server, str(len(p.latencies) or "-"), *lat, queue, engine,
            f"{statistics.mean(p.tokens):.0f}" if p.tokens else "-",
            f"{rate:.1f}" if rate is not None else "-",
            f"{d:.0f}" if (d := p.per_device_h()) is not None else "-",
            "-" if p.left is None else str(p.left)]  # fmt: skip


def table(rows: list[list[str]], markdown: bool) -> str:
    if markdown:
        lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
        return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])
    widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(COLUMNS)]
    lines = ["  ".join(c.rjust(w) for c, w in zip(COLUMNS, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(v.rjust(w) for v, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(lines)


def verdict(phases: list[Phase], server: str = "shared") -> list[str]:
    """The two targets, as ratios of this run's pooled phases of one shared pod."""
    alone, backlog = merge(phases, "alone", server), merge(phases, "backlog", server)
    shared, only = merge(phases, "no traffic", server), merge(phases, "no traffic", "batch-only")
    p99a, p99b = pct(alone.latencies, 0.99), pct(backlog.latencies, 0.99)
    p50a, p50b = pct(alone.latencies, 0.5), pct(backlog.latencies, 0.5)
    ratio = (shared.rate() or 0.0) / max(only.rate() or 0.0, 1e-9)
    e99a, e99b = pct(alone.engine, 0.99), pct(backlog.engine, 0.99)
    device = (shared.per_device_h() or 0.0) / max(only.per_device_h() or 0.0, 1e-9)
    return [
        f"interactive p50 {1000 * p50a:.0f} -> {1000 * p50b:.0f} ms "
        f"({100 * (p50b / p50a - 1):+.1f} %), p99 {1000 * p99a:.0f} -> {1000 * p99b:.0f} ms "
        f"({100 * (p99b / p99a - 1):+.1f} %; target <= +10 %: "
        f"{'met' if p99b <= 1.10 * p99a else 'MISSED'})",
        f"interactive p99 in engine-thread CPU time (device time, apart from the machine's "
        f"load): {1000 * e99a:.0f} -> {1000 * e99b:.0f} ms ({100 * (e99b / e99a - 1):+.1f} %; "
        f"target <= +10 %: {'met' if e99b <= 1.10 * e99a else 'MISSED'})",
        f"batch pages/min with no interactive traffic: shared {shared.rate() or 0:.1f}, "
        f"batch-only {only.rate() or 0:.1f} ({100 * ratio:.0f} %; target >= 90 %: "
        f"{'met' if ratio >= 0.9 else 'MISSED'}); per device-hour (engine-thread CPU time) "
        f"{100 * device:.0f} %",
    ]


class Pod:
    """One server process and the client calls the bench makes to it."""

    def __init__(self, name: str, server: Any, args: argparse.Namespace) -> None:
        self.name, self.server, self.args = name, server, args
        self.http = httpx.Client(base_url=server.url, timeout=args.timeout_s)
        self.engine_tid = ""

    def parse(self, data: bytes) -> tuple[float, int, float, float]:
        fields = {"tier": "0", "max_new_tokens": str(self.args.tokens), "cache": "false"}
        cpu, start = self.engine_cpu(), time.perf_counter()
        reply = self.http.post("/v1/document/parse", files={"file": ("p.png", data)}, data=fields)
        took = time.perf_counter() - start
        if reply.status_code != 200:
            raise RuntimeError(f"{self.name}: parse answered {reply.status_code}: {reply.text}")
        body = reply.json()
        tokens, queued = int(body["usage"]["output_tokens"]), body["timings_ms"]["queue"] / 1000
        return took, tokens, queued, self.engine_cpu() - cpu

    def _threads(self) -> dict[str, int]:
        """Nanoseconds on a CPU of each thread of the pod (Linux schedstat)."""
        out = {}
        for tid in os.listdir(f"/proc/{self.server.proc.pid}/task"):
            with contextlib.suppress(OSError, ValueError):
                stat = Path(f"/proc/{self.server.proc.pid}/task/{tid}/schedstat").read_text()
                out[tid] = int(stat.split()[0])
        return out

    def find_engine_thread(self, data: bytes) -> None:
        """The thread that ran a parse's model steps: the one busiest over a first parse."""
        before = self._threads()
        self.parse(data)
        after = self._threads()
        self.engine_tid = max(after, key=lambda t: after[t] - before.get(t, 0))

    def engine_cpu(self) -> float:
        """Seconds the engine thread ran on a CPU: device time, whatever else the host runs."""
        return self._threads().get(self.engine_tid, 0) / 1e9 if self.engine_tid else 0.0

    def submit(self, pages: list[bytes], lines: int) -> str:
        body = {"tier": 0, "max_new_tokens": self.args.batch_tokens, "cache": False}
        images = [base64.b64encode(page).decode() for page in pages]
        text = "".join(
            json.dumps({"custom_id": f"l{i}", "method": "POST", "url": "/v1/document/parse",
                        "body": {**body, "image": images[i % len(images)]}}) + "\n"
            for i in range(lines)
        )  # fmt: skip
        up = self.http.post("/v1/files", files={"file": ("in.jsonl", text.encode())},
                            data={"purpose": "batch"})  # fmt: skip
        up.raise_for_status()
        created = self.http.post("/v1/batches", json={
            "input_file_id": up.json()["id"], "endpoint": "/v1/document/parse",
            "completion_window": "24h"})  # fmt: skip
        created.raise_for_status()
        return str(created.json()["id"])

    def counts(self, batch_id: str) -> tuple[str, int, int]:
        """(status, lines done or failed, lines in the batch)."""
        reply = self.http.get(f"/v1/batches/{batch_id}")
        reply.raise_for_status()
        body = reply.json()
        c = body.get("request_counts") or {}
        done = int(c.get("completed", 0)) + int(c.get("failed", 0))
        return body["status"], done, int(c.get("total", 0))

    def wait(self, batch_id: str, until: Any, what: str) -> tuple[str, int, int]:
        deadline = time.monotonic() + self.args.timeout_s
        while time.monotonic() < deadline:
            state = self.counts(batch_id)
            if until(state):
                return state
            time.sleep(0.1)
        raise RuntimeError(f"{self.name}: batch {batch_id} not {what} in {self.args.timeout_s}s")

    def cancel(self, batch_id: str) -> None:
        self.http.post(f"/v1/batches/{batch_id}/cancel").raise_for_status()
        self.wait(batch_id, lambda s: s[0] in TERMINAL, "cancelled")


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.pages = [page_png(i) for i in range(args.distinct_pages)]
        self.phases: list[Phase] = []

    def interactive(self, pod: Pod, name: str, seed: int) -> Phase:
        phase = Phase(name, pod.name)
        for i in range(self.args.requests):
            took, tokens, queued, engine = pod.parse(self.pages[(seed + i) % len(self.pages)])
            phase.engine.append(engine)
            phase.latencies.append(took)
            phase.queued.append(queued)
            phase.tokens.append(tokens)
            time.sleep(self.args.gap_s)
        return phase

    def window(self, pod: Pod, batch_id: str, name: str) -> Phase:
        """Batch lines done over ``--window-s`` once ``--slots`` more ended (steady state)."""
        _, base, _ = pod.counts(batch_id)
        pod.wait(batch_id, lambda s: s[1] >= base + self.args.slots, "refilled")
        _, done0, total = pod.counts(batch_id)
        start, cpu = time.perf_counter(), pod.engine_cpu()
        time.sleep(self.args.window_s)
        _, done1, _ = pod.counts(batch_id)
        seconds, cpu_s = time.perf_counter() - start, pod.engine_cpu() - cpu  # a GPU's: wall
        return Phase(name, pod.name, pages=done1 - done0, seconds=seconds, left=total - done1,
                     device_s=cpu_s if self.args.device == "cpu" else seconds)  # fmt: skip

    def started(self, pod: Pod) -> str:
        """A batch that has begun running lines (its slots are busy)."""
        batch_id = pod.submit(self.pages, self.args.batch_lines)
        pod.wait(batch_id, lambda s: s[0] == "in_progress" and s[1] >= 1, "running")
        return batch_id

    def round(self, pods: list[Pod], only: Pod, r: int) -> None:
        for shared in pods if r % 2 == 0 else pods[::-1]:  # each policy first every other round
            self.shared_round(shared, r * self.args.requests)
        batch_id = self.started(only)
        self.phases.append(self.window(only, batch_id, "no traffic"))
        only.cancel(batch_id)
        print(f"  round {r + 1}/{self.args.rounds} done", file=sys.stderr, flush=True)

    def shared_round(self, shared: Pod, seed: int) -> None:
        self.phases.append(self.interactive(shared, "alone", seed))
        batch_id = self.started(shared)
        _, done0, _ = shared.counts(batch_id)
        t0 = time.perf_counter()
        phase = self.interactive(shared, "backlog", seed)
        _, done1, total = shared.counts(batch_id)
        phase.pages, phase.left = done1 - done0, total - done1
        phase.seconds = time.perf_counter() - t0
        self.phases.append(phase)
        self.phases.append(self.window(shared, batch_id, "no traffic"))
        shared.cancel(batch_id)

    def report(self) -> None:
        a = self.args
        print(f"tiny DeepSeek-OCR-2 (random weights, {a.device}, {a.threads} torch thread(s)), "
              f"continuous batching, {a.slots} slots, {a.batch_workers} batch lines per pod; "
              f"interactive: {a.requests} pages x {a.rounds} rounds, {a.tokens} new tokens, "
              f"{a.gap_s} s apart; batch lines: {a.batch_tokens} new tokens; "
              f"windows {a.window_s} s; DOCPARSER_BATCH_YIELD {a.batch_yield}")  # fmt: skip
        names = shared_names(a.batch_yield)
        keys = [(n, s) for s in names for n in ("alone", "backlog", "no traffic")] + [BATCH_ONLY]
        print(table([row(merge(self.phases, n, s)) for n, s in keys], a.markdown))
        short = [p for p in self.phases if p.name != "alone" and (p.left or 0) < a.slots]
        if short:
            print(f"WARNING: {len(short)} batch phase(s) ended with fewer than {a.slots} lines "
                  "left (raise --batch-lines): the backlog was not full throughout")  # fmt: skip
        for name in names:
            print(*(f"{name}: {line}" for line in verdict(self.phases, name)), sep="\n")

    def run(self, model_dir: Path, redis_url: str, store: Path) -> None:
        from live_server import LiveServer

        a = self.args
        env: dict[str, object] = {
            "DOCPARSER_MODEL_PATH": model_dir, "DOCPARSER_DEVICE": a.device,
            "DOCPARSER_ENGINE_THREADS": a.threads, "DOCPARSER_MAX_BATCH_SIZE": a.slots,
            "DOCPARSER_CONTINUOUS_BATCHING": "true", "DOCPARSER_REDIS_URL": redis_url,
            "DOCPARSER_BATCH_WORKERS": a.batch_workers, "DOCPARSER_BATCH_POLL_S": 0.1,
            "DOCPARSER_DEFAULT_TIER": 0, "DOCPARSER_LOG_LEVEL": "warning",
            "DOCPARSER_MAX_QUEUE_PAGES": 4 * a.slots + 16,
            "DOCPARSER_ALLOW_UNVERIFIED_WEIGHTS": "true",  # random weights, no manifest
        }  # fmt: skip
        policies = dict(zip(shared_names(a.batch_yield), a.batch_yield.split(","), strict=True))
        servers = {
            name: LiveServer(engine="deepseek-ocr2", env={
                **env, "DOCPARSER_REDIS_PREFIX": f"{name.replace('/', '-')}:",
                "DOCPARSER_BATCH_YIELD": policies.get(name, "auto"),
                "DOCPARSER_BATCH_STORAGE_URI": f"file://{store / name.replace('/', '-')}"})
            for name in [*policies, "batch-only"]
        }  # fmt: skip
        try:
            for server in servers.values():
                server.start()
            for server in servers.values():
                server.wait_ready(a.timeout_s)
            pods = [Pod(n, s, a) for n, s in servers.items()]
            for pod in pods:  # first request paths warm, not timed; its engine thread
                pod.find_engine_thread(self.pages[0])
            for r in range(a.rounds):
                self.round(pods[:-1], pods[-1], r)
        except Exception:
            for name, server in servers.items():
                print(f"--- {name} log:\n{server.log(3000)}", file=sys.stderr)
            raise
        finally:
            for server in servers.values():
                server.stop()


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    check(args, parser().error)
    binary = redis_binary()
    if binary is None:
        msg = "redis-server not found: apt-get install redis-server or make system-deps"
        sys.stderr.write(f"{msg}, or put it on PATH (this needs a real Redis)\n")
        return 2
    import redis_server
    from tiny_deepseek import build_tiny_model

    redis_server.REDIS_BIN = binary
    bench = Bench(args)
    with tempfile.TemporaryDirectory(prefix="bench-batch-") as tmp, redis_server.RedisServer() as r:
        bench.run(build_tiny_model(Path(tmp) / "tiny"), r.url, Path(tmp) / "store")
    bench.report()
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--requests", type=int, default=10, help="interactive pages per phase")
    p.add_argument("--rounds", type=int, default=4, help="alone/backlog/throughput rounds")
    p.add_argument("--tokens", type=int, default=384, help="new tokens of an interactive page")
    p.add_argument("--batch-tokens", type=int, default=384, help="new tokens of a batch line")
    p.add_argument("--batch-lines", type=int, default=600, help="lines of each batch")
    p.add_argument("--gap-s", type=float, default=0.3, help="pause between interactive pages")
    p.add_argument("--window-s", type=float, default=15.0, help="batch throughput window")
    p.add_argument("--slots", type=int, default=8, help="DOCPARSER_MAX_BATCH_SIZE")
    p.add_argument("--batch-workers", type=int, default=0, help="lines per pod (0: = slots)")
    p.add_argument("--distinct-pages", type=int, default=24, help="different page images")
    p.add_argument("--device", default="cpu", help="cpu, or cuda on a GPU host")
    p.add_argument("--threads", type=int, default=1, help="DOCPARSER_ENGINE_THREADS")
    p.add_argument("--timeout-s", type=float, default=300.0, help="bound of every wait")
    p.add_argument("--batch-yield", default="auto", help="the shared pod's DOCPARSER_BATCH_YIELD; "
                   "a list (slots,rows): a shared pod each, in alternating order")  # fmt: skip
    p.add_argument("--markdown", action="store_true", help="a Markdown table")
    return p


def check(args: argparse.Namespace, error: Any) -> None:
    args.batch_workers = args.batch_workers or args.slots
    if min(args.requests, args.rounds, args.tokens, args.batch_tokens, args.slots) < 1:
        error("--requests, --rounds, --tokens, --batch-tokens and --slots must be >= 1")
    if args.batch_lines < 2 * args.slots:
        error("--batch-lines must be at least 2 x --slots (a backlog that fills the slots)")
    if args.window_s <= 0 or args.gap_s < 0 or args.timeout_s <= 0:
        error("--window-s and --timeout-s must be > 0, --gap-s >= 0")
    if args.distinct_pages < 1:
        error("--distinct-pages must be >= 1")
    yields = args.batch_yield.split(",")
    if len(set(yields)) != len(yields) or not set(yields) <= {"auto", "rows", "slots"}:
        error("--batch-yield takes distinct auto, rows or slots, comma-separated")


def shared_names(batch_yield: str) -> list[str]:
    """The shared pods' names: ``shared``, or ``shared/<policy>`` for each of a list."""
    return [f"shared/{p}" if "," in batch_yield else "shared" for p in batch_yield.split(",")]


if __name__ == "__main__":
    sys.exit(main())
