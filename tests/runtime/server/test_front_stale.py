"""The CPU front after its backend went away, as real processes: the case of a DocParser that
went back to zero pods a moment before a synchronous parse arrives.

The front polls the backend's ``/readyz`` ten times less often while nothing waits, so its last
word can still be "ready" when the pods are gone. Such a parse must be held (and counted in
``docparser_front_held_requests``, which is what wakes the DocParser), not forwarded into a
Service with no pods, and a backend address that takes no connection (on a cluster, a Service
whose pods went away can drop the connect instead of refusing it) must not eat the hold.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

import pytest
from documents import png_bytes, single_column
from front_processes import FrontAndBackend, InBackground, metric, post_parse, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.redis]

HELD = "docparser_front_held_requests"
# At rest the front polls every 10 x 1.5 s: its "ready" outlives the backend by up to 15 s.
ENV = {"DOCPARSER_FRONT_HOLD_SECONDS": 60, "DOCPARSER_FRONT_POLL_INTERVAL_S": 1.5}


@pytest.fixture(scope="module")
def page() -> bytes:
    return png_bytes(single_column().image)


def new_page(width: int) -> bytes:
    """A page the result cache has not seen (a hit would never reach the backend)."""
    return png_bytes(single_column(size=(width, 700)).image)


@contextmanager
def taking_no_connection(port: int) -> Iterator[None]:
    """A listener on ``port`` whose accept queue is full and never drained: the kernel drops
    every further SYN, so a connect hangs (as to an address nothing answers)."""
    with ExitStack() as stack:
        listener = stack.enter_context(socket.socket())
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", port))
        listener.listen(0)
        for _ in range(3):  # fill the queue (a backlog of 0 admits one or two)
            filler = stack.enter_context(socket.socket())
            filler.setblocking(False)
            filler.connect_ex(("127.0.0.1", port))
        probe = stack.enter_context(socket.socket())
        probe.settimeout(1.0)
        with pytest.raises(OSError):  # the premise: a connect here is not answered
            probe.connect(("127.0.0.1", port))
        yield


def _back_to_zero(fb: FrontAndBackend, page: bytes) -> None:
    """The backend serves (the front saw it ready and forwarded), the front's watch goes back
    to its slow pace (one more poll at the fast one), then the backend goes away."""
    backend = fb.start_backend().wait_ready(120)
    first = post_parse(fb.front.url, page)
    assert first.status_code == 200, first.text
    time.sleep(2 * ENV["DOCPARSER_FRONT_POLL_INTERVAL_S"])
    backend.stop()


def test_a_parse_right_after_the_backend_left_is_held_and_answered(redis_url, page):
    with FrontAndBackend(redis_url, front_env=ENV) as fb:
        _back_to_zero(fb, page)
        fresh = new_page(1010)
        held = InBackground(lambda: post_parse(fb.front.url, fresh, timeout=90))
        wait_for("the parse held", lambda: metric(fb.front.url, HELD) == 1, 10)
        fb.start_backend()
        resp = held.result(120)
        assert resp.status_code == 200, resp.text
        assert metric(fb.front.url, HELD) == 0


def test_a_backend_that_takes_no_connection_does_not_eat_the_hold(redis_url, page):
    with FrontAndBackend(redis_url, front_env=ENV) as fb:
        _back_to_zero(fb, page)
        fresh = new_page(1020)
        with taking_no_connection(fb.backend_port):
            held = InBackground(lambda: post_parse(fb.front.url, fresh, timeout=90))
            # A probe or a connect of at most a couple of seconds, then it is held.
            wait_for("the parse held", lambda: metric(fb.front.url, HELD) == 1, 8)
        fb.start_backend()
        resp = held.result(120)
        assert resp.status_code == 200, resp.text
        assert "Quarterly Report" in resp.json()["content"]
        assert metric(fb.front.url, HELD) == 0
