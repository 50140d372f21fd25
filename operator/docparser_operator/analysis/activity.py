"""What a DocParser that scales to zero is doing, read from ``/metrics`` (pure: text in,
numbers out): the front's held requests and queued jobs, the runtime pods' requests in flight
and running jobs, and every pod's count of client API requests (core/plan/idle.py decides on it).

Why the pods' and the front's own ``/metrics``, not Prometheus or the API server: the
operator must see a job queued at the front within seconds, with no Prometheus in the
cluster, and the front never calls the API server. The names are the contract with the
runtime (the front: ``docparser_front_*``; the pods: ``docparser_requests_total`` on
``/v1/`` routes, ``docparser_outstanding_requests``, ``docparser_jobs_queued``,
``docparser_jobs_running``, ``docparser_last_request_timestamp_seconds``; the front's
``docparser_front_capacity_wanted_timestamp_seconds``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

# series -> the field it feeds (a gauge of the front or of a runtime pod)
_GAUGES = {
    "docparser_front_held_requests": "held",
    "docparser_front_queued_jobs": "queued",
    "docparser_jobs_queued": "queued",
    "docparser_jobs_running": "running",
    "docparser_outstanding_requests": "in_flight",
    "docparser_front_last_request_timestamp_seconds": "last_request",
    "docparser_last_request_timestamp_seconds": "last_request",
    "docparser_front_capacity_wanted_timestamp_seconds": "wanted",
}


@dataclass(frozen=True)
class PodReading:
    """One pod's ``/metrics`` (the front's or a runtime pod's), reduced."""

    requests: float = 0.0  # client API requests since the pod started (a counter)
    held: float = 0.0  # synchronous requests the front holds
    queued: float = 0.0  # jobs waiting in the DocParser's queue (Redis: every pod sees it)
    running: float = 0.0  # jobs running on this pod
    in_flight: float = 0.0  # requests this pod is answering
    last_request: float = 0.0  # unix time of its last client request (0: none or unknown)
    wanted: float = 0.0  # unix time a parse last found no ready pod at the front (0: never)


def parse(text: str) -> PodReading:
    """One pod's reading from its exposition text; raises ValueError on a malformed one."""
    values: dict[str, float] = {}
    requests = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            client_route = sample.labels.get("route", "").startswith("/v1/")
            if sample.name == "docparser_front_requests_total" or (
                sample.name == "docparser_requests_total" and client_route
            ):
                requests += sample.value
            elif sample.name in _GAUGES:
                field = _GAUGES[sample.name]
                values[field] = max(values.get(field, 0.0), sample.value)
    return PodReading(requests=requests, **values)


@dataclass(frozen=True)
class Activity:
    """One reading of a DocParser: pod name -> its reading (the front's and the runtime
    pods' Ready ones)."""

    pods: Mapping[str, PodReading]

    @property
    def held(self) -> int:
        return round(sum(r.held for r in self.pods.values()))

    @property
    def queued(self) -> int:
        """Jobs waiting: every pod reports the same shared queue, so the largest counts."""
        return round(max((r.queued for r in self.pods.values()), default=0.0))

    @property
    def running(self) -> int:
        return round(sum(r.running for r in self.pods.values()))

    @property
    def in_flight(self) -> int:
        return round(sum(r.in_flight for r in self.pods.values()))

    @property
    def backlog(self) -> int:
        """Work waiting for a GPU pod: jobs queued and requests held at the front."""
        return self.queued + self.held

    @property
    def busy(self) -> bool:
        """Work under way or waiting now (requests since the last reading aside)."""
        return self.backlog + self.running + self.in_flight > 0

    @property
    def last_request(self) -> float:
        return max((r.last_request for r in self.pods.values()), default=0.0)

    @property
    def wanted(self) -> float:
        """When a synchronous parse last found no capacity at the front (held or refused)."""
        return max((r.wanted for r in self.pods.values()), default=0.0)

    def new_requests(self, before: Activity | None) -> bool:
        """Whether some pod counted client requests since ``before`` (a pod not read then
        counts with whatever it has: it started and served since)."""
        earlier = before.pods if before is not None else {}
        return any(
            r.requests > (earlier[name].requests if name in earlier else 0.0)
            for name, r in self.pods.items()
        )
