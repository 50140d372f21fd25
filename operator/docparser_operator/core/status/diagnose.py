"""Precise Degraded reasons from what the cluster already says (pure: objects in, problems out).

A platform engineer should read *why* in ``kubectl get dp`` and Argo CD, not "Pending":

- ``Unschedulable``: the scheduler's own message ("0/3 nodes are available: 3 Insufficient
  nvidia.com/gpu") from a pod's ``PodScheduled=False`` condition, and since when it says so;
- ``CredentialsSecretMissing`` / ``SecretMissing``: the kubelet cannot build a container's
  environment (``CreateContainerConfigError``) because a Secret is absent;
- ``WeightsChecksumMismatch`` / ``WeightsFetchFailed``: the fetch-weights init container
  exited non-zero; its termination message (the last log lines, see the Deployment's
  ``terminationMessagePolicy``) says which;
- ``FailedToLoad``: the runtime container exited; the runtime's own message (``Restarting``
  instead for a pod of the serving revision within its first few restarts: core/status/stalls.py);
- ``RouteNotAccepted``: the Gateway's controller refused the current HTTPRoute for our
  parentRef (``status.parents``), in its words; ``RouteNotJudged``: no controller has answered
  for a while (core/status/route_verdict.py);
- ``MetricsUnavailable``: the HPA cannot read its metric (``ScalingActive=False``);
- ``NodeLost``: a pod's node stopped reporting (the node controller marked the pod not Ready
  while its containers' last word was ready), naming the node.

Only pods of the spec's revisions count: a previous revision failing as it leaves is not the
DocParser's problem.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from typing import Any

from docparser_operator.api import labels, naming
from docparser_operator.api.models import DocParserSpec
from docparser_operator.core.plan.problem import Problem
from docparser_operator.core.status.conditions import tolerated_restart
from docparser_operator.core.status.route_verdict import route_problems, route_verdict

Key = tuple[str, str]
MESSAGE_LIMIT = 300


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MESSAGE_LIMIT else text[: MESSAGE_LIMIT - 3] + "..."


def _terminated(ctr: dict[str, Any]) -> dict[str, Any] | None:
    """The container's failed termination: now, or in its last restart while it is not Ready
    again. A container that failed once (OOM-killed under a burst, say) and serves again is no
    standing problem: its ``lastState`` stays until the next restart and would otherwise hold
    Degraded, and stop a rollout, for as long."""
    wheres = ("state",) if ctr.get("ready") else ("state", "lastState")
    for where in wheres:
        term = (ctr.get(where) or {}).get("terminated")
        if isinstance(term, dict) and term.get("exitCode", 0) != 0:
            return term
    return None


def _memory_limit(pod: dict[str, Any], container: str) -> str:
    for ctr in (pod.get("spec") or {}).get("containers") or []:
        if ctr.get("name") == container:
            return str(((ctr.get("resources") or {}).get("limits") or {}).get("memory", "none"))
    return "none"


def _node_lost(pod: dict[str, Any]) -> str | None:
    """The pod's node stopped reporting: the node controller set the pod's Ready condition to
    False while every container still says ready (their last word, from the kubelet that is
    gone). Read from the pod alone, so an operator limited with --namespace (no Node reads)
    reports it too; the capacity stays named until the pod is replaced or its node is back."""
    status = pod.get("status") or {}
    ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
    containers = status.get("containerStatuses") or []
    if ready is None or ready.get("status") != "False" or not containers:
        return None
    if not all(c.get("ready") for c in containers):
        return None
    node = (pod.get("spec") or {}).get("nodeName", "?")
    name = pod["metadata"].get("name", "?")
    return _short(f"node {node} stopped reporting: pod {name} is no longer Ready behind traffic")


def _pod_problems(pod: dict[str, Any], spec: DocParserSpec, serving: bool) -> list[Problem]:
    name = pod["metadata"].get("name", "?")
    status = pod.get("status") or {}
    found: list[Problem] = []
    for cond in status.get("conditions") or []:
        if (
            cond.get("type") == "PodScheduled"
            and cond.get("status") == "False"
            and cond.get("reason") == "Unschedulable"
        ):
            text = _short(f"pod {name}: {cond.get('message', '')}")
            found.append(Problem("Unschedulable", text, since=cond.get("lastTransitionTime")))
    lost = _node_lost(pod)
    if lost:
        found.append(Problem("NodeLost", lost))
    credentials = {
        ref.name
        for ref in (
            spec.weights.credentials_secret_ref if spec.weights else None,
            spec.canary_weights.credentials_secret_ref if spec.canary_weights else None,
        )
        if ref is not None
    }
    containers = (status.get("initContainerStatuses") or []) + (
        status.get("containerStatuses") or []
    )
    for ctr in containers:
        waiting = (ctr.get("state") or {}).get("waiting") or {}
        message = waiting.get("message") or ""
        if waiting.get("reason") == "CreateContainerConfigError" and "secret" in message.lower():
            named = any(f'"{secret}"' in message for secret in credentials)
            reason = "CredentialsSecretMissing" if named else "SecretMissing"
            found.append(Problem(reason, _short(f"pod {name}: {message}")))
        term = _terminated(ctr)
        if term is None:
            continue
        said = term.get("message") or term.get("reason") or f"exit {term.get('exitCode')}"
        if term.get("reason") == "OOMKilled":  # its message is only the log's last lines
            limit = _memory_limit(pod, str(ctr.get("name")))
            said = f"OOMKilled at its memory limit ({limit}): raise spec.resources.memory"
        if ctr.get("name") == naming.FETCH_CONTAINER:
            reason = (
                "WeightsChecksumMismatch" if "sha256 mismatch" in said else "WeightsFetchFailed"
            )
            found.append(Problem(reason, _short(f"pod {name}: {said}")))
        elif ctr.get("name") == naming.RUNTIME_CONTAINER:
            # serve verifies mounted weights itself (pvc://, the weights cache): a digest
            # mismatch there is the same finding as the fetcher's.
            mismatch = "weights_error" in said and "sha256" in said
            reason = "WeightsChecksumMismatch" if mismatch else "FailedToLoad"
            if reason == "FailedToLoad" and serving and tolerated_restart(ctr):
                reason = "Restarting"  # core/status/stalls.py: advisory until a crash loop
                said = f"{said} (restart {ctr.get('restartCount') or 0} after it served)"
            found.append(Problem(reason, _short(f"pod {name}: {said}")))
    return found


def _hpa_problems(hpa: dict[str, Any]) -> list[Problem]:
    """``ScalingActive=False`` but ``ScalingDisabled``: the scale target's size is 0 (someone
    scaled the DocParser to 0 through /scale), which says nothing of the metric."""
    return [
        Problem(
            "MetricsUnavailable", _short(f"{cond.get('reason', '')}: {cond.get('message', '')}")
        )
        for cond in (hpa.get("status") or {}).get("conditions") or []
        if cond.get("type") == "ScalingActive"
        and cond.get("status") == "False"
        and cond.get("reason") != "ScalingDisabled"
    ]


def diagnose(
    spec: DocParserSpec,
    revisions: set[str],
    children: dict[Key, dict[str, Any]],
    pods: list[dict[str, Any]],
    serving: str | None = None,
    now: datetime.datetime | None = None,
    front: Sequence[dict[str, Any]] = (),
) -> list[Problem]:
    """Problems the cluster reports for the spec's revisions and traffic objects, one per
    reason (the first pod's message stands for the others; the earliest ``since``).
    ``serving``: the revision serving as stable, whose runtime restarts are tolerated. ``now``
    dates the route's wait for a verdict (without it, no ``RouteNotJudged``). ``front``: the
    front's pods (replicas.min 0), read like a serving revision's (a Secret it misses, a
    crash loop)."""
    found: list[Problem] = []
    for pod in pods:
        revision = (pod["metadata"].get("labels") or {}).get(labels.LABEL_REVISION)
        if revision in revisions and not pod["metadata"].get("deletionTimestamp"):
            found += _pod_problems(pod, spec, revision == serving)
    for pod in front:
        if not pod["metadata"].get("deletionTimestamp"):
            found += _pod_problems(pod, spec, True)
    for (kind, _), obj in sorted(children.items()):
        if kind == "HTTPRoute" and spec.traffic.gateway_ref is not None:
            verdict = route_verdict(obj, spec.traffic.gateway_ref)
            found += route_problems(verdict, obj, now)
        elif kind == "HorizontalPodAutoscaler":
            found += _hpa_problems(obj)
    unique: dict[str, Problem] = {}
    for problem in found:
        first = unique.setdefault(problem.reason, problem)
        if problem.since and first.since and problem.since < first.since:
            unique[problem.reason] = Problem(first.reason, first.message, problem.since)
    return list(unique.values())
