"""The shadow canary's analysis (pure): the stable pods' comparison counters read from the
contract's /metrics text, the shadow gate before step 1 of a dark canary, the checks in
every window, the step's minimum of compared pages, and the figures status reports."""

from __future__ import annotations

from dataclasses import replace

import pytest
from docparser_operator.analysis import gates
from docparser_operator.analysis import shadow_score as shadow
from docparser_operator.analysis.counters import TrackCounters
from docparser_operator.analysis.shadow_score import ShadowCounters, ShadowFigures
from docparser_operator.analysis.walk import Window, advance, current
from docparser_operator.api.analysis_spec import CanaryAnalysis, PrometheusSource
from docparser_operator.api.status_models import AnalysisStatus
from docparser_operator.providers.base import ShadowQuery
from docparser_operator.providers.pods import parse_shadow
from docparser_operator.providers.prometheus import shadow_queries
from shadow_metrics import Pages, exposition

CONFIG = CanaryAnalysis(
    steps=[{"weight": 10, "minShadowPages": 50}, {"weight": 50}],
    interval_seconds=60,
    min_requests=20,
    failure_limit=1,
    min_shadow_pages=100,
    max_shadow_disagreement={"quantile": 0.9, "cer": 0.02},
    max_shadow_truncation_increase=0.02,
)
NOW = "2026-12-01T10:00:00Z"


def span(pages: int, bad: int = 0, cer: float = 0.05, **extra: float) -> ShadowCounters:
    """``pages`` compared, ``bad`` of them at ``cer`` (a dropped line in twenty), the rest
    identical to stable's: read back from the contract's exposition."""
    text = exposition(
        {("s1", "c1"): Pages(cer=[0.0] * (pages - bad) + [cer] * bad, mirrored=pages)}
    )
    return replace(parse_shadow(text, "s1", "c1"), **extra)


def test_counters_come_from_the_contract_exposition_for_this_revision_pair_only() -> None:
    text = exposition(
        {
            ("s1", "c1"): Pages(
                cer=[0.0] * 8 + [0.05, 0.3],
                mirrored=12,
                stable_truncated=1,
                canary_truncated=3,
                structure=2,
                dropped={"busy": 4, "budget": 7},
            ),
            ("s1", "c0"): Pages(cer=[0.9] * 50, mirrored=50),  # the canary before: not ours
        }
    )
    got = parse_shadow(text, "s1", "c1")
    assert (got.mirrored, got.compared, got.structure) == (12, 10, 2)
    assert (got.stable_truncated, got.canary_truncated) == (1, 3)
    assert dict(got.dropped) == {"budget": 7, "busy": 4, "credential": 0, "error": 0, "revision": 0}
    assert dict(got.cer)[0.001] == 8 and dict(got.cer)[0.1] == 9 and dict(got.cer)[1.0] == 10
    assert got.truncation_increase == pytest.approx(0.2)
    assert 0.05 < got.cer_at(0.95) <= 0.5 and got.cer_at(0.5) <= 0.001


def test_a_span_is_the_difference_and_a_counter_going_down_voids_it() -> None:
    later, earlier = span(300, bad=30), span(100, bad=10)
    diff = later.minus(earlier)
    assert diff is not None and (diff.compared, diff.mirrored) == (200, 200)
    assert dict(diff.cer)[0.001] == 180
    assert earlier.minus(later) is None  # a stable pod restarted: measure again
    both = shadow.add([earlier, earlier])
    assert both.compared == 200 and dict(both.cer)[1.0] == 200


def test_a_dark_canary_with_a_shadow_is_gated_before_step_1_at_weight_0() -> None:
    state = current(CONFIG, None, "c1", shadow=True)
    assert (state.phase, state.weight, state.step) == ("Shadowing", 0, 0)
    waiting = gates.shadowed(state, CONFIG, span(60))
    assert (waiting.phase, waiting.weight) == ("Shadowing", 0)
    assert "60/100 live pages compared" in waiting.message
    passed = gates.shadowed(state, CONFIG, span(200, bad=10))  # 5 %: under the p90
    assert (passed.phase, passed.weight, passed.step) == ("Progressing", 10, 0)
    assert [c.name for c in passed.checks] == ["shadowDisagreement", "shadowTruncationIncrease"]
    assert all(c.ok for c in passed.checks)


def test_a_canary_that_reads_live_documents_worse_is_rolled_back_before_any_traffic() -> None:
    state = current(CONFIG, None, "c1", shadow=True)
    failed = gates.shadowed(state, CONFIG, span(200, bad=40))  # 20 % of pages at CER 0.05
    assert (failed.phase, failed.reason, failed.weight) == ("Failed", "ShadowRegression", 0)
    (disagreement, truncation) = failed.checks
    assert not disagreement.ok and disagreement.quantile == 0.9
    assert 0.02 < disagreement.value <= 0.05 and truncation.ok
    assert "p90 page CER against stable" in failed.message and "200 live pages" in failed.message
    assert "no traffic was sent to it" in failed.message
    truncating = gates.shadowed(state, CONFIG, span(200, canary_truncated=20, stable_truncated=2))
    assert (truncating.phase, truncating.reason) == ("Failed", "ShadowRegression")
    assert "truncated pages 10.0% vs stable's 1.0%" in truncating.message


