"""``status.canary.shadow`` and ``status.capacity`` are built as their models (issue 37) and
give the API server the same JSON as the camelCase dicts they were built as before.

Why: a written form that moved (``4`` where ``4.0`` was, a configured field kept while the
shadow is off, figures of another canary revision carried over) would make the first resync
after an upgrade write every DocParser's status, or report the shadow wrong. The expected
forms are what that code wrote, taken from it; they are compared as JSON text.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from docparser_operator.analysis.capacity_reading import CapacityCounters
from docparser_operator.analysis.shadow_score import ShadowCounters, ShadowFigures
from docparser_operator.analysis.walk import AnalysisState
from docparser_operator.api.models import DocParser
from docparser_operator.api.status_models import DocParserStatus
from docparser_operator.core.plan.target import Target, target_at_rest
from docparser_operator.core.render import roles_of
from docparser_operator.core.status.capacity_status import report
from docparser_operator.core.status.capacity_window import Figures
from docparser_operator.core.status.report import shadow_status
from dp_helpers import CANARY_WEIGHTS, docparser

NOW, BEFORE = "2026-12-01T10:00:00Z", "2026-12-01T09:00:00Z"
INF = float("inf")
TOLD = {"enabled": True, "percent": 25, "podPagesPerMinute": 4}  # 7 a minute over 2 pods
KEPT = {
    "since": BEFORE,
    "pagesCompared": 40.0,
    "pagesMirrored": 41.0,
    "cer": 0.01,
    "dropped": [{"reason": "busy", "requests": 2.0}],
}
MEASURED = {
    "since": NOW,
    "pagesCompared": 200.0,
    "pagesMirrored": 200.0,
    "pagesPerMinute": 100.0,
    "quantile": 0.9,
    "cer": 0.04,
    "truncationIncrease": 0.015,
    "structureDisagreements": 3.0,
    "dropped": [{"reason": "budget", "requests": 6.0}],
}


def _plan() -> Target:
    canary = {"weights": CANARY_WEIGHTS, "weight": 0}
    shadow = {"percent": 25, "maxPagesPerMinute": 7}
    body = docparser("inv", replicas={"min": 2, "max": 2}, canary={**canary, "shadow": shadow})
    model = DocParser.from_resource(body)
    return target_at_rest(model, roles_of(model), canary_ready=True)


def _previous(revision: str, shadow: dict[str, Any]) -> DocParserStatus:
    return DocParserStatus.model_validate({"canary": {"revision": revision, "shadow": shadow}})


def test_the_shadow_section_is_written_as_before() -> None:
    plan = _plan()
    canary = plan.role("canary")
    assert canary is not None
    c1 = canary.revision
    cer = ((0.01, 150.0), (0.05, 190.0), (0.1, 198.0), (INF, 200.0))
    span = ShadowCounters(200.0, 200.0, cer, 2.0, 5.0, 3.0, (("budget", 6.0), ("busy", 0.0)))
    measured = AnalysisState(c1, (), figures=ShadowFigures(NOW, 120.0, 0.9, span))
    unmeasured = AnalysisState(c1, ())
    earlier = _previous(c1, {"enabled": True, "percent": 10, "podPagesPerMinute": 9, **KEPT})
    cases = [
        (DocParserStatus(), None, TOLD),  # configuration only
        (earlier, measured, {**TOLD, **MEASURED}),  # this pass's figures replace the kept ones
        (earlier, unmeasured, {**TOLD, **KEPT}),  # kept from status, told anew
        (earlier, None, {**TOLD, **KEPT}),
        (_previous("zzzz", {"since": "x", "pagesCompared": 4.0}), None, TOLD),  # another canary
    ]
    for previous, walk, expected in cases:
        got = shadow_status(plan, previous, walk)
        assert got is not None
        assert json.dumps(got.to_wire()) == json.dumps(expected)
    # the shadow stopped (a failed analysis): off, no page budget, the figures kept
    off = shadow_status(replace(plan, mirror=False), earlier, None)
    assert off is not None
    assert json.dumps(off.to_wire()) == json.dumps({"enabled": False, "percent": 25, **KEPT})


FIGURES = {
    "window": "1m",
    "since": "2026-01-01T00:00:00Z",
    "source": "pods",
    "pods": 2,
    "pagesPerSecond": 2.0,
    "peakPagesPerSecond": 3.3,
    "visionTokensPerPage": 250.0,
    "outputTokensPerPage": 75.0,
    "secondsPerPage": 0.83,
    "slots": 4,
    "queueWaitP95Seconds": 0.89,
    "memoryPeak": "3.2Gi",
    "memoryLimit": "4Gi",
    "tiers": [
        {"tier": 0, "autoShare": 0.83, "secondsPerPage": 0.6},
        {"tier": 6, "autoShare": 0.17, "secondsPerPage": 2.0},
    ],
}
BARE = {
    "window": "1m",
    "since": "2026-01-01T00:00:00Z",
    "source": "prometheus",
    "pods": 1,
    "pagesPerSecond": 0.083,
    "peakPagesPerSecond": 0.1,
    "visionTokensPerPage": 0.0,
    "outputTokensPerPage": 0.0,
    "secondsPerPage": 0.0,
    "queueWaitP95Seconds": 0.0,
}
RECOMMENDED = {"replicas": 1, "memory": "4Gi", "targetWaitSeconds": 5.0}


@pytest.mark.parametrize(
    ("fields", "full", "bare"),
    [
        (
            {"tier": "auto"},
            {**FIGURES, "recommended": {**RECOMMENDED, "tier": "auto", "maxBatchSize": 91}},
            {**BARE, "recommended": {"maxBatchSize": 91}},
        ),
        (
            {},
            {**FIGURES, "recommended": {**RECOMMENDED, "maxBatchSize": 139}},
            {**BARE, "recommended": {"maxBatchSize": 139}},
        ),
    ],
)
def test_the_capacity_report_is_written_as_before(
    fields: dict[str, Any], full: dict[str, Any], bare: dict[str, Any]
) -> None:
    spec = DocParser.from_resource(docparser("inv", capacity={"window": "1m"}, **fields)).spec
    counters = CapacityCounters(
        pages=120.0,
        vision_tokens=30000.0,
        output_tokens=9000.0,
        auto_pages=((0, 100.0), (6, 20.0)),
        service_seconds=((0, 60.0), (6, 40.0)),
        service_pages=((0, 100.0), (6, 20.0)),
        queue_wait=((0.5, 100.0), (1.0, 118.0), (INF, 120.0)),
        slots=4.0,
        memory_peak=3.2 * 2**30,
        memory_limit=4 * 2**30,
    )
    got = report(
        Figures(60.0, counters, 3.3, 2), spec, window="1m", since=BARE["since"], source="pods"
    )
    # the recommendation's keys in the model's order, as the model always wrote them
    order = ["replicas", "tier", "memory", "maxBatchSize", "targetWaitSeconds"]
    full = {
        **full,
        "recommended": {k: full["recommended"][k] for k in order if k in full["recommended"]},
    }
    assert json.dumps(got.to_wire()) == json.dumps(full)
    few = Figures(60.0, CapacityCounters(pages=5.0), 0.1, 1)
    got = report(few, spec, window="1m", since=BARE["since"], source="prometheus")
    assert json.dumps(got.to_wire()) == json.dumps(bare)
