"""The runtime's GPU sizing (``docparser_runtime.sizing.capacity``, used by ``advise``) equals the
operator's, so the advisor's "fits gpuMemory" is the verdict the operator will reach."""

from __future__ import annotations

import pytest
from docparser_operator.core.plan import sizing

capacity = pytest.importorskip("docparser_runtime.sizing.capacity")


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


def test_live_capacity_equations_equal_the_operators() -> None:
    """status.capacity and `advise --from-metrics` recommend alike
    (core/status/capacity_sizing.py)."""
    from docparser_operator.core.status import capacity_sizing as ours

    for name in (
        "TARGET_WAIT_S",
        "MAX_UTILISATION",
        "MEMORY_HEADROOM",
        "TOO_LOW_BUDGET",
        "FIXED_OVER_AUTO",
        "BATCH_CEILING",
    ):
        assert getattr(capacity, name) == getattr(ours, name), name
    for peak in (0.0, 0.4, 1.0, 5.6, 37.0):
        for seconds in (0.05, 0.8, 2.5):
            for slots in (1, 2, 8, 64):
                for wait in (0.1, 1.0, 5.0, 60.0):
                    args = (peak, seconds, slots, wait)
                    assert capacity.replicas_at_peak(*args) == ours.replicas_at_peak(*args), args
    mixes = [{}, {0: 99, 6: 1}, {0: 50, 6: 50}, {2: 10, 3: 10}, {6: 1}, {0: 1, 1: 1, 4: 1}]
    for mix in mixes:
        for cap in (2, 6):
            assert capacity.tier_for_mix(mix, cap) == ours.tier_for_mix(mix, cap), mix
    for peak in (1, 2**30, 3.3 * 2**30, 70 * 2**30):
        assert capacity.memory_for_peak(peak) == ours.memory_for_peak(peak)
    for gpu in (8, 24, 40, 80):
        for tier in (0, 3, 6):
            args2 = ("deepseek-ocr2", tier, 4096, gpu * 2**30)
            assert capacity.batch_for_gpu(*args2) == ours.batch_for_gpu(*args2), args2
