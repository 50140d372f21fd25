"""How batch lines give way to pages someone waits on, in the continuous batch (issue 35).

Why two policies: what a batch row beside an interactive page costs depends on the device.
On a GPU a decode step is bound by reading the weights, nearly flat from 1 to 8 rows, so a
batch row beside an interactive page is almost free and the only thing it must give up is
its *slot* when none is left (``slots``: the newest running batch page goes back to the
queue with its tokens, ``preempted``). On a CPU device a step's compute grows with its rows
(~12 % from 1 to 8 rows on the tiny model), so a batch row slows every interactive token:
with ``rows`` every running batch page steps aside (``RunningBatch.park``: out of the decode
steps, its cache, tokens and position kept) while an interactive, job or background page runs
or waits, and resumes where it stopped (nothing recomputed) once none does. Parked pages hold
their cache (they count against the cache budget) but no slot. With no such page present
neither policy changes anything, so a pod without interactive traffic runs batch lines as a
batch-only pod does. ``auto`` (the default, ``DOCPARSER_BATCH_YIELD``): ``slots`` on CUDA,
``rows`` on any other device.
"""

from __future__ import annotations

import time
from typing import Literal

from docparser_runtime.engines.stepping import PageRun, SteppingEngine, projected_peak_tokens
from docparser_runtime.server.inference.priorities import Priority
from docparser_runtime.server.inference.queued import _Item

YieldPolicy = Literal["rows", "slots"]


def resolve_batch_yield(setting: str, device: str | None) -> YieldPolicy:
    """``auto`` -> ``slots`` on a CUDA device, ``rows`` elsewhere; the others as they are."""
    if setting == "auto":
        return "slots" if (device or "").startswith("cuda") else "rows"
    if setting not in ("rows", "slots"):
        raise ValueError(f"batch yield policy must be auto, rows or slots, not {setting!r}")
    return "rows" if setting == "rows" else "slots"


class BatchYield:
    """The ``ContinuousBatcher``'s rules between batch lines and other pages; the
    attributes are the batcher's own."""

    max_batch_size: int
    budget_tokens: int
    stepper: SteppingEngine
    batch_yield: YieldPolicy
    preempted: int
    _queue: list[_Item]
    _running: list[_Item]
    _parked: set[int]  # id() of the running batch items whose rows are parked

    def _rank(self, item: _Item, now: float) -> tuple[int, float]:
        raise NotImplementedError

    def _forget(self, item: _Item) -> None:
        raise NotImplementedError

    def _step_aside(self) -> tuple[list[PageRun], list[PageRun]]:
        """(rows to park, rows to resume) this iteration under ``rows``: every running batch
        page parks while a page ranked above batch runs or waits, and all resume once none
        does (before any batch page is admitted: they go first)."""
        if self.batch_yield != "rows":
            return [], []
        lines = [it for it in self._running if it.priority >= Priority.BATCH]
        others = any(it.priority < Priority.BATCH for it in self._running + self._queue)
        if others:
            moving = [it for it in lines if id(it) not in self._parked]
            self._parked.update(id(it) for it in moving)
            return _runs(moving), []
        moving = [it for it in lines if id(it) in self._parked]
        self._parked.clear()
        return [], _runs(moving)

    def _preempt(self) -> list[PageRun]:
        """Running batch pages (newest first) that leave so the waiting interactive and
        job pages this iteration can admit get a slot and cache room; they go back to the
        queue with their tokens (and recompute their cache when admitted again)."""
        now = time.monotonic()
        waiting = sorted((it for it in self._queue if it.priority < Priority.BATCH),
                         key=lambda it: self._rank(it, now))[:MAX_PREFILL_PAGES]  # fmt: skip
        lines = [it for it in self._running if it.priority >= Priority.BATCH]
        if not waiting or not lines:
            return []
        kept = [it for it in self._running if it.priority < Priority.BATCH]
        victims: list[_Item] = []
        while lines and not self._fits(kept + lines, waiting):
            victims.append(lines.pop())
        if not self._fits(kept + lines, waiting[:1]):
            return []  # not even the head fits beside the other pages: nothing to gain
        for item in victims:
            self._forget(item)
            self._queue.append(item)  # its rank (priority, arrival) is kept
        self.preempted += len(victims)
        return _runs(victims)

    def _fits(self, running: list[_Item], joining: list[_Item]) -> bool:
        """Slots (parked pages hold none) and the cache budget (they hold theirs)."""
        active = [it for it in running if id(it) not in self._parked]
        if len(active) + len(joining) > self.max_batch_size:
            return False
        rows = [(run.length, run.remaining) for run in _runs(running)]
        for item in joining:
            run = item.run or self.stepper.new_run(item.page, item.options, item.on_delta)
            item.run = run
            rows.append((run.length + 1, run.remaining))
        return len(rows) <= 1 or projected_peak_tokens(rows) <= self.budget_tokens

    def free_slots(self) -> int:
        """Slots a page may join: parked pages hold none."""
        return self.max_batch_size - len(self._running) + len(self._parked)


# Pages prefilled per iteration: each prefill delays the running pages' next token, so a
# burst of arrivals joins over a few steps instead of stalling every stream at once.
MAX_PREFILL_PAGES = 4


def _runs(items: list[_Item]) -> list[PageRun]:
    """The runs of admitted items (every admitted item has one)."""
    return [item.run for item in items if item.run is not None]
