"""What the shadow canary costs the stable pod that mirrors (issue 24): latency and CPU with
the shadow on against off, under the same bounded load, for three canaries.

Real processes (``docparser-runtime serve``, rapidocr), as in production:

- ``stable``: the pod whose answers are timed; ``DOCPARSER_DECODE_WORKERS=0`` so all of its
  work (HTTP, decode, engine, the shadow's sampling, sending and comparison) is one process
  whose CPU time ``/proc/<pid>/stat`` reports;
- canaries: ``fast`` (the deterministic test engine, no OCR: every copy sent, answered and
  compared, while the canary takes next to no CPU from the machine the stable shares),
  ``slow`` (the test engine taking ``--slow-s`` a page: copies wait, the excess is dropped
  ``busy``), ``down`` (nothing listens: every copy fails ``error``) and ``same`` (rapidocr
  again: real texts compared, but its OCR competes with the stable's for this machine's
  CPUs, which a canary pod on its own node does not).

Per canary, ``--rounds`` rounds of an ``off`` and an ``on`` phase (order alternating), each
phase the same ``--requests`` pages (``cache: false``: the same work every phase) from
``--concurrency`` closed-loop clients, the shadow at 100 % (every answer mirrored: the worst
case; production samples ``percent``). Short phases, many rounds: the machine's load drifts
over minutes, and only fine interleaving lets both arms see the same drift. A phase's CPU is
counted until its copies are compared or dropped. Columns: client latency (p50, p99, mean),
the stable's own time for the parse (``timings_ms.total``, p50), its CPU per request.
``--pin`` pins the stable and the canaries to different CPUs (off by default: on a small
shared machine it starves whichever side shares its CPU with the neighbours). Target: < 2 % of
stable's latency and CPU.

On a shared machine those wall-clock and CPU figures move by tens of percent between phases
whatever the shadow does, so the bench also measures the shadow's own cost directly: the same
stable replies are offered to a ``ShadowMirror`` in this process (the stable's code: sampling,
the copy, the HTTP round trip to the ``same`` canary, the reply's JSON, the comparison) and its
CPU time per mirrored request is set against the stable's CPU per request; ``offer`` (the only
part on the request's event loop) is timed per call.

Nothing here asserts; it prints a table (``--markdown`` for docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import random
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "runtime"))  # live_server, documents, page_corpus

import asyncio  # noqa: E402

import httpx  # noqa: E402
from docparser_runtime.engines.base import ParseOptions  # noqa: E402
from docparser_runtime.server.protocol import ParseRequest  # noqa: E402
from docparser_runtime.server.shadow.sender import ShadowMirror  # noqa: E402
from docparser_runtime.settings import Settings  # noqa: E402
from docparser_runtime.sizing.host_memory import MemoryBudget, settings_budget  # noqa: E402
from documents import font  # noqa: E402
from live_server import LiveServer  # noqa: E402
from page_corpus import sentence  # noqa: E402
from PIL import Image, ImageDraw  # noqa: E402
from prometheus_client import CollectorRegistry  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

TOKEN, ADMIN = "bench-internal-token", "bench-admin-key"
TICK = os.sysconf("SC_CLK_TCK")


def page_png(seed: int, lines: int) -> bytes:
    rng = random.Random(seed)
    image = Image.new("RGB", (900, 60 + lines * 46), "white")
    draw = ImageDraw.Draw(image)
    for i in range(lines):
        draw.text((60, 30 + i * 46), sentence(rng, rng.randrange(3, 7)), font=font(24), fill=0)
    out = io.BytesIO()
    image.save(out, "PNG")
    return out.getvalue()


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime + stime, all threads


def pin(pid: int, cpus: set[int]) -> None:
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):  # a thread that just ended
            os.sched_setaffinity(int(task.name), cpus)


def shadow_counts(url: str) -> dict[str, float]:
    counts = {"compared": 0.0, "settled": 0.0}
    for family in text_string_to_metric_families(httpx.get(f"{url}/metrics", timeout=10).text):
        for s in family.samples:
            if s.name == "docparser_shadow_pages_compared_total":
                counts["compared"] += s.value
            elif s.name == "docparser_shadow_dropped_total":
                counts["settled"] += s.value
                key = "dropped " + s.labels["reason"]
                counts[key] = counts.get(key, 0.0) + s.value
            elif s.name == "docparser_shadow_latency_ratio_count":
                counts["settled"] += s.value
    return counts


class Bench:
    def __init__(self, args: argparse.Namespace, root: Path) -> None:
        self.args = args
        self.config = root / "shadow.json"
        self.config.write_text('{"enabled": false}')
        (root / "token").write_text(TOKEN)
        (root / "admin").write_text(ADMIN)
        self.env = {
            "DOCPARSER_INTERNAL_TOKEN_FILE": root / "token",
            "DOCPARSER_ENGINE_THREADS": 1,
            "DOCPARSER_MAX_WAIT_MS": 2,
            "DOCPARSER_LOG_LEVEL": "warning",
        }
        self.docs = [page_png(seed, args.lines) for seed in range(args.requests)]
        self.rows: list[dict[str, object]] = []
        self.replies: list[dict[str, object]] = []  # stable's answers, for the direct cost
        self.direct: dict[str, float] = {}

    def point_at(self, stable: LiveServer, target: str | None, revision: str) -> None:
        config: dict[str, object] = {"enabled": False}
        if target is not None:
            config = {
                "enabled": True, "target": target, "percent": 100,
                "maxPagesPerMinute": 100_000, "stableRevision": "stable",
                "canaryRevision": revision,
            }  # fmt: skip
        tmp = self.config.with_suffix(".tmp")
        tmp.write_text(json.dumps(config))
        tmp.replace(self.config)
        wanted = revision if target is not None else None
        admin = {"authorization": f"Bearer {ADMIN}"}
        deadline = time.monotonic() + 30
        while (
            httpx.get(f"{stable.url}/admin/v1/shadow/worst", headers=admin)
            .json()
            .get("canary_revision")
            != wanted
        ):
            if time.monotonic() > deadline:
                raise RuntimeError("the stable never read its shadow config")
            time.sleep(0.05)

    def phase(self, stable: LiveServer, canary: str, shadow: str) -> None:
        assert stable.proc is not None
        before = shadow_counts(stable.url)
        cpu0 = cpu_seconds(stable.proc.pid)
        latencies: list[float] = []
        server: list[float] = []
        replies: list[dict[str, object]] = []

        def one(data: bytes) -> None:
            t0 = time.perf_counter()
            resp = httpx.post(
                f"{stable.url}/v1/document/parse",
                files={"file": ("p.png", data, "image/png")},
                data={"cache": "false"},
                timeout=300,
            )
            resp.raise_for_status()
            latencies.append(time.perf_counter() - t0)
            replies.append(resp.json())
            server.append(float(replies[-1]["timings_ms"]["total"]) / 1000)

        with ThreadPoolExecutor(self.args.concurrency) as pool:
            list(pool.map(one, self.docs))
        if shadow == "off" and not self.replies:
            self.replies = replies
        expected = before["settled"] + (len(self.docs) if shadow == "on" else 0)
        deadline = time.monotonic() + self.args.settle_s
        after = shadow_counts(stable.url)
        while after["settled"] < expected and time.monotonic() < deadline:
            time.sleep(0.1)
            after = shadow_counts(stable.url)
        cpu = cpu_seconds(stable.proc.pid) - cpu0
        drops = {k: after.get(k, 0) - before.get(k, 0) for k in after if k.startswith("dropped")}
        self.rows.append({
            "canary": canary, "shadow": shadow, "requests": len(latencies),
            "p50": statistics.median(latencies),
            "p99": sorted(latencies)[max(0, round(0.99 * len(latencies)) - 1)],
            "mean": statistics.fmean(latencies), "cpu": cpu / len(latencies),
            "server": statistics.median(server), "latencies": latencies, "servers": server,
            "compared": after["compared"] - before["compared"],
            "dropped": ", ".join(f"{k[8:]} {v:.0f}" for k, v in sorted(drops.items()) if v),
        })  # fmt: skip
        print(f"  {canary} {shadow}: p50 {1000 * self.rows[-1]['p50']:.0f} ms", file=sys.stderr)

    def run(self) -> None:
        args = self.args
        cpus = sorted(os.sched_getaffinity(0))
        stable = LiveServer(
            env={**self.env, "DOCPARSER_REVISION": "stable", "DOCPARSER_DECODE_WORKERS": 0,
                 "DOCPARSER_SHADOW_CONFIG_FILE": self.config, "DOCPARSER_SHADOW_POLL_S": 0.1,
                 "DOCPARSER_ADMIN_KEY_FILE": self.config.parent / "admin"}
        )  # fmt: skip
        canaries = {
            "fast": LiveServer(gated_delay_s=0.0, env=self.env),
            "slow": LiveServer(gated_delay_s=args.slow_s, env=self.env),
            "same": LiveServer(env={**self.env, "DOCPARSER_REVISION": "same"}),
        }
        wanted = [c for c in args.canaries.split(",") if c]
        servers = [stable, *(canaries[c] for c in wanted if c in canaries)]
        for server in servers:
            server.start()
        try:
            for server in servers:
                server.wait_ready(180)
            if args.pin and len(cpus) > 1:
                assert stable.proc is not None
                pin(stable.proc.pid, {cpus[0]})
                for name in wanted:
                    proc = canaries[name].proc if name in canaries else None
                    if proc is not None:
                        pin(proc.pid, set(cpus[1:]))
            self.phase(stable, "warm-up", "off")
            self.rows.clear()
            direct = next((c for c in ("same", "fast") if c in wanted), None)
            if direct is not None:
                self.direct = asyncio.run(self.direct_cost(canaries[direct].url, direct))
            for name in wanted:
                target = canaries[name].url if name in canaries else LiveServer().url
                for n in range(args.rounds):
                    for shadow in ("off", "on") if n % 2 == 0 else ("on", "off"):
                        self.point_at(stable, target if shadow == "on" else None, name)
                        self.phase(stable, name, shadow)
        finally:
            for server in servers:
                server.stop()

    async def direct_cost(self, canary_url: str, name: str) -> dict[str, float]:
        """The shadow's CPU per mirrored request, measured in this process (module doc)."""
        root = self.config.parent
        config = root / "direct.json"
        config.write_text(json.dumps({
            "enabled": True, "target": canary_url, "percent": 100,
            "maxPagesPerMinute": 100_000, "stableRevision": "stable", "canaryRevision": name,
        }))  # fmt: skip
        settings = Settings(
            revision="stable", shadow_config_file=config, internal_token_file=root / "token",
            shadow_queue=len(self.replies),
        )  # fmt: skip
        memory = MemoryBudget(settings_budget(settings, "rapidocr"))
        mirror = ShadowMirror(settings, CollectorRegistry(), memory=memory)
        await mirror.start()
        options = ParseOptions(tier=0, mode="markdown", max_new_tokens=4096)
        try:
            cpu0, offer_s = time.process_time(), 0.0
            for data, reply in zip(self.docs, self.replies, strict=False):
                t0 = time.perf_counter()
                mirror.offer(ParseRequest(data=data, options=options), reply)
                offer_s += time.perf_counter() - t0
            deadline = time.monotonic() + self.args.settle_s
            counter = mirror.metrics.pages_compared.labels(**mirror.config.labels)
            while counter._value.get() < len(self.replies) and time.monotonic() < deadline:
                await asyncio.sleep(0.25)  # this loop's own wake-ups count in the CPU time
            cpu = time.process_time() - cpu0
            compared = counter._value.get()
        finally:
            await mirror.close()
        return {
            "canary": name,
            "cpu_per_request": cpu / max(1, len(self.replies)),
            "offer_us": 1e6 * offer_s / max(1, len(self.replies)),
            "compared": compared,
        }

    def report(self) -> None:
        head = ["canary", "shadow", "requests", "p50 ms", "p99 ms", "mean ms", "server p50 ms",
                "cpu ms/req", "compared", "dropped"]  # fmt: skip
        lines = []
        merged: dict[tuple[str, str], list[dict[str, object]]] = {}
        for row in self.rows:
            merged.setdefault((str(row["canary"]), str(row["shadow"])), []).append(row)
        summary = {}
        for (canary, shadow), rows in merged.items():
            latencies = [x for r in rows for x in r["latencies"]]
            servers = [x for r in rows for x in r["servers"]]
            p50, mean = statistics.median(latencies), statistics.fmean(latencies)
            p99 = sorted(latencies)[max(0, round(0.99 * len(latencies)) - 1)]
            cpu = statistics.fmean(float(r["cpu"]) for r in rows)
            compared = sum(float(r["compared"]) for r in rows)
            drops: dict[str, float] = {}
            for r in rows:
                for part in str(r["dropped"]).split(", "):
                    if part and part != "-":
                        reason, count = part.rsplit(" ", 1)
                        drops[reason] = drops.get(reason, 0) + float(count)
            dropped = ", ".join(f"{k} {v:.0f}" for k, v in sorted(drops.items()))
            server_p50 = statistics.median(servers)
            summary[(canary, shadow)] = (p50, mean, cpu, server_p50)
            lines.append([canary, shadow, len(latencies), f"{1000 * p50:.0f}",
                          f"{1000 * p99:.0f}", f"{1000 * mean:.0f}", f"{1000 * server_p50:.0f}",
                          f"{1000 * cpu:.0f}", f"{compared:.0f}", dropped or "-"])  # fmt: skip
        if self.args.markdown:
            print("| " + " | ".join(head) + " |")
            print("|---|---|" + "---:|" * (len(head) - 3) + "---|")
            for line in lines:
                print("| " + " | ".join(str(c) for c in line) + " |")
        else:
            print(("{:<8} {:<6}" + " {:>10}" * (len(head) - 3) + "  {}").format(*head))
            for line in lines:
                print(("{:<8} {:<6}" + " {:>10}" * (len(head) - 3) + "  {}").format(*line))
        print()
        for canary in dict.fromkeys(c for c, _ in summary):
            if (canary, "on") not in summary or (canary, "off") not in summary:
                continue
            on, off = summary[(canary, "on")], summary[(canary, "off")]
            change = [100 * (a - b) / b for a, b in zip(on, off, strict=True)]
            print(f"{canary}: shadow on vs off: p50 {change[0]:+.1f} %, mean {change[1]:+.1f} %, "
                  f"server p50 {change[3]:+.1f} %, stable CPU per request {change[2]:+.1f} % "
                  "(target < 2 %)")  # fmt: skip
        direct = str(self.direct.get("canary", ""))
        if self.direct and (direct, "off") in summary:
            stable_cpu = summary[(direct, "off")][2]
            own = self.direct["cpu_per_request"]
            share = own / stable_cpu
            print(
                f"direct ({direct} canary): the shadow's CPU per mirrored request "
                f"{1000 * own:.2f} ms "
                f"({self.direct['compared']:.0f} pages compared) = {100 * share:.2f} % of stable's "
                f"{1000 * stable_cpu:.0f} ms per request at percent 100, {10 * share:.2f} % at 10; "
                f"offer() on the event loop {self.direct['offer_us']:.0f} us a call"
            )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=4, help="pages per phase")
    parser.add_argument("--lines", type=int, default=8, help="text lines per page")
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--canaries", default="fast,slow,down")
    parser.add_argument("--slow-s", type=float, default=2.0, help="the slow canary, s a page")
    parser.add_argument("--settle-s", type=float, default=60.0, help="wait for the copies")
    parser.add_argument("--pin", action="store_true", help="stable and canaries on other CPUs")
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="shadow-bench-") as root:
        bench = Bench(args, Path(root))
        bench.run()
        bench.report()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
