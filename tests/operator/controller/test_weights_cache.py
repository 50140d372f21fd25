"""The weights cache on a real API server with its controllers: one claim and one fill Job per
weights sha256, WeightsCached following the Job, rollouts that reuse a filled claim, the previous
stable's claim kept for a rollback and older ones deleted. The Job's pod is played here (no
kubelet): it succeeds as fetch-weights would, and the real Job controller completes the Job."""

from __future__ import annotations

from typing import Any

import pytest
from docparser_operator.api.kinds import KNOWN_KINDS
from docparser_operator.api.models import DocParserSpec
from docparser_operator.cli.main import render_resource
from docparser_operator.core.status.weights_cache_status import weights_cache_verdict
from dp_helpers import (
    SHA_A,
    SHA_B,
    SHA_C,
    condition,
    create,
    decide_on,
    docparser,
    owner,
    set_spec,
    spec_of,
)
from kube_cluster import Cluster, wait_for
from kubelet_sim import Kubelet
from operator_runner import running_operator

PVC, JOB, POD, DEPLOY = (
    KNOWN_KINDS[k] for k in ("PersistentVolumeClaim", "Job", "Pod", "Deployment")
)
CACHE = {"mode": "PersistentVolume", "storageClassName": "standard", "volumeSize": "1Gi"}
NOW = "2026-01-01T00:00:00Z"


def cache_name(name: str, sha: str) -> str:
    return f"{name}-weights-{sha[:12]}"


def weights(version: str, sha: str) -> dict[str, Any]:
    return {"uri": f"s3://models/ocr/{version}", "version": version, "sha256": sha}


def finish_fill(cluster: Cluster, job: str) -> None:
    """Play the kubelet for the fill Job's pod: fetch-weights exits 0."""
    pod = wait_for(f"pod of {job}", lambda: next(iter(cluster.list(POD, f"job-name={job}")), None))
    container = pod["spec"]["containers"][0]
    cluster.client.patch_status(
        POD,
        cluster.namespace,
        pod["metadata"]["name"],
        {
            "phase": "Succeeded",
            "conditions": [{"type": "Ready", "status": "False", "lastTransitionTime": NOW}],
            "containerStatuses": [
                {
                    "name": container["name"],
                    "image": container["image"],
                    "imageID": "",
                    "ready": False,
                    "restartCount": 0,
                    "state": {
                        "terminated": {
                            "exitCode": 0,
                            "reason": "Completed",
                            "startedAt": NOW,
                            "finishedAt": NOW,
                        }
                    },
                }
            ],
        },
    )


def cached(cluster: Cluster, name: str) -> dict[str, Any]:
    return condition(cluster, name, "WeightsCached")


@pytest.mark.realcluster
def test_cache_fills_once_serves_rollouts_and_keeps_only_what_a_rollback_needs(
    real_cluster: Cluster,
) -> None:
    """The real API server runs the Job controller (the emulator has none)."""
    cluster = real_cluster
    with running_operator(cluster):
        _walk_versions(cluster)


def _walk_versions(cluster: Cluster) -> None:
    v1, v2, v3 = ("v1", SHA_A), ("v2", SHA_B), ("v3", SHA_C)
    create(cluster, docparser("wc", weights=weights(*v1), weightsCache=CACHE))
    claim = wait_for("v1 claim", lambda: cluster.get(PVC, cache_name("wc", SHA_A)))
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    assert claim["spec"]["storageClassName"] == "standard"
    job = wait_for("v1 fill job", lambda: cluster.get(JOB, cache_name("wc", SHA_A)))
    assert job["spec"]["template"]["spec"]["containers"][0]["args"][:3] == [
        "fetch-weights",
        "--source",
        "s3://models/ocr/v1",
    ]
    filling = wait_for("filling", lambda: cached(cluster, "wc").get("reason") == "Filling")
    assert filling
    assert cached(cluster, "wc")["status"] == "False"
    dep = wait_for("v1 deployment", lambda: next(iter(cluster.list(DEPLOY)), None))
    volumes = {v["name"]: v for v in dep["spec"]["template"]["spec"]["volumes"]}
    assert volumes["weights"]["persistentVolumeClaim"] == {
        "claimName": cache_name("wc", SHA_A),
        "readOnly": True,
    }

    finish_fill(cluster, cache_name("wc", SHA_A))
    done = wait_for("cached", lambda: cached(cluster, "wc").get("status") == "True")
    assert done
    assert cached(cluster, "wc")["reason"] == "Cached"
    assert condition(cluster, "wc", "Degraded")["status"] == "False"

    with Kubelet(cluster, ready_after=0.2):
        for version, sha in (v2, v3):
            spec = spec_of(cluster, "wc")
            spec["weights"] = weights(version, sha)
            set_spec(cluster, "wc", spec)
            wait_for(f"{version} fill job", lambda sha=sha: cluster.get(JOB, cache_name("wc", sha)))
            finish_fill(cluster, cache_name("wc", sha))
            wait_for(
                f"{version} rolled out",
                lambda version=version: (
                    condition(cluster, "wc", "Progressing").get("status") == "False"
                    and condition(cluster, "wc", "Ready").get("status") == "True"
                    and cached(cluster, "wc").get("status") == "True"
                    and (cluster.get(DOCPARSER_REF, "wc")["status"].get("stable") or {}).get(
                        "version"
                    )
                    == version
                ),
                timeout=60,
            )

    # v3 serves, v2 stays for a rollback (the previous stable, at 0 pods); v1 is gone.
    def cache_objects() -> set[str]:
        return {o["metadata"]["name"] for o in cluster.list(PVC)} | {
            o["metadata"]["name"] for o in cluster.list(JOB)
        }

    want = {cache_name("wc", SHA_B), cache_name("wc", SHA_C)}
    wait_for("v1 pruned", lambda: cache_objects() == want or None, timeout=30)


