"""GPU and host memory sizing of one runtime pod (pure arithmetic, no cluster).

Kubernetes cannot request GPU *memory*, only whole GPUs, so a DocParser whose batch does not
fit its GPU would crash-loop with CUDA OOM at the first full batch, long after it became
Ready. The operator predicts the worst case instead and reports ``Degraded`` up front.

Worst case of one pod (one GPU; the runtime places the whole model on one device):

    vision_tokens(tier) = 256 + 144 * tiles(tier)        tiles = tier if tier >= 2 else 0
    seq_tokens          = vision_tokens + 1 (view separator) + PROMPT_TOKENS + maxNewTokens
    weights             = WEIGHTS_BYTES[engine]          (~3.39e9 params in bf16 for deepseek-ocr2)
    kv_cache            = maxBatchSize * seq_tokens * KV_BYTES_PER_TOKEN
    vision_activations  = maxBatchSize * vision_tokens * VISION_BYTES_PER_TOKEN
    total               = (weights + kv_cache + vision_activations) * (1 + FRAGMENTATION)
                          + CUDA_OVERHEAD

KV_BYTES_PER_TOKEN uses the DeepSeek-OCR-2 decoder (DeepSeek-3B-MoE: 12 layers, 10 KV heads
of dim 128, plain multi-head attention, bf16): 2 (K and V) * 12 * 10 * 128 * 2 B = 61,440 B.
VISION_BYTES_PER_TOKEN covers the SAM-base + Qwen2-0.5B encoder working set: each visual
token comes from 16 SAM patches of width 768 with about 16 live bf16 tensors per patch
(qkv, attention output, 4x MLP, residuals): 16 * 768 * 2 B * 16 = 393,216 B.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from docparser_operator.api.models import DocParserSpec
from docparser_operator.core.plan import quantity

GIB = 1024**3
# Kept equal to docparser_runtime.preprocess.tiling (tests/operator/core/plan/test_sizing.py
# checks it).
GLOBAL_VIEW_TOKENS = 256
TILE_TOKENS = 144
IMAGE_SEPARATOR_TOKENS = 1
MIN_TILES = 2
PROMPT_TOKENS = 32

DECODER_LAYERS = 12
DECODER_KV_HEADS = 10
DECODER_HEAD_DIM = 128
BF16_BYTES = 2
KV_BYTES_PER_TOKEN = 2 * DECODER_LAYERS * DECODER_KV_HEADS * DECODER_HEAD_DIM * BF16_BYTES
VISION_BYTES_PER_TOKEN = 16 * 768 * BF16_BYTES * 16
WEIGHTS_BYTES = {"deepseek-ocr2": int(3.39e9 * BF16_BYTES), "rapidocr": 0}
CUDA_OVERHEAD = int(1.5 * GIB)  # CUDA context, cuBLAS/cuDNN workspaces
FRAGMENTATION = 0.10  # caching allocator slack

# Host memory of a runtime pod: the runtime's own equation and numbers
# (docparser_runtime.sizing.host_memory, which sizes the pod's admission from the limit set here;
# tests/operator/core/plan/test_sizing.py checks the copies are equal and that a pod sized here
# gives admission at least HOST_WORK_BYTES):
#
#   limit = (server(engine) + decoders * DECODER + engine page pixels * bytes per pixel
#            + HOST_WORK_BYTES) / (1 - HEADROOM)  +  weights * 1.25 (read through host
#            memory while loading; safetensors)
MIB = 1024**2
HOST_SERVER_BYTES = {"rapidocr": 650 * MIB, "deepseek-ocr2": 1536 * MIB}
HOST_DECODER_BYTES = 70 * MIB
HOST_DECODERS = 2  # the runtime's decode_workers default
HOST_HEADROOM = 0.10
HOST_ENGINE_PAGE_PIXELS = {"rapidocr": 2000 * 2000, "deepseek-ocr2": 2 * 6 * 768 * 768}
HOST_ENGINE_BYTES_PER_PIXEL = {"rapidocr": 100, "deepseek-ocr2": 16}
HOST_WORK_BYTES = 1 * GIB  # for decodes in flight and decoded pages

_MEMORY = re.compile(r"^[0-9]+(?:\.[0-9]+)?(?:Ki|Mi|Gi|Ti|k|M|G|T)?$")  # the CRD's pattern


def parse_quantity(text: str) -> int:
    """Bytes of a Kubernetes memory quantity such as ``40Gi`` or ``80G`` (CRD pattern)."""
    if not _MEMORY.match(text):
        raise ValueError(f"not a memory quantity: {text!r}")
    return int(quantity.parse(text))


def parse_cpu_millis(text: str) -> int:
    """Millicores of a Kubernetes CPU quantity such as ``100m``, ``0.5`` or ``2``."""
    if text.endswith("m") and text[:-1].isdigit():
        return int(text[:-1])
    try:
        return int(float(text) * 1000)
    except ValueError as err:
        raise ValueError(f"not a CPU quantity: {text!r}") from err


def format_gib(n_bytes: int) -> str:
    return f"{n_bytes / GIB:.1f}GiB"


def worst_case_tiles(tier: int) -> int:
    """Most local tiles a page can get at ``tier`` (0 and 1 mean none; DESIGN: 0 or 2..6)."""
    return tier if tier >= MIN_TILES else 0


def vision_tokens(tier: int) -> int:
    return GLOBAL_VIEW_TOKENS + TILE_TOKENS * worst_case_tiles(tier)


@dataclass(frozen=True)
class GpuEstimate:
    """Worst-case GPU memory of one pod, by component (bytes)."""

    weights: int
    kv_cache: int
    vision_activations: int
    overhead: int

    @property
    def total(self) -> int:
        return self.weights + self.kv_cache + self.vision_activations + self.overhead

    def describe(self) -> str:
        return (
            f"{format_gib(self.total)} (weights {format_gib(self.weights)} + KV cache "
            f"{format_gib(self.kv_cache)} + vision activations "
            f"{format_gib(self.vision_activations)} + overhead {format_gib(self.overhead)})"
        )


def estimate_gpu_memory(
    engine: str, *, tier: int, max_batch_size: int, max_new_tokens: int
) -> GpuEstimate:
    """Worst-case GPU bytes of one pod: full batch of the largest pages at ``tier``."""
    weights = WEIGHTS_BYTES[engine]
    if weights == 0:  # CPU engine: nothing lives on a GPU
        return GpuEstimate(0, 0, 0, 0)
    visual = vision_tokens(tier)
    seq = visual + IMAGE_SEPARATOR_TOKENS + PROMPT_TOKENS + max_new_tokens
    kv = max_batch_size * seq * KV_BYTES_PER_TOKEN
    vision = max_batch_size * visual * VISION_BYTES_PER_TOKEN
    slack = int((weights + kv + vision) * FRAGMENTATION)
    return GpuEstimate(weights, kv, vision, CUDA_OVERHEAD + slack)


def estimate_for_spec(spec: DocParserSpec) -> GpuEstimate:
    return estimate_gpu_memory(
        spec.engine,
        tier=spec.max_tier,
        max_batch_size=spec.runtime.max_batch_size,
        max_new_tokens=spec.runtime.max_new_tokens,
    )


def largest_batch_that_fits(spec: DocParserSpec, gpu_bytes: int) -> int:
    """Biggest maxBatchSize whose worst case fits ``gpu_bytes`` (0 when even 1 does not)."""
    best = 0
    for batch in range(1, spec.runtime.max_batch_size + 1):
        est = estimate_gpu_memory(
            spec.engine,
            tier=spec.max_tier,
            max_batch_size=batch,
            max_new_tokens=spec.runtime.max_new_tokens,
        )
        if est.total > gpu_bytes:
            break
        best = batch
    return best


def gpu_memory_problem(spec: DocParserSpec) -> tuple[str, str] | None:
    """``(reason, message)`` for a Degraded condition when gpuMemory cannot hold the worst case.

    None when it fits, when no gpuMemory is declared (nothing to check against), or when the
    pod uses no GPU.
    """
    if spec.resources.gpu_memory is None or spec.gpus == 0:
        return None
    estimate = estimate_for_spec(spec)
    if estimate.total == 0:
        return None
    available = parse_quantity(spec.resources.gpu_memory)
    if estimate.total <= available:
        return None
    fits = largest_batch_that_fits(spec, available)
    advice = f"lower runtime.maxBatchSize to {fits}" if fits else "use a GPU with more memory"
    return (
        "InsufficientGPUMemory",
        f"resources.gpuMemory {spec.resources.gpu_memory} cannot hold the worst case at tier "
        f"{spec.max_tier}, maxBatchSize {spec.runtime.max_batch_size} and maxNewTokens "
        f"{spec.runtime.max_new_tokens}: needs {estimate.describe()}; {advice}, or lower tier "
        f"or maxNewTokens",
    )


def host_memory_request(spec: DocParserSpec) -> str:
    """Memory request (and limit) of the runtime container, unless resources.memory is set."""
    if spec.resources.memory:
        return spec.resources.memory
    need = host_serving_bytes(spec.engine) + int(WEIGHTS_BYTES[spec.engine] * 1.25)
    return f"{math.ceil(need / GIB)}Gi"


def host_serving_bytes(engine: str, work_bytes: int = HOST_WORK_BYTES) -> int:
    """The runtime's side of the equation: the limit under which its admission gets
    ``work_bytes`` (``docparser_runtime.sizing.host_memory.pod_memory_bytes``)."""
    engine_work = HOST_ENGINE_PAGE_PIXELS[engine] * HOST_ENGINE_BYTES_PER_PIXEL[engine]
    need = HOST_SERVER_BYTES[engine] + HOST_DECODERS * HOST_DECODER_BYTES + engine_work
    return math.ceil((need + work_bytes) / (1 - HOST_HEADROOM))


def weights_volume_limit(spec: DocParserSpec) -> str:
    """One version's volume (emptyDir limit or cache claim): spec.weightsCache.volumeSize, else
    one copy plus room for a partial download."""
    if spec.weights_cache.volume_size:
        return spec.weights_cache.volume_size
    weights = WEIGHTS_BYTES[spec.engine] or 2 * GIB
    return f"{math.ceil(2 * weights / GIB)}Gi"


TMP_VOLUME_LIMIT = "2Gi"  # the pod's /tmp emptyDir (uploads spill there, the HF home)


def ephemeral_storage_request(spec: DocParserSpec, *, weights_in_pod: bool) -> str:
    """What a runtime pod writes to node disk: its /tmp, plus the weights volume when the
    weights are fetched into the pod's own emptyDir. Requested so the scheduler only picks a
    node with that much free disk, rather than the kubelet evicting the pod later."""
    total = parse_quantity(TMP_VOLUME_LIMIT)
    if weights_in_pod:
        total += parse_quantity(weights_volume_limit(spec))
    return f"{math.ceil(total / GIB)}Gi"
