"""``status.capacity`` and the ``CapacityAdvice`` condition (pure).

The report is the last whole window's figures, each rounded to two significant digits, and
what the spec should say for them (core/status/capacity_sizing.py, the equations ``advise`` shares).
It is replaced at most once per window, and only when a rounded figure moved: at rest the
status stays byte for byte what it was, so the operator writes nothing.

``CapacityAdvice`` is advisory: it never touches Ready, Degraded, Reconciling or Stalled, so
Flux (kstatus) reads Current and Argo CD (the chart's health Lua) Healthy while it is True. It
is True while a recommendation differs from the spec by more than ``ADVICE_RATIO`` over the
window the report covers; its message says what to change, to what, and why, in numbers. It
is compared with the spec on every pass, so it goes on the pass after the spec is fixed, and
it is absent when there is nothing to advise.
"""

from __future__ import annotations

from dataclasses import dataclass

from docparser_operator.api.capacity_spec import (
    CapacityRecommended,
    CapacityStatus,
    CapacityTier,
)
from docparser_operator.api.models import DocParserSpec
from docparser_operator.api.status_models import DocParserStatus
from docparser_operator.core.plan.sizing import (
    GIB,
    WEIGHTS_BYTES,
    host_memory_request,
    parse_quantity,
    vision_tokens,
)
from docparser_operator.core.status import capacity_sizing as eq
from docparser_operator.core.status.capacity_window import Figures, significant
from docparser_operator.core.status.conditions import condition

CONDITION = "CapacityAdvice"
ADVICE_RATIO = 1.25  # a recommendation this far from the spec (either way) is advice


@dataclass(frozen=True)
class CapacityStep:
    """This pass's capacity report (new, or the one in status) and when to read next."""

    report: CapacityStatus | None
    next_read_s: float | None = None


def gib(n_bytes: float) -> str:
    """Bytes as GiB with two significant digits (``5.3Gi``; whole numbers bare: ``8Gi``)."""
    value = significant(n_bytes / GIB)
    return f"{value:g}Gi"


def target_wait(spec: DocParserSpec) -> float:
    """The p95 queue wait replicas are sized for: the latency autoscaler's, else the default."""
    promised = spec.autoscaling.target_seconds
    return promised if spec.autoscaling.metric == "latency" and promised else eq.TARGET_WAIT_S


def recommended(fig: Figures, spec: DocParserSpec) -> CapacityRecommended:
    """What the spec should say for these figures (each only where the figures support it)."""
    slots = int(fig.counters.slots) or spec.runtime.max_batch_size
    wait = target_wait(spec)
    replicas = waited = None
    if fig.seconds_per_page > 0:
        replicas = eq.replicas_at_peak(fig.peak_pages_per_s, fig.seconds_per_page, slots, wait)
        waited = wait
    auto = dict(fig.counters.auto_pages)
    tier: int | str | None = None
    if spec.tier == "auto" and sum(auto.values()) > 0:
        tier = eq.tier_for_mix(auto)
    max_batch = None
    if spec.resources.gpu_memory and spec.gpus > 0 and WEIGHTS_BYTES[spec.engine] > 0:
        sized = tier if isinstance(tier, int) else spec.max_tier
        max_batch = eq.batch_for_gpu(
            spec.engine,
            sized,
            spec.runtime.max_new_tokens,
            parse_quantity(spec.resources.gpu_memory),
        )
    peak = fig.counters.memory_peak
    return CapacityRecommended(
        replicas=replicas,
        tier=None if tier is None else str(tier),
        memory=gib(eq.memory_for_peak(peak)) if peak > 0 else None,
        max_batch_size=max_batch,
        target_wait_seconds=waited,
    )


def report(
    fig: Figures, spec: DocParserSpec, *, window: str, since: str, source: str
) -> CapacityStatus:
    """``status.capacity`` for these figures (rounded, through its model)."""
    c = fig.counters
    seconds = fig.tier_seconds()
    auto = dict(c.auto_pages)
    chosen = sum(auto.values())
    tiers = [
        CapacityTier(
            tier=t,
            auto_share=significant(auto.get(t, 0.0) / chosen) if chosen else None,
            seconds_per_page=significant(seconds[t]) if t in seconds else None,
        )
        for t in sorted(set(seconds) | {t for t, n in auto.items() if n > 0})
    ]
    return CapacityStatus(
        window=window,
        since=since,
        source=source,
        pods=fig.pods,
        pages_per_second=significant(fig.pages_per_s),
        peak_pages_per_second=significant(fig.peak_pages_per_s),
        vision_tokens_per_page=significant(fig.per_page(c.vision_tokens)),
        output_tokens_per_page=significant(fig.per_page(c.output_tokens)),
        seconds_per_page=significant(fig.seconds_per_page),
        slots=int(c.slots) if c.slots else None,
        queue_wait_p95_seconds=significant(fig.queue_wait_p95),
        memory_peak=gib(c.memory_peak) if c.memory_peak else None,
        memory_limit=gib(c.memory_limit) if c.memory_limit else None,
        tiers=tiers or None,
        recommended=recommended(fig, spec),
    )


