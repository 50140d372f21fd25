"""The canary analysis walk (pure): counters read from real runtime /metrics text, windows
judged against stable, steps, pauses, the failure limit, rollback and the fresh start on a
new canary or retry token."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from docparser_operator.analysis.counters import TrackCounters
from docparser_operator.analysis.walk import (
    AnalysisState,
    Check,
    Window,
    advance,
    current,
    evaluate,
    window_due,
)
from docparser_operator.api.analysis_spec import CanaryAnalysis
from docparser_operator.api.status_models import AnalysisStatus
from docparser_operator.providers.pods import add, parse_counters, scrape_track
from docparser_runtime.server.ops.metrics import Metrics

CONFIG = CanaryAnalysis(
    steps=[{"weight": 10}, {"weight": 25, "pause": True}, {"weight": 50}],
    interval_seconds=60,
    min_requests=20,
    failure_limit=2,
)
NOW = "2026-12-01T10:00:00Z"


def exposition(
    ok: int,
    errors: int = 0,
    latency_s: float = 0.2,
    *,
    truncated: int = 0,
    empty: int = 0,
    looping: int = 0,
    slow: int = 0,
) -> str:
    """A runtime pod's /metrics after ``ok`` + ``errors`` parse requests of one page each,
    ``truncated`` / ``empty`` / ``looping`` of the ``ok`` pages so (the real registry); the
    first ``slow`` of the ``ok`` requests took 20 s (a cold pod's first parses)."""
    metrics = Metrics(model="deepseek-ocr2", version="v2")
    for i in range(ok):
        metrics.count_request(route="/v1/document/parse", method="POST", status="200")
        metrics.observe_stage("total", 20.0 if i < slow else latency_s)
        metrics.count_parsed(pages=1, vision_tokens=256, output_tokens=40)
    metrics.count_page_outcomes(truncated=truncated, empty=empty, repetition=looping)
    for _ in range(errors):
        metrics.count_request(route="/v1/document/parse", method="POST", status="500")
        metrics.observe_stage("total", latency_s)
    metrics.count_request(route="/readyz", method="GET", status="200")  # never counted
    return metrics.render().decode()


def window(canary: str, stable: str) -> Window:
    return Window(parse_counters(canary), parse_counters(stable))


def fresh() -> AnalysisState:
    return current(CONFIG, None, "canary1")


def test_counters_come_from_the_runtime_exposition_and_add_up_over_pods() -> None:
    one = parse_counters(exposition(30, errors=3, latency_s=0.2))
    assert (one.requests, one.errors) == (33, 3)
    assert dict(one.latency)[0.25] == 33 and dict(one.latency)[0.1] == 0
    both = add([one, parse_counters(exposition(10))])
    assert both.requests == 43 and both.error_rate == pytest.approx(3 / 43)
    assert 0.1 < both.quantile(0.99) <= 0.25  # interpolated inside the 0.1..0.25 bucket


def test_a_counter_that_went_down_voids_the_window() -> None:
    later, earlier = parse_counters(exposition(5)), parse_counters(exposition(9))
    assert later.minus(earlier) is None  # a pod restarted or left
    assert parse_counters(exposition(9, truncated=2)).minus(later) == TrackCounters(
        4,
        0,
        tuple((le, 4.0 if le >= 0.25 else 0.0) for le, _ in later.latency),
        pages=4,
        outcomes=(("truncated", 2.0), ("empty", 0.0), ("repetition_guarded", 0.0)),
    )
    fewer_truncated = parse_counters(exposition(9)).minus(parse_counters(exposition(5, empty=1)))
    assert fewer_truncated is None  # an outcome counter went down too


def test_pods_are_read_only_when_ready_and_one_failure_voids_the_sample() -> None:
    def pod(ip: str, ready: bool = True) -> dict:
        status = "True" if ready else "False"
        return {
            "metadata": {"name": ip},
            "status": {"podIP": ip, "conditions": [{"type": "Ready", "status": status}]},
        }

    bodies = {
        "http://10.0.0.1:8000/metrics": exposition(4),
        "http://10.0.0.2:8000/metrics": exposition(6),
    }
    fetched: list[str] = []

    def fetch(url: str) -> str:
        fetched.append(url)
        return bodies[url]

    pods = [pod("10.0.0.1"), pod("10.0.0.2"), pod("10.0.0.3", ready=False)]
    counters = scrape_track(pods, fetch)
    assert counters is not None and counters.requests == 10 and len(fetched) == 2
    assert scrape_track([*pods, pod("10.0.0.9")], fetch) is None  # 10.0.0.9 does not answer


def test_a_good_canary_walks_every_step_pausing_where_asked() -> None:
    state = fresh()
    assert (state.step, state.weight, state.phase) == (0, 10, "Progressing")
    good = window(exposition(40), exposition(200))
    # Not serving the step yet: no verdict, however long.
    state = advance(state, CONFIG, good, now=NOW, generation=1, serving_step=False)
    assert state.weight == 10 and "shifting" in state.message
    state = advance(state, CONFIG, good, now=NOW, generation=1, serving_step=True)
    assert (state.step, state.weight) == (1, 25)
    assert [c.ok for c in state.checks] == [True] * 5
    state = advance(state, CONFIG, good, now=NOW, generation=1, serving_step=True)
    assert (state.phase, state.weight, state.paused_generation) == ("Paused", 25, 1)
    assert advance(state, CONFIG, good, now=NOW, generation=1, serving_step=True) == state
    state = advance(state, CONFIG, None, now=NOW, generation=2, serving_step=True)  # spec changed
    assert (state.phase, state.step, state.weight) == ("Progressing", 2, 50)
    state = advance(state, CONFIG, good, now=NOW, generation=2, serving_step=True)
    assert (state.phase, state.weight) == ("Succeeded", 100)
    assert "promote" in state.message


def test_failed_windows_roll_back_at_the_failure_limit() -> None:
    state = fresh()
    bad = window(exposition(35, errors=5), exposition(200))  # 12.5 % errors vs 0 %
    state = advance(state, CONFIG, bad, now=NOW, generation=1, serving_step=True)
    assert (state.phase, state.failures, state.weight) == ("Progressing", 1, 10)
    assert state.window_start == NOW  # a new window at the same step
    state = advance(state, CONFIG, bad, now=NOW, generation=1, serving_step=True)
    assert (state.phase, state.weight) == ("Failed", 0)
    assert "errorRate 0.125 > 0.01" in state.message
    # Stays rolled back, whatever comes next.
    good = window(exposition(40), exposition(200))
    assert advance(state, CONFIG, good, now=NOW, generation=5, serving_step=True) == state


@pytest.mark.parametrize(
    ("outcome", "check"),
    [("truncated", "truncatedRate"), ("empty", "emptyRate"), ("looping", "repetitionRate")],
)
def test_output_that_reads_worse_fails_against_stable_not_in_absolute_terms(
    outcome: str, check: str
) -> None:
    """A canary answering 200s whose pages are cut short, empty or looping more often than
    stable's fails; the same share as stable (hard documents both tracks struggle with)
    passes."""
    worse = window(exposition(40, **{outcome: 4}), exposition(200, **{outcome: 2}))
    checks = {c.name: c for c in evaluate(CONFIG, worse.canary, worse.stable)}
    assert not checks[check].ok and checks[check].value == pytest.approx(0.1 - 0.01)
    assert (checks[check].canary, checks[check].stable) == (0.1, 0.01)
    assert all(c.ok for name, c in checks.items() if name != check)
    same = window(exposition(40, **{outcome: 4}), exposition(200, **{outcome: 20}))
    assert all(c.ok for c in evaluate(CONFIG, same.canary, same.stable))
    state = fresh()
    for _ in range(CONFIG.failure_limit):
        state = advance(state, CONFIG, worse, now=NOW, generation=1, serving_step=True)
    assert (state.phase, state.reason, state.weight) == ("Failed", "CanaryFailed", 0)
    assert check in state.message


def test_slower_p99_fails_and_a_good_window_resets_the_count() -> None:
    slow = window(exposition(40, latency_s=4.0), exposition(200, latency_s=0.2))
    checks = evaluate(CONFIG, slow.canary, slow.stable)
    assert not isinstance(checks, str)
    latency = next(c for c in checks if c.name == "latencyP99Ratio")
    assert not latency.ok and latency.value > 10
    state = advance(fresh(), CONFIG, slow, now=NOW, generation=1, serving_step=True)
    assert state.failures == 1
    good = window(exposition(40), exposition(200))
    state = advance(state, CONFIG, good, now=NOW, generation=1, serving_step=True)
    assert (state.failures, state.step) == (0, 1)


def test_one_slow_request_never_decides_the_latency_verdict_alone() -> None:
    """Under 100 timed requests the p99 is the slowest request: a canary pod's cold first
    parse would fail it alone. The compared quantile is min(0.99, 1 - 1/n) on both tracks,
    reported in the check; two slow requests of 40 still fail."""
    from docparser_operator.analysis.counters import supported_quantile

    assert [supported_quantile(n) for n in (1, 10, 40, 100, 5000)] == [0.5, 0.9, 0.975, 0.99, 0.99]
    stable = exposition(200)

    def latency(canary: str) -> Check:
        w = window(canary, stable)
        checks = evaluate(CONFIG, w.canary, w.stable)
        assert not isinstance(checks, str)
        return next(c for c in checks if c.name == "latencyP99Ratio")

    one = latency(exposition(40, slow=1))
    assert one.ok and one.quantile == 0.975 and one.to_status().quantile == 0.975, one
    two = latency(exposition(40, slow=2))
    assert not two.ok and two.value > 10, two
    many = window(exposition(400, slow=2), exposition(400))  # 0.5 % slow: p99 sees none
    checks = evaluate(CONFIG, many.canary, many.stable)
    assert not isinstance(checks, str)
    assert all(c.ok for c in checks) and checks[1].quantile == 0.99, checks


def test_too_few_requests_is_no_verdict() -> None:
    state = advance(
        fresh(),
        CONFIG,
        window(exposition(5), exposition(200)),
        now=NOW,
        generation=1,
        serving_step=True,
    )
    assert (state.step, state.failures) == (0, 0)
    assert "canary 5/20" in state.message


def test_the_walk_resumes_from_status_and_restarts_for_a_new_canary_or_retry() -> None:
    state = advance(
        fresh(),
        CONFIG,
        window(exposition(40), exposition(200)),
        now=NOW,
        generation=1,
        serving_step=True,
    )
    wire = state.to_status().to_wire()
    assert wire["step"] == 2 and wire["weight"] == 25
    status = AnalysisStatus.model_validate(wire)  # as the pass reads it back (typed)
    again = current(CONFIG, status, "canary1")
    assert (again.step, again.weight, again.phase) == (1, 25, "Progressing")
    assert current(CONFIG, status, "canary2").step == 0  # a new canary revision
    retried = CONFIG.model_copy(update={"retry": "2"})
    assert current(retried, status, "canary1").step == 0  # a new retry token


def test_windows_are_due_after_the_interval() -> None:
    state = AnalysisState(revision="r", steps=tuple(CONFIG.schedule()), window_start=NOW)
    assert not window_due(state, CONFIG, "2026-12-01T10:00:59Z")
    assert window_due(state, CONFIG, "2026-12-01T10:01:00Z")


def test_generated_steps_and_quantiles() -> None:
    stepped = CanaryAnalysis(stepWeight=20, maxWeight=70)
    assert [s.weight for s in stepped.schedule()] == [20, 40, 60]
    assert [s.weight for s in CanaryAnalysis().schedule()] == [10, 25, 50]
    counters = TrackCounters(100, 0, ((0.1, 50.0), (1.0, 100.0), (math.inf, 100.0)))
    assert counters.quantile(0.5) == pytest.approx(0.1)
    assert counters.quantile(0.99) == pytest.approx(0.1 + 0.9 * 49 / 50)


def test_unreadable_pods_say_why_the_walk_does_not_move() -> None:
    """A NetworkPolicy (traffic.allowFrom without the operator's namespace) keeps the
    operator from the pods' /metrics: the status says so instead of waiting silently."""
    from docparser_operator.api.models import DocParser
    from docparser_operator.providers import analysis_run
    from dp_helpers import CANARY_WEIGHTS, docparser

    resource = docparser("walk", canary={"weights": CANARY_WEIGHTS, "analysis": {}})
    resource["metadata"].update(namespace="ocr", uid="u", generation=1)
    model = DocParser.from_resource(resource)
    pod = {
        "metadata": {"name": "p", "labels": {"docparser.io/revision": "c1"}},
        "status": {"podIP": "10.1.1.1", "conditions": [{"type": "Ready", "status": "True"}]},
    }

    def refused(url: str) -> str:
        raise ConnectionRefusedError(url)

    from docparser_operator.providers import sources
    from docparser_operator.providers.pods import PodMetrics

    memory = analysis_run.AnalysisMemory()
    pods_refused = replace(sources.guarded((), ()), pods=PodMetrics(refused))
    state = analysis_run.begin(model, {"stable": "s1", "canary": "c1"})
    assert state is not None
    after = analysis_run.finish(
        memory,
        pods_refused,
        model,
        state,
        {"stable": "s1", "canary": "c1"},
        [pod],
        serving=True,
        now=NOW,
    )
    assert (after.step, after.phase) == (0, "Progressing")
    assert "cannot read every Ready pod's /metrics" in after.message


GOLDEN = CanaryAnalysis.model_validate(
    {"steps": [{"weight": 10}], "golden": {"configMapRef": {"name": "g"}, "maxCER": 0.05}}
)


def test_character_error_rate_folds_whitespace_and_counts_edits() -> None:
    from docparser_operator.analysis.golden_score import cer

    assert cer("Total due 1280 EUR", "Total  due" + chr(10) + "1280 EUR") == 0.0
    assert cer("Total due 1280 EUR", "Total due 1230 EUR") == pytest.approx(1 / 18)
    assert cer("Total due 1280 EUR", "") == 1.0
    assert cer("", "") == 0.0


def test_golden_gate_holds_traffic_until_it_passes_and_fails_on_regression() -> None:
    from docparser_operator.analysis.gates import verified
    from docparser_operator.analysis.golden_score import score_golden

    state = current(GOLDEN, None, "c1")
    assert (state.phase, state.weight) == ("Verifying", 0)
    good = score_golden(GOLDEN, {"inv": ("Total 12 EUR", "Total 12 EUR", "Total 12 EUR")})
    passed = verified(state, good)
    assert (passed.phase, passed.weight) == ("Progressing", 10)
    worse = score_golden(
        GOLDEN, {"inv": ("Total 12 EUR", "Total", "Total 12 EUR"), "a": ("x", "x", "x")}
    )
    failed = verified(state, worse)
    assert (failed.phase, failed.reason, failed.weight) == ("Failed", "GoldenRegression", 0)
    assert "1 of 2" in failed.message and "inv" in failed.message
    # Verdict and scores survive in status.
    again = current(GOLDEN, AnalysisStatus.model_validate(failed.to_status()), "c1")
    assert (again.phase, again.reason) == ("Failed", "GoldenRegression")
    assert [g.document for g in again.golden] == ["a", "inv"]


def test_golden_every_step_gates_each_later_step_holding_the_weight_earned() -> None:
    """``everyStep``: after a passed window the gate runs again before the weight widens;
    while it runs the canary keeps the previous step's share (never 0, never more). A
    regression found then rolls the canary back; the pause of a step resumes through it too."""
    from docparser_operator.analysis.gates import verified
    from docparser_operator.analysis.golden_score import score_golden

    config = CanaryAnalysis.model_validate(
        {
            "steps": [{"weight": 10}, {"weight": 25, "pause": True}, {"weight": 50}],
            "intervalSeconds": 60,
            "minRequests": 20,
            "golden": {"configMapRef": {"name": "g"}, "everyStep": True},
        }
    )
    good = score_golden(config, {"inv": ("Total 12 EUR", "Total 12 EUR", "Total 12 EUR")})
    worse = score_golden(config, {"inv": ("Total 12 EUR", "Total", "Total 12 EUR")})
    passing = window(exposition(40), exposition(200))
    state = verified(current(config, None, "c1"), good)
    assert (state.phase, state.step, state.weight) == ("Progressing", 0, 10)
    state = advance(state, config, passing, now=NOW, generation=1, serving_step=True)
    assert (state.phase, state.step, state.weight) == ("Verifying", 1, 10)
    assert (
        current(config, AnalysisStatus.model_validate(state.to_status()), "c1").weight == 10
    )  # as status says, after a restart
    rolled_back = verified(state, worse)
    assert (rolled_back.phase, rolled_back.reason, rolled_back.weight) == (
        "Failed",
        "GoldenRegression",
        0,
    )
    assert "rolled back from 10%" in rolled_back.message
    state = verified(state, good)
    assert (state.phase, state.step, state.weight) == ("Progressing", 1, 25)
    state = advance(state, config, passing, now=NOW, generation=1, serving_step=True)
    assert (state.phase, state.weight) == ("Paused", 25)
    state = advance(state, config, None, now=NOW, generation=2, serving_step=True)
    assert (state.phase, state.step, state.weight) == ("Verifying", 2, 25)
    assert (verified(state, good).phase, verified(state, good).weight) == ("Progressing", 50)


def test_golden_documents_come_from_a_configmap_and_are_read_by_both_tracks() -> None:
    import base64

    from docparser_operator.providers.golden import GoldenUnavailable, documents_of, read

    cm = {
        "binaryData": {"inv.png": base64.b64encode(b"PNG...").decode(), "notes.bin": "AA=="},
        "data": {"inv.txt": "Total 12 EUR"},
    }
    docs = documents_of(cm)
    assert docs == {"inv": ("inv.png", b"PNG...", "Total 12 EUR")}
    with pytest.raises(GoldenUnavailable, match="no expected text"):
        documents_of({"binaryData": {"x.pdf": "AA=="}, "data": {}})

    def pod(ip: str) -> dict:
        return {
            "metadata": {"name": ip},
            "status": {"podIP": ip, "conditions": [{"type": "Ready", "status": "True"}]},
        }

    replies = {"10.0.0.1": "Total 12 EUR", "10.0.0.2": "Total 12"}
    got = read(docs, [pod("10.0.0.2")], [pod("10.0.0.1")], lambda url, f, d: replies[url[7:15]])
    assert got == {"inv": ("Total 12 EUR", "Total 12", "Total 12 EUR")}
    with pytest.raises(GoldenUnavailable, match="Ready canary pod"):
        read(docs, [], [pod("10.0.0.1")], lambda url, f, d: replies[url[7:15]])
