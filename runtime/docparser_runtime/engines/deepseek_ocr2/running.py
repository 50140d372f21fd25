"""DeepSeek-OCR-2's running batch: pages join and leave between decode steps.

Built on the model's own forward pass and transformers' ``DynamicCache`` (no paged
attention: the design card keeps us on transformers + torch), the way TGI's first Python
server did it (``CausalLMBatch.concatenate`` / ``filter``):

* A joining page is prefilled on its own cache (vision encoder + prompt; pages whose inputs
  have the same length share one prefill, which needs no padding), its first token chosen,
  and its cache is concatenated to the batch's: keys/values left-padded to the longer
  length along the sequence axis, the attention mask 0 there. Every row keeps its own
  position ids (real tokens before it), which is what ``generate`` does with left padding,
  so a page's positions never depend on its batch-mates.
* A leaving page's rows are dropped with ``index_select``, and left columns that are
  padding for every remaining page are cut, so a long page leaving gives its width back.
  A parked page's rows are kept apart the same way, and merge back as a joining page's.
* Each step feeds every page's last token with the extended mask, applies the page's own
  ``min_new_tokens`` and repetition guard (``generation.banned_next_tokens``, the rule the
  ``generate`` path uses) and takes the argmax: greedy, like ``infer_batch``.

Numerics: a page decodes against left padding its ``generate``-alone run does not have, and
its rows go through matmuls of other batch shapes; masked columns add exact zeros after
softmax, but kernels may sum in another order, so logits can differ in the last bits (fp32)
or more (bf16). Greedy choices only change where two logits are that close.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from transformers.cache_utils import DynamicLayer

from docparser_runtime.engines.deepseek_ocr2.generation import (
    IncrementalDecoder,
    banned_next_tokens,
)
from docparser_runtime.engines.stepping import PageRun

# run -> the processor's inputs for its page, on the model's device and dtype.
Prepare = Callable[[PageRun], Any]
CPU_CACHE_BYTES = 1 << 30  # the default cache budget on CPU (no device memory to measure)
ROOM = 64  # spare cache columns per page and layer (RoomyLayer); they come out of the reserve


@dataclass(frozen=True)
class TokenRules:
    """What decides and ends a page's tokens: the engine's EOS ids, the ids a stream never
    shows, and the repetition guard (``ngram_size`` 0: off)."""

    eos_ids: frozenset[int]
    drop_ids: frozenset[int]
    ngram_size: int
    ngram_window: int
    whitelist: frozenset[int]
    decode: Callable[[list[int]], str]


class DeepseekRunningBatch:
    """The pages of one model decoding together (``stepping.RunningBatch``)."""

    def __init__(self, model: Any, prepare: Prepare, rules: TokenRules) -> None:
        self._model = model
        self._prepare = prepare
        self._rules = rules
        self._runs: list[PageRun] = []
        self._cache: Any = None
        self._mask: torch.Tensor | None = None  # [pages, length]: 0 on left padding
        self._next: torch.Tensor | None = None  # [pages]: the id each page feeds next
        self._pos: torch.Tensor | None = None  # [pages]: that id's position
        self._parked: list[tuple[list[PageRun], _Part]] = []  # out of the steps, cache kept

    @property
    def runs(self) -> Sequence[PageRun]:
        return tuple(self._runs)

    @property
    def padded_tokens(self) -> int:
        held = sum(int(part.mask.numel()) for _, part in self._parked)
        return held + (0 if self._mask is None else int(self._mask.numel()))

    # ---------------------------------------------------------------- join / leave

    @torch.inference_mode()
    def join(self, runs: Sequence[PageRun]) -> None:
        """All or none: after a failure (out of memory) none of ``runs`` is in the batch;
        those that got a first token keep it and resume later."""
        try:
            self._join(runs)
        except BaseException:
            self.leave(runs)
            raise

    def _join(self, runs: Sequence[PageRun]) -> None:
        groups: dict[tuple[int, bool], list[tuple[PageRun, Any]]] = {}
        for run in runs:
            inputs = self._prepare(run)
            if run.generated:  # resumed after an eviction: recompute its cache
                self._merge(self._resume(run, inputs), [run])
                continue
            key = (int(inputs["input_ids"].shape[1]), "pixel_values_local" in inputs)
            groups.setdefault(key, []).append((run, inputs))
        for group in groups.values():
            members = [run for run, _ in group]
            self._merge(self._prefill(members, _stack([inputs for _, inputs in group])), members)

    def leave(self, runs: Sequence[PageRun]) -> None:
        gone = {id(run) for run in runs}
        self._parked = [
            (kept, _rows(part, [i for i, run in enumerate(group) if id(run) not in gone]))
            for group, part in self._parked
            if (kept := [run for run in group if id(run) not in gone])
        ]  # fmt: skip
        keep = [i for i, run in enumerate(self._runs) if id(run) not in gone]
        if len(keep) == len(self._runs):
            return
        if not keep:
            self._runs, self._cache, self._mask, self._next, self._pos = [], None, None, None, None
            return
        part = _rows(self._part(), keep)
        self._cache, self._mask, self._next, self._pos = part.cache, part.mask, part.next, part.pos
        self._runs = [self._runs[i] for i in keep]

    def park(self, runs: Sequence[PageRun]) -> None:
        """Take ``runs`` out of the decode steps, keeping their cache, next ids and
        positions apart: ``resume`` puts them back as they were, with nothing recomputed.
        On a CPU device every row of a step costs compute, so a batch line steps aside
        while a page someone waits on decodes (``server/inference/batch_yield.py``)."""
        wanted = {id(run) for run in runs}
        rows = [i for i, run in enumerate(self._runs) if id(run) in wanted]
        if rows:
            group, part = [self._runs[i] for i in rows], _rows(self._part(), rows)
            self.leave(group)
            self._parked.append((group, part))

    @torch.inference_mode()
    def resume(self, runs: Sequence[PageRun]) -> None:
        """Parked ``runs`` decode again from where they stopped (they join last)."""
        wanted = {id(run) for run in runs}
        still = []
        for group, part in self._parked:
            back = [i for i, run in enumerate(group) if id(run) in wanted]
            if back:
                self._merge(_rows(part, back), [group[i] for i in back])
            rest = [i for i, run in enumerate(group) if id(run) not in wanted]
            if rest:
                still.append(([group[i] for i in rest], _rows(part, rest)))
        self._parked = still

    @property
    def parked(self) -> Sequence[PageRun]:
        return tuple(run for group, _ in self._parked for run in group)

    def _part(self) -> _Part:
        assert self._mask is not None and self._next is not None and self._pos is not None
        return _Part(self._cache, self._mask, self._next, self._pos)

    # ---------------------------------------------------------------- decoding

    @torch.inference_mode()
    def step(self) -> None:
        if not self._runs:
            return
        assert self._mask is not None and self._next is not None and self._pos is not None
        length = self._mask.shape[1]
        mask = torch.cat([self._mask, self._mask.new_ones(len(self._runs), 1)], dim=1)
        try:
            out = self._model(
                input_ids=self._next[:, None],
                attention_mask=mask,
                position_ids=self._pos[:, None],
                cache=self._cache,
                use_cache=True,
            )
        except BaseException:
            self._crop(length)  # layers that appended this step's keys give them back
            raise
        self._mask = mask
        self._next = self._choose(self._runs, out.logits[:, -1, :])
        self._pos = self._pos + 1

    def _choose(self, runs: Sequence[PageRun], logits: torch.Tensor) -> torch.Tensor:
        """Each page's next id: greedy after its ``min_new_tokens`` and n-gram ban, in
        ``generate``'s order (built-in processors first, then ours)."""
        rules = self._rules
        scores = logits.to(dtype=torch.float32, copy=True)
        eos = sorted(rules.eos_ids)
        for row, run in enumerate(runs):
            if len(run.generated) < run.options.min_new_tokens:
                scores[row, eos] = -float("inf")
        if rules.ngram_size > 0:
            top = scores.argmax(dim=-1).tolist()
            span = rules.ngram_window + rules.ngram_size - 1
            for row, run in enumerate(runs):
                banned = banned_next_tokens(
                    run.generated[-span:], rules.ngram_size, set(rules.whitelist)
                )
                if banned:
                    run.trips += top[row] in banned
                    scores[row, sorted(banned)] = -float("inf")
        chosen = scores.argmax(dim=-1)
        for run, token in zip(runs, chosen.tolist(), strict=True):
            run.generated.append(token)
            self._emit(run, token)
        return chosen

    def _emit(self, run: PageRun, token: int) -> None:
        """A stream's text so far, as ``stream_page`` sends it; its callback returning
        True means the client left, and the page stops."""
        if run.on_delta is None or run.stopped or token in self._rules.drop_ids:
            return
        if not isinstance(run.decoder, IncrementalDecoder):
            run.decoder = IncrementalDecoder(self._rules.decode)
        delta = run.decoder.push(token)
        if delta and run.on_delta(delta):
            run.stopped = True

    # ---------------------------------------------------------------- cache surgery

    def _prefill(self, runs: list[PageRun], inputs: Any) -> _Part:
        out = self._model(**inputs, use_cache=True, logits_to_keep=1)
        _make_roomy(out.cache)
        mask = inputs["attention_mask"]
        for run, length in zip(runs, mask.sum(dim=1).tolist(), strict=True):
            run.prompt_tokens = int(length)
        chosen = self._choose(runs, out.logits[:, -1, :])
        return _Part(out.cache, mask, chosen, mask.sum(dim=1))

    def _resume(self, run: PageRun, inputs: Any) -> _Part:
        """Recompute an evicted page's cache: its prompt, then the ids it had generated
        (but the last, which it feeds at the next step)."""
        out = self._model(**inputs, use_cache=True, logits_to_keep=1)
        _make_roomy(out.cache)
        mask = inputs["attention_mask"]
        run.prompt_tokens = int(mask.shape[1])
        fed = run.generated[:-1]
        if fed:
            device = mask.device
            mask = torch.cat([mask, mask.new_ones(1, len(fed))], dim=1)
            start = run.prompt_tokens
            positions = torch.arange(start, start + len(fed), device=device)[None, :]
            out = self._model(
                input_ids=torch.tensor([fed], device=device),
                attention_mask=mask,
                position_ids=positions,
                cache=out.cache,
                use_cache=True,
                logits_to_keep=1,
            )
        last = torch.tensor([run.generated[-1]], device=mask.device)
        return _Part(out.cache, mask, last, mask.sum(dim=1))

    def _merge(self, part: _Part, runs: list[PageRun]) -> None:
        if self._cache is None:
            self._cache, self._mask, self._next, self._pos = (
                part.cache,
                part.mask,
                part.next,
                part.pos,
            )
            self._runs = list(runs)
            return
        assert self._mask is not None and self._next is not None and self._pos is not None
        length = max(self._mask.shape[1], part.mask.shape[1])
        merged = [
            (
                torch.cat([_left_pad(mine.keys, length), _left_pad(theirs.keys, length)]),
                torch.cat([_left_pad(mine.values, length), _left_pad(theirs.values, length)]),
            )
            for mine, theirs in zip(self._cache.layers, part.cache.layers, strict=True)
        ]  # fmt: skip  (built first: an allocation failure leaves the batch as it was)
        for layer, (keys, values) in zip(self._cache.layers, merged, strict=True):
            layer.keys, layer.values = keys, values
        self._mask = torch.cat([_left_pad(self._mask, length), _left_pad(part.mask, length)])
        self._next = torch.cat([self._next, part.next])
        self._pos = torch.cat([self._pos, part.pos])
        self._runs.extend(runs)

    def _crop(self, length: int) -> None:
        for layer in self._cache.layers:
            if layer.keys is not None and layer.keys.shape[-2] > length:
                layer.keys = layer.keys[:, :, :length, :]
                layer.values = layer.values[:, :, :length, :]


