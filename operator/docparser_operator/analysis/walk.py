"""Canary analysis (``spec.canary.analysis``): the weight walks its steps on metrics (pure).

Why here and not a person editing ``canary.weight``: a model release is judged by how the
canary serves next to stable over the same minutes. Each step holds its weight for
``intervalSeconds``; then the runtime pods' own counters (``docparser_requests_total`` and the
total-stage latency histogram, differenced over the window by ``scrape.py``) decide:

- inconclusive while either track has fewer than ``minRequests`` requests in the window (the
  window keeps accumulating: a quiet service never advances on no evidence);
- failed when the canary's error rate (5xx / all) exceeds stable's by more than
  ``maxErrorRateIncrease``, its p99 latency is more than ``maxLatencyRatio`` times stable's,
  or the share of its pages cut at ``max_new_tokens``, answered empty or steered by the
  repetition guard exceeds stable's by more than ``maxTruncatedRateIncrease``,
  ``maxEmptyRateIncrease`` or ``maxRepetitionRateIncrease`` (output that reads worse
  without failing: what a model release regresses on);
  ``failureLimit`` failed windows in a row roll back: weight 0, stable untouched,
  ``Degraded/CanaryFailed``; it stays there until the canary changes (a new revision) or
  ``analysis.retry`` gets a new value;
- passed: the next step, a pause (``pause: true`` on a step waits for any spec change, i.e. a
  new generation), or after the last step ``Succeeded``: the canary carries 100 % (the
  make-before-break promotion of core/plan/rollout_planner.py) until its weights move into
  ``spec.weights``.

The counters come from the pods' own ``/metrics`` (scrape.py) or, with ``prometheus``, from
PromQL over the window (prometheus.py): the same ``TrackCounters``, the same checks.

With ``golden`` the walk starts ``Verifying`` at weight 0: each golden document is parsed by
a canary pod and a stable pod (golden.py) and scored by character error rate against its
expected text; a canary over ``maxCER`` on a document, or more than ``maxCERIncrease`` above
stable's, never gets traffic (``Failed``, reason ``GoldenRegression``). With
``golden.everyStep`` the gate runs again before each later step, holding the weight earned
so far while it does; a failure then rolls the canary back to 0 %.

With ``canary.shadow`` (stable's pods copy live requests to the canary and compare the
outputs) the walk holds ``Shadowing`` at weight 0 before step 1 (after the golden gate):
gates.py judges the stable pods' comparison once ``minShadowPages`` pages were compared
(``ShadowRegression`` on failure, no traffic sent); every later window also carries the
comparison over its minutes (shadow_score.py's checks; a step's ``minShadowPages`` waits for them).

The operator never writes ``spec``: the step, the effective weight, the last checks and the
verdict live in ``status.canary.analysis`` and survive an operator restart or a new leader.
The counters at a window's start are kept in the leader's memory only; a restart begins the
current step's window again (it never skips or repeats a verdict).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Literal

from docparser_operator.analysis import shadow_score as shadow
from docparser_operator.analysis.counters import (
    OUTCOMES,
    Check,
    TrackCounters,
    supported_quantile,
)
from docparser_operator.analysis.golden_score import GoldenScore
from docparser_operator.analysis.shadow_score import ShadowCounters, ShadowFigures
from docparser_operator.api.analysis_spec import AnalysisStep, CanaryAnalysis
from docparser_operator.api.status_models import AnalysisStatus

Phase = Literal["Verifying", "Shadowing", "Progressing", "Paused", "Failed", "Succeeded"]
__all__ = ["AnalysisState", "Check", "Window", "advance", "current", "evaluate", "window_due"]


@dataclass(frozen=True)
class AnalysisState:
    """``status.canary.analysis``: where the walk is (the state the operator resumes from)."""

    revision: str
    steps: tuple[AnalysisStep, ...]
    step: int = 0
    phase: Phase = "Progressing"
    window_start: str = ""
    failures: int = 0
    paused_generation: int = 0
    retry: str = ""
    message: str = ""
    checks: tuple[Check, ...] = field(default_factory=tuple)
    reason: str = ""  # why a Failed walk stopped: CanaryFailed, Golden- or ShadowRegression
    golden: tuple[GoldenScore, ...] = field(default_factory=tuple)
    figures: ShadowFigures | None = None  # the shadow span measured this pass (status.shadow)

    @property
    def weight(self) -> int:
        """The canary's effective weight (what the rollout planner is asked for)."""
        if self.phase == "Failed":
            return 0
        if self.phase in ("Verifying", "Shadowing"):  # hold what was earned, never widen
            return self.steps[self.step - 1].weight if self.step else 0
        if self.phase == "Succeeded":
            return 100
        return self.steps[self.step].weight

    def to_status(self) -> AnalysisStatus:
        """``status.canary.analysis``, through its model (what ``current`` reads back)."""
        return AnalysisStatus(
            revision=self.revision,
            step=self.step + 1,
            steps=len(self.steps),
            weight=self.weight,
            phase=self.phase,
            failures=self.failures,
            message=self.message,
            checks=[c.to_status() for c in self.checks],
            window_start=self.window_start or None,
            paused_generation=self.paused_generation or None,
            retry=self.retry or None,
            reason=self.reason or None,
            golden=[g.to_status() for g in self.golden] if self.golden else None,
        )


