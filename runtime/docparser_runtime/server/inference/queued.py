"""A page waiting for (or in) the engine, and the small helpers both schedulers share.

``_Item`` is one queued page: its request's future, deadline and stream callback, its
priority, and (continuous batching) its ``PageRun``. ``server/inference/batcher.py`` (static
micro-batches) and ``continuous.py`` (continuous batching) keep their queues of these.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

from docparser_runtime.engines.base import DeltaCallback, PageImage, PageResult, ParseOptions
from docparser_runtime.engines.stepping import PageRun

PageFuture = asyncio.Future[PageResult]
_Entry = tuple[PageImage, DeltaCallback | None]  # a page to queue, and its stream callback


def is_out_of_memory(exc: BaseException) -> bool:
    """torch.cuda.OutOfMemoryError (by name: the batcher never imports torch) or an
    engine's own out-of-memory error message."""
    return type(exc).__name__ == "OutOfMemoryError" or "out of memory" in str(exc).lower()


def _report_to(callback: Callable[[PageResult], None]) -> Callable[[PageFuture], None]:
    def done(fut: PageFuture) -> None:
        if not fut.cancelled() and fut.exception() is None:
            callback(fut.result())

    return done


@dataclass
class SubmitTimings:
    """Filled by ``submit``: seconds waiting in the queue and inside engine calls."""

    queue_s: float = 0.0
    inference_s: float = 0.0


@dataclass(eq=False)
class _Item:
    page: PageImage
    options: ParseOptions
    future: PageFuture
    enqueued: float
    deadline: float | None
    on_delta: DeltaCallback | None = None  # set: a streamed page, always a batch of one
    priority: int = 0  # inference.priorities.Priority: the continuous scheduler's order
    run: PageRun | None = None  # set when the continuous scheduler admits the page
    started: float | None = None
    finished: float | None = None
    key: tuple[tuple[int, str, int, int], bool] = field(init=False)

    def __post_init__(self) -> None:
        self.key = (self.options.batch_key(), self.on_delta is not None)
