"""PDB renderer: one budget over all runtime pods that never blocks a drain."""

from __future__ import annotations

import pytest
from docparser_operator.core.render import render_all
from golden import CASES, Case, check_golden, of_kind


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_golden(case: Case) -> None:
    check_golden(case, "PodDisruptionBudget")


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_one_budget_selecting_every_runtime_pod(case: Case) -> None:
    objects = render_all(case.resource(), canary_ready=case.canary_ready)
    (pdb,) = of_kind(objects, "PodDisruptionBudget")
    selector = pdb["spec"]["selector"]["matchLabels"]
    for dep in of_kind(objects, "Deployment"):
        pod_labels = dep["spec"]["template"]["metadata"]["labels"]
        assert selector.items() <= pod_labels.items()
    # maxUnavailable 1 lets even a single-replica service be drained; minAvailable would not.
    assert pdb["spec"]["maxUnavailable"] == 1 and "minAvailable" not in pdb["spec"]
    assert pdb["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
