"""Leader election on a coordination.k8s.io Lease: two operator replicas, one reconciling.

WHY: kopf's standalone mode has no election, and its peering only pauses operators by
priority. With two replicas (the chart's default, so a node drain or a crash never leaves
DocParsers unwatched) exactly one may write children and status at a time. The kubernetes
client's LeaderElection (the same Lease protocol as controller-runtime and the
kube-controller-manager) hands the Lease over within `lease_duration` when the leader dies.
A leader that cannot renew exits at once rather than act on a view another replica may
already be changing; the Deployment restarts it as a follower.

While following, the replica answers its liveness probe itself (kopf's endpoint starts only
with kopf), so a healthy standby is never restarted for waiting.
"""

from __future__ import annotations

import logging
import os
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlparse

from kubernetes import client as k8s_client
from kubernetes.leaderelection import electionconfig, leaderelection
from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock

log = logging.getLogger(__name__)

EXIT_LOST_LEASE = 3


@dataclass(frozen=True)
class LeaseSettings:
    """Which Lease, who we are, and the timings (controller-runtime's defaults, scaled down:
    a GPU service should not wait 15 s + 10 s for a new leader after a crash)."""

    name: str
    namespace: str
    identity: str
    lease_duration_s: int = 15
    renew_deadline_s: int = 10
    retry_period_s: int = 2

    @staticmethod
    def identity_for(pod_name: str | None) -> str:
        """The pod name plus a nonce: a restarted pod never mistakes the old lease for its own."""
        return f"{pod_name or os.uname().nodename}_{uuid.uuid4().hex[:8]}"


class _Healthz(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.end_headers()
        self.wfile.write(b"standby: waiting for the lease\n")

    def log_message(self, format: str, *args: object) -> None:
        return


def _standby_probe(endpoint: str | None) -> ThreadingHTTPServer | None:
    if not endpoint:
        return None
    url = urlparse(endpoint)
    server = ThreadingHTTPServer((url.hostname or "0.0.0.0", url.port or 8080), _Healthz)
    threading.Thread(target=server.serve_forever, name="standby-healthz", daemon=True).start()
    return server


def lead_then(
    run_operator: Callable[[], None],
    lease: LeaseSettings,
    configuration: k8s_client.Configuration,
    *,
    liveness_endpoint: str | None = None,
    on_lost: Callable[[], None] | None = None,
) -> None:
    """Block until this replica holds the Lease, then call `run_operator` (in this thread:
    kopf needs the main thread for its signal handlers). Losing the Lease calls `on_lost`
    (default: exit the process with EXIT_LOST_LEASE)."""
    leading = threading.Event()

    def lost() -> None:
        log.error("lost the lease %s/%s: exiting, no stale view acts", lease.namespace, lease.name)
        (on_lost or (lambda: os._exit(EXIT_LOST_LEASE)))()

    lock = LeaseLock(lease.name, lease.namespace, lease.identity)
    lock.api_instance = k8s_client.CoordinationV1Api(k8s_client.ApiClient(configuration))
    config = electionconfig.Config(
        lock,
        lease_duration=lease.lease_duration_s,
        renew_deadline=lease.renew_deadline_s,
        retry_period=lease.retry_period_s,
        onstarted_leading=leading.set,
        onstopped_leading=lost,
    )
    election = leaderelection.LeaderElection(config)
    threading.Thread(target=election.run, name="leader-election", daemon=True).start()
    probe = _standby_probe(liveness_endpoint)
    log.info("waiting for the lease %s/%s as %s", lease.namespace, lease.name, lease.identity)
    leading.wait()
    if probe is not None:
        probe.shutdown()
        probe.server_close()
    log.info("leading as %s", lease.identity)
    run_operator()
