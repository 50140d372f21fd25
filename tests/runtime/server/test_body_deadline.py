"""``BodyDeadline`` in-process: the body has deadlines; what follows the body does not."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from docparser_runtime.server.guards.slow_clients import BodyDeadline

SCOPE = {"type": "http", "method": "POST", "path": "/", "headers": []}


def run(
    app: Any, messages: list[tuple[float, dict]], *, idle_s: float = 0.2, total_s: float = 0.6
) -> tuple[list[dict], list[dict]]:
    """Drive ``BodyDeadline(app)`` with client messages (delay before each); returns what
    the application received and what went out to the client."""
    received: list[dict] = []
    sent: list[dict] = []

    async def main() -> None:
        queue: asyncio.Queue[dict] = asyncio.Queue()

        async def client() -> None:
            for delay, message in messages:
                await asyncio.sleep(delay)
                queue.put_nowait(message)

        async def receive() -> dict:
            message = await queue.get()
            received.append(message)
            return message

        async def send(message: dict) -> None:
            sent.append(message)

        feeder = asyncio.create_task(client())
        guarded = BodyDeadline(app, idle_s=idle_s, total_s=total_s)
        await asyncio.wait_for(guarded(SCOPE, receive, send), 5)
        feeder.cancel()

    asyncio.run(main())
    return received, sent


async def echo_after_disconnect_wait(scope: Any, receive: Any, send: Any) -> None:
    """Reads the body, replies in two parts with a wait for the client in between (as a
    streaming response listening for a disconnect does)."""
    body = b""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    await send({"type": "http.response.start", "status": 200, "headers": []})
    message = await receive()  # the next message only comes when the client leaves
    await send({"type": "http.response.body", "body": body + message["type"].encode()})


def test_a_complete_body_passes_and_later_waits_are_not_timed() -> None:
    chunk = {"type": "http.request", "body": b"ab", "more_body": True}
    last = {"type": "http.request", "body": b"c", "more_body": False}
    _, sent = run(
        echo_after_disconnect_wait,
        [(0.05, chunk), (0.05, last), (0.5, {"type": "http.disconnect"})],  # 0.5 > idle
    )
    assert sent[0]["status"] == 200
    assert sent[1]["body"] == b"abchttp.disconnect"


def test_a_stalled_body_is_answered_408_and_the_app_sees_a_disconnect() -> None:
    chunk = {"type": "http.request", "body": b"ab", "more_body": True}
    received, sent = run(echo_after_disconnect_wait, [(0.0, chunk), (1.0, chunk)])
    assert sent[0]["status"] == 408
    error = json.loads(sent[1]["body"])["error"]
    assert error["code"] == "request_timeout" and "stalled" in error["message"]
    assert len(sent) == 2  # the application's own reply (none here) would be dropped
    assert received == [chunk]


def test_a_body_trickled_past_the_total_limit_is_answered_408() -> None:
    chunk = {"type": "http.request", "body": b"a", "more_body": True}
    # 1.2 s > total 0.6. The idle limit is far above the 0.15 s gaps: on a loaded machine
    # (a CI run beside the cluster session) one gap once took over 0.2 s and read as a stall.
    _, sent = run(echo_after_disconnect_wait, [(0.15, chunk)] * 8, idle_s=2.0)
    assert sent[0]["status"] == 408
    assert "took longer than 0.6 s" in json.loads(sent[1]["body"])["error"]["message"]
