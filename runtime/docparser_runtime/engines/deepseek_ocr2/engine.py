"""The DeepSeek-OCR-2 engine: transformers ``AutoProcessor`` + ``AutoModelForImageTextToText``.

Weights come from a local directory (``--model-path``; ``fetch-weights`` puts them there),
loaded with ``from_pretrained`` exactly as tests load the tiny random-weight model. bf16 on
CUDA, fp32 on CPU. ``infer_batch`` runs ONE batched ``generate`` over all pages (left
padding, greedy), which is where the GPU throughput comes from; the processor gets the
request's tier as its crop cap (``tiling.processor_image_kwargs``) so the visual tokens the
model sees are the ones ``tiling.plan_tiles`` reported.

torch and transformers are imported lazily inside ``load()``/generation helpers: importing
this module must stay cheap, and the ``rapidocr`` path never imports it at all.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

from docparser_runtime.engines.base import (
    DeltaCallback,
    Engine,
    PageImage,
    PageResult,
    ParseOptions,
)
from docparser_runtime.engines.deepseek_ocr2.grounding import parse_output
from docparser_runtime.engines.deepseek_ocr2.prompts import IMAGE_PLACEHOLDER, PROMPTS, prompt_for
from docparser_runtime.engines.deepseek_ocr2.steps import ContinuousSteps
from docparser_runtime.errors import EngineFailure, Unavailable, WeightsError
from docparser_runtime.preprocess.tiling import plan_tiles, processor_image_kwargs

if TYPE_CHECKING:  # torch-dependent: imported lazily at run time
    from transformers import StoppingCriteria

    from docparser_runtime.engines.deepseek_ocr2.generation import WindowedNoRepeatNGram
    from docparser_runtime.settings import Settings

log = logging.getLogger(__name__)

# Table cells legitimately repeat; DeepSeek-OCR exempts them from the n-gram ban.
_NGRAM_WHITELIST_TOKENS = ("<td>", "</td>")


def resolve_device(requested: str, cuda_available: bool) -> str:
    """``auto`` -> ``cuda`` when present else ``cpu``; explicit values pass through."""
    if requested == "auto":
        return "cuda" if cuda_available else "cpu"
    if requested.startswith("cuda") and not cuda_available:
        raise WeightsError(f"device {requested!r} requested but CUDA is not available")
    return requested


class DeepseekOcr2Engine(ContinuousSteps, Engine):
    """DeepSeek-OCR-2 through transformers; one instance owns one model on one device."""

    name = "deepseek-ocr2"

    def __init__(
        self,
        model_path: Path | str | None,
        *,
        device: str = "auto",
        version: str = "dev",
        no_repeat_ngram_size: int = 20,
        no_repeat_ngram_window: int = 90,
        kv_cache_tokens: int = 0,
        gpu_memory_utilization: float = 0.9,
    ) -> None:
        self.model_path = Path(model_path) if model_path is not None else None
        self.requested_device = device
        self._version = version
        self.no_repeat_ngram_size = no_repeat_ngram_size
        self.no_repeat_ngram_window = no_repeat_ngram_window
        self.kv_cache_tokens = kv_cache_tokens  # 0: from free device memory after loading
        self.gpu_memory_utilization = gpu_memory_utilization
        self._kv_budget: int | None = None
        self._prompt_text_tokens: dict[str, int] = {}
        self.device: str | None = None
        self.dtype: Any = None
        self._model: Any = None
        self._processor: Any = None
        self._drop_ids: set[int] = set()
        self._eos_ids: set[int] = set()
        self._pad_id: int | None = None
        self._whitelist_ids: set[int] = set()
        # One generate at a time per model: concurrent calls would only compete for the
        # same device and multiply activation memory; batching is the batcher's job.
        self._lock = threading.Lock()

    @classmethod
    def from_settings(cls, settings: Settings) -> Self:
        return cls(
            settings.model_path,
            device=settings.device,
            version=settings.model_version or "dev",
            no_repeat_ngram_size=settings.no_repeat_ngram_size,
            no_repeat_ngram_window=settings.no_repeat_ngram_window,
            kv_cache_tokens=settings.kv_cache_tokens,
            gpu_memory_utilization=settings.gpu_memory_utilization,
        )

    @property
    def version(self) -> str:
        return self._version

    # ------------------------------------------------------------------ loading

    def load(self) -> None:
        path = self.model_path
        if path is None:
            raise WeightsError("deepseek-ocr2 needs a model directory (--model-path)")
        if not path.is_dir():
            raise WeightsError(f"model directory {path} does not exist")
        if not (path / "config.json").is_file():
            raise WeightsError(f"{path} has no config.json: not a transformers model directory")
        try:
            import torch
            from transformers import AutoModelForImageTextToText, AutoProcessor
        except ImportError as exc:
            raise WeightsError(f"deepseek-ocr2 needs torch and transformers: {exc}") from exc

        self.device = resolve_device(self.requested_device, torch.cuda.is_available())
        self.dtype = torch.bfloat16 if self.device.startswith("cuda") else torch.float32
        try:
            processor = AutoProcessor.from_pretrained(path)
            model = AutoModelForImageTextToText.from_pretrained(path, dtype=self.dtype)
        except Exception as exc:  # any failure here means unusable weights
            raise WeightsError(f"cannot load DeepSeek-OCR-2 from {path}: {exc}") from exc
        model.to(self.device).eval()  # type: ignore[arg-type]  # transformers' wrapped .to
        self._configure_tokens(processor, model)
        self._processor, self._model = processor, model
        log.info("loaded %s from %s on %s (%s)", self.name, path, self.device, self.dtype)

    def _configure_tokens(self, processor: Any, model: Any) -> None:
        tokenizer = processor.tokenizer
        tokenizer.padding_side = "left"  # batched generate appends on the right
        gen = model.generation_config
        eos = gen.eos_token_id if gen.eos_token_id is not None else tokenizer.eos_token_id
        if eos is None:
            raise WeightsError("the tokenizer/generation config defines no EOS token")
        self._eos_ids = set(eos) if isinstance(eos, list) else {eos}
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        self._pad_id = tokenizer.pad_token_id
        ids = {tokenizer.bos_token_id, self._pad_id, processor.image_token_id, *self._eos_ids}
        self._drop_ids = {i for i in ids if i is not None}
        # Prompt lengths without the image, for admission (the tokenizer is not thread-safe:
        # the scheduler must not call it while the engine thread decodes).
        self._prompt_text_tokens = {
            mode: len(tokenizer(prompt.replace(IMAGE_PLACEHOLDER, ""))["input_ids"])
            for mode, prompt in PROMPTS.items()
        }
        unk = tokenizer.unk_token_id
        self._whitelist_ids = {
            i
            for i in tokenizer.convert_tokens_to_ids(list(_NGRAM_WHITELIST_TOKENS))
            if i is not None and i != unk
        }

    def release_cached_memory(self) -> None:
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()

    def close(self) -> None:
        self._model = self._processor = None

    def locates_text(self, options: ParseOptions) -> bool:
        """The markdown and grounding prompts put a located header before every block;
        ``text`` (Free OCR) locates nothing, so its pages cannot be audited."""
        return options.mode in ("markdown", "grounding")

    # ---------------------------------------------------------------- inference

    def infer_batch(self, pages: Sequence[PageImage], options: ParseOptions) -> list[PageResult]:
        if not pages:
            return []
        import torch

        with self._lock:
            inputs = self._prepare(pages, options)
            prompt_length = inputs["input_ids"].shape[1]
            guard = self._repetition_guard(inputs)
            try:
                with torch.inference_mode():
                    output = self._model.generate(**self._generate_kwargs(inputs, options, guard))
            except Exception as exc:
                raise EngineFailure(f"generation failed: {exc}") from exc
        generated = output[:, prompt_length:].tolist()
        trips = _trips(guard, len(pages))
        return [
            self._finish(page, ids, trips=n)
            for page, ids, n in zip(pages, generated, trips, strict=True)
        ]

    def stream_page(
        self, page: PageImage, options: ParseOptions, on_delta: DeltaCallback
    ) -> PageResult:
        with self._lock:
            return self._stream_locked(page, options, on_delta)

    def _stream_locked(
        self, page: PageImage, options: ParseOptions, on_delta: DeltaCallback
    ) -> PageResult:
        from docparser_runtime.engines.deepseek_ocr2.generation import (
            IncrementalDecoder,
            StopOnEvent,
            TokenQueueStreamer,
            run_in_thread,
        )

        inputs = self._prepare([page], options)
        prompt_length = inputs["input_ids"].shape[1]
        stop = threading.Event()
        streamer = TokenQueueStreamer(skip_ids=self._drop_ids)
        guard = self._repetition_guard(inputs)
        kwargs = self._generate_kwargs(inputs, options, guard, stop_criteria=[StopOnEvent(stop)])
        kwargs["streamer"] = streamer
        thread, outcome = run_in_thread(lambda: self._model.generate(**kwargs), streamer)
        decoder = IncrementalDecoder(self._decode)
        try:
            for token_id in streamer:
                delta = decoder.push(token_id)
                if delta and not stop.is_set() and on_delta(delta):
                    stop.set()
            tail = decoder.flush()
            if tail and not stop.is_set():
                on_delta(tail)
        finally:
            stop.set()  # our caller failed: do not leave the GPU generating
            thread.join()
        if "error" in outcome:
            raise EngineFailure(f"generation failed: {outcome['error']}") from outcome["error"]
        generated = outcome["result"][0, prompt_length:].tolist()
        return self._finish(page, generated, trips=_trips(guard, 1)[0])

    # ------------------------------------------------------------------ helpers

    def _prepare(self, pages: Sequence[PageImage], options: ParseOptions) -> Any:
        if self._model is None:
            raise Unavailable("deepseek-ocr2 engine is not loaded")
        prompt = prompt_for(options.mode)
        try:
            inputs = self._processor(
                images=[page.image for page in pages],
                text=[prompt] * len(pages),
                padding=True,
                return_tensors="pt",
                **processor_image_kwargs(options.tier),
            )
        except Exception as exc:  # pages are decoded RGB images: this is our failure
            raise EngineFailure(f"DeepSeek-OCR-2 preprocessing failed: {exc}") from exc
        self._check_vision_tokens(pages, options, inputs)
        inputs = inputs.to(self.device)
        for key in ("pixel_values", "pixel_values_local"):
            if key in inputs:
                inputs[key] = inputs[key].to(self.dtype)
        return inputs

    def _check_vision_tokens(
        self, pages: Sequence[PageImage], options: ParseOptions, inputs: Any
    ) -> None:
        """Reported ``vision_tokens`` must be what the processor fed the model (+1 separator)."""
        counts = (inputs["input_ids"] == self._processor.image_token_id).sum(dim=1).tolist()
        for page, count in zip(pages, counts, strict=True):
            plan = plan_tiles(page.width, page.height, options.tier)
            if count != page.vision_tokens + 1 or plan.vision_tokens != page.vision_tokens:
                log.warning(
                    "page %d: reported %d vision tokens (%d tiles), processor inserted %d "
                    "(plan %d): tier mismatch between preprocessing and engine?",
                    page.index,
                    page.vision_tokens,
                    page.tiles,
                    count,
                    plan.processor_image_tokens,
                )
            else:
                log.debug("page %d: %d vision tokens + 1 separator", page.index, count - 1)

    def _repetition_guard(self, inputs: Any) -> WindowedNoRepeatNGram | None:
        """The n-gram ban of this generate call (None when switched off); its ``trips``
        say per page how often it changed the output."""
        if self.no_repeat_ngram_size <= 0:
            return None
        from docparser_runtime.engines.deepseek_ocr2.generation import WindowedNoRepeatNGram

        return WindowedNoRepeatNGram(
            self.no_repeat_ngram_size,
            self.no_repeat_ngram_window,
            prompt_length=inputs["input_ids"].shape[1],
            whitelist_token_ids=self._whitelist_ids,
            stop_token_ids=self._eos_ids,
        )

    def _generate_kwargs(
        self,
        inputs: Any,
        options: ParseOptions,
        guard: WindowedNoRepeatNGram | None,
        stop_criteria: list[StoppingCriteria] | None = None,
    ) -> dict[str, Any]:
        from transformers import LogitsProcessorList, StoppingCriteriaList

        processors = LogitsProcessorList([guard] if guard is not None else [])
        return {
            **inputs,
            "max_new_tokens": options.max_new_tokens,
            "min_new_tokens": options.min_new_tokens or None,
            "do_sample": False,
            "num_beams": 1,
            "eos_token_id": sorted(self._eos_ids),
            "pad_token_id": self._pad_id,
            "logits_processor": processors,
            "stopping_criteria": StoppingCriteriaList(stop_criteria or []),
        }

    def _decode(self, ids: list[int]) -> str:
        # skip_special_tokens=False: real checkpoints may mark <|ref|>/<|det|> special,
        # and grounding needs them; the ids we must not show were dropped already.
        text: str = self._processor.tokenizer.decode(ids, skip_special_tokens=False)
        return text

    def _finish(self, page: PageImage, generated: list[int], *, trips: int = 0) -> PageResult:
        """Cut at EOS, count tokens, decode, parse grounding.

        ``truncated``: no EOS was produced (``max_new_tokens`` hit, typically a repetition
        loop, or generation stopped because the client left).
        """
        eos_at = next((i for i, t in enumerate(generated) if t in self._eos_ids), None)
        if eos_at is None:
            kept, output_tokens, truncated = generated, len(generated), True
        else:
            kept, output_tokens, truncated = generated[:eos_at], eos_at + 1, False
        raw = self._decode([t for t in kept if t not in self._drop_ids])
        parsed = parse_output(raw, page.width, page.height)
        return PageResult(
            index=page.index,
            content=parsed.content,
            width=page.width,
            height=page.height,
            tiles=page.tiles,
            vision_tokens=page.vision_tokens,
            blocks=parsed.blocks,
            output_tokens=output_tokens,
            truncated=truncated,
            repetition_trips=trips,
        )


def _trips(guard: WindowedNoRepeatNGram | None, rows: int) -> list[int]:
    """Per row, the steps at which the repetition guard changed the output (0 without one)."""
    trips = list(guard.trips) if guard is not None else []
    return trips + [0] * (rows - len(trips))
