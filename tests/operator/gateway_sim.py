"""A background stand-in for a Gateway API controller that accepts every route.

The operator waits for the Gateway's controller to judge each HTTPRoute generation before it
calls a gateway-routed DocParser Ready or scales down what a route stopped sending traffic to
(core/route_verdict.py). No backend of the operator suite runs such a controller (the local
cluster's e2e scenarios run the real Envoy Gateway), so ``GatewayController`` plays it for one
namespace: every route's parents get ``Accepted=True`` and ``ResolvedRefs=True`` with the
route's current ``observedGeneration``, ``delay`` seconds after that generation first
appears, through the status subresource, as a real controller writes it.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from docparser_operator.api.kinds import KNOWN_KINDS
from kube_cluster import Cluster

ROUTE = KNOWN_KINDS["HTTPRoute"]
CONTROLLER = "example.com/test-gateway-controller"


class GatewayController:
    def __init__(self, cluster: Cluster, *, delay: float = 0.2, interval: float = 0.1) -> None:
        self.cluster, self.delay, self.interval = cluster, delay, interval
        self._seen: dict[tuple[str, int], float] = {}  # (route uid, generation) -> first seen
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="gateway-sim", daemon=True)
        self.errors: list[str] = []
        self.judged = 0

    def __enter__(self) -> GatewayController:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.tick()
            except Exception as exc:  # a racing delete; the next tick sees the new state
                self.errors.append(repr(exc))
            self._stop.wait(self.interval)

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