def current(
    config: CanaryAnalysis,
    status: AnalysisStatus | None,
    revision: str,
    *,
    shadow: bool = False,
) -> AnalysisState:
    """The state to continue from: ``status.canary.analysis``'s, unless it speaks of another
    canary revision or an older ``retry`` token (then the walk starts again at step 1).
    ``shadow``: the DocParser has ``canary.shadow`` (its gate comes before step 1)."""
    steps = tuple(config.schedule())
    first: Phase = (
        "Verifying" if config.golden is not None else "Shadowing" if shadow else "Progressing"
    )
    fresh = AnalysisState(
        revision=revision,
        steps=steps,
        retry=config.retry or "",
        phase=first,
        message={
            "Verifying": "golden documents: waiting for a Ready canary pod",
            "Shadowing": "shadow: comparing live pages at 0%",
        }.get(first, f"step 1/{len(steps)}: {steps[0].weight}% for {config.interval_seconds}s"),
    )
    old = status or AnalysisStatus()
    if old.revision != revision or (old.retry or "") != (config.retry or ""):
        return fresh
    step = min(max(int(old.step or 1) - 1, 0), len(steps) - 1)
    kept = ("Verifying", "Shadowing", "Paused", "Failed", "Succeeded")
    phase: Phase | None = old.phase if old.phase in kept else None  # type: ignore[assignment]
    return replace(
        fresh,
        step=step,
        phase=phase or "Progressing",
        reason=old.reason or "",
        golden=tuple(
            GoldenScore(str(g.document), float(g.canary or 0), float(g.stable or 0), bool(g.ok))
            for g in old.golden or []
        ),
        window_start=old.window_start or "",
        failures=int(old.failures or 0),
        paused_generation=int(old.paused_generation or 0),
        message=old.message or fresh.message,
        checks=tuple(
            Check(
                str(c.name),
                float(c.value or 0),
                float(c.threshold or 0),
                bool(c.ok),
                c.canary,
                c.stable,
                c.quantile,
            )
            for c in old.checks or []
        ),
    )


def evaluate(
    config: CanaryAnalysis,
    canary: TrackCounters,
    stable: TrackCounters,
    span: ShadowCounters | None = None,
    min_shadow_pages: int = 0,
) -> tuple[Check, ...] | str:
    """The window's checks, or why there is no verdict yet. ``span``: the shadow's compared
    pages in the window (with ``canary.shadow``); the step may require ``min_shadow_pages``."""
    low = [
        f"{track} {int(c.requests)}/{config.min_requests}"
        for track, c in (("canary", canary), ("stable", stable))
        if c.requests < config.min_requests
    ]
    if low:
        return "waiting for requests in the window: " + ", ".join(low)
    compared = span.compared if span is not None else 0.0
    if compared < min_shadow_pages:
        return f"waiting for compared live pages in the window: {compared:g}/{min_shadow_pages}"
    judged = shadow.checks(config, span) if span is not None and compared > 0 else ()
    increase = canary.error_rate - stable.error_rate
    q = supported_quantile(min(canary.timed, stable.timed))
    stable_p99, canary_p99 = stable.quantile(q), canary.quantile(q)
    ratio = canary_p99 / stable_p99 if stable_p99 > 0 else (1.0 if canary_p99 == 0 else math.inf)
    quality = []
    for outcome, (name, field_name) in OUTCOMES.items():
        threshold: float = getattr(config, field_name)
        c_rate, s_rate = canary.page_rate(outcome), stable.page_rate(outcome)
        quality.append(
            Check(name, c_rate - s_rate, threshold, c_rate - s_rate <= threshold, c_rate, s_rate)
        )
    return (
        Check(
            "errorRate",
            increase,
            config.max_error_rate_increase,
            increase <= config.max_error_rate_increase,
            canary.error_rate,
            stable.error_rate,
        ),
        Check(
            "latencyP99Ratio",
            ratio if math.isfinite(ratio) else 1e9,
            config.max_latency_ratio,
            ratio <= config.max_latency_ratio,
            canary_p99,
            stable_p99,
            quantile=q,
        ),
        *quality,
        *judged,
    )


