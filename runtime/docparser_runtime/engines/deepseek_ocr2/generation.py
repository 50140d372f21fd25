"""Generation glue for the DeepSeek-OCR-2 engine: streaming, stopping, repetition guard.

Imports torch/transformers at module level, so only ``deepseek_ocr2`` imports it (the
``rapidocr`` path never does).

* ``IncrementalDecoder``: token ids -> text deltas whose concatenation equals decoding all
  ids at once; holds back a delta while it ends inside a multi-byte character.
* ``TokenQueueStreamer``: a ``BaseStreamer`` that hands generated ids from the generate
  thread to the caller's thread, so the caller's ``on_delta`` runs in its own thread, in order.
* ``StopOnEvent``: a ``StoppingCriteria`` that ends generation once the caller sets an event
  (the client went away): GPU time is not spent on text nobody reads.
* ``WindowedNoRepeatNGram``: DeepSeek-OCR's own repetition guard (its vLLM
  ``NoRepeatNGramLogitsProcessor``): ban a token that would repeat an n-gram seen in the
  last ``window`` generated tokens. Unlike HF ``no_repeat_ngram_size`` it ignores the prompt
  (1000+ identical ``<image>`` tokens) and distant legitimately repeated text (table rows),
  and costs O(window) per step instead of O(length).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch
from transformers import LogitsProcessor, StoppingCriteria
from transformers.generation.streamers import BaseStreamer

REPLACEMENT_CHAR = "\ufffd"


class IncrementalDecoder:
    """Detokenise a growing id list into deltas (prefix/read offsets, as vLLM does).

    Decoding a window that starts at the last emitted boundary keeps tokenizer quirks
    (leading-space stripping, byte-level merges) out of the deltas.
    """

    def __init__(self, decode: Callable[[list[int]], str]) -> None:
        self._decode = decode
        self.ids: list[int] = []
        self._prefix = 0
        self._read = 0

    def push(self, token_id: int) -> str:
        self.ids.append(token_id)
        return self._delta(final=False)

    def flush(self) -> str:
        """Whatever is still held back (e.g. an incomplete character at the end)."""
        return self._delta(final=True)

    def _delta(self, *, final: bool) -> str:
        prefix_text = self._decode(self.ids[self._prefix : self._read])
        new_text = self._decode(self.ids[self._prefix :])
        if len(new_text) <= len(prefix_text):
            return ""
        if not final and new_text.endswith(REPLACEMENT_CHAR):
            return ""
        self._prefix, self._read = self._read, len(self.ids)
        return new_text[len(prefix_text) :]


class TokenQueueStreamer(BaseStreamer):
    """Receives ids from ``generate`` (batch of one) and queues them for another thread."""

    _END = object()

    def __init__(self, skip_ids: Iterable[int] = ()) -> None:
        self._queue: queue.Queue[Any] = queue.Queue()  # token ids, then ``_END``
        self._skip = set(skip_ids)
        self._prompt_seen = False

    def put(self, value: torch.Tensor) -> None:
        if not self._prompt_seen:  # generate() first puts the whole prompt
            self._prompt_seen = True
            return
        for token_id in value.reshape(-1).tolist():
            if token_id not in self._skip:
                self._queue.put(token_id)

    def end(self) -> None:
        self._queue.put(self._END)

    def __iter__(self) -> Iterator[int]:
        while True:
            item = self._queue.get()
            if item is self._END:
                return
            yield item


class StopOnEvent(StoppingCriteria):
    """Stop every sequence once ``event`` is set."""

    def __init__(self, event: threading.Event) -> None:
        self.event = event

    def __call__(
        self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kwargs: Any
    ) -> torch.Tensor:
        return torch.full(
            (input_ids.shape[0],), self.event.is_set(), dtype=torch.bool, device=input_ids.device
        )


class WindowedNoRepeatNGram(LogitsProcessor):
    """Ban the next token of any n-gram already seen in the recent generated window.

    ``trips[row]`` counts the steps at which the guard changed the output of that row: the
    model's top token was banned (it was looping). A row that produced a stop id has ended
    (HF keeps padding it in a batch), so its later steps do not count.
    """

    def __init__(
        self,
        ngram_size: int,
        window: int,
        prompt_length: int,
        whitelist_token_ids: Iterable[int] = (),
        stop_token_ids: Iterable[int] = (),
    ) -> None:
        if ngram_size < 1:
            raise ValueError("ngram_size must be >= 1")
        self.ngram_size = ngram_size
        self.window = window
        self.prompt_length = prompt_length
        self.whitelist = set(whitelist_token_ids)
        self.stop_ids = set(stop_token_ids)
        self.trips: list[int] = []
        self._ended: list[bool] = []
        self._seen = 0  # generated ids already checked for a stop id

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        n = self.ngram_size
        generated = input_ids[:, self.prompt_length :]
        if len(self.trips) != generated.shape[0]:
            self.trips = [0] * generated.shape[0]
            self._ended = [False] * generated.shape[0]
            self._seen = 0
        for row, new_ids in enumerate(generated[:, self._seen :].tolist()):
            self._ended[row] = self._ended[row] or not self.stop_ids.isdisjoint(new_ids)
        self._seen = generated.shape[1]
        if generated.shape[1] < n:
            return scores
        recent = generated[:, -(self.window + n - 1) :].tolist()
        top = scores.argmax(dim=-1).tolist()
        for row, seq in enumerate(recent):
            banned = banned_next_tokens(seq, n, self.whitelist)
            if banned:
                if top[row] in banned and not self._ended[row]:
                    self.trips[row] += 1
                scores[row, list(banned)] = -float("inf")
        return scores


def banned_next_tokens(recent: list[int], ngram_size: int, whitelist: set[int]) -> set[int]:
    """Tokens that would complete an n-gram already in ``recent`` (the guard's window:
    the last ``window + n - 1`` generated ids); one rule for ``generate`` and the
    continuous batch (``deepseek_ocr2.running``), so both steer a page the same way."""
    n = ngram_size
    if len(recent) < n:
        return set()
    prefix = recent[len(recent) - (n - 1) :] if n > 1 else []
    return {
        recent[i + n - 1]
        for i in range(len(recent) - n + 1)
        if recent[i : i + n - 1] == prefix and recent[i + n - 1] not in whitelist
    }


def run_in_thread(
    target: Callable[[], object], streamer: TokenQueueStreamer
) -> tuple[threading.Thread, dict[str, Any]]:
    """Start ``target`` (a generate call) in a thread; always end the streamer.

    Returns ``(thread, outcome)`` where ``outcome`` gets ``"result"`` or ``"error"``
    once the thread finishes.
    """
    outcome: dict[str, Any] = {}

    def work() -> None:
        try:
            with torch.inference_mode():
                outcome["result"] = target()
        except BaseException as exc:  # re-raised in the caller's thread
            outcome["error"] = exc
        finally:
            streamer.end()

    thread = threading.Thread(target=work, name="deepseek-generate", daemon=True)
    thread.start()
    return thread, outcome
