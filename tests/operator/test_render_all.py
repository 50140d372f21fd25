"""render_all: stable order, common labels, owner references, the replica split rule."""

from __future__ import annotations

import pytest
from docparser_operator.render import render_all
from docparser_operator.render.plan import split_replicas
from golden import CASES, Case


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_every_child_is_labelled_and_namespaced(case: Case) -> None:
    resource = case.resource()
    for obj in render_all(resource, canary_ready=case.canary_ready):
        meta = obj["metadata"]
        assert meta["namespace"] == resource["metadata"]["namespace"]
        assert meta["labels"]["app.kubernetes.io/managed-by"] == "docparser-operator"
        assert meta["labels"]["app.kubernetes.io/name"] == "docparser"
        assert meta["labels"]["app.kubernetes.io/instance"] == resource["metadata"]["name"]
        assert meta["labels"]["docparser.io/track"] in {"stable", "canary", "shared"}
        assert "ownerReferences" not in meta  # a manifest has no uid


def test_order_is_stable() -> None:
    kinds = [
        (o["kind"], o["metadata"]["name"])
        for o in render_all(Case("deepseek-gateway-canary").resource())
    ]
    assert kinds == [
        ("Deployment", "invoices-stable"),
        ("Service", "invoices-stable"),
        ("HorizontalPodAutoscaler", "invoices-stable"),
        ("Deployment", "invoices-canary"),
        ("Service", "invoices-canary"),
        ("Service", "invoices"),
        ("PodDisruptionBudget", "invoices"),
        ("HTTPRoute", "invoices"),
    ]


def test_live_object_children_are_owned() -> None:
    resource = Case("rapidocr-minimal").resource()
    resource["metadata"]["uid"] = "0b7e5c2e-1111-2222-3333-444455556666"
    for obj in render_all(resource):
        (owner,) = obj["metadata"]["ownerReferences"]
        assert owner == {
            "apiVersion": "docparser.io/v1alpha1",
            "kind": "DocParser",
            "name": "receipts",
            "uid": "0b7e5c2e-1111-2222-3333-444455556666",
            "controller": True,
            "blockOwnerDeletion": True,
        }


@pytest.mark.parametrize(
    ("total", "weight", "ready", "expected"),
    [
        (4, 25, True, (3, 1)),
        (4, 0, True, (3, 1)),  # a present canary runs dark with one pod
        (10, 10, True, (9, 1)),
        (10, 35, True, (6, 4)),  # round half up: 3.5 -> 4
        (1, 10, True, (1, 1)),  # stable never drops to zero below 100%
        (2, 100, True, (0, 2)),  # a Ready canary may take everything
        (2, 100, False, (1, 2)),  # ...but not before it is Ready
        (3, 50, True, (1, 2)),
    ],
)
def test_split_replicas(total: int, weight: int, ready: bool, expected: tuple[int, int]) -> None:
    assert split_replicas(total, weight, canary_ready=ready) == expected


def test_rendering_is_pure_and_deterministic() -> None:
    resource = Case("deepseek-gateway-canary").resource()
    before = repr(resource)
    assert render_all(resource) == render_all(resource)
    assert repr(resource) == before


def test_golden_check_fails_on_a_real_change_even_in_update_mode(monkeypatch, tmp_path) -> None:
    import shutil

    import golden

    case = Case("deepseek-gateway-canary")
    original = Case.render

    def changed(self: Case) -> list[dict]:
        objects = original(self)
        objects[0]["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] += 1
        return objects

    monkeypatch.setattr(Case, "render", changed)
    monkeypatch.setattr(golden, "UPDATE", False)  # even when the run regenerates goldens
    with pytest.raises(AssertionError):
        golden.check_golden(case, "Deployment")
    scratch = tmp_path / "golden"
    shutil.copytree(golden.GOLDEN_DIR, scratch)
    monkeypatch.setattr(golden, "GOLDEN_DIR", scratch)
    monkeypatch.setattr(golden, "UPDATE", True)
    with pytest.raises(pytest.fail.Exception):
        golden.check_golden(case, "Deployment")
    golden.check_golden(case, "Deployment")  # rewritten: now it matches
