"""A tiny random-weight DeepSeek-OCR-2 of the REAL architecture, for tests and benchmarks.

Everything that decides tokens and shapes stays real: the 1024px global view and the
768px tiles (SAM patch 16 + two stride-2 convs -> 16x16 / 12x12 queries, which the model
hard-codes as 256 and 144 learned queries), the hybrid vision encoder, the MoE decoder, the
processor and its crop-grid logic. Only widths and depths shrink, so a batch of a few
pages generates in seconds on CPU. The tokenizer is byte-level (any text round-trips) plus
the special tokens DeepSeek-OCR prompts and outputs use. Saved with ``save_pretrained`` so
tests load it through ``AutoProcessor`` / ``AutoModelForImageTextToText.from_pretrained``
exactly like production weights.
"""

from __future__ import annotations

from pathlib import Path

from docparser_runtime.engines.base import PageImage
from docparser_runtime.preprocess.tiling import plan_tiles
from PIL import Image, ImageDraw

# DeepSeek's own names (full-width bars, U+2581 spaces), as in the real tokenizer.
BOS = "<｜begin▁of▁sentence｜>"  # noqa: RUF001
EOS = "<｜end▁of▁sentence｜>"  # noqa: RUF001
PAD = "<｜▁pad▁｜>"  # noqa: RUF001
IMAGE = "<image>"
# Tokens the prompts and grounding output use; not "special", so decoding keeps them.
GROUNDING_TOKENS = ["<|grounding|>", "<|ref|>", "<|/ref|>", "<|det|>", "<|/det|>"]
SEED = 1234


def _build_tokenizer():
    """Byte-level BPE without merges: 256 byte tokens + specials, reversible for any text."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    byte_alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {tok: i for i, tok in enumerate(sorted(byte_alphabet))}
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    core.add_special_tokens([BOS, EOS, PAD, IMAGE])
    core.add_tokens(GROUNDING_TOKENS)
    bos_id = core.token_to_id(BOS)
    core.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, bos_id)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        padding_side="left",
        model_max_length=8192,
    )


def _build_config(tokenizer):
    from transformers import DeepseekOcr2Config

    vocab_size = len(tokenizer)
    sam = {
        "hidden_size": 16,
        "output_channels": 16,
        # One windowed layer: a global-attention layer over 64x64 patches costs seconds on
        # CPU and exercises no extra token logic.
        "num_hidden_layers": 1,
        "num_attention_heads": 1,
        "mlp_dim": 32,
        "window_size": 16,
        "global_attn_indexes": [],
        "downsample_channels": [16, 32],
        # The real default (1e-10) makes a random SAM output ~0, so every page would look
        # the same to the decoder; tests need pages to produce different text.
        "initializer_range": 0.2,
        # image_size/patch_size stay 1024/16: token counts depend on them.
    }
    encoder = {
        "vocab_size": vocab_size,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "max_position_embeddings": 1024,
        "initializer_range": 0.2,
    }
    text = {
        "vocab_size": vocab_size,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "max_position_embeddings": 4096,
        "mlp_layer_types": ["dense", "sparse"],
        "n_routed_experts": 4,
        "num_experts_per_tok": 2,
        "n_shared_experts": 1,
        "moe_intermediate_size": 16,
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
        # Wide random weights: with the default 0.02 a tiny random decoder ignores its
        # input and emits the same text for every page and prompt.
        "initializer_range": 0.5,
    }
    return DeepseekOcr2Config(
        vision_config={"sam_config": sam, "encoder_config": encoder},
        text_config=text,
        image_token_id=tokenizer.convert_tokens_to_ids(IMAGE),
    )


def build_tiny_model(dest: Path) -> Path:
    """Write a loadable tiny DeepSeek-OCR-2 (model + tokenizer + processor) into ``dest``."""
    import torch
    from transformers import (
        DeepseekOcr2ForConditionalGeneration,
        DeepseekOcr2ImageProcessorPil,
        DeepseekOcr2Processor,
        GenerationConfig,
    )

    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    tokenizer = _build_tokenizer()
    processor = DeepseekOcr2Processor(
        image_processor=DeepseekOcr2ImageProcessorPil(), tokenizer=tokenizer
    )
    config = _build_config(tokenizer)
    torch.manual_seed(SEED)
    model = DeepseekOcr2ForConditionalGeneration(config).eval()
    # Random init gives near-uniform logits; a wider lm_head makes greedy choices crisp so
    # batched/unbatched comparisons are not decided by float noise.
    with torch.no_grad():
        model.lm_head.weight.normal_(0.0, 1.0)
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        do_sample=False,
    )
    model.save_pretrained(dest)
    processor.save_pretrained(dest)
    return dest


# Pages and raw generation for the engine's tests (engines/ and server/ share them).
def make_page(index: int, width: int, height: int, tier: int) -> PageImage:
    """A page with some drawn lines (pages differ, so the model's outputs differ)."""
    image = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(image)
    for line in range(12):
        draw.rectangle(
            (20 + index * 9, 30 + line * 40, width // 2 + line * 7, 45 + line * 40), "black"
        )
    plan = plan_tiles(width, height, tier)
    return PageImage(index, image, plan.tiles, plan.vision_tokens)


def generated_ids(engine, pages, options):
    """The engine's own generate call, returning raw new token ids per page."""
    import torch

    inputs = engine._prepare(pages, options)
    with torch.inference_mode():
        guard = engine._repetition_guard(inputs)
        out = engine._model.generate(**engine._generate_kwargs(inputs, options, guard))
    return out[:, inputs["input_ids"].shape[1] :].tolist()
