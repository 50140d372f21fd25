"""Slow clients against a real server process: headers and bodies have deadlines.

Raw sockets play the attacker (headers a byte at a time, an upload that stops, a body
trickled under the idle limit), with the deadlines shortened to seconds. Each attack must end
with the server closing the connection or answering 408, while a normal request sent during
the attack is served, and the server must not count the attackers against its connection
limit for ever.
"""

from __future__ import annotations

import socket
import time

import httpx
import pytest
from engines_for_tests import png_bytes
from live_server import LiveServer

pytestmark = pytest.mark.slow

HEADER_S, IDLE_S, TOTAL_S = 1.0, 1.0, 3.0
BOUND_S = 15.0  # every wait below ends by then: a hang fails instead of blocking the suite


@pytest.fixture(scope="module")
def server():
    env = {
        "DOCPARSER_HEADER_TIMEOUT_S": HEADER_S,
        "DOCPARSER_BODY_IDLE_TIMEOUT_S": IDLE_S,
        "DOCPARSER_BODY_TIMEOUT_S": TOTAL_S,
        "DOCPARSER_MAX_CONNECTIONS": 20,
        "DOCPARSER_DEFAULT_TIER": 0,
    }
    with LiveServer(env=env, gated_delay_s=0.0) as live:
        yield live


def _connect(server: LiveServer) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=BOUND_S)
    sock.settimeout(BOUND_S)
    return sock


def _read_until_closed(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (bounded by BOUND_S)."""
    chunks = []
    deadline = time.monotonic() + BOUND_S
    while time.monotonic() < deadline:
        try:
            data = sock.recv(65536)
        except (ConnectionResetError, TimeoutError):
            break
        if not data:
            break
        chunks.append(data)
    return b"".join(chunks)


def _normal_request(server: LiveServer) -> int:
    files = {"file": ("n.png", png_bytes(), "image/png")}
    return httpx.post(f"{server.url}/v1/document/parse", files=files, timeout=60).status_code


def test_headers_that_never_finish_are_cut_off(server: LiveServer) -> None:
    """More half-sent requests than the connection limit: all are closed after the header
    deadline, and a normal request is served while they hang and after."""
    attackers = [_connect(server) for _ in range(25)]
    for sock in attackers:
        sock.sendall(b"POST /v1/document/parse HTTP/1.1\r\nHost: x\r\nX-Slow: ")
    started = time.monotonic()
    closed = [_read_until_closed(sock) for sock in attackers]
    waited = time.monotonic() - started
    for sock in attackers:
        sock.close()
    assert all(data == b"" for data in closed)  # dropped, not answered: nothing was accepted
    assert waited < HEADER_S + 10, f"connections held {waited:.1f}s"
    assert _normal_request(server) == 200


def test_a_kept_alive_connection_gets_the_same_header_deadline(server: LiveServer) -> None:
    sock = _connect(server)
    sock.sendall(b"GET /livez HTTP/1.1\r\nHost: x\r\n\r\n")
    first = sock.recv(65536)
    head, _, body = first.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length")
    )
    while len(body) < length:  # the whole first response, so what follows is the second's
        body += sock.recv(65536)
    assert first.startswith(b"HTTP/1.1 200")
    sock.sendall(b"GET /livez HTTP/1.1\r\n")  # the next request stalls in its headers
    assert _read_until_closed(sock) == b""
    sock.close()


def test_an_upload_that_stops_gets_408(server: LiveServer) -> None:
    sock = _connect(server)
    sock.sendall(
        b"POST /v1/document/parse HTTP/1.1\r\nHost: x\r\nContent-Type: image/png\r\n"
        b"Content-Length: 100000\r\n\r\n" + b"\x89PNG\r\n\x1a\n"
    )
    started = time.monotonic()
    reply = _read_until_closed(sock)
    sock.close()
    assert reply.startswith(b"HTTP/1.1 408"), reply[:200]
    assert b'"request_timeout"' in reply and b"stalled" in reply
    assert time.monotonic() - started < IDLE_S + 10
    assert _normal_request(server) == 200


def test_a_trickled_upload_gets_408_at_the_total_limit(server: LiveServer) -> None:
    """Each chunk arrives within the idle limit; the whole body does not within the total."""
    sock = _connect(server)
    sock.sendall(
        b"POST /v1/document/parse HTTP/1.1\r\nHost: x\r\nContent-Type: image/png\r\n"
        b"Content-Length: 100000\r\n\r\n"
    )
    started = time.monotonic()
    reply = b""
    for _ in range(40):  # bounded: 40 chunks, 0.4 s apart, about 16 s at most
        try:
            sock.sendall(b"x" * 10)
        except (BrokenPipeError, ConnectionResetError):
            break
        sock.settimeout(0.4)
        try:
            reply += sock.recv(65536)
        except TimeoutError:
            continue
        if reply:
            break
    sock.settimeout(BOUND_S)
    reply += _read_until_closed(sock)
    sock.close()
    assert reply.startswith(b"HTTP/1.1 408"), reply[:200]
    assert b"took longer than" in reply
    assert TOTAL_S - 0.5 < time.monotonic() - started < TOTAL_S + 10


def test_running_out_of_file_descriptors_does_not_flood_the_log() -> None:
    """200 idle connections against a limit of 96 descriptors: asyncio's accept loop fails
    in a tight loop (measured: 88,000 tracebacks, 32 MB of log in 10 s). One line per minute
    gets through; the server answers again once the connections go."""
    with LiveServer(env={"DOCPARSER_HEADER_TIMEOUT_S": 30}, gated_delay_s=0.0, nofile=96) as live:
        before = len(live.log())
        attackers = []
        for _ in range(200):
            try:
                attackers.append(socket.create_connection(("127.0.0.1", live.port), timeout=5))
            except OSError:
                break
        time.sleep(3)
        flood = live.log()[before:]
        for sock in attackers:
            sock.close()
        assert 0 < flood.count("out of system resource") <= 2, flood[-2000:]
        assert "Traceback" not in flood
        deadline = time.monotonic() + BOUND_S
        while True:  # back to serving once the descriptors are free
            try:
                if httpx.get(f"{live.url}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "never answered again"
            time.sleep(0.2)
