"""A real server under a real memory cap: the kernel's, not a watchdog's.

The server process (production app, the embedded RapidOCR engine, sandboxed decoders)
starts inside a memory cgroup made here with a 2 GiB limit, like a pod's. It must read that
limit itself and admit work inside it: the 1.7 KB PDF of eight 200 x 200 inch pages (4.4 GiB
of PSS before, issue 29) and a 200 Mpx greyscale PNG are parsed at the engine's size; a PNG
whose header announces 200 Mpx of RGB cannot be decoded within the budget and is refused
(413 naming the limit) before a pixel is decoded; normal requests sent meanwhile are
served; a PDF of nested Form XObjects that grows without bound in PDFium is ended by its
decoder's address-space limit (422), not by the kernel. PSS is summed over the process
tree every 50 ms; the kernel's own peak and OOM counters say whether the cap was ever hit.
Needs root and a cgroup v1 memory hierarchy or a delegated v2 one (skipped otherwise).
Figures are printed with ``-s`` (docs/benchmarks.md).
"""

from __future__ import annotations

import base64
import contextlib
import io
import os
import struct
import threading
import time
import uuid
import zlib
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from engines_for_tests import png_bytes
from hostile_docs import huge_pages_pdf, nested_xobject_pdf
from live_server import LiveServer
from memory_watchdog import MemoryWatchdog
from PIL import Image, ImageDraw

pytestmark = pytest.mark.slow

PARSE = "/v1/document/parse"
GIB = 1024**3
LIMIT = 2 * GIB
SIDE_200MPX = 14_143  # 14143^2 > 200 M pixels


def _own_cgroup(controller: str) -> str | None:
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        hid, controllers, path = line.split(":", 2)
        if (controller and controller in controllers.split(",")) or (not controller and hid == "0"):
            return path
    return None


@contextlib.contextmanager
def memory_cgroup(limit: int) -> Iterator[Path]:
    """A new memory cgroup below this process's own, limited to ``limit`` bytes."""
    if os.geteuid() != 0:
        pytest.skip("making a memory cgroup needs root")
    name = f"docparser-cap-{uuid.uuid4().hex[:8]}"
    v1 = _own_cgroup("memory")
    v2 = _own_cgroup("")
    if v1 is not None and Path("/sys/fs/cgroup/memory", v1.lstrip("/")).is_dir():
        group = Path("/sys/fs/cgroup/memory", v1.lstrip("/"), name)
        files = {"memory.limit_in_bytes": limit}
    elif v2 is not None and "memory" in _read(
        Path("/sys/fs/cgroup", v2.lstrip("/"), "cgroup.subtree_control")
    ):
        group = Path("/sys/fs/cgroup", v2.lstrip("/"), name)
        files = {"memory.max": limit, "memory.swap.max": 0}
    else:
        pytest.skip("no cgroup memory controller this process may use")
    try:
        group.mkdir()
    except OSError as exc:
        pytest.skip(f"cannot make a memory cgroup here: {exc}")
    try:
        for file, value in files.items():
            with contextlib.suppress(FileNotFoundError):
                (group / file).write_text(str(value))
        memsw = group / "memory.memsw.limit_in_bytes"  # v1 with swap accounting
        with contextlib.suppress(OSError):
            memsw.write_text(str(limit))
        yield group
    finally:
        for _ in range(50):  # the server's processes leave the group as they exit
            with contextlib.suppress(OSError):
                group.rmdir()
                break
            time.sleep(0.2)


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def kernel_figures(group: Path) -> dict[str, int]:
    """The kernel's own peak and OOM kills of the group (v1 or v2 file names)."""
    figures = {}
    for name in ("memory.max_usage_in_bytes", "memory.peak"):
        text = _read(group / name).strip()
        if text.isdigit():
            figures["peak"] = int(text)
    for name in ("memory.oom_control", "memory.events"):
        for line in _read(group / name).splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill" and value.strip().isdigit():
                figures["oom_kill"] = int(value)
    return figures


