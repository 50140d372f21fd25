"""The Argo CD health check we ship (charts/docparser-operator/files/argocd-health.lua), run in
gopher-lua as Argo CD runs it, and Flux's kstatus, both on statuses ``status.build_status``
produces: ready -> Current/Healthy, rolling out -> InProgress/Progressing, failed ->
Failed/Degraded, a status older than the spec -> InProgress/Progressing. The two tools agree on
every one (issue 28's table), and nothing is "Progressing forever"."""

from __future__ import annotations

from typing import Any

from docparser_operator.core.plan.problem import Problem
from docparser_operator.core.status.conditions import TrackObservation
from gitopscheck.checker import AGREEING, GitOpsCheck
from test_status import deployment, pod, status


def docparser(generation: int, st: dict[str, Any] | None = None) -> dict[str, Any]:
    meta = {"name": "inv", "namespace": "ocr", "generation": generation}
    obj = {"apiVersion": "docparser.io/v1alpha1", "kind": "DocParser", "metadata": meta}
    return obj | ({"status": st} if st is not None else {})


def judged(check: GitOpsCheck, obj: dict[str, Any]) -> tuple[str, str, str]:
    """(kstatus, Argo CD health, Argo CD message); fails when the two tools disagree."""
    flux = check.kstatus(obj)[0]
    argo, message = check.argocd_health(obj)
    assert AGREEING[flux] == argo, (flux, argo, obj.get("status"))
    return flux, argo, message


def track(state: str, want: int = 1, ready: int = 0) -> TrackObservation:
    return TrackObservation("v1", deployment(want=want, ready=ready), [pod(state)] * want)


def test_ready_is_current_and_healthy(gitops_check: GitOpsCheck) -> None:
    obj = docparser(2, status(track("ready", want=2, ready=2)))
    flux, argo, message = judged(gitops_check, obj)
    assert (flux, argo) == ("Current", "Healthy") and "serving at" in message


def test_a_batch_running_on_the_pool_is_current_and_healthy(gitops_check: GitOpsCheck) -> None:
    """status.batch (issue 35) changes no condition: a pool scaling and pages queued read as a
    DocParser at rest to both tools, as does a pool still starting."""
    busy = {
        "replicas": 3,
        "readyReplicas": 1,
        "batchesInProgress": 2,
        "pagesQueued": 12000,
        "pagesDone": 340,
        "pagesPerMinute": 120.0,
        "etaMinutes": 100,
        "lastScaleTime": "2026-03-02T01:00:00Z",
    }
    obj = docparser(2, status(track("ready", want=2, ready=2)) | {"batch": busy})
    assert judged(gitops_check, obj)[:2] == ("Current", "Healthy")


def test_loading_is_in_progress(gitops_check: GitOpsCheck) -> None:
    flux, argo, message = judged(gitops_check, docparser(2, status(track("loading"))))
    assert (flux, argo) == ("InProgress", "Progressing") and message


def test_failed_weights_are_failed_not_progressing_forever(gitops_check: GitOpsCheck) -> None:
    flux, argo, message = judged(gitops_check, docparser(2, status(track("failed"))))
    assert (flux, argo) == ("Failed", "Degraded") and "weights fetch failed" in message


def test_spec_problem_is_failed_with_its_message(gitops_check: GitOpsCheck) -> None:
    st = status(
        track("ready", ready=1),
        problems=[Problem("InsufficientGPUMemory", "40Gi cannot hold the worst case")],
    )
    flux, argo, message = judged(gitops_check, docparser(2, st))
    assert (flux, argo) == ("Failed", "Degraded") and "40Gi" in message


def test_an_advisory_reason_is_healthy(gitops_check: GitOpsCheck) -> None:
    """Degraded=True but nothing waits on it (core/status/stalls.py): the script keys on Stalled."""
    st = status(
        track("ready", ready=1),
        problems=[Problem("MetricsUnavailable", "no custom metrics API")],
        rolling=[],
    )
    assert judged(gitops_check, docparser(2, st))[:2] == ("Current", "Healthy")


def test_status_older_than_the_spec_is_in_progress(gitops_check: GitOpsCheck) -> None:
    st = status(track("ready", want=2, ready=2))  # written for generation 2
    assert judged(gitops_check, docparser(3, st))[:2] == ("InProgress", "Progressing")
    st = status(track("failed"))  # even a stalled status: it describes an older spec
    assert judged(gitops_check, docparser(3, st))[:2] == ("InProgress", "Progressing")


def test_the_crd_default_status_is_in_progress(gitops_check: GitOpsCheck) -> None:
    """Before the operator's first status, the API server serves the CRD's default status
    (observedGeneration 0): both tools wait, neither calls a fresh object Current."""
    fresh = docparser(1, {"observedGeneration": 0})
    assert judged(gitops_check, fresh)[:2] == ("InProgress", "Progressing")
    # without any status (an API server that did not default it) Argo CD waits too
    assert gitops_check.argocd_health(docparser(1))[0] == "Progressing"