def test_fill_failure_names_the_fetch_error() -> None:
    """Pure: a failed fill Job is WeightsCached False / FillFailed and a Degraded problem
    quoting the pod's termination message (what fetch-weights printed)."""
    spec = DocParserSpec.model_validate(
        docparser("wc", weights=weights("v1", SHA_A), weightsCache=CACHE)["spec"]
    )
    name = cache_name("wc", SHA_A)
    job = {"status": {"conditions": [{"type": "Failed", "status": "True", "message": "backoff"}]}}
    pod = {
        "metadata": {"labels": {"batch.kubernetes.io/job-name": name}},
        "status": {
            "containerStatuses": [
                {
                    "state": {
                        "terminated": {
                            "message": "fetch-weights: weights_error: sha256 mismatch for a.bin"
                        }
                    }
                }
            ]
        },
    }
    verdict = weights_cache_verdict(spec, "wc", [spec.weights], {name: job}, [pod])
    assert (verdict.cached, verdict.reason) == (False, "FillFailed")
    assert "sha256 mismatch for a.bin" in verdict.message
    assert verdict.problem is not None and verdict.problem.reason == "WeightsCacheFillFailed"
    running = weights_cache_verdict(spec, "wc", [spec.weights], {}, [])
    assert running.reason == "Filling" and not running.cached
    plain = spec.model_copy(
        update={"weights_cache": spec.weights_cache.model_copy(update={"mode": "EmptyDir"})}
    )
    assert weights_cache_verdict(plain, "wc", [], {}, []).reason == "Disabled"


DOCPARSER_REF = KNOWN_KINDS["DocParser"]


def test_a_deleted_claim_takes_its_fill_job_along() -> None:
    """Pure: a claim deleted (to refill it, or by mistake) leaves a Job whose success speaks
    of a volume that is gone: the pass recreates the claim and deletes that Job, so the next
    pass fills the new claim instead of pods waiting on an empty one."""
    from docparser_operator.core.plan.children import Observed, prepare

    resource = docparser("wc", weights=weights("v1", SHA_A), weightsCache=CACHE)
    resource["metadata"].update(namespace="ocr", uid="uid-wc", generation=1)
    name = cache_name("wc", SHA_A)
    (job,) = [o for o in prepare(render_resource(resource), owner(resource)) if o["kind"] == "Job"]
    job["metadata"]["uid"] = "uid-job"
    decision = decide_on(resource, Observed({("Job", name): job}, []), previous_weight=0)
    verbs = {(a.verb, a.key) for a in decision.actions}
    assert ("apply", ("PersistentVolumeClaim", name)) in verbs
    assert ("prune", ("Job", name)) in verbs
    # With its claim there, a live Job is left alone (Jobs are immutable).
    children = prepare(render_resource(resource), owner(resource))
    claim = next(o for o in children if o["kind"] == "PersistentVolumeClaim")
    both = Observed({("Job", name): job, ("PersistentVolumeClaim", name): claim}, [])
    keys = {a.key for a in decide_on(resource, both, previous_weight=0).actions}
    assert ("Job", name) not in keys
