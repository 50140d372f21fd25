"""Golden files of rendered children: tests/operator/golden/<case>.<kind>.yaml.

A case is an example manifest rendered with the canary Ready or not. Comparison is exact text
(the `render` output format), so any change to a rendered field fails. To accept an intended
change run ``DOCPARSER_UPDATE_GOLDEN=1 pytest tests/operator/core/render/test_render_*.py``:
changed files are rewritten and those tests still FAIL once (review ``git diff
tests/operator/golden``, then rerun without the variable); unchanged goldens pass. A missing
golden fails the same way.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from docparser_operator.cli.main import render_resource, to_yaml_stream

GOLDEN_DIR = Path(__file__).resolve().parent / "golden"
EXAMPLES_DIR = Path(__file__).resolve().parents[2] / "examples"
UPDATE = os.environ.get("DOCPARSER_UPDATE_GOLDEN") == "1"


@dataclass(frozen=True)
class Case:
    example: str
    canary_ready: bool = True
    idle: bool = False  # at zero (replicas.min 0)

    @property
    def id(self) -> str:
        if self.idle:
            return f"{self.example}.idle"
        return self.example if self.canary_ready else f"{self.example}.canary-not-ready"

    def resource(self) -> dict:
        return yaml.safe_load((EXAMPLES_DIR / f"{self.example}.yaml").read_text())

    def render(self) -> list[dict]:
        return render_resource(self.resource(), canary_ready=self.canary_ready, idle=self.idle)


CASES = [
    Case("rapidocr-minimal"),
    Case("deepseek-gateway-canary"),
    Case("deepseek-gateway-canary", canary_ready=False),
    Case("deepseek-service-router"),
    Case("deepseek-service-router", canary_ready=False),
    Case("deepseek-weights-cache"),
    Case("deepseek-scale-to-zero"),
    Case("deepseek-scale-to-zero", idle=True),
    Case("deepseek-batch-pool"),  # spec.batch: the pool is the last Deployment
]


def of_kind(objects: list[dict], kind: str) -> list[dict]:
    return [o for o in objects if o["kind"] == kind]


def check_golden(case: Case, kind: str) -> None:
    """Compare the case's objects of ``kind`` with their golden file (see module doc)."""
    text = to_yaml_stream(of_kind(case.render(), kind))
    path = GOLDEN_DIR / f"{case.id}.{kind.lower()}.yaml"
    current = path.read_text() if path.exists() else None
    if current == text:
        return
    if UPDATE:
        GOLDEN_DIR.mkdir(exist_ok=True)
        path.write_text(text)
        pytest.fail(f"golden {path.name} rewritten; review the diff and rerun without the update")
    if current is None:
        pytest.fail(f"missing golden {path.name}: run with DOCPARSER_UPDATE_GOLDEN=1")
    assert text == current, f"{path.name} differs (DOCPARSER_UPDATE_GOLDEN=1 accepts a change)"
