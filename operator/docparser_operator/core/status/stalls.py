"""Which Degraded reasons stall a DocParser: the one table both GitOps tools' verdicts follow.

Flux reads kstatus (``Reconciling=True`` -> InProgress, else ``Stalled=True`` -> Failed, else the
``Ready`` condition) and the chart's Argo CD health script reads the same conditions in the same
order. So each reason is classed once, here, and conditions.py derives both conditions from it:

- ``stalled``: the operator cannot make progress until someone acts (a spec fix, a Secret, RBAC,
  a Gateway that admits the route): ``Stalled=True``, ``Reconciling=False``, so Flux says Failed
  with the cause within one reconcile instead of waiting out its timeout;
- ``progressing``: the cluster is still working on it (a lost node's pods being replaced):
  ``Reconciling=True``, ``Stalled=False``. A drain whose replacements are coming is no problem
  at all but a wait (``Progressing`` reason ``Draining``, core/plan/drain.py);
- ``advisory``: worth a Degraded condition (and ``kubectl get dp``), but the DocParser serves
  and nothing it was asked to do waits on it: neither condition changes.

``Unschedulable`` depends on time: a cluster autoscaler may be adding a node, so for
``UNSCHEDULABLE_GRACE_S`` after the scheduler first said no it is progressing, then stalled;
either only while a rollout waits on the pod (pods an autoscaler adds to a serving revision are
advisory: the revision serves at its size). A reason missing from the table stalls: a wrong
Failed names its cause, a wrong InProgress hides it for the length of a timeout.

docs/crd.md lists the same table (tests/operator/core/status/test_stalls.py holds the two together).
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Literal

Kind = Literal["stalled", "progressing", "advisory"]
UNSCHEDULABLE_GRACE_S = 300
# A container of the serving revision that failed after it served restarts up to this many times
# before it is a crash loop (FailedToLoad, stalled); until then it is Restarting (advisory).
RESTARTS_TOLERATED = 3


@dataclass(frozen=True)
class ReasonClass:
    kind: Kind
    why: str
    grace_s: int = 0  # progressing this long after the cluster first said it, then `kind`


REASONS: dict[str, ReasonClass] = {
    "SpecInvalid": ReasonClass("stalled", "the spec must change"),
    "InsufficientGPUMemory": ReasonClass("stalled", "the spec must change (batch, tier, GPU)"),
    "MissingAPI": ReasonClass("stalled", "a CRD (Gateway API) must be installed"),
    "ChildRefused": ReasonClass(
        "stalled", "a quota, an IP range, an admission policy or a 422 refuses a child"
    ),
    "ChildConflict": ReasonClass("stalled", "someone else's object holds a child's name"),
    "Forbidden": ReasonClass("stalled", "the operator's RBAC must grant a verb"),
    "CredentialsSecretMissing": ReasonClass("stalled", "the weights credentials Secret is absent"),
    "SecretMissing": ReasonClass("stalled", "a Secret the pods need is absent"),
    "WeightsChecksumMismatch": ReasonClass("stalled", "the weights or their sha256 must change"),
    "WeightsFetchFailed": ReasonClass("stalled", "the weights source refuses or is unreachable"),
    "WeightsCacheFillFailed": ReasonClass("stalled", "the cache fill Job failed"),
    "FailedToLoad": ReasonClass(
        "stalled", "the runtime exits before it serves (or crash-loops), or a deadline passed"
    ),
    "RouteNotAccepted": ReasonClass("stalled", "the Gateway refuses the HTTPRoute"),
    "RouteNotJudged": ReasonClass(
        "stalled", "no Gateway controller answers for the route's parent (no such Gateway?)"
    ),
    "SourceNotAllowed": ReasonClass(
        "stalled",
        "the analysis' Prometheus URL or golden URI is outside what the operator may reach",
    ),
    "CanaryFailed": ReasonClass("stalled", "the analysis rolled the canary back"),
    "GoldenRegression": ReasonClass("stalled", "the golden documents read worse on the canary"),
    "ShadowRegression": ReasonClass("stalled", "mirrored requests read worse on the canary"),
    "Unschedulable": ReasonClass(
        "stalled", "no node fits the pods a rollout waits for", grace_s=UNSCHEDULABLE_GRACE_S
    ),
    "NodeLost": ReasonClass("progressing", "pods of a lost node are being replaced"),
    "DrainBlocked": ReasonClass(
        "advisory",
        "a drain's eviction is held because no replacement can start, or went ahead at its "
        "deadline: it serves meanwhile",
    ),
    "MetricsUnavailable": ReasonClass("advisory", "the autoscaler cannot read its metric"),
    "Restarting": ReasonClass(
        "advisory", "a serving pod restarted after it served (fewer restarts than a crash loop)"
    ),
    "Idle": ReasonClass("advisory", "scaled to zero while idle, by design"),
    "ActivityUnknown": ReasonClass(
        "advisory", "the front's or the pods' /metrics cannot be read: no sleep, no wake"
    ),
}
UNKNOWN = ReasonClass("stalled", "not classed: treated as stalled")


def _elapsed(since: str, now: str) -> float:
    def parse(value: str) -> datetime.datetime:
        return datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))

    return (parse(now) - parse(since)).total_seconds()


def classify(reason: str, *, since: str | None, now: str, rolling: bool) -> Kind:
    """The kind of one problem now. ``since``: when the cluster first reported it (for a reason
    with a grace period); ``rolling``: a spec-driven change is under way."""
    entry = REASONS.get(reason, UNKNOWN)
    if entry.grace_s:
        if not rolling:
            return "advisory"
        if since is None or _elapsed(since, now) < entry.grace_s:
            return "progressing"
    return entry.kind
