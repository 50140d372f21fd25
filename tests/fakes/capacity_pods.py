"""A runtime pod's ``/metrics`` under emulated traffic whose truth the test knows.

Pages arrive at ``rate`` pages per second; each is read at the next tier of ``tiers`` (as if
``auto`` chose it), holds a decode slot ``service_s`` seconds, waits in the queue the next of
``waits`` seconds, and generates ``output_tokens``. The exposition is rendered by the
runtime's own ``Metrics`` (the series and names the operator reads are the real ones); only
``docparser_memory_bytes`` is set by the test (the real collector reads this machine's
cgroup). ``text()`` advances the traffic to the moment it is called, so a reader sees the
counters a pod serving that traffic would show then.
"""

from __future__ import annotations

import itertools
import math
import threading
import time
from collections.abc import Callable, Sequence

from docparser_runtime.server.ops.metrics import Metrics
from docparser_runtime.sizing.capacity import worst_case_vision_tokens

GIB = 1024**3


class EmulatedPod:
    def __init__(
        self,
        *,
        rate: float,
        service_s: float,
        tiers: Sequence[int] = (0, 0, 2, 6),
        waits: Sequence[float] = tuple(i / 20 for i in range(1, 21)),
        slots: int = 2,
        output_tokens: int = 400,
        memory_peak: float = 3 * GIB,
        memory_limit: float = 4 * GIB,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.rate, self.service_s, self.output_tokens = rate, service_s, output_tokens
        self.memory_peak, self.memory_limit = memory_peak, memory_limit
        self.clock = clock
        self.metrics = Metrics(model="deepseek-ocr2", version="v1")
        self.metrics.decode_slots.set(slots)
        self._tiers = itertools.cycle(tiers)
        self._waits = itertools.cycle(waits)
        self._lock = threading.Lock()
        self._since = clock()
        self._arrived = 0.0  # pages arrived before _since at earlier rates
        self.served = 0

    def set_rate(self, rate: float) -> None:
        """Change the arrival rate from now on (0: the traffic stops)."""
        with self._lock:
            now = self.clock()
            self._arrived += self.rate * (now - self._since)
            self._since, self.rate = now, rate

    def _advance(self) -> None:
        arrived = math.floor(self._arrived + self.rate * (self.clock() - self._since))
        for _ in range(arrived - self.served):
            tier = next(self._tiers)
            self.metrics.count_parsed(
                pages=1,
                vision_tokens=worst_case_vision_tokens(tier),
                output_tokens=self.output_tokens,
            )
            self.metrics.count_tier(
                tier=tier, auto=True, vision_tokens=worst_case_vision_tokens(tier)
            )
            self.metrics.observe_service(tier, self.service_s)
            self.metrics.observe_stage("queue", next(self._waits))
        self.served = max(self.served, arrived)

    def text(self) -> str:
        with self._lock:
            self._advance()
            rendered = self.metrics.render().decode()
        kept = [line for line in rendered.splitlines() if "docparser_memory_bytes" not in line]
        kept += [
            "# TYPE docparser_memory_bytes gauge",
            f'docparser_memory_bytes{{kind="peak"}} {self.memory_peak}',
            f'docparser_memory_bytes{{kind="limit"}} {self.memory_limit}',
        ]
        return "\n".join(kept) + "\n"
