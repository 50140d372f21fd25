"""Serving lifecycle: starting -> ready -> draining, or failed.

Why a state machine: Kubernetes probes and the request path must agree on one truth.
``/readyz`` answers 200 only in ``ready``; ``/v1`` routes refuse new work (503) in every
other state, so a pod that is loading, warming up, draining after SIGTERM or whose engine
failed to load never receives traffic it cannot serve. In-flight requests are counted so
a drain can wait for them to finish (``wait_idle``).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import AsyncIterator
from enum import StrEnum

from docparser_runtime.errors import Unavailable


class State(StrEnum):
    STARTING = "starting"
    READY = "ready"
    DRAINING = "draining"
    FAILED = "failed"


class Lifecycle:
    """Thread-safe: the engine loads on a worker thread and reports back from there."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._state = State.STARTING
        self._reason: str | None = None
        self._since = time.time()
        self._in_flight = 0
        self._idle = asyncio.Event()
        self._idle.set()

    # -- state -------------------------------------------------------------------------
    @property
    def state(self) -> State:
        return self._state

    @property
    def reason(self) -> str | None:
        return self._reason

    @property
    def is_ready(self) -> bool:
        return self._state is State.READY

    def mark_ready(self) -> None:
        """Engine loaded and warmed up. Ignored once draining or failed (no way back)."""
        with self._lock:
            if self._state is State.STARTING:
                self._set(State.READY, None)

    def mark_failed(self, reason: str) -> None:
        with self._lock:
            if self._state is not State.DRAINING:
                self._set(State.FAILED, reason)

    def start_draining(self, reason: str = "shutting down") -> None:
        """Stop taking new work at once; in-flight requests still finish."""
        with self._lock:
            if self._state is not State.FAILED:
                self._set(State.DRAINING, reason)

    def _set(self, state: State, reason: str | None) -> None:
        self._state = state
        self._reason = reason
        self._since = time.time()

    def snapshot(self) -> dict[str, object]:
        """The JSON body of ``/readyz``."""
        body: dict[str, object] = {
            "status": self._state.value,
            "since": round(self._since, 3),
            "in_flight": self._in_flight,
        }
        if self._reason:
            body["reason"] = self._reason
        return body

    # -- in-flight tracking ------------------------------------------------------------
    @property
    def in_flight(self) -> int:
        return self._in_flight

    def check_accepting(self) -> None:
        """Raise ``Unavailable`` (503) unless new work may start now."""
        state = self._state
        if state is State.READY:
            return
        if state is State.STARTING:
            raise Unavailable("the engine is still loading; retry shortly", code="starting")
        if state is State.DRAINING:
            raise Unavailable("the server is draining; retry on another replica", code="draining")
        raise Unavailable(f"the engine failed to load: {self._reason}", code="engine_unavailable")

    @contextlib.asynccontextmanager
    async def request_slot(self, *, check: bool = True) -> AsyncIterator[None]:
        """Count one in-flight request for the duration of the block.

        ``check=False`` counts work that was accepted earlier (e.g. a queued job that a
        background worker picks up during a drain) without refusing it.
        """
        if check:
            self.check_accepting()
        self._in_flight += 1
        self._idle.clear()
        try:
            yield
        finally:
            self._in_flight -= 1
            if self._in_flight == 0:
                self._idle.set()

    async def wait_idle(self, timeout: float | None) -> bool:
        """Wait until no request is in flight; False if ``timeout`` passed first."""
        if self._in_flight == 0:
            return True
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
        except TimeoutError:
            return self._in_flight == 0
        return True
