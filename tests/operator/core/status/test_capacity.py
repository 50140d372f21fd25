"""``status.capacity`` (issue 36), pure parts: the runtime's real exposition read and
differenced per pod, the window's figures against the traffic's truth, the sizing equations,
the rounded report, the advice and its condition, and how Flux and Argo CD read it."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from capacity_pods import GIB, EmulatedPod
from docparser_operator.analysis.capacity_reading import CapacityCounters, add, parse
from docparser_operator.api.capacity_spec import CapacityStatus
from docparser_operator.api.models import DocParser, DocParserSpec
from docparser_operator.api.status_models import DocParserStatus
from docparser_operator.core.plan.sizing import estimate_gpu_memory
from docparser_operator.core.status import capacity_sizing as eq
from docparser_operator.core.status.capacity_status import (
    CONDITION,
    CapacityStep,
    advice,
    report,
    same_figures,
    with_capacity,
)
from docparser_operator.core.status.capacity_window import (
    CapacitySeen,
    figures,
    significant,
    window_seconds,
)
from docparser_operator.core.status.outcome import Outcome
from docparser_operator.core.status.transition_events import events_for
from dp_helpers import docparser


class Clock:
    def __init__(self) -> None:
        self.t = 1_000_000.0

    def __call__(self) -> float:
        return self.t


def spec(**fields: Any) -> DocParserSpec:
    body = docparser("inv", **{"tier": "auto", "capacity": {"window": "1m"}, **fields})
    return DocParser.from_resource(body).spec


def measured(
    pods: dict[str, EmulatedPod], clock: Clock, *, seconds: int, poll: int
) -> CapacitySeen:
    """Read ``pods`` every ``poll`` seconds of the fake clock for ``seconds``."""
    seen = CapacitySeen()
    for _ in range(seconds // poll + 1):
        seen.record({n: parse(p.text()) for n, p in pods.items()}, clock.t, seconds)
        clock.t += poll
    clock.t -= poll
    return seen


def test_the_runtime_exposition_parses_to_its_counters() -> None:
    clock = Clock()
    pod = EmulatedPod(rate=2.0, service_s=0.5, tiers=(0, 2), slots=4, clock=clock)
    clock.t += 10  # 20 pages: 10 at tier 0, 10 at tier 2
    got = parse(pod.text())
    assert got.pages == 20
    assert got.vision_tokens == 10 * 256 + 10 * 544
    assert got.output_tokens == 20 * 400
    assert dict(got.auto_pages) == {0: 10, 2: 10}
    assert dict(got.service_seconds) == {0: 5.0, 2: 5.0}
    assert dict(got.service_pages) == {0: 10, 2: 10}
    assert max(n for _, n in got.queue_wait) == 20  # the +Inf bucket: every request
    assert (got.slots, got.memory_peak, got.memory_limit) == (4, 3 * GIB, 4 * GIB)
    with pytest.raises(ValueError):
        parse("docparser_pages_total{ not exposition")


def test_a_counter_going_down_is_a_restart_not_negative_traffic() -> None:
    before = CapacityCounters(pages=50, auto_pages=((0, 50.0),))
    assert CapacityCounters(pages=3, auto_pages=((0, 3.0),)).minus(before) is None
    grown = CapacityCounters(pages=60, auto_pages=((0, 55.0), (6, 5.0))).minus(before)
    assert grown is not None and dict(grown.auto_pages) == {0: 5.0, 6: 5.0}
    assert add([grown, grown]).pages == 20


def test_window_figures_are_within_a_tenth_of_the_traffic_truth() -> None:
    """Two pods at 3 and 1 pages/s for a minute, read every 5 s (a pod restarting midway
    and one first seen late contribute only intervals they can be measured over)."""
    clock = Clock()
    pods = {
        "a": EmulatedPod(rate=3.0, service_s=1.2, clock=clock),
        "b": EmulatedPod(rate=1.0, service_s=1.2, clock=clock),
    }
    seen = measured(pods, clock, seconds=60, poll=5)
    fig = figures(seen)
    assert fig is not None and seen.covered(clock.t, 60)
    assert fig.pages_per_s == pytest.approx(4.0, rel=0.1)
    assert fig.peak_pages_per_s == pytest.approx(4.0, rel=0.1)
    assert fig.seconds_per_page == pytest.approx(1.2, rel=0.01)
    assert fig.per_page(fig.counters.vision_tokens) == pytest.approx(
        (256 + 256 + 544 + 1120) / 4, rel=0.1
    )
    assert fig.per_page(fig.counters.output_tokens) == pytest.approx(400)
    assert fig.queue_wait_p95 == pytest.approx(0.95, rel=0.1)  # waits spread over 0.05..1 s
    assert fig.tier_seconds() == pytest.approx({0: 1.2, 2: 1.2, 6: 1.2})
    restarted = EmulatedPod(rate=3.0, service_s=1.2, clock=clock)  # counters from zero again
    clock.t += 5
    seen.record({"a": parse(restarted.text()), "b": parse(pods["b"].text())}, clock.t, 60)
    assert seen.intervals[-1].counters.pages == 3 * 5 + 1 * 5  # a since its restart, and b


def test_a_pod_first_seen_counts_what_it_served_and_a_missing_one_is_kept() -> None:
    clock = Clock()
    a, b = EmulatedPod(rate=2.0, service_s=1.0, clock=clock), EmulatedPod(rate=0, service_s=1)
    seen = CapacitySeen()
    seen.record({"a": parse(a.text())}, clock.t, 60)
    b.clock = clock
    b.set_rate(1.0)  # b starts (and becomes Ready) within the next interval
    clock.t += 10
    seen.record({"a": parse(a.text()), "b": parse(b.text())}, clock.t, 60)
    assert seen.intervals[-1].counters.pages == 2 * 10 + 1 * 10
    clock.t += 10
    seen.record({"a": parse(a.text())}, clock.t, 60)  # b not Ready a moment: not read
    clock.t += 10
    seen.record({"a": parse(a.text()), "b": parse(b.text())}, clock.t, 60)
    assert seen.intervals[-1].counters.pages == 2 * 10 + 1 * 20  # b since its last reading


def test_the_peak_minute_is_the_busiest_interval() -> None:
    clock = Clock()
    pod = EmulatedPod(rate=1.0, service_s=1.0, clock=clock)
    seen = CapacitySeen()
    for minute in range(10):
        seen.record({"p": parse(pod.text())}, clock.t, 600)
        pod.set_rate(5.0 if minute == 6 else 1.0)
        clock.t += 60
    fig = figures(seen)
    assert fig is not None
    assert fig.peak_pages_per_s == pytest.approx(5.0, rel=0.05)
    assert fig.pages_per_s == pytest.approx((8 * 1 + 5) / 9, rel=0.05)


def test_sizing_equations() -> None:
    # 6 pages/s at 1 s a page on 2 slots: 3 pods' worth of busy slots; at most 80 % busy -> 4
    assert eq.replicas_at_peak(6.0, 1.0, 2, 5.0) == 4
    # a 0.1 s promise on 1 slot of 2 s pages: x = 0.1, rho = 0.09 -> many more pods
    assert eq.utilisation_for_wait(0.1, 2.0, 1) == pytest.approx(0.1 / 1.1)
    assert eq.replicas_at_peak(1.0, 2.0, 1, 0.1) == 22
    assert eq.replicas_at_peak(0.0, 1.0, 2, 5.0) == 1
    assert eq.tier_for_mix({0: 99, 6: 1}) == 0  # 1 % above tier 0: within the 2 % budget
    assert eq.tier_for_mix({0: 50, 6: 50}) == "auto"  # tier 6 costs far more than the mix
    assert eq.tier_for_mix({6: 10}) == 6
    assert eq.tier_for_mix({}) == "auto"
    assert eq.memory_for_peak(3 * GIB) == 4 * GIB  # 3.75 GiB rounded up to whole GiB
    best = eq.batch_for_gpu("deepseek-ocr2", 6, 4096, 24 * GIB)
    worst = [
        estimate_gpu_memory("deepseek-ocr2", tier=6, max_batch_size=b, max_new_tokens=4096).total
        for b in (best, best + 1)
    ]
    assert best > 1 and worst[0] <= 24 * GIB < worst[1]
    assert eq.batch_for_gpu("deepseek-ocr2", 6, 4096, 7 * GIB) == 0


def _report(rate: float, max_replicas: int, **fields: Any) -> dict[str, Any]:
    clock = Clock()
    pod = EmulatedPod(rate=rate, service_s=1.0, tiers=(0,) * 99 + (6,), clock=clock)
    fig = figures(measured({"p": pod}, clock, seconds=60, poll=5))
    assert fig is not None
    sp = spec(replicas={"min": 1, "max": max_replicas}, **fields)
    return report(fig, sp, window="1m", since="2026-01-01T00:00:00Z", source="pods").to_wire()


def typed_report(report_: dict[str, Any]) -> CapacityStatus:
    return CapacityStatus.model_validate(report_)


def advise(report_: dict[str, Any], spec_: DocParserSpec) -> tuple[str, str] | None:
    return advice(typed_report(report_), spec_)


def with_report(
    base: dict[str, Any],
    report_: dict[str, Any],
    spec_: DocParserSpec,
    previous: dict[str, Any],
    generation: int,
    now: str,
) -> dict[str, Any]:
    """with_capacity on statuses in their wire shape (as the API server holds them)."""
    typed = DocParserStatus.model_validate
    step = CapacityStep(typed_report(report_))
    return with_capacity(typed(base), step, spec_, typed(previous), generation, now).to_wire()


def test_the_report_is_rounded_and_recommends_from_the_same_equations() -> None:
    got = _report(5.6, 2)
    assert got["pagesPerSecond"] == significant(got["pagesPerSecond"])
    assert got["recommended"]["replicas"] == eq.replicas_at_peak(
        got["peakPagesPerSecond"], 1.0, 2, eq.TARGET_WAIT_S
    )
    assert got["recommended"]["tier"] == "0"
    assert got["recommended"]["memory"] == "4Gi"
    assert got["recommended"]["maxBatchSize"] == eq.batch_for_gpu(
        "deepseek-ocr2", 0, 4096, 80 * GIB
    )
    assert got["memoryPeak"] == "3Gi" and got["memoryLimit"] == "4Gi"
    assert same_figures(typed_report(got), typed_report({**got, "since": "later"}))
    moved = {**got, "pagesPerSecond": got["pagesPerSecond"] + 1}
    assert not same_figures(typed_report(got), typed_report(moved))
    latency = _report(5.6, 2, autoscaling={"metric": "latency", "targetSeconds": 0.2})
    assert latency["recommended"]["targetWaitSeconds"] == 0.2
    assert latency["recommended"]["replicas"] > got["recommended"]["replicas"]


def test_advice_says_what_to_change_and_why_and_goes_once_fixed() -> None:
    got = _report(5.6, 2, runtime={"image": "r:1", "maxBatchSize": 8})
    found = advise(got, spec(replicas={"min": 1, "max": 2}, runtime={"image": "r:1"}))
    assert found is not None
    reason, message = found
    assert reason == "RaiseReplicas"
    assert "raise replicas.max from 2 to 4" in message and "pages/s" in message
    assert "set tier: 0" in message
    assert "set runtime.maxBatchSize from 8 to" in message
    fixed = spec(
        tier=0,
        replicas={"min": 1, "max": 4},
        runtime={"image": "r:1", "maxBatchSize": got["recommended"]["maxBatchSize"]},
    )
    assert advise(got, fixed) is None
    within = spec(tier=0, replicas={"min": 1, "max": 4}, runtime=fixed.runtime.to_wire())
    assert advise({**got, "recommended": {**got["recommended"], "replicas": 5}}, within) is None
    too_big = advise(
        got, spec(tier=0, replicas={"min": 8, "max": 8}, runtime=fixed.runtime.to_wire())
    )
    assert too_big is not None and too_big[0] == "LowerReplicas"
    small = {**got, "memoryLimit": "16Gi"}
    memory = advise(small, within)
    assert memory is not None and "set resources.memory to 4Gi" in memory[1]


def test_the_condition_is_advisory_for_flux_and_argo_cd(gitops_check: Any) -> None:
    from docparser_operator.core.status.conditions import TrackObservation
    from test_argocd_health import judged
    from test_status import deployment, pod, status

    got = _report(5.6, 2)
    base = status(TrackObservation("v1", deployment(want=1, ready=1), [pod("ready")]))
    sp = spec(replicas={"min": 1, "max": 2})
    st = with_report(base, got, sp, {}, 2, "2026-01-01T00:00:00Z")
    condition = next(c for c in st["conditions"] if c["type"] == CONDITION)
    assert condition["status"] == "True" and condition["reason"] == "RaiseReplicas"
    assert {c["type"]: c["status"] for c in st["conditions"]}["Degraded"] == "False"
    obj = {
        "apiVersion": "docparser.io/v1alpha1",
        "kind": "DocParser",
        "metadata": {"name": "inv", "namespace": "ocr", "generation": 2},
        "status": {**st, "observedGeneration": 2},
    }
    flux, argo, _ = judged(gitops_check, obj)
    assert (flux, argo) == ("Current", "Healthy")
    batch = got["recommended"]["maxBatchSize"]
    runtime = {"image": "r:1", "maxBatchSize": batch}
    fixed = spec(tier=0, replicas={"min": 1, "max": 4}, runtime=runtime)
    gone = with_report(base, got, fixed, st, 2, "2026-01-01T00:01:00Z")
    assert CONDITION not in {c["type"] for c in gone["conditions"]}
    assert gone["capacity"] == got


def test_an_event_when_the_advice_appears_or_changes_never_at_rest() -> None:
    got = _report(5.6, 2)
    sp = spec(replicas={"min": 1, "max": 2})
    base = {"conditions": []}
    st = with_report(base, got, sp, {}, 1, "2026-01-01T00:00:00Z")
    typed = DocParserStatus.model_validate
    first = events_for(Outcome(previous_status=DocParserStatus(), status=typed(st)))
    assert [(e.type, e.reason) for e in first] == [("Normal", "CapacityAdvice")]
    again = with_report(base, got, sp, st, 1, "2026-01-01T00:05:00Z")
    assert again == st  # lastTransitionTime kept: nothing to write
    assert events_for(Outcome(previous_status=typed(copy.deepcopy(st)), status=typed(again))) == []


def test_window_lengths() -> None:
    assert [window_seconds(w) for w in ("45s", "15m", "1h", "24h")] == [45, 900, 3600, 86400]


def test_turning_capacity_off_removes_the_section_and_the_condition() -> None:
    from docparser_operator.controller.capacity import capacity_step
    from docparser_operator.core.plan.children import Observed
    from docparser_operator.core.status.capacity_window import CapacityMemory
    from docparser_operator.core.status.status_patch import status_write

    got = _report(5.6, 2)
    sp = spec(replicas={"min": 1, "max": 2})
    base = {"observedGeneration": 1, "conditions": [{"type": "Ready", "status": "True"}]}
    on = with_report(base, got, sp, {}, 1, "2026-01-01T00:00:00Z")
    memory = CapacityMemory()
    memory.of("u-1").began = 1.0  # readings kept from when it was on
    off = docparser("inv", tier="auto")
    off["metadata"].update(namespace="ocr", uid="u-1")
    model = DocParser.from_resource(off)
    step, problems = capacity_step(
        model, Observed({}, []), memory, None, now="2026-01-01T00:01:00Z", poll_s=60
    )  # type: ignore[arg-type]  # no source: nothing may be read without spec.capacity
    assert (step, problems, memory.seen) == (None, [], {})
    patch = status_write(on, base)
    assert patch is not None and patch["capacity"] is None
    assert [c["type"] for c in patch["conditions"]] == ["Ready"]
