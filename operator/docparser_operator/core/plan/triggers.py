"""What of a child's change is worth a reconcile (pure): the fields status is built from.

Our own metadata-only writes (labels, annotations) and the kubelet's heartbeats change
nothing here, so they trigger no pass.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

OBSERVED = "observedGeneration"


def deployment_signature(body: Mapping[str, Any]) -> tuple[Any, ...]:
    """What a watched child's change may alter in status: a Deployment's rollout, a Job's
    end, an HTTPRoute's verdicts (each parent's conditions with their observedGeneration)."""
    st = body.get("status") or {}
    if body.get("kind") == "HTTPRoute":
        return (
            (body.get("metadata") or {}).get("generation"),
            tuple(
                (
                    str(p.get("parentRef")),
                    tuple(
                        (c.get("type"), c.get("status"), c.get("reason"), c.get(OBSERVED))
                        for c in p.get("conditions") or []
                    ),
                )
                for p in st.get("parents") or []
            ),
        )
    return (
        (body.get("metadata") or {}).get("generation"),
        st.get("observedGeneration"),
        st.get("replicas"),
        st.get("readyReplicas"),
        st.get("updatedReplicas"),
        st.get("availableReplicas"),
        tuple(
            (c.get("type"), c.get("status"), c.get("reason")) for c in st.get("conditions") or []
        ),
    )


def pod_signature(body: Mapping[str, Any]) -> tuple[Any, ...]:
    """What status reports of a pod: phase, conditions, each container's state and reason; and
    what a drain plans by (core/plan/drain.py): its node, and whether it is terminating (an evicted
    pod, or one on a dead node, whose status may never change again)."""
    st = body.get("status") or {}

    def containers(key: str) -> tuple[Any, ...]:
        out = []
        for ctr in st.get(key) or []:
            state = ctr.get("state") or {}
            kind = next(iter(state), "")
            out.append(
                (ctr.get("name"), ctr.get("ready"), kind, (state.get(kind) or {}).get("reason"))
            )
        return tuple(out)

    return (
        st.get("phase"),
        tuple(
            (c.get("type"), c.get("status"), c.get("reason")) for c in st.get("conditions") or []
        ),
        containers("initContainerStatuses"),
        containers("containerStatuses"),
        (body.get("spec") or {}).get("nodeName"),
        bool((body.get("metadata") or {}).get("deletionTimestamp")),
    )
