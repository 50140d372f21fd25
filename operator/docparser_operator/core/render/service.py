"""Services: the endpoint ``<name>``, the canary role's ``<name>-canary``, (router gateway)
one backend Service per revision that the HTTPRoute weights, ``<name>-<revision>``, and for a
DocParser that scales to zero the front's ``<name>-front`` and ``<name>-serving`` (every
runtime pod: where the front hands held requests over).

The endpoint Service is what clients and status.endpoint use. A Service selects by label
equality, so it either spans every revision of the DocParser (a rollout between stable
revisions, or ``router: service`` with a live canary weight: Ready pods then share the traffic)
or pins exactly one revision (the serving stable one while a dark or leaving canary has pods).
The rollout planner decides which (``Rollout.endpoint_revision``). Services only send traffic
to Ready pods, so a revision still loading gets none. With ``replicas.min: 0`` and no Ready
runtime pod behind traffic (at zero, waking) the endpoint selects the front instead
(``Target.to_front``), and goes back to the runtime pods in the pass that finds one Ready.
"""

from __future__ import annotations

from typing import Any

from docparser_operator.api import naming
from docparser_operator.api.labels import (
    LABEL_REVISION,
    TRACK_SHARED,
    TrackLabel,
    front_selector,
    pod_selector,
)
from docparser_operator.core.plan.target import Target
from docparser_operator.core.render.meta import object_meta


def _service(
    plan: Target, name: str, track: TrackLabel, selector: dict[str, str]
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": object_meta(plan, name, track),
        "spec": {
            "type": "ClusterIP",
            "selector": selector,
            "ports": [
                {
                    "name": naming.HTTP_PORT_NAME,
                    "port": naming.HTTP_PORT,
                    "targetPort": naming.HTTP_PORT_NAME,
                    "protocol": "TCP",
                    "appProtocol": "http",
                }
            ],
        },
    }


def render_endpoint_service(plan: Target) -> dict[str, Any]:
    if plan.to_front:
        selector = front_selector(plan.name)
    else:
        selector = pod_selector(plan.name, plan.rollout.endpoint_revision)
    return _service(plan, naming.endpoint_service(plan.name), TRACK_SHARED, selector)


def render_front_service(plan: Target) -> dict[str, Any]:
    """``<name>-front``: the front's pods (the HTTPRoute's backend while at zero)."""
    return _service(plan, naming.front(plan.name), TRACK_SHARED, front_selector(plan.name))


def render_serving_service(plan: Target) -> dict[str, Any]:
    """``<name>-serving``: every runtime pod, whatever the endpoint selects: the front's
    backend (DOCPARSER_FRONT_BACKEND_URL), whose ``/readyz`` tells it when to hand over."""
    return _service(plan, naming.serving_service(plan.name), TRACK_SHARED, pod_selector(plan.name))


def render_canary_service(plan: Target, revision: str) -> dict[str, Any]:
    selector = pod_selector(plan.name, revision)
    return _service(plan, naming.canary_service(plan.name), "canary", selector)


def render_revision_service(plan: Target, revision: str) -> dict[str, Any]:
    """The HTTPRoute backend of one revision (router gateway)."""
    step = plan.rollout.get(revision)
    service = _service(
        plan,
        naming.revision_name(plan.name, revision),
        step.role if step is not None else "stable",
        pod_selector(plan.name, revision),
    )
    service["metadata"]["labels"][LABEL_REVISION] = revision
    return service
