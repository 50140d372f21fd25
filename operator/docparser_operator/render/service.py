"""Services: the stable endpoint ``<name>`` plus one per track (``<name>-stable``/``-canary``).

The endpoint Service is what clients and status.endpoint use. It selects only stable pods,
except with ``router: service`` while a Ready canary has a non-zero weight: then it selects
both tracks and the replica split becomes the traffic split. Per-track Services are the
HTTPRoute backends and let operators reach a dark (weight 0) canary directly.
"""

from __future__ import annotations

from docparser_operator import naming
from docparser_operator.labels import TRACK_SHARED, TrackLabel, pod_selector
from docparser_operator.render.meta import object_meta
from docparser_operator.render.plan import Plan, TrackPlan


def _service(plan: Plan, name: str, track: TrackLabel, selector: dict[str, str]) -> dict:
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


def render_endpoint_service(plan: Plan) -> dict:
    track = None if plan.endpoint_selects_canary else "stable"
    selector = pod_selector(plan.name, track)
    return _service(plan, naming.endpoint_service(plan.name), TRACK_SHARED, selector)


def render_track_service(plan: Plan, tp: TrackPlan) -> dict:
    selector = pod_selector(plan.name, tp.track)
    return _service(plan, naming.track_service(plan.name, tp.track), tp.track, selector)
