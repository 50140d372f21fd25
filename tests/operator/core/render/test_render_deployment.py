"""Deployment renderer: goldens plus the properties a GPU OCR service depends on."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from docparser_operator.api.models import DocParser
from docparser_operator.cli.main import render_resource
from docparser_operator.core.plan import sizing
from docparser_operator.core.render.deployment import (
    PRESTOP_SLEEP_S,
    RUNTIME_DRAIN_GRACE_S,
    RUNTIME_ENTRYPOINT,
    drain_seconds,
)
from docparser_runtime.server.drain import LEAVING_SIGNAL
from golden import CASES, Case, check_golden, of_kind

GATEWAY = Case("deepseek-gateway-canary")
SERVICE = Case("deepseek-service-router")
MINIMAL = Case("rapidocr-minimal")
REPO = Path(__file__).resolve().parents[4]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_golden(case: Case) -> None:
    check_golden(case, "Deployment")


def _deployments(resource: dict, **kw) -> dict[str, dict]:
    """Deployments by the role their revision plays (the Deployment's track label)."""
    return {
        d["metadata"]["labels"]["docparser.io/track"]: d
        for d in of_kind(render_resource(resource, **kw), "Deployment")
    }


def _container(deployment: dict, name: str = "runtime") -> dict:
    pod = deployment["spec"]["template"]["spec"]
    return next(c for c in pod["containers"] + pod.get("initContainers", []) if c["name"] == name)


def test_rolling_update_needs_no_spare_gpu() -> None:
    for dep in _deployments(GATEWAY.resource()).values():
        assert dep["spec"]["strategy"] == {
            "type": "RollingUpdate",
            "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1},
        }


def test_gpu_limits_node_selector_and_toleration() -> None:
    resource = GATEWAY.resource()
    resource["spec"]["resources"]["gpu"] = 1
    dep = _deployments(resource)["stable"]
    res = _container(dep)["resources"]
    assert res["limits"]["nvidia.com/gpu"] == "1" and res["requests"]["nvidia.com/gpu"] == "1"
    pod = dep["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod[
        "tolerations"
    ]


def test_cpu_engine_gets_no_gpu_and_no_init_container() -> None:
    dep = _deployments(MINIMAL.resource())["stable"]
    pod = dep["spec"]["template"]["spec"]
    assert "nvidia.com/gpu" not in _container(dep)["resources"]["limits"]
    assert "initContainers" not in pod
    assert [t["key"] for t in pod["tolerations"]] == [  # node failure only, no GPU toleration
        "node.kubernetes.io/unreachable",
        "node.kubernetes.io/not-ready",
    ]
    assert "--model-path" not in _container(dep)["args"]


def test_pods_of_a_lost_node_are_replaced_after_30_s_unless_the_spec_says_otherwise() -> None:
    """Default NoExecute tolerations of 30 s for unreachable / not-ready nodes (instead of the
    DefaultTolerationSeconds admission's 300 s); a toleration of the user's for the same key,
    or one tolerating every taint, replaces ours (the taint manager takes the shortest)."""
    pod = _deployments(MINIMAL.resource())["stable"]["spec"]["template"]["spec"]
    assert {
        "key": "node.kubernetes.io/unreachable",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 30,
    } in pod["tolerations"]
    mine = {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"}
    resource = MINIMAL.resource()
    resource["spec"]["pod"] = {"tolerations": [{**mine, "tolerationSeconds": 5}]}
    pod = _deployments(resource)["stable"]["spec"]["template"]["spec"]
    keys = [(t["key"], t.get("tolerationSeconds")) for t in pod["tolerations"]]
    assert keys == [("node.kubernetes.io/not-ready", 5), ("node.kubernetes.io/unreachable", 30)]
    resource["spec"]["pod"] = {"tolerations": [{"operator": "Exists"}]}
    pod = _deployments(resource)["stable"]["spec"]["template"]["spec"]
    assert pod["tolerations"] == [{"operator": "Exists"}]


def test_engine_default_gpu_count_is_one_for_deepseek() -> None:
    resource = GATEWAY.resource()
    del resource["spec"]["resources"]["gpu"]
    limits = _container(_deployments(resource)["stable"])["resources"]["limits"]
    assert limits["nvidia.com/gpu"] == "1"


def test_init_container_fetches_and_verifies_each_tracks_weights() -> None:
    spec = GATEWAY.resource()["spec"]
    deps = _deployments(GATEWAY.resource())
    for track, weights in [("stable", spec["weights"]), ("canary", spec["canary"]["weights"])]:
        dep = deps[track]
        fetch = _container(dep, "fetch-weights")
        assert "command" not in fetch  # the image's ENTRYPOINT (tini) runs the args
        assert fetch["args"] == [
            "fetch-weights",
            "--source",
            weights["uri"],
            "--dest",
            f"/models/{weights['version']}",
            "--sha256",
            weights["sha256"],
        ]
        runtime = _container(dep)
        assert runtime["args"][runtime["args"].index("--model-path") + 1] == (
            f"/models/{weights['version']}"
        )
        env = {e["name"]: e.get("value", e.get("valueFrom")) for e in runtime["env"]}
        assert env["DOCPARSER_MODEL_VERSION"] == weights["version"]
        assert dep["metadata"]["labels"]["docparser.io/version"] == weights["version"]
        assert "docparser.io/version" not in dep["spec"]["selector"]["matchLabels"]


def test_containers_keep_the_images_tini_entrypoint() -> None:
    """A ``command`` would replace ``tini -- docparser-runtime``; args alone keep it."""
    for dep in _deployments(GATEWAY.resource()).values():
        for name in ("runtime", "fetch-weights"):
            assert "command" not in _container(dep, name)
    assert _container(dep)["args"][0] == "serve"
    dockerfile = (REPO / "Dockerfile.runtime").read_text()
    entrypoint = next(line for line in dockerfile.splitlines() if line.startswith("ENTRYPOINT"))
    assert entrypoint == f"ENTRYPOINT {json.dumps(list(RUNTIME_ENTRYPOINT))}"


def test_pvc_source_is_mounted_read_only_in_place_never_copied() -> None:
    """A pvc:// source is already a volume: the runtime mounts its path read-only at the model
    path and serve verifies it there (DOCPARSER_WEIGHTS_SHA256); no init container copies it,
    and no emptyDir holds a second copy."""
    dep = _deployments(SERVICE.resource())["stable"]
    pod = dep["spec"]["template"]["spec"]
    assert "initContainers" not in pod
    volume = next(v for v in pod["volumes"] if v["name"] == "weights")
    assert volume == {
        "name": "weights",
        "persistentVolumeClaim": {"claimName": "model-store", "readOnly": True},
    }
    runtime = _container(dep)
    mount = next(m for m in runtime["volumeMounts"] if m["name"] == "weights")
    assert mount == {
        "name": "weights",
        "mountPath": "/models/2026-01-27",
        "subPath": "deepseek-ocr-2/2026-01-27",
        "readOnly": True,
    }
    assert runtime["args"][runtime["args"].index("--model-path") + 1] == "/models/2026-01-27"
    env = {e["name"]: e.get("value") for e in runtime["env"]}
    assert env["DOCPARSER_WEIGHTS_SHA256"] == SERVICE.resource()["spec"]["weights"]["sha256"]
    # Only /tmp is on node disk.
    assert runtime["resources"]["requests"]["ephemeral-storage"] == "2Gi"


def test_emptydir_weights_are_requested_as_ephemeral_storage() -> None:
    """Weights fetched into the pod's emptyDir: the scheduler must find that much node disk
    (the volume's limit plus /tmp), or the kubelet evicts the pod mid-download."""
    resource = copy.deepcopy(GATEWAY.resource())
    dep = _deployments(resource)["stable"]
    volumes = {v["name"]: v for v in dep["spec"]["template"]["spec"]["volumes"]}
    assert volumes["weights"]["emptyDir"]["sizeLimit"] == "13Gi"  # twice deepseek-ocr2's 6.4 GiB
    assert _container(dep)["resources"]["requests"]["ephemeral-storage"] == "15Gi"
    resource["spec"]["weightsCache"] = {"volumeSize": "30Gi"}
    dep = _deployments(resource)["stable"]
    volumes = {v["name"]: v for v in dep["spec"]["template"]["spec"]["volumes"]}
    assert volumes["weights"]["emptyDir"]["sizeLimit"] == "30Gi"
    assert _container(dep)["resources"]["requests"]["ephemeral-storage"] == "32Gi"


def test_non_root_read_only_root_with_writable_tmp_and_weights() -> None:
    dep = _deployments(GATEWAY.resource())["stable"]
    pod = dep["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    for name in ("runtime", "fetch-weights"):
        sc = _container(dep, name)["securityContext"]
        assert sc["readOnlyRootFilesystem"] is True
        assert sc["allowPrivilegeEscalation"] is False
        assert sc["capabilities"] == {"drop": ["ALL"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert "emptyDir" in volumes["tmp"] and "emptyDir" in volumes["weights"]
    fetch_mounts = {m["mountPath"]: m for m in _container(dep, "fetch-weights")["volumeMounts"]}
    assert not fetch_mounts["/models"].get("readOnly")  # the init container writes weights
    run_mounts = {m["mountPath"]: m for m in _container(dep)["volumeMounts"]}
    assert run_mounts["/models"]["readOnly"] is True and not run_mounts["/tmp"].get("readOnly")


def test_startup_budget_is_at_least_20_minutes_by_default_and_configurable() -> None:
    resource = GATEWAY.resource()
    probe = _container(_deployments(resource)["stable"])["startupProbe"]
    assert probe["httpGet"]["path"] == "/readyz"
    assert probe["failureThreshold"] * probe["periodSeconds"] >= 20 * 60
    resource["spec"]["runtime"]["startupTimeoutSeconds"] = 3600
    probe = _container(_deployments(resource)["stable"])["startupProbe"]
    assert probe["failureThreshold"] * probe["periodSeconds"] == 3600


def test_readiness_and_liveness_probe_the_runtime_endpoints() -> None:
    runtime = _container(_deployments(GATEWAY.resource())["stable"])
    assert runtime["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert runtime["livenessProbe"]["httpGet"] == {"path": "/livez", "port": "http"}
    assert runtime["ports"] == [{"name": "http", "containerPort": 8000, "protocol": "TCP"}]


@pytest.mark.parametrize("max_new_tokens", [256, 4096, 8192])
def test_grace_period_covers_prestop_and_drain(max_new_tokens: int) -> None:
    resource = GATEWAY.resource()
    resource["spec"]["runtime"]["maxNewTokens"] = max_new_tokens
    dep = _deployments(resource)["stable"]
    runtime = _container(dep)
    drain = drain_seconds(DocParser.from_resource(resource).spec)
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in runtime["env"]}
    assert env["DOCPARSER_DRAIN_TIMEOUT_S"] == str(drain)
    # preStop: tell the server it is leaving (it claims no new job), then sleep while the
    # endpoints drop the pod. The signal is the one the runtime listens for.
    command = runtime["lifecycle"]["preStop"]["exec"]["command"]
    assert command[:2] == ["/bin/sh", "-c"], command
    assert f"kill -{LEAVING_SIGNAL.name.removeprefix('SIG')} 1 " in command[2], command
    assert command[2].endswith(f"; sleep {PRESTOP_SLEEP_S}"), command
    grace = dep["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert env["DOCPARSER_DRAIN_GRACE_S"] == str(RUNTIME_DRAIN_GRACE_S)
    assert grace > PRESTOP_SLEEP_S + RUNTIME_DRAIN_GRACE_S + drain
    assert drain >= max_new_tokens / 20  # a slow GPU's decode of the longest page


def test_runtime_settings_reach_the_pod_as_env() -> None:
    resource = GATEWAY.resource()
    resource["spec"]["runtime"].update(maxBatchSize=3, maxNewTokens=1234)
    resource["spec"]["tier"] = 2
    env = {
        e["name"]: e.get("value", e.get("valueFrom"))
        for e in _container(_deployments(resource)["stable"])["env"]
    }
    assert env["DOCPARSER_MAX_BATCH_SIZE"] == "3"
    assert env["DOCPARSER_DEFAULT_MAX_NEW_TOKENS"] == "1234"
    assert env["DOCPARSER_DEFAULT_TIER"] == "2"
    assert env["DOCPARSER_API_KEYS_FILE"] == "/var/run/secrets/docparser/api-keys"
    assert env["DOCPARSER_MAX_TIER"] == "2"
    assert env["DOCPARSER_WEIGHTS_SHA256"] == resource["spec"]["weights"]["sha256"]
    assert env["DOCPARSER_REDIS_URL"] == {"secretKeyRef": {"name": "ocr-redis", "key": "url"}}


def test_tier_auto_reaches_the_pod_with_the_cap_at_6_and_is_sized_there() -> None:
    resource = GATEWAY.resource()
    resource["spec"]["tier"] = "auto"
    resource["spec"]["resources"]["gpuMemory"] = "16Gi"
    env = {e["name"]: e.get("value") for e in _container(_deployments(resource)["stable"])["env"]}
    assert (env["DOCPARSER_DEFAULT_TIER"], env["DOCPARSER_MAX_TIER"]) == ("auto", "6")
    auto = DocParser.from_resource(resource).spec
    resource["spec"]["tier"] = 6
    six = DocParser.from_resource(resource).spec
    assert sizing.estimate_for_spec(auto) == sizing.estimate_for_spec(six)
    assert sizing.gpu_memory_problem(auto) == sizing.gpu_memory_problem(six)
    resource["spec"]["tier"] = 0
    assert sizing.estimate_for_spec(DocParser.from_resource(resource).spec).total < (
        sizing.estimate_for_spec(auto).total
    )


def test_redis_url_comes_only_from_its_secret_and_only_when_configured() -> None:
    bare = _container(_deployments(SERVICE.resource())["stable"])
    assert "DOCPARSER_REDIS_URL" not in {e["name"] for e in bare["env"]}
    resource = SERVICE.resource()
    resource["spec"]["runtime"]["redisUrlSecretRef"] = {"name": "r", "key": "dsn"}
    env = _container(_deployments(resource)["stable"])["env"]
    (entry,) = [e for e in env if e["name"] == "DOCPARSER_REDIS_URL"]
    assert entry == {
        "name": "DOCPARSER_REDIS_URL",
        "valueFrom": {"secretKeyRef": {"name": "r", "key": "dsn"}},
    }


def test_weights_credentials_reach_only_the_fetch_init_container() -> None:
    dep = _deployments(GATEWAY.resource())["canary"]
    pod = dep["spec"]["template"]["spec"]
    (fetch,) = pod["initContainers"]
    assert fetch["envFrom"] == [{"secretRef": {"name": "model-store"}}]
    assert all("envFrom" not in c for c in pod["containers"])
    bare = _deployments(SERVICE.resource())["stable"]["spec"]["template"]["spec"]
    assert all("envFrom" not in c for c in bare.get("initContainers", []))


def test_api_keys_secret_is_mounted_only_when_configured() -> None:
    dep = _deployments(GATEWAY.resource())["stable"]
    volumes = {v["name"]: v for v in dep["spec"]["template"]["spec"]["volumes"]}
    assert volumes["api-keys"]["secret"]["secretName"] == "ocr-keys"
    bare = _deployments(SERVICE.resource())["stable"]
    assert "api-keys" not in {v["name"] for v in bare["spec"]["template"]["spec"]["volumes"]}
    env = {e["name"] for e in _container(bare)["env"]}
    assert "DOCPARSER_API_KEYS_FILE" not in env


def test_metrics_port_is_annotated() -> None:
    dep = _deployments(GATEWAY.resource())["stable"]
    annotations = dep["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/port"] == "8000"
    assert annotations["prometheus.io/path"] == "/metrics"


def test_revisions_are_named_by_template_content_and_always_sized() -> None:
    """A Deployment per revision: the name carries the pod template's hash, the template's
    labels carry it too (never the role), and the operator always sets replicas (the one
    HPA scales the DocParser, not a Deployment)."""
    deps = _deployments(GATEWAY.resource())
    for role, dep in deps.items():
        revision = dep["metadata"]["labels"]["docparser.io/revision"]
        assert dep["metadata"]["name"] == f"invoices-{revision}" and len(revision) == 6
        template_labels = dep["spec"]["template"]["metadata"]["labels"]
        assert template_labels["docparser.io/revision"] == revision
        assert "docparser.io/track" not in template_labels  # a role is not a pod's label
        assert dep["spec"]["selector"]["matchLabels"]["docparser.io/revision"] == revision
        assert dep["metadata"]["labels"]["docparser.io/track"] == role
        assert isinstance(dep["spec"]["replicas"], int)
    assert deps["stable"]["metadata"]["name"] != deps["canary"]["metadata"]["name"]
    same = _deployments(GATEWAY.resource())
    assert same["stable"]["metadata"]["name"] == deps["stable"]["metadata"]["name"]
    bumped = GATEWAY.resource()
    bumped["spec"]["runtime"]["image"] += "-2"
    assert _deployments(bumped)["stable"]["metadata"]["name"] != deps["stable"]["metadata"]["name"]


def test_fixed_size_split_by_canary_weight() -> None:
    resource = SERVICE.resource()
    deps = _deployments(resource)
    assert deps["stable"]["spec"]["replicas"] == 3
    assert deps["canary"]["spec"]["replicas"] == 1
    changed = copy.deepcopy(resource)
    changed["spec"]["canary"]["weight"] = 50
    deps = _deployments(changed)
    assert (
        deps["stable"]["spec"]["replicas"],
        deps["canary"]["spec"]["replicas"],
    ) == (2, 2)


@pytest.mark.parametrize(("cpu", "init_cpu"), [("100m", "100m"), ("0.25", "0.25"), ("4", "500m")])
def test_weights_fetcher_never_asks_more_cpu_than_the_pod(cpu: str, init_cpu: str) -> None:
    """A pod schedules by max(init, containers): a bigger init request would make a small CPU
    pod unschedulable where its own spec fits (seen on a 2-core node)."""
    resource = copy.deepcopy(GATEWAY.resource())
    resource["spec"]["resources"]["cpu"] = cpu
    dep = _deployments(resource)["stable"]
    assert _container(dep, "fetch-weights")["resources"]["requests"]["cpu"] == init_cpu
    assert _container(dep)["resources"]["requests"]["cpu"] == cpu


def test_canary_runtime_override_changes_only_the_canarys_pods() -> None:
    """spec.canary.runtime: a new image or settings go through the same canary as weights."""
    resource = copy.deepcopy(GATEWAY.resource())
    before = _deployments(resource)
    resource["spec"]["canary"]["runtime"] = {"image": "example.com/runtime:2.0", "maxBatchSize": 2}
    deps = _deployments(resource)
    canary, stable = _container(deps["canary"]), _container(deps["stable"])
    assert canary["image"] == "example.com/runtime:2.0"
    assert _container(deps["canary"], "fetch-weights")["image"] == "example.com/runtime:2.0"
    env = {e["name"]: e.get("value") for e in canary["env"]}
    assert env["DOCPARSER_MAX_BATCH_SIZE"] == "2"
    stable_env = {e["name"]: e.get("value") for e in stable["env"]}
    assert stable_env["DOCPARSER_MAX_BATCH_SIZE"] == str(
        resource["spec"]["runtime"]["maxBatchSize"]
    )
    # Stable's pods are untouched (same revision); the canary's is a new one.
    assert deps["stable"] == before["stable"]
    assert deps["canary"]["metadata"]["name"] != before["canary"]["metadata"]["name"]
    assert canary["imagePullPolicy"] == stable["imagePullPolicy"]  # unset: spec.runtime's


def test_pod_settings_reach_both_tracks_and_keep_what_the_operator_needs() -> None:
    resource = GATEWAY.resource()
    gpu = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    resource["spec"]["pod"] = {
        "tolerations": [gpu, {"key": "spot", "operator": "Exists"}],  # gpu given twice
        "topologySpreadConstraints": [],
        "envFrom": [{"configMapRef": {"name": "ocr-settings"}}],
        "env": [
            {
                "name": "DOCPARSER_MAX_PAGES",
                "valueFrom": {"configMapKeyRef": {"name": "x", "key": "y"}},
            }
        ],
    }
    for dep in _deployments(resource).values():
        pod = dep["spec"]["template"]["spec"]
        assert pod["tolerations"][:2] == [gpu, {"key": "spot", "operator": "Exists"}]
        assert "topologySpreadConstraints" not in pod  # [] turns the default spread off
        runtime = _container(dep)
        assert runtime["envFrom"] == [{"configMapRef": {"name": "ocr-settings"}}]
        assert runtime["env"][-1]["valueFrom"]["configMapKeyRef"] == {"name": "x", "key": "y"}
        assert dep["spec"]["selector"]["matchLabels"].items() <= (
            dep["spec"]["template"]["metadata"]["labels"].items()
        )


def test_pod_settings_the_operator_owns_are_refused() -> None:
    resource = MINIMAL.resource()
    resource["spec"]["pod"] = {"env": [{"name": "HF_HUB_OFFLINE", "value": "0"}]}
    with pytest.raises(ValueError, match=r"pod\.env may not set HF_HUB_OFFLINE"):
        DocParser.from_resource(resource)
    resource["spec"]["pod"] = {"env": [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]}
    with pytest.raises(ValueError, match="each name at most once"):
        DocParser.from_resource(resource)


def test_env_the_operator_renders_is_exactly_what_pod_env_may_not_set() -> None:
    """naming.OPERATOR_ENV is the one list: the model and the CRD's CEL rule refuse those
    names in spec.pod.env, and it covers every variable the renderer sets."""
    from crd_tools import root_schema
    from docparser_operator.api import naming

    rendered = {
        e["name"]
        for dep in _deployments(GATEWAY.resource()).values()
        for e in _container(dep)["env"]
    } - {e["name"] for e in GATEWAY.resource()["spec"]["pod"]["env"]}
    assert rendered <= naming.OPERATOR_ENV, rendered - naming.OPERATOR_ENV
    env = root_schema()["properties"]["spec"]["properties"]["pod"]["properties"]["env"]
    rule = env["x-kubernetes-validations"][0]["rule"]
    listed = set(rule.split("[", 1)[1].split("]", 1)[0].replace("'", "").split(", "))
    assert listed == naming.OPERATOR_ENV


def test_redis_keys_are_scoped_to_the_docparser() -> None:
    (stable, *_) = _deployments(GATEWAY.resource()).values()
    env = {e["name"]: e.get("value") for e in _container(stable)["env"]}
    assert env["DOCPARSER_REDIS_PREFIX"] == "docparser:ocr:invoices:"
