"""Stage times of one parse, kept apart from ``serving`` so that module stays readable.

Decoding is summed over pages (pages decode concurrently with inference); the engine's time
is the wall span from the first page's start to the last page's end, so pages that share
batches are not counted twice.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from docparser_runtime.server.inference.queued import SubmitTimings


@dataclass
class ParseTimings:
    """Stage times of one parse: decoding (summed over pages) and the engine's wall span."""

    preprocess_s: float = 0.0
    pixels: int = 0  # decoded, over all pages
    planned: int = 0  # pages counted in the outstanding-pages gauge
    settled: int = 0  # of those, pages whose engine call ended
    queue_s: float | None = None
    first_start: float | None = None
    last_end: float | None = None
    held: dict[int, int] = field(default_factory=dict)  # page index -> host memory bytes

    def add(self, submitted: float, sub: SubmitTimings) -> None:
        start = submitted + sub.queue_s
        if self.queue_s is None:
            self.queue_s = sub.queue_s
        self.first_start = start if self.first_start is None else min(self.first_start, start)
        end = start + sub.inference_s
        self.last_end = end if self.last_end is None else max(self.last_end, end)

    @property
    def inference_s(self) -> float:
        if self.first_start is None or self.last_end is None:
            return 0.0
        return self.last_end - self.first_start