class RoomyLayer(DynamicLayer):
    """A ``DynamicLayer`` whose keys and values are views of buffers with ``ROOM`` spare
    columns: ``DynamicLayer.update`` concatenates, copying the whole cache of the batch at
    every step (pages x length x layers); here a step writes its column, and the copy happens
    once per ``ROOM`` steps or when the batch changes shape (a join or leave builds new
    tensors, which the next update moves into a new buffer)."""

    _key_room: torch.Tensor | None = None
    _value_room: torch.Tensor | None = None

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        keys, values = self.keys, self.values
        if keys is None or values is None or not self.is_initialized:
            return super().update(key_states, value_states, *args, **kwargs)
        length = keys.shape[2]
        need = length + key_states.shape[2]
        room = self._key_room
        if room is None or room.data_ptr() != keys.data_ptr() or need > room.shape[2]:
            self._key_room, self._value_room = _with_room(keys, need), _with_room(values, need)
        assert self._key_room is not None and self._value_room is not None
        self._key_room[:, :, length:need] = key_states
        self._value_room[:, :, length:need] = value_states
        self.keys, self.values = self._key_room[:, :, :need], self._value_room[:, :, :need]
        return self.keys, self.values


def _with_room(tensor: torch.Tensor, need: int) -> torch.Tensor:
    pages, heads, length, dim = tensor.shape
    buffer = tensor.new_empty(pages, heads, need + ROOM, dim)
    buffer[:, :, :length] = tensor
    return buffer


