"""What the Gateway's controller said about our HTTPRoute (pure: the route in, a verdict out).

WHY the operator waits for it: an HTTPRoute is a request to a controller, not a fact. Until
the controller has judged the route's current generation (an entry in ``status.parents`` for
our parentRef whose ``Accepted`` condition carries that ``observedGeneration``), the data
plane may still send traffic by the previous weights. So (Envoy Gateway taught us each point,
docs/architecture.md):

- ``Ready`` waits for the first acceptance of our parent (pods Ready behind a route nobody
  accepted serve no one through the Gateway), and is False while the parent refuses it;
- a rollout scales a revision down or removes it only once the controller has observed the
  route generation that stopped sending it traffic (core/decide.py holds those actions);
- only entries for the parentRef we render count: a status entry of an earlier parent (a
  controller that keeps it, another implementation's) must not make us Degraded;
- a parentRef to a Gateway that does not exist, or whose class no controller runs, gets no
  status from anyone: after ``JUDGE_GRACE_S`` the operator says so itself (``RouteNotJudged``)
  and keeps waiting; it never scales down on a verdict it never got.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any

from docparser_operator.api import naming
from docparser_operator.api.models import GatewayRef
from docparser_operator.core.plan.problem import Problem

JUDGE_GRACE_S = 30.0
MESSAGE_LIMIT = 300


@dataclass(frozen=True)
class RouteVerdict:
    """The controller's word on our parent, for the route as it is live now."""

    parent: str  # "namespace/name" or "namespace/name/section", for messages
    generation: int
    accepted_ever: bool  # an entry for our parent says Accepted=True (of any generation)
    judged: bool  # the current generation has a verdict (Accepted with its observedGeneration)
    refusal: str | None  # "Reason: message" when the current generation is refused

    @property
    def waiting(self) -> str | None:
        """Why traffic may not yet follow this generation (None once it is judged)."""
        if self.judged:
            return None
        return (
            f"HTTPRoute generation {self.generation}: awaiting the verdict of Gateway "
            f"{self.parent}'s controller"
        )


def _parent_name(gateway: GatewayRef, namespace: str) -> str:
    parts = [gateway.namespace or namespace, gateway.name]
    if gateway.section_name:
        parts.append(gateway.section_name)
    return "/".join(parts)


def _ours(ref: dict[str, Any], gateway: GatewayRef, namespace: str) -> bool:
    return (
        ref.get("group", "gateway.networking.k8s.io") == "gateway.networking.k8s.io"
        and ref.get("kind", "Gateway") == "Gateway"
        and ref.get("name") == gateway.name
        and (ref.get("namespace") or namespace) == (gateway.namespace or namespace)
        and ref.get("sectionName") == gateway.section_name
    )


def route_verdict(route: dict[str, Any] | None, gateway: GatewayRef) -> RouteVerdict | None:
    """The verdict on `route` (None: no route yet, nothing to judge)."""
    if route is None:
        return None
    namespace = route["metadata"].get("namespace", "")
    generation = int(route["metadata"].get("generation", 1))
    accepted_ever = judged = False
    refusal = None
    for entry in (route.get("status") or {}).get("parents") or []:
        if not _ours(entry.get("parentRef") or {}, gateway, namespace):
            continue
        for cond in entry.get("conditions") or []:
            if cond.get("type") != "Accepted":
                continue
            current = cond.get("observedGeneration") == generation
            if cond.get("status") == "True":
                accepted_ever = True
                judged = judged or current
            elif current:
                judged = True
                refusal = f"{cond.get('reason', '')}: {cond.get('message', '')}"
    return RouteVerdict(
        _parent_name(gateway, namespace), generation, accepted_ever, judged, refusal
    )


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MESSAGE_LIMIT else text[: MESSAGE_LIMIT - 3] + "..."


def route_problems(
    verdict: RouteVerdict | None, route: dict[str, Any] | None, now: datetime.datetime | None
) -> list[Problem]:
    """``RouteNotAccepted`` in the controller's words, or ``RouteNotJudged`` once no one has
    answered for ``JUDGE_GRACE_S`` since the operator last wrote the route (not without
    ``now``)."""
    if verdict is None or route is None:
        return []
    if verdict.refusal is not None:
        return [Problem("RouteNotAccepted", _short(f"Gateway {verdict.parent}: {verdict.refusal}"))]
    if verdict.judged or now is None:
        return []
    written = applied_at(route) or _timestamp(route["metadata"].get("creationTimestamp"))
    if written is None or (now - written).total_seconds() < JUDGE_GRACE_S:
        return []
    # The time it was written, not how long ago: the message stays the same pass after pass, so
    # a route nobody judges costs no status write and no new Event per resync.
    since = written.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return [
        Problem(
            "RouteNotJudged",
            f"no Gateway controller has reported on HTTPRoute {route['metadata']['name']} "
            f"generation {verdict.generation} since {since}: Gateway {verdict.parent} may not "
            "exist, or no controller runs for its class; every revision is kept until one does",
            since=since,
        )
    ]


def applied_at(route: dict[str, Any]) -> datetime.datetime | None:
    """When the operator last applied the route (its managedFields entry)."""
    times = [
        _timestamp(entry.get("time"))
        for entry in route["metadata"].get("managedFields") or []
        if entry.get("manager") == naming.FIELD_MANAGER and entry.get("operation") == "Apply"
        and not entry.get("subresource")
    ]  # fmt: skip
    known = [t for t in times if t is not None]
    return max(known) if known else None


def _timestamp(value: Any) -> datetime.datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
