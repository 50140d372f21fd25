"""The step-level engine interface that continuous batching runs on (no torch here).

Why: a static batch generates until its longest page ends, so short pages wait for long ones
and decode slots idle (OCR outputs range from ~100 to 3,000+ tokens). An engine that can
*step* lets the scheduler (``server/inference/continuous.py``) add a page to the running
batch between two decode steps and take a finished one out at once, as vLLM and TGI do. The
engine owns
the tensors (model, cache); the scheduler owns the policy (which page runs, when one leaves).

``PageRun`` is one page's generation state. It outlives a stay in the running batch: a page
evicted after an out-of-memory error keeps its generated tokens and resumes later by
recomputing its cache (vLLM's recompute preemption), so its output does not change.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from docparser_runtime.engines.base import DeltaCallback, PageResult, ParseOptions
from docparser_runtime.pages import PageImage


@dataclass(eq=False)
class PageRun:
    """One page on its way through a stepping engine.

    ``prompt_tokens``: the prompt's length (vision tokens, separator and the mode's text),
    the engine's estimate until the page is prefilled, exact after. ``generated``: the ids
    produced so far, the last one not yet fed back. ``trips``: steps at which the
    repetition guard changed this page's output. ``stopped``: its stream's client left.
    """

    page: PageImage
    options: ParseOptions
    prompt_tokens: int
    on_delta: DeltaCallback | None = None
    generated: list[int] = field(default_factory=list)
    trips: int = 0
    stopped: bool = False
    decoder: object | None = None  # the engine's incremental detokeniser of a stream

    @property
    def remaining(self) -> int:
        """Decode steps this page may still take (its own ``max_new_tokens``)."""
        return max(0, self.options.max_new_tokens - len(self.generated))

    @property
    def length(self) -> int:
        """Tokens of this page in the cache once its last generated id is fed back."""
        return self.prompt_tokens + len(self.generated)


@runtime_checkable
class RunningBatch(Protocol):
    """The pages decoding together on one device, in the order they joined."""

    @property
    def runs(self) -> Sequence[PageRun]: ...

    @property
    def padded_tokens(self) -> int:
        """Cache slots held now: pages x padded length (what memory follows)."""
        ...

    def join(self, runs: Sequence[PageRun]) -> None:
        """Prefill ``runs`` (vision encoder + prompt, or a resumed page's prompt and
        tokens) and add them; a new page gets its first token here."""
        ...

    def step(self) -> None:
        """One decode step: every page gets one more token (and its stream the text)."""
        ...

    def leave(self, runs: Sequence[PageRun]) -> None:
        """Take ``runs`` out (running or parked) and give their cache back."""
        ...

    def park(self, runs: Sequence[PageRun]) -> None:
        """Take running ``runs`` out of the decode steps but keep their cache: they cost
        the device no compute until ``resume`` and hold their memory meanwhile."""
        ...

    def resume(self, runs: Sequence[PageRun]) -> None:
        """Parked ``runs`` back in the steps, where they stopped (nothing recomputed)."""
        ...


@runtime_checkable
class SteppingEngine(Protocol):
    """An engine the continuous scheduler can drive step by step."""

    name: str

    def kv_budget_tokens(self) -> int:
        """Cache slots (pages x padded length) the device can hold besides the weights."""
        ...

    def new_run(
        self, page: PageImage, options: ParseOptions, on_delta: DeltaCallback | None
    ) -> PageRun: ...

    def new_batch(self) -> RunningBatch: ...

    def run_done(self, run: PageRun) -> bool:
        """The page ended: an end-of-sequence id, its ``max_new_tokens`` or its stream
        stopped."""
        ...

    def finish_run(self, run: PageRun) -> PageResult:
        """The page's result (EOS cut, decoded, grounding parsed), as ``infer_batch``."""
        ...

    def release_cached_memory(self) -> None: ...


def projected_peak_tokens(rows: Sequence[tuple[int, int]]) -> int:
    """The most cache slots a batch will hold if nobody else joins and every page runs
    to its ``max_new_tokens``.

    ``rows``: (length now, steps left) per page. Pages are right-aligned (left padding),
    so the batch holds pages x (longest page) slots, and a left-padding column goes once no
    page needs it. Between two departures the size only grows, so the peak is just before
    one: at ``k`` = some page's steps left, over the pages still there. This is the
    worst case the scheduler reserves before it admits a page (it never over-admits;
    vLLM instead allocates blocks as it goes and preempts).
    """
    peak = len(rows) * max((length for length, _ in rows), default=0)
    for _, k in rows:
        alive = [length for length, left in rows if left >= k]
        peak = max(peak, len(alive) * (max(alive) + k))
    return peak