def _make_roomy(cache: Any) -> None:
    for layer in cache.layers:
        if type(layer) is DynamicLayer:
            layer.__class__ = RoomyLayer


@dataclass
class _Part:
    """A freshly prefilled group of pages, before it joins the batch."""

    cache: Any
    mask: torch.Tensor
    next: torch.Tensor
    pos: torch.Tensor


def _rows(part: _Part, rows: list[int]) -> _Part:
    """The ``rows`` of ``part`` as a part of their own (a cache object of its own), less
    the left columns that are padding for all of them (a long page gone gives its width
    back)."""
    if rows == list(range(len(part.next))):
        return part
    index = torch.tensor(rows, device=part.mask.device)
    mask = part.mask.index_select(0, index)
    start = int((mask.sum(0) > 0).nonzero()[0])
    cache = copy.copy(part.cache)
    cache.layers = [copy.copy(layer) for layer in part.cache.layers]
    for layer, old in zip(cache.layers, part.cache.layers, strict=True):
        layer.keys = old.keys.index_select(0, index)[:, :, start:, :]
        layer.values = old.values.index_select(0, index)[:, :, start:, :]
    return _Part(cache, mask[:, start:], part.next.index_select(0, index),
                 part.pos.index_select(0, index))  # fmt: skip


def _left_pad(tensor: torch.Tensor, length: int) -> torch.Tensor:
    """Pad ``tensor`` (sequence on dim 2 for keys/values, dim 1 for a mask) on the left."""
    if tensor.dim() == 4:
        missing = length - tensor.shape[2]
        return F.pad(tensor, (0, 0, missing, 0)) if missing else tensor
    missing = length - tensor.shape[1]
    return F.pad(tensor, (missing, 0)) if missing else tensor


