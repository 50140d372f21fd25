"""The DeepSeek-OCR-2 engine's step-level interface (``engines.stepping.SteppingEngine``),
which continuous batching (``server/inference/continuous.py``) drives.

A mixin of ``DeepseekOcr2Engine`` kept apart so the engine module stays readable; like the
engine it imports torch only when called (``running.py`` holds the tensors).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from docparser_runtime.engines.base import DeltaCallback, PageImage, PageResult, ParseOptions
from docparser_runtime.engines.stepping import PageRun, RunningBatch
from docparser_runtime.errors import Unavailable


class ContinuousSteps:
    """What the engine gives continuous batching; the attributes are the engine's own."""

    device: str | None
    no_repeat_ngram_size: int
    no_repeat_ngram_window: int
    kv_cache_tokens: int
    gpu_memory_utilization: float
    _model: Any
    _kv_budget: int | None
    _prompt_text_tokens: dict[str, int]
    _eos_ids: set[int]
    _drop_ids: set[int]
    _whitelist_ids: set[int]

    def _prepare(self, pages: Sequence[PageImage], options: ParseOptions) -> Any:
        raise NotImplementedError

    def _decode(self, ids: list[int]) -> str:
        raise NotImplementedError

    def _finish(self, page: PageImage, generated: list[int], *, trips: int = 0) -> PageResult:
        raise NotImplementedError

    def kv_budget_tokens(self) -> int:
        from docparser_runtime.engines.deepseek_ocr2.running import kv_budget_tokens

        if self._kv_budget is None:
            self._kv_budget = kv_budget_tokens(
                self._model,
                self.device or "cpu",
                configured=self.kv_cache_tokens,
                utilization=self.gpu_memory_utilization,
            )
        return self._kv_budget

    def new_run(
        self, page: PageImage, options: ParseOptions, on_delta: DeltaCallback | None
    ) -> PageRun:
        """A page's run, its prompt length estimated for admission (exact once prefilled)."""
        text_tokens = self._prompt_text_tokens.get(options.mode, 0)
        return PageRun(page, options, page.vision_tokens + 1 + text_tokens, on_delta)

    def new_batch(self) -> RunningBatch:
        from docparser_runtime.engines.deepseek_ocr2.running import DeepseekRunningBatch, TokenRules

        if self._model is None:
            raise Unavailable("deepseek-ocr2 engine is not loaded")
        rules = TokenRules(
            eos_ids=frozenset(self._eos_ids),
            drop_ids=frozenset(self._drop_ids),
            ngram_size=self.no_repeat_ngram_size,
            ngram_window=self.no_repeat_ngram_window,
            whitelist=frozenset(self._whitelist_ids),
            decode=self._decode,
        )
        return DeepseekRunningBatch(
            self._model, lambda run: self._prepare([run.page], run.options), rules
        )

    def run_done(self, run: PageRun) -> bool:
        ended = bool(run.generated) and run.generated[-1] in self._eos_ids
        return ended or run.stopped or run.remaining == 0

    def finish_run(self, run: PageRun) -> PageResult:
        """As ``infer_batch`` finishes a page; a stream gets the text held back last."""
        from docparser_runtime.engines.deepseek_ocr2.generation import IncrementalDecoder

        if (
            run.on_delta is not None
            and not run.stopped
            and isinstance(run.decoder, IncrementalDecoder)
        ):
            tail = run.decoder.flush()
            if tail:
                run.on_delta(tail)
        return self._finish(run.page, run.generated, trips=run.trips)
