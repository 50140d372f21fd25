"""The runtime's GPU sizing (``docparser_runtime.capacity``, used by ``advise``) equals the
operator's, so the advisor's "fits gpuMemory" is the verdict the operator will reach."""

from __future__ import annotations

import pytest
from docparser_operator.core import sizing

capacity = pytest.importorskip("docparser_runtime.capacity")


@pytest.mark.parametrize("engine", ["deepseek-ocr2", "rapidocr"])
@pytest.mark.parametrize("max_new_tokens", [256, 4096, 8192])
def test_gpu_estimate_equals_the_operator_over_tier_and_batch(engine, max_new_tokens) -> None:
    for tier in range(7):
        for batch in (1, 2, 3, 8, 16, 64, 256):
            ours = capacity.estimate_gpu_memory(
                engine, tier=tier, max_batch_size=batch, max_new_tokens=max_new_tokens
            )
            theirs = sizing.estimate_gpu_memory(
                engine, tier=tier, max_batch_size=batch, max_new_tokens=max_new_tokens
            )
            assert (ours.weights, ours.kv_cache, ours.vision_activations, ours.overhead) == (
                theirs.weights,
                theirs.kv_cache,
                theirs.vision_activations,
                theirs.overhead,
            ), (engine, tier, batch)


def test_auto_is_sized_at_its_cap() -> None:
    for cap in (2, 6):
        auto = capacity.estimate_gpu_memory(
            "deepseek-ocr2", tier="auto", cap=cap, max_batch_size=8, max_new_tokens=4096
        )
        fixed = sizing.estimate_gpu_memory(
            "deepseek-ocr2", tier=cap, max_batch_size=8, max_new_tokens=4096
        )
        assert auto.total == fixed.total


def test_quantities_parse_alike() -> None:
    for text in ("40Gi", "80G", "1.5Ti", "512Mi", "1000000"):
        assert capacity.parse_quantity(text) == sizing.parse_quantity(text)
    with pytest.raises(ValueError):
        capacity.parse_quantity("forty gigs")
