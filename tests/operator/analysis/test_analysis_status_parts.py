"""The analysis' status parts (``Check``, ``GoldenScore``, ``ShadowFigures``) are written
through their models (api/status_models.py) and give the API server the same JSON as the
camelCase dicts they were built as before (issue 37).

Why: an operator upgrade that changed a written figure's form (``1`` where ``1.0`` was, a key
that appeared or went) would make every DocParser's status differ from what the previous
operator wrote, so the first resync after the upgrade would write all of them. The expected
forms below are what the hand-built dicts gave through the status model (the path to the API
server before), taken from that code; they are compared as JSON text, so an int where a float
was, or a key order that moved, fails.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from docparser_operator.analysis.counters import Check
from docparser_operator.analysis.golden_score import GoldenScore
from docparser_operator.analysis.shadow_score import ShadowCounters, ShadowFigures
from docparser_operator.api.status_models import AnalysisCheck, ShadowStatus
from docparser_operator.api.status_models import GoldenScore as GoldenScoreStatus
from docparser_operator.api.wire import StatusModel

NOW = "2026-12-01T10:00:00Z"
INF = float("inf")
CER = ((0.01, 150.0), (0.05, 190.0), (0.1, 198.0), (INF, 200.0))
DROPPED = (("budget", 6.0), ("busy", 0.0), ("credential", 0.0), ("error", 1.0))

CHECKS: list[tuple[Check, dict[str, Any]]] = [
    (
        Check("errorRate", 0.0123456, 0.05, True),
        {"name": "errorRate", "value": 0.0123, "threshold": 0.05, "ok": True},
    ),
    (
        Check("latencyP99", 1.23456789, 2.5, False, 1.23456789, 0.98765432, 0.975),
        {
            "name": "latencyP99",
            "value": 1.2346,
            "threshold": 2.5,
            "ok": False,
            "canary": 1.2346,
            "stable": 0.9877,
            "quantile": 0.975,
        },
    ),
    (
        Check("shadowTruncationIncrease", -0.00001, 0.02, True, canary=0.0, stable=0.00001),
        {
            "name": "shadowTruncationIncrease",
            "value": -0.0,
            "threshold": 0.02,
            "ok": True,
            "canary": 0.0,
            "stable": 0.0,
        },
    ),
    (  # ints where floats are meant: written as floats, as the model always wrote them
        Check("truncatedRate", 1, 0.1234567, True, canary=3),
        {"name": "truncatedRate", "value": 1.0, "threshold": 0.1234567, "ok": True, "canary": 3.0},
    ),
]

GOLDEN: list[tuple[GoldenScore, dict[str, Any]]] = [
    (
        GoldenScore("invoice-1.pdf", 0.012345, 0.0, True),
        {"document": "invoice-1.pdf", "canary": 0.0123, "stable": 0.0, "ok": True},
    ),
    (
        GoldenScore("s3://b/x.png", 1.0, 0.333333333, False),
        {"document": "s3://b/x.png", "canary": 1.0, "stable": 0.3333, "ok": False},
    ),
    (GoldenScore("d", 0, 0, True), {"document": "d", "canary": 0.0, "stable": 0.0, "ok": True}),
]

SHADOW: list[tuple[ShadowFigures, dict[str, Any]]] = [
    (
        ShadowFigures(NOW, 120.0, 0.9, ShadowCounters(200.0, 200.0, CER, 2.0, 5.0, 3.0, DROPPED)),
        {
            "since": NOW,
            "pagesCompared": 200.0,
            "pagesMirrored": 200.0,
            "pagesPerMinute": 100.0,
            "quantile": 0.9,
            "cer": 0.04,
            "truncationIncrease": 0.015,
            "structureDisagreements": 3.0,
            "dropped": [
                {"reason": "budget", "requests": 6.0},
                {"reason": "error", "requests": 1.0},
            ],
        },
    ),
    (  # a span shorter than a second: no rate; nothing dropped is an empty list, not absent
        ShadowFigures(
            NOW, 0.0, 0.5, ShadowCounters(3.0, 2.0, ((0.01, 2.0), (INF, 2.0)), dropped=DROPPED[1:3])
        ),
        {
            "since": NOW,
            "pagesCompared": 2.0,
            "pagesMirrored": 3.0,
            "quantile": 0.5,
            "cer": 0.005,
            "truncationIncrease": 0.0,
            "structureDisagreements": 0.0,
            "dropped": [],
        },
    ),
    (
        ShadowFigures(NOW, 7.0, 0.99, ShadowCounters(7, 7, (), 0, 1, 0, ())),
        {
            "since": NOW,
            "pagesCompared": 7.0,
            "pagesMirrored": 7.0,
            "pagesPerMinute": 60.0,
            "quantile": 0.99,
            "cer": 0.0,
            "truncationIncrease": 0.1429,
            "structureDisagreements": 0.0,
            "dropped": [],
        },
    ),
]


def _same_json(part: StatusModel, expected: dict[str, Any]) -> None:
    assert json.dumps(part.to_wire()) == json.dumps(expected)
    assert type(part).model_validate(expected) == part  # and it reads back as itself


@pytest.mark.parametrize(("check", "expected"), CHECKS)
def test_a_check_is_written_as_before(check: Check, expected: dict[str, Any]) -> None:
    part = check.to_status()
    assert isinstance(part, AnalysisCheck)
    _same_json(part, expected)


@pytest.mark.parametrize(("score", "expected"), GOLDEN)
def test_a_golden_score_is_written_as_before(score: GoldenScore, expected: dict[str, Any]) -> None:
    part = score.to_status()
    assert isinstance(part, GoldenScoreStatus)
    _same_json(part, expected)


@pytest.mark.parametrize(("figures", "expected"), SHADOW)
def test_shadow_figures_are_written_as_before(
    figures: ShadowFigures, expected: dict[str, Any]
) -> None:
    part = figures.to_status()
    assert isinstance(part, ShadowStatus)
    _same_json(part, expected)
