"""Lifecycle: transitions, refusal codes per state, in-flight counting and wait_idle."""

from __future__ import annotations

import asyncio

import pytest
from docparser_runtime.errors import Unavailable
from docparser_runtime.server.ops.lifecycle import Lifecycle, State


def test_transitions_are_one_way():
    lc = Lifecycle()
    assert lc.state is State.STARTING and not lc.is_ready
    lc.mark_ready()
    assert lc.is_ready
    lc.start_draining("SIGTERM")
    lc.mark_ready()  # no way back from draining
    assert lc.state is State.DRAINING and lc.snapshot()["reason"] == "SIGTERM"

    failed = Lifecycle()
    failed.mark_failed("no weights")
    failed.mark_ready()
    failed.start_draining()
    assert failed.state is State.FAILED and failed.reason == "no weights"


@pytest.mark.parametrize(
    ("setup", "code"),
    [
        (lambda lc: None, "starting"),
        (lambda lc: (lc.mark_ready(), lc.start_draining()), "draining"),
        (lambda lc: lc.mark_failed("boom"), "engine_unavailable"),
    ],
)
def test_refusal_code_per_state(setup, code):
    lc = Lifecycle()
    setup(lc)
    with pytest.raises(Unavailable) as info:
        lc.check_accepting()
    assert info.value.code == code


async def test_in_flight_counting_and_wait_idle():
    lc = Lifecycle()
    lc.mark_ready()
    release = asyncio.Event()

    async def request():
        async with lc.request_slot():
            await release.wait()

    tasks = [asyncio.create_task(request()) for _ in range(3)]
    await asyncio.sleep(0.01)
    assert lc.in_flight == 3 and lc.snapshot()["in_flight"] == 3
    lc.start_draining()
    assert await lc.wait_idle(0.05) is False  # still busy: times out
    with pytest.raises(Unavailable):
        async with lc.request_slot():
            pass
    async with lc.request_slot(check=False):  # accepted earlier (e.g. a claimed job)
        assert lc.in_flight == 4
    release.set()
    assert await lc.wait_idle(5) is True
    await asyncio.gather(*tasks)
    assert lc.in_flight == 0


async def test_slot_is_released_when_the_request_fails():
    lc = Lifecycle()
    lc.mark_ready()
    with pytest.raises(RuntimeError):
        async with lc.request_slot():
            raise RuntimeError("handler failed")
    assert lc.in_flight == 0
    assert await lc.wait_idle(0) is True
