"""render_all: stable order, common labels, owner references, the replica split rule."""

from __future__ import annotations

import pytest
from docparser_operator.api.labels import TRACK_SHARED
from docparser_operator.cli.main import render_resource
from golden import CASES, Case


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_every_child_is_labelled_and_namespaced(case: Case) -> None:
    resource = case.resource()
    for obj in render_resource(resource, canary_ready=case.canary_ready):
        meta = obj["metadata"]
        assert meta["namespace"] == resource["metadata"]["namespace"]
        assert meta["labels"]["app.kubernetes.io/managed-by"] == "docparser-operator"
        assert meta["labels"]["app.kubernetes.io/name"] == "docparser"
        assert meta["labels"]["app.kubernetes.io/instance"] == resource["metadata"]["name"]
        assert meta["labels"]["docparser.io/track"] in {"stable", "canary", TRACK_SHARED}
        assert "ownerReferences" not in meta  # a manifest has no uid


def test_order_is_stable() -> None:
    objects = render_resource(Case("deepseek-gateway-canary").resource())
    kinds = [(o["kind"], o["metadata"]["labels"]["docparser.io/track"]) for o in objects]
    assert kinds == [
        ("ConfigMap", TRACK_SHARED),  # the shadow's configuration, before the pods mounting it
        ("Deployment", "stable"),
        ("Deployment", "canary"),
        ("Service", "stable"),
        ("Service", "canary"),
        ("Service", "canary"),
        ("Service", TRACK_SHARED),
        ("HorizontalPodAutoscaler", TRACK_SHARED),
        ("PodDisruptionBudget", TRACK_SHARED),
        ("HTTPRoute", TRACK_SHARED),
    ]


def test_live_object_children_are_owned() -> None:
    resource = Case("rapidocr-minimal").resource()
    resource["metadata"]["uid"] = "0b7e5c2e-1111-2222-3333-444455556666"
    for obj in render_resource(resource):
        (owner,) = obj["metadata"]["ownerReferences"]
        assert owner == {
            "apiVersion": "docparser.io/v1alpha1",
            "kind": "DocParser",
            "name": "receipts",
            "uid": "0b7e5c2e-1111-2222-3333-444455556666",
            "controller": True,
            "blockOwnerDeletion": True,
        }


def test_rendering_is_pure_and_deterministic() -> None:
    resource = Case("deepseek-gateway-canary").resource()
    before = repr(resource)
    assert render_resource(resource) == render_resource(resource)
    assert repr(resource) == before


def test_golden_check_fails_on_a_real_change_even_in_update_mode(monkeypatch, tmp_path) -> None:
    import shutil

    import golden

    case = Case("deepseek-gateway-canary")
    original = Case.render

    def changed(self: Case) -> list[dict]:
        objects = original(self)
        deployment = next(o for o in objects if o["kind"] == "Deployment")
        deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] += 1
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
