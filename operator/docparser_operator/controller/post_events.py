"""Posting the Events that core/status/transition_events.py derives, at most one Warning per
reason and interval.

``post`` is the only I/O; which Events a pass deserves is decided purely in
core/status/transition_events.py.
"""

from __future__ import annotations

import datetime
import logging
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from docparser_operator.api import naming
from docparser_operator.core.status.transition_events import Event
from docparser_operator.kube.client import ApiError, KubeClient

log = logging.getLogger(__name__)
COMPONENT = "docparser-operator"


@dataclass
class EventLimiter:
    """At most one Warning per (object, reason) per ``interval_s``.

    A failure retried every few seconds (a 403 until RBAC is fixed) or a condition that flaps
    would otherwise add an Event per attempt: etcd churn, and `kubectl describe` buried under
    copies. Normal events pass: they mark spec-driven transitions, which are few and each worth
    seeing. The clock is injectable so the rule is tested without sleeping."""

    interval_s: float
    clock: Callable[[], float] = time.monotonic
    _last: dict[tuple[str, str], float] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def admit(self, uid: str, events: list[Event]) -> list[Event]:
        now = self.clock()
        out = []
        with self._lock:
            for ev in events:
                key = (uid, ev.reason)
                last = self._last.get(key)
                if ev.type == "Warning" and last is not None and now - last < self.interval_s:
                    continue
                self._last[key] = now
                out.append(ev)
            if len(self._last) > 10_000:  # bounded: forget what the interval no longer covers
                self._last = {k: t for k, t in self._last.items() if now - t < self.interval_s}
        return out


def post(client: KubeClient, resource: dict[str, Any], events: list[Event]) -> int:
    """Create core/v1 Events on the DocParser; failures are logged, never raised (best effort)."""
    meta = resource["metadata"]
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    posted = 0
    for ev in events:
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
            "involvedObject": {
                "apiVersion": naming.API_VERSION,
                "kind": naming.KIND,
                "name": meta["name"],
                "namespace": meta["namespace"],
                "uid": meta["uid"],
            },
            "type": ev.type,
            "reason": ev.reason,
            "message": ev.message[:1024],
            # legacy core/v1 shape (source, not reportingController: that one obliges the
            # events.k8s.io fields eventTime/action on create)
            "source": {"component": COMPONENT, "host": socket.gethostname()[:128]},
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        try:
            client.create(body)
            posted += 1
        except ApiError as exc:
            log.warning("could not post event %s on %s: %s", ev.reason, meta["name"], exc)
    return posted
