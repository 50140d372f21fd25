"""The canary analysis' gates before traffic (pure): the golden documents' verdict and the
shadow's, each moving the walk (walk.py) on or ending it.

Why gates and not windows: both judge the canary while it carries no traffic (weight 0, or
the weight earlier steps earned), on evidence gathered without users: parsed golden
documents, or live pages stable's pods copied to it (``spec.canary.shadow``). A window
compares live traffic the canary already served; a gate decides whether it gets any. Order
before step 1: the golden gate (``Verifying``), then the shadow gate (``Shadowing``: at least
``minShadowPages`` live pages compared, then ``maxShadowDisagreement`` and
``maxShadowTruncationIncrease``), then the steps. A failure is ``Failed`` with the reason
in status (``GoldenRegression``, ``ShadowRegression``) and the figures in its message.
"""

from __future__ import annotations

from dataclasses import replace

from docparser_operator.analysis import shadow_score as shadow_figures
from docparser_operator.analysis.golden_score import GoldenScore
from docparser_operator.analysis.shadow_score import ShadowCounters
from docparser_operator.analysis.walk import AnalysisState
from docparser_operator.api.analysis_spec import CanaryAnalysis


def verified(
    state: AnalysisState, scores: tuple[GoldenScore, ...], *, shadow: bool = False
) -> AnalysisState:
    """The golden gate's verdict: traffic may start (or widen to the step's weight), or the
    canary gets none (a failure after earlier steps rolls it back to 0 %). ``shadow``: the
    DocParser has a shadow, whose gate comes next before step 1."""
    failed = [g for g in scores if not g.ok]
    n = len(state.steps)
    if failed:
        worst = ", ".join(f"{g.document} {g.canary:.3f} (stable {g.stable:.3f})" for g in failed)
        return replace(
            state,
            phase="Failed",
            reason="GoldenRegression",
            golden=scores,
            message=f"golden documents: the canary reads {len(failed)} of {len(scores)} worse "
            f"than allowed (character error rate: {worst}); "
            + (
                f"rolled back from {state.weight}% before step {state.step + 1}/{n}"
                if state.step
                else "no traffic was sent to it"
            ),
        )
    if shadow and state.step == 0:
        return replace(
            state,
            phase="Shadowing",
            golden=scores,
            window_start="",
            message=f"golden documents passed ({len(scores)}); shadow: comparing live pages at 0%",
        )
    return replace(
        state,
        phase="Progressing",
        golden=scores,
        message=f"golden documents passed ({len(scores)}); step {state.step + 1}/{n}: "
        f"{state.steps[state.step].weight}%",
    )


def shadowed(state: AnalysisState, config: CanaryAnalysis, span: ShadowCounters) -> AnalysisState:
    """The shadow gate over the live pages compared since it began: wait for
    ``minShadowPages``, then pass to step 1 or fail with ``ShadowRegression`` (the canary,
    dark, never took a request)."""
    n = len(state.steps)
    if span.compared < config.min_shadow_pages:
        dropped = sum(count for _, count in span.dropped)
        return replace(
            state,
            message=f"shadow: {span.compared:g}/{config.min_shadow_pages} live pages compared "
            f"at 0% ({span.mirrored:g} sent, {dropped:g} copies dropped)",
        )
    verdict = shadow_figures.checks(config, span)
    failed = [c for c in verdict if not c.ok]
    if failed:
        return replace(
            state,
            phase="Failed",
            reason="ShadowRegression",
            checks=verdict,
            window_start="",
            message="shadow: the canary reads live documents worse than stable ("
            + shadow_figures.describe(failed, span)
            + "); no traffic was sent to it",
        )
    return replace(
        state,
        phase="Progressing",
        checks=verdict,
        window_start="",
        message=f"shadow passed ({shadow_figures.describe(verdict, span)}); step 1/{n}: "
        f"{state.steps[0].weight}% for {config.interval_seconds}s",
    )
