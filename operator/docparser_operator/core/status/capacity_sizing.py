"""The sizing equations of ``status.capacity``'s recommendations (pure arithmetic).

A copy of ``docparser_runtime.sizing.capacity``'s, because the operator may not import the runtime
(separate distributions; an import-linter contract): ``docparser-runtime advise
--from-metrics`` and the operator must recommend the same replicas, tier, memory and batch
from the same figures. tests/operator/core/plan/test_capacity_parity.py holds the two equal over
grids of inputs. The GPU memory equation itself is core/plan/sizing.py's (already held equal).

- **replicas at the peak**: the busy decode slots the peak minute needs
  (pages/s x seconds a page holds a slot), over the slots one pod may keep busy. How busy is
  Kingman's approximation for a queue in front of a pod with Poisson arrivals and
  near-constant service: ``wait = rho / (1 - rho) * s / (2 c)``, solved for the target wait
  (``autoscaling.targetSeconds``, else ``TARGET_WAIT_S``), capped at ``MAX_UTILISATION``.
- **tier**: the lowest fixed tier that reads at most ``TOO_LOW_BUDGET`` of the pages ``auto``
  chose below its choice, when its worst case costs within ``FIXED_OVER_AUTO`` of auto's
  mean tokens (``advise``'s rule, on the live mix), else ``auto``.
- **pod memory**: the observed peak plus ``MEMORY_HEADROOM``, in whole GiB.
- **batch**: the largest maxBatchSize whose worst case at the tier fits ``gpuMemory``.
"""

from __future__ import annotations

import math

from docparser_operator.core.plan.sizing import GIB, estimate_gpu_memory, vision_tokens

MAX_TIER = 6
TARGET_WAIT_S = 5.0
MAX_UTILISATION = 0.8
MEMORY_HEADROOM = 0.25
TOO_LOW_BUDGET = 0.02
FIXED_OVER_AUTO = 1.10
BATCH_CEILING = 256


def utilisation_for_wait(target_wait_s: float, seconds_per_page: float, slots: int) -> float:
    """How busy a pod's decode slots may be for queue waits near ``target_wait_s``."""
    x = 2 * target_wait_s * max(1, slots) / max(seconds_per_page, 1e-9)
    return min(MAX_UTILISATION, x / (1 + x))


def replicas_at_peak(
    peak_pages_per_s: float, seconds_per_page: float, slots: int, target_wait_s: float
) -> int:
    """Pods that serve ``peak_pages_per_s`` with waits near ``target_wait_s`` (at least one)."""
    busy_pods = peak_pages_per_s * seconds_per_page / max(1, slots)
    rho = utilisation_for_wait(target_wait_s, seconds_per_page, slots)
    return max(1, math.ceil(busy_pods / rho - 1e-9))


def tier_for_mix(auto_pages: dict[int, float], cap: int = MAX_TIER) -> int | str:
    """The default tier for pages ``auto`` read at these tiers (tier -> pages), or ``auto``."""
    total = sum(auto_pages.values())
    if total <= 0:
        return "auto"
    mean = sum(n * vision_tokens(t) for t, n in auto_pages.items()) / total
    for tier in range(cap + 1):
        above = sum(n for t, n in auto_pages.items() if t > tier) / total
        if above <= TOO_LOW_BUDGET:
            return tier if vision_tokens(tier) <= FIXED_OVER_AUTO * mean else "auto"
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
