"""Request bodies are charged to the host-memory budget before they are read (issue 34).

The reservation logic with a real ``MemoryBudget`` and the real body reader
(``request_input.read_body``) under the real ``BodyMemory`` middleware, driven by ASGI
messages: a declared body is charged whole before its first chunk, a chunked one as its
chunks arrive, a JSON one at its higher multiple, and every charge is back when the request
ends (read, refused, or the client gone). Then the real app: a busy budget answers 503
``upload_memory_busy`` with ``Retry-After`` through the one error mapping; a body that
could never fit, 413. The flood under a real memory cgroup is test_host_memory_cap.py's.
"""

from __future__ import annotations

from typing import Any

from app_for_tests import make_settings, serving
from docparser_runtime.errors import PayloadTooLarge, Unavailable
from docparser_runtime.server.endpoints.parse.request_input import read_body
from docparser_runtime.server.guards.body_memory import BodyMemory
from docparser_runtime.server.state import runtime_state
from docparser_runtime.sizing.cgroup_memory import MemoryLimit
from docparser_runtime.sizing.host_memory import (
    JSON_BODY_BYTES_PER_BYTE,
    RAW_BODY_BYTES_PER_BYTE,
    HostBudget,
    MemoryBudget,
)
from engines_for_tests import png_bytes
from starlette.requests import ClientDisconnect, Request

MIB = 2**20
CHUNK = 1000


def budget(total: int = 64 * MIB) -> MemoryBudget:
    return MemoryBudget(HostBudget(MemoryLimit(total, "test"), 0, total))


def scope(headers: dict[str, str]) -> dict[str, Any]:
    raw = [(k.encode(), v.encode()) for k, v in headers.items()]
    return {"type": "http", "method": "POST", "path": "/v1/document/parse", "headers": raw}


async def drive(
    memory: MemoryBudget, headers: dict[str, str], chunks: int, *, disconnect: bool = False
) -> tuple[list[int], BaseException | None]:
    """Read a body of ``chunks`` chunks through the middleware; the budget's use at each
    ``receive`` (before the chunk it returns was read), and what the reader raised."""
    seen: list[int] = []
    sent = 0

    async def receive() -> dict[str, Any]:
        nonlocal sent
        seen.append(memory.used)
        if disconnect and sent == 1:
            return {"type": "http.disconnect"}
        sent += 1
        return {"type": "http.request", "body": b"x" * CHUNK, "more_body": sent < chunks}

    raised: list[BaseException] = []

    async def reader(scope: Any, receive: Any, send: Any) -> None:
        try:
            await read_body(Request(scope, receive), 10 * MIB)
        except Exception as exc:  # what the route would raise, kept for the test
            raised.append(exc)

    async def send(message: Any) -> None:
        raise AssertionError("the reader sends nothing")

    await BodyMemory(reader, budget=lambda: memory)(scope(headers), receive, send)
    return seen, (raised[0] if raised else None)


async def test_a_declared_body_is_charged_whole_before_its_first_byte_is_read():
    memory = budget()
    length = 5 * CHUNK
    headers = {"content-type": "application/pdf", "content-length": str(length)}
    seen, raised = await drive(memory, headers, 5)
    assert raised is None
    assert seen[0] == length * RAW_BODY_BYTES_PER_BYTE  # before the first receive
    assert set(seen) == {length * RAW_BODY_BYTES_PER_BYTE}  # never more while it streams
    assert memory.used == 0  # back when the request ended


async def test_a_json_body_is_charged_at_its_multiple():
    memory = budget()
    headers = {"content-type": "application/json; charset=utf-8", "content-length": "3000"}
    seen, _ = await drive(memory, headers, 3)
    assert seen[0] == 3000 * JSON_BODY_BYTES_PER_BYTE
    assert memory.used == 0


async def test_a_chunked_body_without_length_is_charged_as_its_chunks_arrive():
    memory = budget()
    seen, raised = await drive(memory, {"content-type": "image/png"}, 4)
    assert raised is None
    assert seen == [k * CHUNK * RAW_BODY_BYTES_PER_BYTE for k in range(4)]
    assert memory.peak == 4 * CHUNK * RAW_BODY_BYTES_PER_BYTE
    assert memory.used == 0


async def test_a_client_that_leaves_mid_body_gives_its_charge_back():
    memory = budget()
    headers = {"content-type": "image/png", "content-length": str(10 * CHUNK)}
    seen, raised = await drive(memory, headers, 10, disconnect=True)
    assert isinstance(raised, ClientDisconnect)
    assert seen[-1] == 10 * CHUNK * RAW_BODY_BYTES_PER_BYTE  # held while it was reading
    assert memory.used == 0


async def test_a_short_budget_refuses_before_reading_and_a_growing_body_when_it_runs_out():
    memory = budget(10 * CHUNK)
    assert memory.try_reserve(6 * CHUNK)  # another request's
    declared = {"content-type": "image/png", "content-length": str(3 * CHUNK)}
    seen, raised = await drive(memory, declared, 3)
    assert isinstance(raised, Unavailable) and raised.code == "upload_memory_busy"
    assert raised.retry_after_s and seen == []  # refused before a byte was read
    seen, raised = await drive(memory, {"content-type": "image/png"}, 5)
    assert isinstance(raised, Unavailable) and len(seen) == 3  # the third chunk overflowed
    too_big = {"content-type": "image/png", "content-length": str(6 * CHUNK)}
    seen, raised = await drive(memory, too_big, 6)  # 12 000 bytes of a 10 000 budget
    assert isinstance(raised, PayloadTooLarge) and raised.code == "host_memory_limit"
    assert memory.used == 6 * CHUNK  # only the other request's charge is left


async def test_the_app_answers_503_with_retry_after_while_bodies_fill_the_budget():
    page = png_bytes()
    async with serving(make_settings()) as (app, client, _):
        memory = runtime_state(app).host_memory
        assert memory is not None
        held = memory.total - len(page)  # room for less than this upload's charge
        assert memory.try_reserve(held)
        busy = await client.post("/v1/document/parse", files={"file": ("p.png", page, "image/png")})
        assert busy.status_code == 503, busy.text
        assert busy.json()["error"]["code"] == "upload_memory_busy"
        assert int(busy.headers["Retry-After"]) >= 1
        assert memory.used == held  # its charge went back
        memory.release(held)
        ok = await client.post("/v1/document/parse", files={"file": ("p.png", page, "image/png")})
        assert ok.status_code == 200, ok.text
        assert memory.used == 0