@dataclass(frozen=True)
class Window:
    """What the executor measured for the state's current window (None: nothing due)."""

    canary: TrackCounters
    stable: TrackCounters
    shadow: ShadowCounters | None = None  # the stable pods' comparison (canary.shadow)


def advance(
    state: AnalysisState,
    config: CanaryAnalysis,
    window: Window | None,
    *,
    now: str,
    generation: int,
    serving_step: bool,
) -> AnalysisState:
    """One pass of the walk (pure). ``serving_step``: the canary's Ready pods carry the step's
    weight now; until they do the window keeps starting over (no verdict on a half shift).
    ``window``: the counters over the full window, when it is due."""
    n = len(state.steps)
    if state.phase == "Paused":
        if generation == state.paused_generation:
            return state
        step = state.step + 1
        return _next_step(
            replace(state, failures=0, paused_generation=0),
            config,
            step,
            f"resumed: step {step + 1}/{n} at {state.steps[step].weight}%",
        )
    if state.phase != "Progressing":
        return state
    if not serving_step:
        return replace(
            state,
            window_start="",
            message=f"step {state.step + 1}/{n}: shifting {state.weight}% to the canary",
        )
    if window is None:
        return state
    step_pages = state.steps[state.step].min_shadow_pages
    verdict = evaluate(config, window.canary, window.stable, window.shadow, step_pages)
    if isinstance(verdict, str):
        return replace(state, message=f"step {state.step + 1}/{n} at {state.weight}%: {verdict}")
    failed = [c for c in verdict if not c.ok]
    if failed:
        failures = state.failures + 1
        why = "; ".join(f"{c.name} {c.value:.4g} > {c.threshold:g}" for c in failed)
        if failures >= config.failure_limit:
            on_shadow = any(c.name.startswith("shadow") for c in failed)
            return replace(
                state,
                phase="Failed",
                reason="ShadowRegression" if on_shadow else "CanaryFailed",
                failures=failures,
                checks=verdict,
                window_start="",
                message=f"rolled back at step {state.step + 1}/{n} ({state.weight}%) after "
                f"{failures} failed window(s): {why}",
            )
        return replace(
            state,
            failures=failures,
            checks=verdict,
            window_start=now,
            message=f"step {state.step + 1}/{n}: window failed ({why}), "
            f"{failures}/{config.failure_limit} before rollback",
        )
    done = state.steps[state.step]
    if state.step + 1 >= n:
        return replace(
            state,
            phase="Succeeded",
            failures=0,
            checks=verdict,
            window_start="",
            message=f"all {n} steps passed: the canary carries 100%; move its weights to "
            "spec.weights (docparser-operator promote) to finish",
        )
    if done.pause:
        return replace(
            state,
            phase="Paused",
            failures=0,
            checks=verdict,
            paused_generation=generation,
            window_start="",
            message=f"step {state.step + 1}/{n} passed at {done.weight}%: paused until the "
            "spec changes",
        )
    step = state.step + 1
    return _next_step(
        replace(state, failures=0, checks=verdict),
        config,
        step,
        f"step {step + 1}/{n}: {state.steps[step].weight}% for {config.interval_seconds}s",
    )


def _next_step(
    state: AnalysisState, config: CanaryAnalysis, step: int, message: str
) -> AnalysisState:
    """Move to ``step``; with ``golden.everyStep`` through the golden gate first, at the
    weight already earned (``Verifying`` holds the previous step's weight)."""
    moved = replace(state, step=step, window_start="", phase="Progressing", message=message)
    if config.golden is not None and config.golden.every_step:
        return replace(
            moved,
            phase="Verifying",
            message=f"golden documents again before step {step + 1}/{len(state.steps)} "
            f"({state.steps[step].weight}%): waiting for a Ready canary pod",
        )
    return moved


def _seconds(rfc3339: str) -> float:
    import calendar
    import time

    return float(calendar.timegm(time.strptime(rfc3339, "%Y-%m-%dT%H:%M:%SZ")))


def elapsed(start: str, now: str) -> float:
    """Seconds from ``start`` to ``now`` (status timestamps)."""
    return _seconds(now) - _seconds(start)


def window_due(state: AnalysisState, config: CanaryAnalysis, now: str) -> bool:
    """The step's window has lasted ``intervalSeconds`` (only a Progressing walk has one)."""
    if state.phase != "Progressing" or not state.window_start:
        return False
    return _seconds(now) - _seconds(state.window_start) >= config.interval_seconds
