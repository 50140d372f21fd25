"""A background loop for the suite's stand-ins of cluster components (the kubelet, a Gateway
controller): ``tick`` every ``interval`` seconds on a daemon thread until the ``with`` ends.

A tick that races a delete records the error and the next tick sees the new state, as a
level-triggered controller would; tests assert ``errors`` where it matters.
"""

from __future__ import annotations

import threading
from typing import Self


class Ticker:
    def __init__(self, name: str, interval: float) -> None:
        self.interval = interval
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.tick()
            except Exception as exc:  # a racing delete; the next tick sees the new state
                self.errors.append(repr(exc))
            self._stop.wait(self.interval)

    def tick(self) -> None:
        raise NotImplementedError
