"""The shadow canary's rendering: the ConfigMap <name>-shadow, and the mounts that keep every
pod template the same whether the shadow is on, off, or its canary replaced."""

from __future__ import annotations

import copy
import dataclasses
import json

import pytest
from docparser_operator.api.models import DocParser
from docparser_operator.cli.main import render_resource
from docparser_operator.core.plan.target import target_at_rest
from docparser_operator.core.render import render_target, roles_of
from golden import CASES, Case, check_golden, of_kind

GATEWAY = Case("deepseek-gateway-canary")  # canary with shadow, adminKeySecretRef
MINIMAL = Case("rapidocr-minimal")
OTHER_WEIGHTS = {
    "uri": "s3://models/deepseek-ocr-2/2026-04-01",
    "version": "2026-04-01",
    "sha256": "ab" * 32,
}


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_golden(case: Case) -> None:
    check_golden(case, "ConfigMap")


def _config(resource: dict, *, live: bool = False) -> dict:
    """What ``<name>-shadow`` says at rest; ``live``: as a pass renders it when its view holds
    the ConfigMap (a shadow turned off)."""
    (config_map,) = of_kind(_at_rest(resource, live=live), "ConfigMap")
    assert config_map["metadata"]["name"] == resource["metadata"]["name"] + "-shadow"
    return json.loads(config_map["data"]["config.json"])


def _at_rest(resource: dict, *, live: bool) -> list[dict]:
    """Every child at rest, rendered as a pass does: ``live`` when its view holds the ConfigMap
    ``<name>-shadow`` (``Target.shadow_config_live``)."""
    model = DocParser.from_resource(resource)
    plan = target_at_rest(model, roles_of(model))
    return render_target(dataclasses.replace(plan, shadow_config_live=live))


def _templates(resource: dict) -> dict[str, dict]:
    """track -> the pod template of that track's Deployment."""
    return {
        d["metadata"]["labels"]["docparser.io/track"]: d["spec"]["template"]
        for d in of_kind(render_resource(resource), "Deployment")
    }