def test_the_golden_gate_comes_first_then_the_shadow_gate() -> None:
    config = CONFIG.model_copy(update={"golden": {"configMapRef": {"name": "g"}}})
    state = current(config, None, "c1", shadow=True)
    assert state.phase == "Verifying"
    assert gates.verified(state, (), shadow=True).phase == "Shadowing"
    assert gates.verified(state, ()).phase == "Progressing"  # no shadow: straight to step 1


def test_the_walk_resumes_the_shadow_gate_from_status() -> None:
    state = current(CONFIG, None, "c1", shadow=True)
    again = current(CONFIG, AnalysisStatus.model_validate(state.to_status()), "c1", shadow=True)
    assert (again.phase, again.weight) == ("Shadowing", 0)
    assert (
        current(CONFIG, AnalysisStatus.model_validate(state.to_status()), "c2", shadow=True).phase
        == "Shadowing"
    )


def _window(shadow_span: ShadowCounters | None) -> Window:
    track = TrackCounters(requests=40, latency=((0.25, 40.0), (float("inf"), 40.0)), pages=40)
    return Window(track, track, shadow_span)


def test_a_step_waits_for_its_compared_pages_and_judges_the_shadow_in_its_window() -> None:
    state = replace(current(CONFIG, None, "c1"), window_start=NOW)
    kwargs = {"now": NOW, "generation": 1, "serving_step": True}
    held = advance(state, CONFIG, _window(span(20)), **kwargs)
    assert held.step == 0 and "compared live pages in the window: 20/50" in held.message
    moved = advance(state, CONFIG, _window(span(60)), **kwargs)
    assert moved.step == 1 and "shadowDisagreement" in [c.name for c in moved.checks]
    failed = advance(state, CONFIG, _window(span(60, bad=20)), **kwargs)
    assert (failed.phase, failed.reason, failed.weight) == ("Failed", "ShadowRegression", 0)
    assert "shadowDisagreement" in failed.message
    later = replace(state, step=1)  # a step without minShadowPages: no shadow pages is no bar
    assert advance(later, CONFIG, _window(span(0)), **kwargs).phase == "Succeeded"


def test_status_figures_say_what_the_shadow_costs() -> None:
    dropped = (("budget", 6.0), ("busy", 0.0), ("credential", 0.0), ("error", 1.0))
    figures = ShadowFigures(NOW, 120.0, 0.9, span(200, bad=10, dropped=dropped))
    assert figures.to_status().to_wire() == {
        "since": NOW,
        "pagesCompared": 200.0,
        "pagesMirrored": 200.0,
        "pagesPerMinute": 100.0,  # 200 pages sent over two minutes
        "quantile": 0.9,
        "cer": pytest.approx(figures.span.cer_at(0.9), abs=1e-4),
        "truncationIncrease": 0.0,
        "structureDisagreements": 0.0,
        "dropped": [{"reason": "budget", "requests": 6.0}, {"reason": "error", "requests": 1.0}],
    }


def test_prometheus_reads_the_stable_revision_s_series_for_the_canary_revision() -> None:
    source = PrometheusSource(url="http://prom:9090")
    queries = shadow_queries(source, ShadowQuery("ocr", "s1", "c1", (), 300))
    sel = '{namespace="ocr",docparser_io_revision="s1",canary_revision=~"c1"}'
    assert queries["compared"] == f"sum(increase(docparser_shadow_pages_compared_total{sel}[300s]))"
    assert queries["cer"].startswith("sum by (le)(increase(docparser_shadow_page_cer_bucket{")
    assert 'flag=~"truncated"' in queries["truncated"] and "by (side)" in queries["truncated"]


def test_the_cli_status_shows_what_the_shadow_costs_and_finds() -> None:
    from docparser_operator.cli.rollout import render_status

    shadow_status = {
        "enabled": True,
        "percent": 10,
        "podPagesPerMinute": 30,
        **ShadowFigures(NOW, 450.0, 0.9, span(412, bad=60, dropped=(("budget", 38.0),)))
        .to_status()
        .to_wire(),
    }
    dp = {
        "metadata": {"name": "inv", "namespace": "ocr"},
        "spec": {"canary": {"weight": 0}},
        "status": {"canary": {"revision": "c1", "shadow": shadow_status}},
    }
    text = render_status(dp, [], [])
    assert "shadow  on, 10% of answered requests, 30 pages/min per stable pod" in text
    cer = shadow_status["cer"]
    assert f"412 pages compared, 412 sent (54.93/min), p90 CER {cer:.4f}" in text
    assert "dropped: budget 38" in text
    dp["status"]["canary"]["shadow"] = {"enabled": False, "percent": 10}
    assert "shadow  off" in render_status(dp, [], [])