def same_figures(a: CapacityStatus | None, b: CapacityStatus) -> bool:
    """Whether two reports say the same but for when they were taken."""
    if a is None:
        return False
    return a.model_copy(update={"since": None}) == b.model_copy(update={"since": None})


def _differs(a: float, b: float) -> bool:
    low, high = sorted((a, b))
    return high > ADVICE_RATIO * low


def advice(capacity: CapacityStatus, spec: DocParserSpec) -> tuple[str, str] | None:
    """(reason, message) when a recommendation differs from ``spec`` by more than
    ``ADVICE_RATIO``; None when the spec fits the window's traffic."""
    rec = capacity.recommended or CapacityRecommended()
    found: list[tuple[str, str]] = []
    n = rec.replicas
    if isinstance(n, int):
        why = (
            f"the peak minute brought {capacity.peak_pages_per_second} pages/s at "
            f"{capacity.seconds_per_page} s a page on {capacity.slots or '?'} "
            f"slots a pod; {n} pod(s) keep the p95 queue wait near {rec.target_wait_seconds}"
            " s"
        )
        if n > ADVICE_RATIO * spec.replicas.max:
            found.append(
                ("RaiseReplicas", f"raise replicas.max from {spec.replicas.max} to {n}: {why}")
            )
        elif spec.replicas.min > 0 and n * ADVICE_RATIO < spec.replicas.min:
            found.append(
                ("LowerReplicas", f"lower replicas.min from {spec.replicas.min} to {n}: {why}")
            )
    tier = rec.tier
    if spec.tier == "auto" and isinstance(tier, str) and tier.isdigit():
        worst, fixed = vision_tokens(spec.max_tier), vision_tokens(int(tier))
        if _differs(worst, fixed):
            share = next((t.auto_share for t in capacity.tiers or [] if t.tier == int(tier)), None)
            found.append(
                (
                    "SetTier",
                    f"set tier: {tier}: auto read at most {eq.TOO_LOW_BUDGET:.0%} of pages above "
                    f"tier {tier} (tier {tier}: {share} of pages), and tier {tier}'s worst case is "
                    f"{fixed} visual tokens a page against {worst} that auto is sized for",
                )
            )
    memory, limit = rec.memory, capacity.memory_limit
    if (
        isinstance(memory, str)
        and isinstance(limit, str)
        and _differs(parse_quantity(memory), parse_quantity(limit))
    ):
        found.append(
            (
                "SetMemory",
                f"set resources.memory to {memory}: the pods peaked at "
                f"{capacity.memory_peak} of their {limit} limit (now "
                f"{spec.resources.memory or host_memory_request(spec)})",
            )
        )
    batch = rec.max_batch_size
    if isinstance(batch, int) and _differs(batch, spec.runtime.max_batch_size):
        found.append(
            (
                "SetMaxBatchSize",
                f"set runtime.maxBatchSize from {spec.runtime.max_batch_size} to {batch}: the "
                f"largest batch whose worst case fits gpuMemory {spec.resources.gpu_memory}",
            )
        )
    if not found:
        return None
    return found[0][0], "; ".join(message for _, message in found)


def with_capacity(
    status: DocParserStatus,
    step: CapacityStep,
    spec: DocParserSpec | None,
    previous: DocParserStatus,
    generation: int,
    now: str,
) -> DocParserStatus:
    """``status`` with the capacity report and, while there is advice, its condition (its
    transition time the previous status' while it stays True)."""
    if step.report is None:
        return status
    out = status.model_copy(update={"capacity": step.report})
    found = advice(step.report, spec) if spec is not None else None
    if found is None:
        return out
    reason, message = found
    advised = condition(CONDITION, True, reason, message, generation, previous, now)
    return out.model_copy(update={"conditions": [*status.conditions, advised]})