def test_the_config_points_stable_at_the_canary_service_within_the_budget() -> None:
    resource = GATEWAY.resource()
    deployments = of_kind(render_resource(resource), "Deployment")
    revisions = {
        d["metadata"]["labels"]["docparser.io/track"]: d["metadata"]["labels"][
            "docparser.io/revision"
        ]
        for d in deployments
    }
    stable_pods = next(
        d["spec"]["replicas"]
        for d in deployments
        if d["metadata"]["labels"]["docparser.io/track"] == "stable"
    )
    (canary_service,) = [
        s
        for s in of_kind(render_resource(resource), "Service")
        if s["metadata"]["name"] == "invoices-canary"
    ]
    assert canary_service["spec"]["selector"]["docparser.io/revision"] == revisions["canary"]
    assert _config(resource) == {
        "enabled": True,
        "target": "http://invoices-canary.ocr.svc:8000",
        "percent": 10,
        "maxPagesPerMinute": -(-60 // stable_pods),  # the DocParser's 60, divided, rounded up
        "stableRevision": revisions["stable"],
        "canaryRevision": revisions["canary"],
    }


@pytest.mark.parametrize(
    ("budget", "size", "per_pod"), [(60, 2, 30), (61, 2, 31), (5, 4, 2), (1, 3, 1)]
)
def test_the_budget_is_divided_among_stable_pods_rounding_up(
    budget: int, size: int, per_pod: int
) -> None:
    resource = GATEWAY.resource()
    spec = resource["spec"]
    spec["canary"]["weight"] = 0  # a dark canary: every one of the size's pods is stable
    spec["replicas"] = {"min": size, "max": size}
    spec["canary"]["shadow"]["maxPagesPerMinute"] = budget
    assert _config(resource)["maxPagesPerMinute"] == per_pod


def test_without_a_shadow_the_config_map_is_rendered_only_when_live_and_then_says_off() -> None:
    """A DocParser that never had a shadow has no ``<name>-shadow`` (one apply fewer per
    DocParser created; its pods mount it ``optional`` and the runtime reads a missing file as
    off). One that exists (a shadow turned off, or made by an older operator) is kept and says
    ``enabled: false``, so running pods stop mirroring. The pod templates are the same either
    way: no revision hash, so no pod, depends on it."""
    no_canary = MINIMAL.resource()
    no_shadow = GATEWAY.resource()
    del no_shadow["spec"]["canary"]["shadow"]
    for resource in (no_canary, no_shadow):
        assert of_kind(_at_rest(resource, live=False), "ConfigMap") == []
        assert _config(resource, live=True) == {"enabled": False}
        templates = [of_kind(_at_rest(resource, live=live), "Deployment") for live in (False, True)]
        assert templates[0] == templates[1]
    shadowed = GATEWAY.resource()  # with a shadow in the spec: rendered, live or not
    assert _config(shadowed, live=False) == _config(shadowed, live=True)
    assert _config(shadowed)["enabled"] is True


def test_shadow_on_off_and_a_new_canary_never_change_the_stable_pod_template() -> None:
    """The pod template (and so the revision hash and stable's pods) stays the same whether
    the shadow is on, off, sized differently or aimed at another canary: only the ConfigMap
    changes, which the kubelet refreshes in running pods."""
    on = GATEWAY.resource()
    off = copy.deepcopy(on)
    del off["spec"]["canary"]["shadow"]
    resized = copy.deepcopy(on)
    resized["spec"]["canary"]["shadow"] = {"percent": 100, "maxPagesPerMinute": 5000}
    replaced = copy.deepcopy(on)
    replaced["spec"]["canary"]["weights"] = OTHER_WEIGHTS
    no_canary = copy.deepcopy(on)
    del no_canary["spec"]["canary"]
    stable = _templates(on)["stable"]
    for other in (off, resized, replaced, no_canary):
        assert _templates(other)["stable"] == stable
    assert _templates(off)["canary"] == _templates(on)["canary"]
    configs = {
        json.dumps(_config(r, live=True), sort_keys=True) for r in (on, off, resized, replaced)
    }
    assert len(configs) == 4  # ... while the configuration did change each time


def test_every_runtime_pod_mounts_the_config_the_token_and_the_admin_key() -> None:
    for track, template in _templates(GATEWAY.resource()).items():
        (container,) = template["spec"]["containers"]
        mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
        volumes = {v["name"]: v for v in template["spec"]["volumes"]}
        env = {e["name"]: e.get("value") for e in container["env"]}
        config = volumes[mounts["/etc/docparser/shadow"]]["configMap"]
        assert config == {"name": "invoices-shadow", "optional": True}, track
        token = volumes[mounts["/var/run/secrets/docparser/internal"]]["secret"]
        assert token["secretName"] == "invoices-internal" and token["optional"] is True
        assert token["items"] == [{"key": "token", "path": "token"}]
        admin = volumes[mounts["/var/run/secrets/docparser/admin"]]["secret"]
        assert admin["secretName"] == "ocr-admin" and "optional" not in admin
        assert admin["items"] == [{"key": "admin-key", "path": "admin-key"}]
        assert env["DOCPARSER_SHADOW_CONFIG_FILE"] == "/etc/docparser/shadow/config.json"
        assert env["DOCPARSER_INTERNAL_TOKEN_FILE"] == "/var/run/secrets/docparser/internal/token"
        assert env["DOCPARSER_ADMIN_KEY_FILE"] == "/var/run/secrets/docparser/admin/admin-key"


def test_the_admin_key_entry_is_mounted_under_the_runtime_s_file_name() -> None:
    resource = GATEWAY.resource()
    resource["spec"]["auth"]["adminKeySecretRef"] = {"name": "ops", "key": "key.txt"}
    template = _templates(resource)["stable"]
    (admin,) = [v for v in template["spec"]["volumes"] if v["name"] == "admin-key"]
    assert admin["secret"]["items"] == [{"key": "key.txt", "path": "admin-key"}]
    del resource["spec"]["auth"]["adminKeySecretRef"]
    template = _templates(resource)["stable"]
    assert "admin-key" not in {v["name"] for v in template["spec"]["volumes"]}
    (container,) = template["spec"]["containers"]
    assert "DOCPARSER_ADMIN_KEY_FILE" not in {e["name"] for e in container["env"]}


def test_a_canary_of_a_runtime_setting_sets_env_on_its_own_pods_only() -> None:
    """canary.runtime.env: a canary that differs by an environment variable alone (a setting
    the spec has no field for, or the regression fault the shadow's tests inject) gets it over
    spec.pod.env; stable's pod template is the one it was."""
    resource = MINIMAL.resource()
    before = _templates(resource)["stable"]
    fault = {"name": "DOCPARSER_TEST_DROP_LINE_EVERY", "value": "20"}
    resource["spec"]["pod"] = {"env": [{"name": "DOCPARSER_MAX_PAGES", "value": "9"}]}
    plain = _templates(resource)["stable"]
    resource["spec"]["canary"] = {
        "runtime": {"env": [fault, {"name": "DOCPARSER_MAX_PAGES", "value": "3"}]},
        "shadow": {},
    }
    templates = _templates(resource)
    assert templates["stable"] == plain and plain != before
    (stable,) = templates["stable"]["spec"]["containers"]
    (canary,) = templates["canary"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in canary["env"]}
    assert env["DOCPARSER_TEST_DROP_LINE_EVERY"] == "20" and env["DOCPARSER_MAX_PAGES"] == "3"
    assert [e["name"] for e in canary["env"]].count("DOCPARSER_MAX_PAGES") == 1
    assert "DOCPARSER_TEST_DROP_LINE_EVERY" not in {e["name"] for e in stable["env"]}
