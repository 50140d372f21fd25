"""The cordoned nodes, as the operator knows them (core/plan/drain.py reads the names).

Why a watch of one filtered list rather than a kopf watch of every Node: a Node object changes
every few seconds (heartbeats, conditions, images) on every node of the cluster, and the
operator needs one bit of it. ``fieldSelector=spec.unschedulable=true`` makes the API server
send only the cordoned nodes (usually none): one list at start for the set and its
resourceVersion, then one long watch from there. A quiet cluster costs no request at all but
the watch's renewal every few minutes (``timeoutSeconds``, jittered so that replicas and
restarts do not renew in step), and a cordon reaches the operator as soon as it is written.
A node leaving the selector (uncordoned) arrives as DELETED, one deleted too. Bookmarks keep
the resourceVersion fresh, so a renewal resumes without a list; an expired one (410 Gone)
lists again, and a broken connection backs off (1 s doubling to 30 s, jittered: never a hot
loop) then lists again, since events may have been missed.

Why not kopf: a kopf watch the API server refuses never sends its first list, and kopf then
runs no handler at all; this watch is ours, so a refusal only costs drain awareness. Whether it
may read nodes is asked once at start-up (a SelfSubjectAccessReview, as kube/permissions.py
does for the watches): an operator limited with ``--namespace`` whose RBAC grants no
cluster-scope read then runs with PDB-only protection for drains (``cordoned() is None``) and
says so in its log, once; a 403 later (RBAC removed while running) does the same until a
retry (every 30 s) is allowed again.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kubernetes.watch.watch import iter_resp_lines

from docparser_operator.api.kinds import ref_for
from docparser_operator.core.plan import drain
from docparser_operator.kube import permissions
from docparser_operator.kube.client import ApiError, KubeClient

log = logging.getLogger("docparser_operator")
CORDONED = "spec.unschedulable=true"
NODES = ref_for("Node")
MAX_BACKOFF_S = 30.0
Changed = Callable[[frozenset[str]], object]


class _Expired(Exception):
    """The resourceVersion is too old to watch from (410 Gone): list again."""


@dataclass
class CordonedNodes:
    """The last known set of cordoned nodes; None when the operator may not read nodes."""

    client: KubeClient
    watch_timeout_s: float = 300.0  # a watch is renewed after 0.8-1.2x this
    _names: frozenset[str] | None = None
    forbidden: bool = False  # the last list or watch was refused (403)
    relists: int = 0  # lists after the first: an expired resourceVersion or a broken watch
    _rv: str | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stop: threading.Event = field(default_factory=threading.Event)
    _response: Any = None
    _thread: threading.Thread | None = None

    def __call__(self) -> frozenset[str] | None:
        with self._lock:
            return self._names

    def start(self) -> bool:
        """Ask RBAC whether nodes may be listed, then take the first view. False: not allowed
        (PDB-only protection for drains, core/plan/drain.py)."""
        try:
            denied = permissions.missing(self.client, [("", "nodes")], [""], ("list",))
        except ApiError as exc:  # no answer: try the list itself
            log.warning("could not check the permission to list nodes: %s", exc)
            denied = []
        if denied:
            log.warning(
                "the operator may not %s: node drains get PDB-only protection (maxUnavailable "
                "1, no replacement first); grant get/list/watch on nodes (the chart's "
                "-discovery ClusterRole does) for drains that never drop serving capacity",
                denied[0],
            )
            return False
        try:
            self.relist()
        except ApiError as exc:  # a transient failure: the watch lists again
            log.warning("listing the cordoned nodes failed: %s", exc)
        if self.forbidden:
            return False
        with self._lock:
            if self._names is None:  # no cordon known yet, keep guarding
                self._names = frozenset()
        return True

    def relist(self) -> frozenset[str]:
        """List the cordoned nodes; returns the nodes whose cordon state changed. A 403 turns
        to PDB-only protection (None); other failures raise ApiError (the last view kept)."""
        try:
            answer = self.client.request("GET", NODES.path(None), query={"fieldSelector": CORDONED})
        except ApiError as exc:
            if exc.status != 403:
                raise
            self._forbid()
            return frozenset()
        names = drain.cordoned_names(answer.get("items") or [])
        self.forbidden = False
        self._rv = (answer.get("metadata") or {}).get("resourceVersion") or None
        with self._lock:
            before, self._names = self._names, names
        return names ^ (before or frozenset())

    def _forbid(self) -> None:
        self.forbidden = True
        self._rv = None
        with self._lock:
            if self._names is not None:
                log.warning("nodes may no longer be read: PDB-only drain protection")
            self._names = None

    # the watch ----------------------------------------------------------------------------
    def watch(self, on_change: Changed) -> None:
        """Follow cordons in a background thread until ``stop``; ``on_change`` gets the nodes
        whose cordon state changed (called from that thread)."""
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._run, args=(on_change,), name="cordoned-nodes", daemon=True
        )
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        """End the watch: the open stream is shut so a blocked read returns at once."""
        self._stop.set()
        resp = self._response
        if resp is not None:
            try:
                resp.shutdown()
            except (ValueError, OSError, AttributeError):
                resp.close()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None

    def _run(self, on_change: Changed) -> None:
        failures = 0
        while not self._stop.is_set():
            try:
                if self._rv is None:
                    if self._names is not None or self.forbidden:  # not the start's list
                        self.relists += 1
                    _notify(on_change, self.relist())
                    if self.forbidden:
                        raise ApiError(403, "Forbidden", "list nodes", "GET", NODES.path(None))
                if self._watch_once(on_change):
                    failures = 0
                    continue
                raise ApiError(0, "Closed", "the watch ended at once", "GET", NODES.path(None))
            except _Expired:
                log.info("the cordoned-node watch expired: listing again")
                self._rv = None
                failures += 1
                if failures == 1:
                    continue  # the usual case: one list and the watch goes on
            except ApiError as exc:
                if self._stop.is_set():
                    break
                if exc.status == 403:
                    self._forbid()
                log.warning("the cordoned-node watch failed (listing again after a pause): %s", exc)
                self._rv = None
                failures += 1
            except Exception:  # never let a surprise end drain awareness
                log.exception("the cordoned-node watch failed")
                self._rv = None
                failures += 1
            delay = min(MAX_BACKOFF_S, 2.0 ** (failures - 1))
            self._stop.wait(delay * random.uniform(0.5, 1.0))

    def _watch_once(self, on_change: Changed) -> bool:
        """One watch request from ``_rv``, read to its end. True when it was a real watch (it
        lasted or brought events); False when it ended at once with nothing (a proxy that
        closes it: back off rather than renew in a hot loop). Raises _Expired on 410."""
        timeout = int(self.watch_timeout_s * random.uniform(0.8, 1.2)) or 1
        query = {
            "watch": "true",
            "fieldSelector": CORDONED,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(timeout),
            "resourceVersion": self._rv or "",
        }
        began = time.monotonic()
        try:
            resp = self.client.stream(NODES.path(None), query, read_timeout_s=timeout + 60.0)
        except ApiError as exc:
            if exc.status == 410:
                raise _Expired from exc
            raise
        self._response = resp
        events, whole = 0, False
        try:
            for line in iter_resp_lines(resp):
                if self._stop.is_set():
                    break
                if line:
                    events += 1
                    _notify(on_change, self._apply(json.loads(line)))
            else:
                whole = True
        except _Expired:
            raise
        except Exception as exc:  # a reset or timed-out stream, a torn line
            if self._stop.is_set():
                return True
            raise ApiError(0, type(exc).__name__, str(exc), "GET", NODES.path(None)) from exc
        finally:
            self._response = None
            if whole:
                resp.release_conn()  # read to its end: the connection serves the next watch
            else:
                resp.close()
        return events > 0 or time.monotonic() - began >= 1.0

    def _apply(self, event: dict[str, Any]) -> frozenset[str]:
        """One watch event into the set; returns the node whose cordon state changed, if any."""
        kind, obj = event.get("type"), event.get("object") or {}
        meta = obj.get("metadata") or {}
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise _Expired
            code = int(obj.get("code") or 0)
            raise ApiError(code, str(obj.get("reason")), str(obj.get("message")), "GET", "watch")
        if meta.get("resourceVersion"):
            self._rv = meta["resourceVersion"]
        name = meta.get("name")
        if kind == "BOOKMARK" or not name:
            return frozenset()
        # the object's own spec decides, so a server that ignores the selector is read right
        cordoned = kind != "DELETED" and bool(drain.cordoned_names([obj]))
        with self._lock:
            before = self._names or frozenset()
            after = before | {name} if cordoned else before - {name}
            self._names = after
        return after ^ before


def _notify(on_change: Changed, changed: frozenset[str]) -> None:
    if not changed:
        return
    try:
        on_change(changed)
    except Exception:  # the owners' wake-up failed: the resync still finds them
        log.exception("waking the owners of pods on %s failed", sorted(changed))
