"""A background stand-in for a Gateway API controller that accepts every route.

The operator waits for the Gateway's controller to judge each HTTPRoute generation before it
calls a gateway-routed DocParser Ready or scales down what a route stopped sending traffic to
(core/status/route_verdict.py). No backend of the operator suite runs such a controller (the local
cluster's e2e scenarios run the real Envoy Gateway), so ``GatewayController`` plays it for one
namespace: every route's parents get ``Accepted=True`` and ``ResolvedRefs=True`` with the
route's current ``observedGeneration``, ``delay`` seconds after that generation first
appears, through the status subresource, as a real controller writes it.
"""

from __future__ import annotations

import time
from typing import Any

from docparser_operator.api.kinds import KNOWN_KINDS
from kube_cluster import Cluster
from ticker import Ticker

ROUTE = KNOWN_KINDS["HTTPRoute"]
CONTROLLER = "example.com/test-gateway-controller"


class GatewayController(Ticker):
    def __init__(self, cluster: Cluster, *, delay: float = 0.2, interval: float = 0.1) -> None:
        super().__init__("gateway-sim", interval)
        self.cluster, self.delay = cluster, delay
        self._seen: dict[tuple[str, int], float] = {}  # (route uid, generation) -> first seen
        self.judged = 0

    def tick(self) -> None:
        for route in self.cluster.list(ROUTE, "app.kubernetes.io/managed-by=docparser-operator"):
            meta = route["metadata"]
            generation = int(meta.get("generation", 1))
            first = self._seen.setdefault((meta["uid"], generation), time.monotonic())
            if time.monotonic() - first < self.delay or self._judged(route, generation):
                continue
            parents = [
                {
                    "parentRef": ref,
                    "controllerName": CONTROLLER,
                    "conditions": [
                        _condition(kind, generation) for kind in ("Accepted", "ResolvedRefs")
                    ],
                }
                for ref in route["spec"].get("parentRefs") or []
            ]
            self.cluster.client.patch_status(
                ROUTE, self.cluster.namespace, meta["name"], {"parents": parents}
            )
            self.judged += 1

    @staticmethod
    def _judged(route: dict[str, Any], generation: int) -> bool:
        parents = (route.get("status") or {}).get("parents") or []
        return bool(parents) and all(
            any(c.get("observedGeneration") == generation for c in p.get("conditions") or [])
            for p in parents
        )


def _condition(kind: str, generation: int) -> dict[str, Any]:
    return {
        "type": kind,
        "status": "True",
        "reason": kind,
        "message": f"{kind} by the test controller",
        "observedGeneration": generation,
        "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
