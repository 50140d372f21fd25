"""The weights cache (spec.weightsCache.mode: PersistentVolume): one claim and one fill Job
per weights sha256, pods that mount the claim read-only and wait for it, and nothing of it
for pvc:// sources or in EmptyDir mode."""

from __future__ import annotations

import copy

import pytest
from docparser_operator.cli.main import render_resource
from golden import Case, check_golden, of_kind

CACHED = Case("deepseek-weights-cache")
GATEWAY = Case("deepseek-gateway-canary")
SERVICE = Case("deepseek-service-router")
STABLE_SHA = "3f7a9c1e5b2d4f6a8c0e1b3d5f7a9c1e5b2d4f6a8c0e1b3d5f7a9c1e5b2d4f6a"
CANARY_SHA = "9b1d3f5a7c9e1b3d5f7a9c1e3b5d7f9a1c3e5b7d9f1a3c5e7b9d1f3a5c7e9b1d"


@pytest.mark.parametrize("kind", ["PersistentVolumeClaim", "Job"])
def test_golden(kind: str) -> None:
    check_golden(CACHED, kind)


def _by_name(objects: list[dict], kind: str) -> dict[str, dict]:
    return {o["metadata"]["name"]: o for o in of_kind(objects, kind)}


def test_one_claim_and_one_fill_job_per_sha256() -> None:
    objects = CACHED.render()
    claims, jobs = _by_name(objects, "PersistentVolumeClaim"), _by_name(objects, "Job")
    names = {f"forms-weights-{STABLE_SHA[:12]}", f"forms-weights-{CANARY_SHA[:12]}"}
    assert set(claims) == set(jobs) == names
    claim = claims[f"forms-weights-{STABLE_SHA[:12]}"]
    assert claim["spec"] == {
        "accessModes": ["ReadWriteMany"],
        "resources": {"requests": {"storage": "16Gi"}},
        "storageClassName": "efs-sc",
    }
    assert claim["metadata"]["annotations"]["docparser.io/weights-sha256"] == STABLE_SHA
    assert claim["metadata"]["labels"]["app.kubernetes.io/component"] == "weights-cache"
    # A canary with the same weights (runtime change only) shares stable's claim.
    resource = copy.deepcopy(CACHED.resource())
    resource["spec"]["canary"] = {
        "weights": resource["spec"]["weights"],
        "runtime": {"maxBatchSize": 2},
        "weight": 10,
    }
    shared = render_resource(resource)
    assert set(_by_name(shared, "PersistentVolumeClaim")) == {f"forms-weights-{STABLE_SHA[:12]}"}


def test_fill_job_fetches_into_the_claim_with_the_pods_identity_and_no_gpu() -> None:
    job = _by_name(CACHED.render(), "Job")[f"forms-weights-{CANARY_SHA[:12]}"]
    pod = job["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Never" and job["spec"]["backoffLimit"] >= 1
    assert pod["serviceAccountName"] == "ocr-runtime"
    assert pod["securityContext"]["runAsNonRoot"] is True
    (fetch,) = pod["containers"]
    assert fetch["args"] == [
        "fetch-weights",
        "--source",
        "s3://models/deepseek-ocr-2/2026-03-01",
        "--dest",
        "/models/2026-03-01",
        "--sha256",
        CANARY_SHA,
    ]
    mount = next(m for m in fetch["volumeMounts"] if m["name"] == "weights")
    assert not mount.get("readOnly")  # the only writer of the claim
    claim = next(v for v in pod["volumes"] if v["name"] == "weights")
    assert claim["persistentVolumeClaim"] == {"claimName": f"forms-weights-{CANARY_SHA[:12]}"}
    assert "nvidia.com/gpu" not in str(fetch["resources"]) and "nodeSelector" not in pod
    # Its pods are no runtime pods: the HPA, the PDB and status never count them.
    labels = job["spec"]["template"]["metadata"]["labels"]
    assert "app.kubernetes.io/name" not in labels
    assert labels["app.kubernetes.io/instance"] == "forms"


def test_runtime_pods_mount_the_claim_read_only_and_wait_for_it() -> None:
    deployments = {
        d["metadata"]["labels"]["docparser.io/track"]: d
        for d in of_kind(CACHED.render(), "Deployment")
    }
    for track, sha, version in (
        ("stable", STABLE_SHA, "2026-01-27"),
        ("canary", CANARY_SHA, "2026-03-01"),
    ):
        pod = deployments[track]["spec"]["template"]["spec"]
        volumes = {v["name"]: v for v in pod["volumes"]}
        assert volumes["weights"]["persistentVolumeClaim"] == {
            "claimName": f"forms-weights-{sha[:12]}",
            "readOnly": True,
        }
        (wait,) = pod["initContainers"]
        assert wait["name"] == "wait-weights"
        assert wait["args"][:3] == ["wait-weights", "--dir", f"/models/{version}"]
        assert all(m.get("readOnly") for m in wait["volumeMounts"])
        runtime = pod["containers"][0]
        assert next(m for m in runtime["volumeMounts"] if m["name"] == "weights")["readOnly"]
        env = {e["name"]: e.get("value") for e in runtime["env"]}
        assert env["DOCPARSER_WEIGHTS_SHA256"] == sha  # serve re-verifies the cached copy
        assert runtime["resources"]["requests"]["ephemeral-storage"] == "2Gi"  # /tmp only


@pytest.mark.parametrize("case", [GATEWAY, SERVICE], ids=lambda c: c.id)
def test_no_cache_objects_in_emptydir_mode_or_for_pvc_sources(case: Case) -> None:
    resource = copy.deepcopy(case.resource())
    objects = render_resource(resource)
    assert not of_kind(objects, "PersistentVolumeClaim") and not of_kind(objects, "Job")
    if case is SERVICE:  # pvc:// weights: already a volume, mounted in place in either mode
        resource["spec"]["weightsCache"] = {"mode": "PersistentVolume"}
        assert not of_kind(render_resource(resource), "Job")


def test_a_long_docparser_name_keeps_cache_names_within_63_characters() -> None:
    resource = copy.deepcopy(CACHED.resource())
    resource["metadata"]["name"] = "n" * 56
    for obj in of_kind(render_resource(resource), "Job"):
        assert len(obj["metadata"]["name"]) == 63
        assert obj["metadata"]["name"].endswith(f"-weights-{obj['metadata']['name'][-12:]}")
