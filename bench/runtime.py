"""Runtime benchmark: HTTP serving vs the engine in-process, and the batcher's payoff.

Prints one table. Rows:
- ``in-process``: the work both paths share: ``load_document`` (PNG decode, tiling plan)
  + ``engine.infer_batch``, called directly on one worker thread (as in the server),
  pages in batches of ``min(concurrency, max_batch)`` (what perfect batching without
  HTTP gives); latency is per batch (every page of a batch waits for all of it).
- ``http``: the same plus what serving adds: multipart encode/upload, request parsing,
  the hop to the decode pool, the micro-batcher (``max_wait_ms`` 5), the hop to the
  engine thread, the JSON reply; ``docparser-runtime serve`` as a separate process on
  127.0.0.1 (result cache off), ``concurrency`` clients posting one page each; latency
  per request.
- ``audit``: time of the coverage audit (``engines.coverage``, issue 12) as a share of the
  engine's time, in-process rows (target < 10%).
- ``cpu ms/p``: CPU time of *both* processes (benchmark client and server) per page
  during the cell: unlike wall time, it hardly moves when other tenants load the box.
The two paths of one concurrency run in ABBA order on the two halves of the pages
(in-process, http, http, in-process), so load that drifts during the run falls on both.
Engines: ``rapidocr`` (embedded CPU engine) and the tiny random-weight DeepSeek-OCR-2
(built into a temp dir by ``tests/runtime/tiny_deepseek.build_tiny_model``), plus the tiny
model at concurrency 8 with ``max_batch_size`` 8 vs 1.

Targets (issue 2): HTTP+queueing cost <= 5% of in-process pages/s at concurrency 1;
tiny model, concurrency 8: max_batch_size 8 serves >= 2x the pages/s of max_batch_size 1.
Request counts are bounded (``--pages`` per cell); nothing here asserts timings.

``--workload mixed``: static micro-batches against continuous batching on a mixed workload
(output lengths spread wide, mixed tiers, streams, concurrency 8 and 32, a head-of-line
case): ``bench/mixed_workload.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import os
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx
from PIL import Image, ImageDraw, ImageFont

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "runtime"))  # tiny_deepseek

from docparser_runtime.engines.base import Engine, ParseOptions  # noqa: E402
from docparser_runtime.engines.coverage import audit_results  # noqa: E402
from docparser_runtime.preprocess.pipeline import DecodeLimits, load_document  # noqa: E402
from docparser_runtime.settings import Settings  # noqa: E402

FONT = Path("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf")
WORDS = [
    "invoice", "total", "amount", "due", "payment",
    "reference", "customer", "order", "shipping", "date",
]  # fmt: skip


@dataclass
class Cell:
    engine: str
    path: str
    concurrency: int
    max_batch: int
    pages: int
    wall_s: float
    latencies_s: list[float]
    cpu_s: float = 0.0
    audit_s: float = 0.0  # coverage audit (in-process only), part of wall_s

    def __add__(self, other: Cell) -> Cell:
        return Cell(
            self.engine, self.path, self.concurrency, self.max_batch,
            self.pages + other.pages, self.wall_s + other.wall_s,
            self.latencies_s + other.latencies_s, self.cpu_s + other.cpu_s,
            self.audit_s + other.audit_s,
        )  # fmt: skip

    @property
    def pages_per_s(self) -> float:
        return self.pages / self.wall_s

    def pct(self, q: float) -> float:
        ordered = sorted(self.latencies_s)
        return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] * 1000


def make_pages(count: int, size: tuple[int, int]) -> list[bytes]:
    """Distinct small text pages (PNG) so no cache or identical-input shortcut applies."""
    font = ImageFont.truetype(str(FONT), 22) if FONT.exists() else ImageFont.load_default()
    pages = []
    for i in range(count):
        img = Image.new("RGB", size, "white")
        draw = ImageDraw.Draw(img)
        for row in range(2):
            words = [WORDS[(i + row + k) % len(WORDS)] for k in range(4)]
            draw.text((16, 16 + 40 * row), f"{' '.join(words)} {i:03d}", font=font, fill="black")
        buf = io.BytesIO()
        img.save(buf, format="PNG")
        pages.append(buf.getvalue())
    return pages


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- in-process -----------------------------------------------------------------------
def run_in_process(engine: Engine, pages, opts: ParseOptions, batch: int, name, cpu_clock):
    """On one worker thread, like the server's engine thread (torch/onnxruntime thread
    pools behave differently on the main thread, which would skew the comparison)."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(_in_process, engine, pages, opts, batch, name, cpu_clock).result()