def grey_png(side: int) -> bytes:
    """A mostly white ``side`` x ``side`` 8-bit greyscale PNG with a few words on it."""
    img = Image.new("L", (side, side), 255)
    draw = ImageDraw.Draw(img)
    draw.rectangle((side // 10, side // 10, side // 2, side // 8), fill=0)
    buf = io.BytesIO()
    img.save(buf, "PNG", compress_level=1)
    img.close()
    return buf.getvalue()


def rgb_png_header(side: int) -> bytes:
    """A PNG whose header announces ``side`` x ``side`` RGB pixels (the data is a stub:
    admission must refuse it from the header, before decoding)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    ihdr = struct.pack(">IIBBBBB", side, side, 8, 2, 0, 0, 0)
    idat = zlib.compress(b"\x00" * (side * 3 + 1))
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


@pytest.mark.timeout(1800)  # eight pages through RapidOCR on a shared 2-core machine
def test_huge_documents_stay_under_a_real_2_gib_cap_while_normal_requests_are_served():
    pdf = huge_pages_pdf(pages=8)
    big_grey = grey_png(SIDE_200MPX)
    with memory_cgroup(LIMIT) as group:
        env = {
            "DOCPARSER_DECODE_TIMEOUT_S": 120,
            "DOCPARSER_DECODE_CPU_S": 120,
            "DOCPARSER_REQUEST_TIMEOUT_S": 900,  # a shared 2-core machine runs it
            "DOCPARSER_DRAIN_TIMEOUT_S": 900,
        }
        server = LiveServer(env=env, cgroup=group).start()
        try:
            server.wait_ready(240)
            assert "host memory:" in server.log() and "2.00 GiB" in server.log(), server.log()
            with MemoryWatchdog(server.proc.pid, LIMIT + GIB, interval_s=0.05, pss=True) as dog:
                baseline = dog.current()
                dog.reset_peak()
                replies: dict[str, httpx.Response | str] = {}

                def send(name: str, data: bytes, ctype: str) -> None:
                    try:
                        replies[name] = httpx.post(
                            f"{server.url}{PARSE}", files={"file": ("x", data, ctype)},
                            data={"mode": "text"}, timeout=900,
                        )  # fmt: skip
                    except httpx.HTTPError as exc:
                        replies[name] = type(exc).__name__

                attacks = [
                    threading.Thread(target=send, args=("pdf", pdf, "application/pdf")),
                    threading.Thread(target=send, args=("grey", big_grey, "image/png")),
                ]
                for thread in attacks:
                    thread.start()
                normal: list[tuple[int | str, float]] = []
                for _ in range(200):  # bounded: at most 200 normal requests
                    if not any(t.is_alive() for t in attacks):
                        break
                    started = time.monotonic()
                    try:
                        reply = httpx.post(
                            f"{server.url}{PARSE}",
                            files={"file": ("n.png", png_bytes(), "image/png")},
                            timeout=300,
                        )
                        status: int | str = reply.status_code
                    except httpx.HTTPError as exc:
                        status = type(exc).__name__
                    normal.append((status, time.monotonic() - started))
                    time.sleep(0.5)
                for thread in attacks:
                    thread.join(900)
                refused = httpx.post(
                    f"{server.url}{PARSE}",
                    files={"file": ("x", rgb_png_header(SIDE_200MPX), "image/png")},
                    timeout=120,
                )
                # A PDF that grows without bound inside PDFium: the decoder's address space
                # (its share of the budget) ends it, not the kernel's OOM killer.
                nested = httpx.post(
                    f"{server.url}{PARSE}",
                    files={"file": ("n.pdf", nested_xobject_pdf(levels=10), "application/pdf")},
                    timeout=300,
                )
            kernel = kernel_figures(group)
            alive = server.proc.poll() is None
        finally:
            server.stop()
        log = server.log()
    pdf_reply, grey_reply = replies.get("pdf"), replies.get("grey")
    print(
        f"\nunder a {LIMIT / GIB:.0f} GiB cgroup: tree PSS {baseline / 2**20:.0f} MiB at rest, "
        f"peak {dog.peak / 2**20:.0f} MiB; kernel peak "
        f"{kernel.get('peak', 0) / 2**20:.0f} MiB (page cache included), "
        f"OOM kills {kernel.get('oom_kill', 'n/a')}; normal requests "
        f"{[s for s, _ in normal]} in at most {max((t for _, t in normal), default=0):.1f} s; "
        f"refused: {refused.status_code} {refused.json()['error']['message'][:160]}; nested "
        f"XObjects: {nested.status_code} {nested.json()['error']['message'][:120]}"
    )
    assert alive, log
    assert not dog.tripped and dog.peak < LIMIT, (dog.peak, log)
    assert kernel.get("oom_kill", 0) == 0, (kernel, log)
    for name, reply in (("pdf", pdf_reply), ("grey", grey_reply)):
        assert isinstance(reply, httpx.Response) and reply.status_code == 200, (name, reply, log)
    pages = pdf_reply.json()["pages"]  # type: ignore[union-attr]
    assert len(pages) == 8
    assert all(max(p["width"], p["height"]) <= 2000 for p in pages), pages
    grey_page = grey_reply.json()["pages"][0]  # type: ignore[union-attr]
    assert max(grey_page["width"], grey_page["height"]) <= 2000
    assert normal and all(status == 200 for status, _ in normal), normal
    assert nested.status_code == 422, nested.text
    assert nested.json()["error"]["code"] == "document_too_complex"
    assert refused.status_code == 413, refused.text
    body = refused.json()["error"]
    assert body["code"] == "host_memory_limit" and "GiB" in body["message"], body


FLOOD = 30  # concurrent uploads (issue 34 reproduced it with 30)
PADDED = 45 * 2**20  # each: a tiny PNG padded to 45 MB


@pytest.mark.timeout(900)
def test_a_flood_of_large_uploads_is_refused_by_the_budget_not_the_kernel():
    """Bodies are charged before they are read: 30 concurrent 45 MB uploads (a quarter as
    base64 JSON) under a real 2 GiB cap get 503 + Retry-After for what the budget cannot
    hold, no OOM kill, and small parses sent meanwhile are answered 200. Before, every
    upload was read first (2.9 GB RSS under the same budget)."""
    padded = png_bytes() + b"\0" * (PADDED - len(png_bytes()))
    as_json = ('{"mode": "text", "image": "' + base64.b64encode(padded[: PADDED // 2]).decode()
               + '"}').encode()  # fmt: skip
    with memory_cgroup(LIMIT) as group:
        env = {"DOCPARSER_REQUEST_TIMEOUT_S": 300, "DOCPARSER_DRAIN_TIMEOUT_S": 300}
        server = LiveServer(env=env, cgroup=group).start()
        try:
            server.wait_ready(240)
            replies: list[httpx.Response | str] = []

            def upload(index: int) -> None:
                json_body = index % 4 == 3
                try:
                    replies.append(
                        httpx.post(
                            f"{server.url}{PARSE}?mode=text",
                            content=as_json if json_body else padded,
                            headers={"Content-Type": "application/json" if json_body
                                     else "image/png"},
                            timeout=300,
                        )
                    )  # fmt: skip
                except httpx.HTTPError as exc:
                    replies.append(type(exc).__name__)

            with MemoryWatchdog(server.proc.pid, LIMIT + GIB, interval_s=0.05, pss=True) as dog:
                flood = [threading.Thread(target=upload, args=(i,)) for i in range(FLOOD)]
                for thread in flood:
                    thread.start()
                normal: list[int | str] = []
                for _ in range(100):  # bounded: at most 100 small parses
                    if not any(t.is_alive() for t in flood) and normal:
                        break
                    try:
                        small = httpx.post(
                            f"{server.url}{PARSE}",
                            files={"file": ("n.png", png_bytes(), "image/png")},
                            timeout=300,
                        )
                        normal.append(small.status_code)
                    except httpx.HTTPError as exc:
                        normal.append(type(exc).__name__)
                    time.sleep(0.2)
                for thread in flood:
                    thread.join(300)
            kernel = kernel_figures(group)
            alive = server.proc.poll() is None
        finally:
            server.stop()
        log = server.log()
    statuses = [r.status_code if isinstance(r, httpx.Response) else r for r in replies]
    print(
        f"\n{FLOOD} uploads of {PADDED / 2**20:.0f} MB under a {LIMIT / GIB:.0f} GiB cgroup: "
        f"{sorted(statuses, key=str)}; tree PSS peak {dog.peak / 2**20:.0f} MiB; kernel peak "
        f"{kernel.get('peak', 0) / 2**20:.0f} MiB, OOM kills {kernel.get('oom_kill', 'n/a')}; "
        f"small parses meanwhile {normal}"
    )
    assert alive, log
    assert kernel.get("oom_kill", 0) == 0, (kernel, log)
    assert not dog.tripped and dog.peak < LIMIT, (dog.peak, log)
    assert len(replies) == FLOOD and set(statuses) <= {200, 503}, (statuses, log)
    busy = [r for r in replies if isinstance(r, httpx.Response) and r.status_code == 503]
    assert busy, statuses
    for reply in busy:
        assert reply.json()["error"]["code"] == "upload_memory_busy", reply.text
        assert int(reply.headers["Retry-After"]) >= 1
    assert normal and all(status == 200 for status in normal), normal
