"""GPU memory and throughput of one runtime pod, for ``docparser-runtime advise`` (issue 25).

WHY a copy of the operator's sizing: the runtime must not import the operator (they are
separate distributions; an import-linter contract), yet the advisor has to say whether a
batch fits the DocParser's ``gpuMemory`` exactly as the operator will judge it.
``tests/operator/core/plan/test_capacity_parity.py`` keeps the two equal over a grid of tier x
batch. The formula and its constants are explained in ``docparser_operator`` sizing:

    total = (weights + batch * seq_tokens * KV_BYTES_PER_TOKEN
             + batch * vision_tokens * VISION_BYTES_PER_TOKEN) * (1 + FRAGMENTATION)
            + CUDA_OVERHEAD,   seq_tokens = vision_tokens + 1 + PROMPT_TOKENS + maxNewTokens

``auto`` is sized at the worst case its cap allows (tier 6 unless capped), as the operator
sizes ``spec.tier: auto``.

Throughput: pages per second per replica are an **estimate** until ``bench/gpu_generate.py``
has GPU figures (``--throughput`` takes measured ones). The estimate starts from the
DeepSeek-OCR paper's "200k+ pages a day on one A100-40G" (~2.3 pages/s) taken at tier 6, and
assumes a third of a page's time scales with its visual tokens (encoder and prefill) and the
rest is decoding the text, which a lower tier does not shorten.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from docparser_runtime.preprocess.tiling import (
    GLOBAL_VIEW_TOKENS,
    IMAGE_SEPARATOR_TOKENS,
    MAX_TIER,
    MIN_TILES,
    TILE_TOKENS,
)

GIB = 1024**3
PROMPT_TOKENS = 32
DECODER_LAYERS = 12
DECODER_KV_HEADS = 10
DECODER_HEAD_DIM = 128
BF16_BYTES = 2
KV_BYTES_PER_TOKEN = 2 * DECODER_LAYERS * DECODER_KV_HEADS * DECODER_HEAD_DIM * BF16_BYTES
VISION_BYTES_PER_TOKEN = 16 * 768 * BF16_BYTES * 16
WEIGHTS_BYTES = {"deepseek-ocr2": int(3.39e9 * BF16_BYTES), "rapidocr": 0}
CUDA_OVERHEAD = int(1.5 * GIB)
FRAGMENTATION = 0.10

ESTIMATED_PAGES_PER_S_AT_TIER6 = 2.3
VISION_SHARE_OF_PAGE_TIME = 1 / 3

_UNITS = {
    "": 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
}
_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(Ki|Mi|Gi|Ti|k|M|G|T)?$")


def parse_quantity(text: str) -> int:
    """Bytes of a Kubernetes memory quantity such as ``40Gi`` or ``80G``."""
    match = _QUANTITY.match(text.strip())
    if not match:
        raise ValueError(f"not a memory quantity: {text!r} (examples: 40Gi, 80G)")
    return int(float(match.group(1)) * _UNITS[match.group(2) or ""])


def worst_case_vision_tokens(tier: int) -> int:
    """Visual tokens of the largest page at ``tier`` (0 and 1: no tiles)."""
    return GLOBAL_VIEW_TOKENS + TILE_TOKENS * (tier if tier >= MIN_TILES else 0)


@dataclass(frozen=True)
class GpuEstimate:
    """GPU bytes of one pod, by component."""

    weights: int
    kv_cache: int
    vision_activations: int
    overhead: int

    @property
    def total(self) -> int:
        return self.weights + self.kv_cache + self.vision_activations + self.overhead


def estimate_gpu_memory_for_tokens(
    engine: str, *, vision_tokens: int, max_batch_size: int, max_new_tokens: int
) -> GpuEstimate:
    """GPU bytes of a full batch whose pages carry ``vision_tokens`` each."""
    weights = WEIGHTS_BYTES[engine]
    if weights == 0:  # CPU engine: nothing lives on a GPU
        return GpuEstimate(0, 0, 0, 0)
    seq = vision_tokens + IMAGE_SEPARATOR_TOKENS + PROMPT_TOKENS + max_new_tokens
    kv = max_batch_size * seq * KV_BYTES_PER_TOKEN
    vision = max_batch_size * vision_tokens * VISION_BYTES_PER_TOKEN
    slack = int((weights + kv + vision) * FRAGMENTATION)
    return GpuEstimate(weights, kv, vision, CUDA_OVERHEAD + slack)


def estimate_gpu_memory(
    engine: str, *, tier: int | str, max_batch_size: int, max_new_tokens: int, cap: int = MAX_TIER
) -> GpuEstimate:
    """Worst case of one pod at ``tier`` (``auto``: at ``cap``), as the operator sizes it."""
    worst = cap if tier == "auto" else int(tier)
    return estimate_gpu_memory_for_tokens(
        engine,
        vision_tokens=worst_case_vision_tokens(worst),
        max_batch_size=max_batch_size,
        max_new_tokens=max_new_tokens,
    )


def largest_batch_that_fits(
    engine: str, *, tier: int | str, max_batch_size: int, max_new_tokens: int, gpu_bytes: int
) -> int:
    """Biggest batch up to ``max_batch_size`` whose worst case fits (0: not even one page)."""
    best = 0
    for batch in range(1, max_batch_size + 1):
        est = estimate_gpu_memory(
            engine, tier=tier, max_batch_size=batch, max_new_tokens=max_new_tokens
        )
        if est.total > gpu_bytes:
            break
        best = batch
    return best


def estimated_pages_per_s(vision_tokens: float) -> float:
    """Pages per second of one GPU replica at this mean of visual tokens (an estimate)."""
    full = worst_case_vision_tokens(MAX_TIER)
    share = VISION_SHARE_OF_PAGE_TIME * vision_tokens / full + (1 - VISION_SHARE_OF_PAGE_TIME)
    return ESTIMATED_PAGES_PER_S_AT_TIER6 / share


def replicas_for(pages_per_hour: float, pages_per_s: float) -> int:
    """Replicas that carry ``pages_per_hour`` at ``pages_per_s`` each (at least one)."""
    return max(1, math.ceil(pages_per_hour / 3600 / pages_per_s))


# --- Live capacity (issue 36): the equations status.capacity and `advise --from-metrics`
# recommend with. The operator keeps a copy (docparser_operator.core.capacity_sizing);
# tests/operator/core/plan/test_capacity_parity.py holds the two equal.
TARGET_WAIT_S = 5.0  # the p95 queue wait sized for when autoscaling.metric is not latency
MAX_UTILISATION = 0.8  # never plan pods busier than this, whatever the target allows
MEMORY_HEADROOM = 0.25  # pod memory recommended above the observed peak
TOO_LOW_BUDGET = 0.02  # share of pages a fixed tier may read too coarsely
FIXED_OVER_AUTO = 1.10  # a fixed tier within this factor of auto's tokens is recommended
BATCH_CEILING = 256  # runtime.maxBatchSize's largest value


def utilisation_for_wait(target_wait_s: float, seconds_per_page: float, slots: int) -> float:
    """How busy a pod's decode slots may be for queue waits near ``target_wait_s``.

    Kingman's approximation of a queue in front of one server (the pod: ``slots`` pages side
    by side, one finishing every ``seconds_per_page / slots`` on average), with Poisson
    arrivals and near-constant service: wait = rho / (1 - rho) * seconds_per_page / (2 slots).
    Solved for rho, capped at ``MAX_UTILISATION``."""
    x = 2 * target_wait_s * max(1, slots) / max(seconds_per_page, 1e-9)
    return min(MAX_UTILISATION, x / (1 + x))


def replicas_at_peak(
    peak_pages_per_s: float, seconds_per_page: float, slots: int, target_wait_s: float
) -> int:
    """Pods that serve ``peak_pages_per_s`` with waits near ``target_wait_s`` (at least one):
    the busy slots the peak needs, over the slots a pod may keep busy."""
    busy_pods = peak_pages_per_s * seconds_per_page / max(1, slots)
    rho = utilisation_for_wait(target_wait_s, seconds_per_page, slots)
    return max(1, math.ceil(busy_pods / rho - 1e-9))


def tier_for_mix(auto_pages: dict[int, float], cap: int = MAX_TIER) -> int | str:
    """The default tier for pages ``auto`` read at these tiers (tier -> pages): the lowest
    fixed tier that reads at most ``TOO_LOW_BUDGET`` of them below auto's choice, when its
    worst-case tokens are within ``FIXED_OVER_AUTO`` of auto's mean; else ``auto``."""
    total = sum(auto_pages.values())
    if total <= 0:
        return "auto"
    mean = sum(n * worst_case_vision_tokens(t) for t, n in auto_pages.items()) / total
    for tier in range(cap + 1):
        above = sum(n for t, n in auto_pages.items() if t > tier) / total
        if above <= TOO_LOW_BUDGET:
            fits = worst_case_vision_tokens(tier) <= FIXED_OVER_AUTO * mean
            return tier if fits else "auto"
    return "auto"


def memory_for_peak(peak_bytes: float) -> int:
    """Pod memory for an observed peak: ``MEMORY_HEADROOM`` above it, in whole GiB."""
    return max(1, math.ceil(peak_bytes * (1 + MEMORY_HEADROOM) / GIB)) * GIB


def batch_for_gpu(engine: str, tier: int, max_new_tokens: int, gpu_bytes: int) -> int:
    """The largest maxBatchSize (up to ``BATCH_CEILING``) whose worst case at ``tier`` fits
    ``gpu_bytes`` (0: not one page)."""
    best = 0
    for batch in range(1, BATCH_CEILING + 1):
        need = estimate_gpu_memory(
            engine, tier=tier, max_batch_size=batch, max_new_tokens=max_new_tokens
        )
        if need.total > gpu_bytes:
            break
        best = batch
    return best
