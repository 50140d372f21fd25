"""PDB renderer: one budget over all runtime pods that holds a drain's eviction until a
replacement is Ready, and relaxes when it must (core/plan/drain.py)."""

from __future__ import annotations

import pytest
from docparser_operator.api.models import DocParser
from docparser_operator.cli.main import render_resource
from docparser_operator.core.plan.drain import DrainPlan, NodeDrain
from docparser_operator.core.plan.target import target_at_rest
from docparser_operator.core.render import Target, roles_of
from docparser_operator.core.render.pdb import render_pdb
from golden import CASES, Case, check_golden, of_kind

MINIMAL = Case("rapidocr-minimal")


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_golden(case: Case) -> None:
    check_golden(case, "PodDisruptionBudget")


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_one_budget_selecting_every_runtime_pod(case: Case) -> None:
    objects = render_resource(case.resource(), canary_ready=case.canary_ready)
    (pdb,) = of_kind(objects, "PodDisruptionBudget")
    selector = pdb["spec"]["selector"]["matchLabels"]
    for dep in of_kind(objects, "Deployment"):
        pod_labels = dep["spec"]["template"]["metadata"]["labels"]
        # every runtime pod, never the front (replicas.min 0): it is no GPU capacity, nor the
        # batch pool (spec.batch: spot pods, evicted at will; their lines requeue)
        outside = dep["metadata"]["name"].endswith(("-front", "-batch"))
        assert (selector.items() <= pod_labels.items()) != outside
    # At rest it keeps the size Ready: an eviction waits for a replacement (core/plan/drain.py).
    size = sum(
        d["spec"]["replicas"]
        for d in of_kind(objects, "Deployment")
        if not d["metadata"]["name"].endswith(("-front", "-batch"))
    )
    assert pdb["spec"]["minAvailable"] == size and "maxUnavailable" not in pdb["spec"]
    assert pdb["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"


def _target(drain: DrainPlan) -> Target:
    model = DocParser.from_resource(MINIMAL.resource())
    at_rest = target_at_rest(model, roles_of(model))
    return Target(at_rest.resource, at_rest.roles, at_rest.rollout, drain)


def test_the_budget_relaxes_past_a_deadline_or_without_node_reads() -> None:
    """Past a drain's deadline only the Ready pods on nodes not cordoned must stay (the drained
    node's pods may all go; not maxUnavailable 1, which counts the unscheduled replacement as
    expected and allows no eviction); maxUnavailable 1 for an operator that cannot read nodes
    (a drain it cannot see must not wait for ever); minAvailable at the size while every
    drain is within its deadline."""
    late = NodeDrain("n1", "2026-01-01T00:00:00Z", "2026-01-01T00:10:00Z", 1, expired=True)
    early = NodeDrain("n2", "2026-01-01T00:00:00Z", "2026-01-01T00:10:00Z", 1, expired=False)
    holding = render_pdb(_target(DrainPlan(aware=True, leaving={}, drains=(early,), staying=3)))
    assert holding["spec"]["minAvailable"] == 1
    for staying in (0, 2):
        spec = render_pdb(_target(DrainPlan(aware=True, drains=(early, late), staying=staying)))
        assert spec["spec"]["minAvailable"] == staying and "maxUnavailable" not in spec["spec"]
    spec = render_pdb(_target(DrainPlan(aware=False)))["spec"]
    assert spec["maxUnavailable"] == 1 and "minAvailable" not in spec