def _stack(inputs: list[Any]) -> Any:
    """One processor batch from several same-length ones (no padding needed)."""
    if len(inputs) == 1:
        return inputs[0]
    first = inputs[0]
    for key in list(first):
        first[key] = torch.cat([item[key] for item in inputs])
    return first


def kv_budget_tokens(model: Any, device: str, *, configured: int, utilization: float) -> int:
    """Cache slots (pages x padded tokens) the scheduler may hold.

    ``configured`` (> 0) wins. On CUDA: the memory left after the weights, at most
    ``utilization`` of the device (vLLM's ``gpu_memory_utilization``), less a reserve for
    the vision encoder and prefill activations, divided by a token's keys and values over
    all decoder layers. On CPU: ``CPU_CACHE_BYTES`` worth.
    """
    if configured > 0:
        return configured
    text = model.config.text_config
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
    per_token: int = 2 * text.num_hidden_layers * text.num_key_value_heads * head_dim
    per_token *= torch.finfo(model.dtype).bits // 8
    if not device.startswith("cuda"):
        return int(CPU_CACHE_BYTES // per_token)
    torch.cuda.empty_cache()  # blocks torch holds but does not use (warm-up) count as free
    free, total = torch.cuda.mem_get_info(torch.device(device))
    spare = free - (1.0 - utilization) * total - PREFILL_RESERVE_BYTES
    return max(0, int(spare // per_token))


# Activations of a prefill (SAM + encoder over 6 tiles, a few pages at once) in bf16.
PREFILL_RESERVE_BYTES = 2 << 30