def _in_process(engine: Engine, pages, opts: ParseOptions, batch: int, name, cpu_clock):
    limits = DecodeLimits.from_settings(Settings())
    warm = load_document(pages[0], tier=opts.tier, pages=None, limits=limits)
    engine.infer_batch(warm * batch, opts)  # untimed, like the HTTP path's first request
    latencies, audit_s = [], 0.0
    cpu0, start = cpu_clock(), time.perf_counter()
    for i in range(0, len(pages), batch):
        t0 = time.perf_counter()
        decoded = [
            load_document(data, tier=opts.tier, pages=None, limits=limits)[0]
            for data in pages[i : i + batch]
        ]
        results = engine.infer_batch(decoded, opts)
        audit_results(engine, decoded, results, opts)  # as the server's engine thread does
        audit_s += sum(r.audit_s for r in results)
        latencies += [time.perf_counter() - t0] * len(decoded)
    wall = time.perf_counter() - start
    cpu = cpu_clock() - cpu0
    return Cell(name, "in-process", batch, batch, len(pages), wall, latencies, cpu, audit_s)


# -- HTTP -----------------------------------------------------------------------------
class ProcessServer:
    """``docparser-runtime serve`` as a separate process on 127.0.0.1 (own GIL, as deployed)."""

    def __init__(self, engine: str, *, max_batch: int, model_path: Path | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.args = [sys.executable, "-m", "docparser_runtime", "serve", "--engine", engine]
        self.args += ["--host", "127.0.0.1", "--port", str(self.port)]
        if model_path is not None:
            self.args += ["--model-path", str(model_path)]
        self.env = {
            **os.environ,
            "DOCPARSER_MAX_BATCH_SIZE": str(max_batch),
            "DOCPARSER_MAX_WAIT_MS": "5",
            "DOCPARSER_MAX_QUEUE_PAGES": "1024",
            "DOCPARSER_DEVICE": "cpu",
            "DOCPARSER_DRAIN_GRACE_S": "0",
            "DOCPARSER_LOG_LEVEL": "warning",
            "DOCPARSER_CACHE_MAX_BYTES": "0",  # every page really parsed
            "DOCPARSER_ALLOW_UNVERIFIED_WEIGHTS": "true",  # the tiny model has no manifest
        }
        self.log = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the server
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> ProcessServer:
        self.proc = subprocess.Popen(
            self.args, env=self.env, stdout=self.log, stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.log.seek(0)
                raise RuntimeError("benchmark server exited:\n" + self.log.read().decode())
            try:
                if httpx.get(self.url + "/readyz", timeout=2).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        raise RuntimeError("benchmark server did not become ready")

    def cpu_seconds(self) -> float:
        """User + system CPU of this (client) process, all threads, plus the server's."""
        assert self.proc is not None
        own = resource.getrusage(resource.RUSAGE_SELF)
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        server = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        return own.ru_utime + own.ru_stime + server

    def __exit__(self, *exc) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


async def _drive(url: str, pages: list[bytes], fields: dict, concurrency: int, cpu_clock):
    latencies: list[float] = []
    queue = list(enumerate(pages))

    async def worker(client: httpx.AsyncClient) -> None:
        while queue:
            _, data = queue.pop(0)
            t0 = time.perf_counter()
            resp = await client.post(
                "/v1/document/parse", files={"file": ("p.png", data, "image/png")}, data=fields
            )
            resp.raise_for_status()
            latencies.append(time.perf_counter() - t0)

    limits = httpx.Limits(max_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, timeout=600, limits=limits) as client:
        await client.post(  # warm the connection pool and code paths (not timed)
            "/v1/document/parse", files={"file": ("p.png", pages[0], "image/png")}, data=fields
        )
        cpu0, start = cpu_clock(), time.perf_counter()
        await asyncio.gather(*(worker(client) for _ in range(concurrency)))
        return time.perf_counter() - start, latencies, cpu_clock() - cpu0


def run_http(server: ProcessServer, pages, opts, concurrency, max_batch, name) -> Cell:
    fields = {"tier": str(opts.tier), "mode": opts.mode, "max_new_tokens": str(opts.max_new_tokens)}
    drive = _drive(server.url, pages, fields, concurrency, server.cpu_seconds)
    wall, latencies, cpu = asyncio.run(drive)
    return Cell(name, "http", concurrency, max_batch, len(pages), wall, latencies, cpu)


# -- engines --------------------------------------------------------------------------
def rapidocr_engine() -> Engine:
    from docparser_runtime.engines.rapidocr.engine import RapidOcrEngine

    engine = RapidOcrEngine.from_settings(Settings(engine="rapidocr"))
    engine.load()
    engine.warmup()
    return engine


def tiny_deepseek_engine(model_dir: Path) -> Engine:
    from docparser_runtime.engines.deepseek_ocr2.engine import DeepseekOcr2Engine

    engine = DeepseekOcr2Engine.from_settings(
        Settings(engine="deepseek-ocr2", model_path=model_dir, device="cpu")
    )
    engine.load()
    engine.warmup()
    return engine


def bench_engine(name, engine, server, pages, opts, concurrencies, max_batch) -> list[Cell]:
    """Per concurrency: in-process, http, http, in-process on the pages' two halves."""
    cells = []
    half = len(pages) // 2
    for c in concurrencies:
        direct, http = [], []
        for part, order in ((pages[:half], "ab"), (pages[half:], "ba")):
            for path in order:
                if path == "a":
                    batch = min(c, max_batch)
                    direct.append(
                        run_in_process(engine, part, opts, batch, name, server.cpu_seconds)
                    )
                else:
                    http.append(run_http(server, part, opts, c, max_batch, name))
        cells += [direct[0] + direct[1], http[0] + http[1]]
        print(f"  {name} c={c} done", file=sys.stderr, flush=True)
    return cells


def print_table(cells: list[Cell]) -> None:
    header = f"{'engine':<14} {'path':<11} {'conc':>4} {'batch':>5} {'pages':>5} "
    header += f"{'pages/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'cpu ms/p':>8} {'audit':>6}"
    print(header)
    print("-" * len(header))
    for c in cells:
        print(
            f"{c.engine:<14} {c.path:<11} {c.concurrency:>4} {c.max_batch:>5} {c.pages:>5} "
            f"{c.pages_per_s:>8.2f} {c.pct(0.5):>8.1f} {c.pct(0.99):>8.1f} "
            f"{c.cpu_s / c.pages * 1000:>8.0f} {audit_share(c):>6}"
        )


def audit_share(cell: Cell) -> str:
    """The coverage audit's time as a share of the engine's (in-process rows only)."""
    if cell.path != "in-process" or cell.audit_s <= 0:
        return "-"
    return f"{100 * cell.audit_s / (cell.wall_s - cell.audit_s):.1f}%"


def summarize(cells: list[Cell]) -> None:
    def find(engine, path, conc, batch=None):
        for c in cells:
            if (c.engine, c.path, c.concurrency) == (engine, path, conc) and (
                batch is None or c.max_batch == batch
            ):
                return c
        return None

    print()
    for engine in sorted({c.engine for c in cells}):
        direct, http = find(engine, "in-process", 1), find(engine, "http", 1)
        if direct and http:
            cost = (1 - http.pages_per_s / direct.pages_per_s) * 100
            cpu = (http.cpu_s / http.pages) / (direct.cpu_s / direct.pages) * 100 - 100
            print(
                f"{engine}: HTTP+queueing cost at concurrency 1: {cost:.1f}% (target <= 5%); "
                f"CPU per page {cpu:+.1f}%"
            )
    b8, b1 = find("tiny-deepseek", "http", 8, 8), find("tiny-deepseek", "http", 8, 1)
    if b8 and b1:
        ratio = b8.pages_per_s / b1.pages_per_s
        print(f"tiny-deepseek, concurrency 8: max_batch_size 8 / 1 = {ratio:.2f}x (target >= 2x)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="8 pages per cell")
    parser.add_argument("--pages", type=int, default=24, help="pages per cell (default 24)")
    parser.add_argument("--engines", default="rapidocr,tiny-deepseek")
    parser.add_argument("--max-new-tokens", type=int, default=32, help="tiny model output cap")
    parser.add_argument(
        "--workload",
        choices=("serving", "mixed"),
        default="serving",
        help="mixed: static vs continuous batching on the tiny model (bench/mixed_workload.py)",
    )
    import mixed_workload  # bench/, next to this script

    mixed_workload.add_arguments(parser)
    args = parser.parse_args(argv)
    if args.workload == "mixed":
        return mixed_workload.run(args)
    count = 8 if args.quick else args.pages
    wanted = set(args.engines.split(","))
    cells: list[Cell] = []
    concurrencies = (1, 4, 8)
    if "rapidocr" in wanted:
        engine = rapidocr_engine()
        threads = Settings(engine="rapidocr").engine_threads or "auto"
        print(f"rapidocr: DOCPARSER_ENGINE_THREADS={threads} ({engine._threads})", flush=True)
        pages = make_pages(count, (640, 110))
        opts = ParseOptions(tier=0, mode="markdown", max_new_tokens=args.max_new_tokens)
        with ProcessServer("rapidocr", max_batch=8) as server:
            cells += bench_engine("rapidocr", engine, server, pages, opts, concurrencies, 8)
        engine.close()
    if "tiny-deepseek" in wanted:
        from tiny_deepseek import build_tiny_model

        with tempfile.TemporaryDirectory(prefix="bench-tiny-") as tmp:
            model_dir = build_tiny_model(Path(tmp) / "tiny-deepseek-ocr2")
            engine = tiny_deepseek_engine(model_dir)
            pages = make_pages(count, (640, 480))
            opts = ParseOptions(tier=0, mode="markdown", max_new_tokens=args.max_new_tokens)
            name = "tiny-deepseek"
            with ProcessServer("deepseek-ocr2", max_batch=8, model_path=model_dir) as server:
                cells += bench_engine(name, engine, server, pages, opts, concurrencies, 8)
            with ProcessServer("deepseek-ocr2", max_batch=1, model_path=model_dir) as server:
                cells.append(run_http(server, pages, opts, 8, 1, name))
            engine.close()
    print_table(cells)
    summarize(cells)
    return 0


if __name__ == "__main__":
    sys.exit(main())
