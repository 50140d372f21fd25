"""Whether the CPU front's backend (the GPU pods' Service) can take a parse now.

The front never asks the API server: it learns that capacity is up the way a client would,
by polling ``<backend>/readyz`` (the Service routes only to Ready pods, so any 200 means
some pod serves). One poller per process, every call bounded in time; it polls every
``interval_s`` while a parse waits and ten times less often otherwise, and a waiter's
arrival (``kick``) polls at once, so a parse that arrives while the backend is up is not
held for a poll interval. A forward that cannot connect marks the backend down again
(``mark_down``): the pods went away between two polls.

A ready backend counts only while a good poll is recent (``fresh``: two poll intervals): at
rest the front polls every ten intervals, and a DocParser that went back to zero in between
leaves a ``ready`` that no pod backs. A parse then waits (held, so the operator sees it) for a
poll of its own (``unconfirm``) instead of being forwarded to a Service with no pods (on a real
cluster such a connect can hang rather than be refused).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

import aiohttp

log = logging.getLogger("docparser.front")

PROBE_TIMEOUT_S = 2.0
IDLE_FACTOR = 10  # no parse waiting: poll this many times less often
MIN_GAP_S = 0.2


class BackendWatch:
    """Polls ``url``/readyz; ``ready`` is set while the last poll answered 200."""

    def __init__(self, url: str, *, interval_s: float, session: aiohttp.ClientSession) -> None:
        self.url = url.rstrip("/")
        self.interval_s = interval_s
        self._session = session
        self.ready = asyncio.Event()
        self._kick = asyncio.Event()
        self._waiters = 0
        self._task: asyncio.Task[None] | None = None
        self.polls = 0
        self.last_change = time.monotonic()
        self.confirmed_at: float | None = None  # the last poll that answered 200 (monotonic)
        self._up = False  # what the log said last

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="front-backend-watch")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task

    def fresh(self) -> bool:
        """Ready, and a poll said so within two poll intervals."""
        at = self.confirmed_at
        return (
            self.ready.is_set()
            and at is not None
            and time.monotonic() - at <= 2 * self.interval_s + PROBE_TIMEOUT_S
        )

    def unconfirm(self) -> None:
        """``ready`` is too old to forward on: poll again now, wait for its answer."""
        self.ready.clear()
        self._kick.set()

    def mark_down(self) -> None:
        """A forward could not reach the backend: wait for the next good poll."""
        self._set(False)
        self._kick.set()

    async def wait_ready(self, timeout_s: float) -> bool:
        """True once the backend is ready, False after ``timeout_s``."""
        if self.ready.is_set():
            return True
        if timeout_s <= 0:
            return False
        self._waiters += 1
        self._kick.set()
        try:
            await asyncio.wait_for(self.ready.wait(), timeout_s)
            return True
        except TimeoutError:
            return self.ready.is_set()
        finally:
            self._waiters -= 1

    def _set(self, ready: bool) -> None:
        if ready:
            self.confirmed_at = time.monotonic()
            self.ready.set()
        else:
            self.ready.clear()
        if ready != self._up:  # a re-confirmed backend is no news
            self._up = ready
            self.last_change = time.monotonic()
            log.info("backend %s is %s", self.url, "ready" if ready else "not ready")

    async def poll(self) -> bool:
        """One bounded ``GET /readyz``: True on 200."""
        self.polls += 1
        try:
            timeout = aiohttp.ClientTimeout(total=PROBE_TIMEOUT_S)
            async with self._session.get(f"{self.url}/readyz", timeout=timeout) as resp:
                await resp.read()
                return resp.status == 200
        except (aiohttp.ClientError, TimeoutError, OSError):
            return False

    async def _run(self) -> None:
        # A kick polls early, but never more than once per MIN_GAP_S: a burst of arrivals
        # while the backend is down costs one probe, not one each.
        gap = min(self.interval_s, MIN_GAP_S)
        while True:
            self._kick.clear()
            self._set(await self.poll())
            every = self.interval_s if self._waiters else self.interval_s * IDLE_FACTOR
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._kick.wait(), every)
                await asyncio.sleep(gap)
