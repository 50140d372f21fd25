"""The cordoned nodes, as the operator knows them (core/drain.py reads the names).

Why a poll of one filtered list rather than a kopf watch of every Node: a Node object changes
every few seconds (heartbeats, conditions, images) on every node of the cluster, and the
operator needs one bit of it. ``GET /api/v1/nodes?fieldSelector=spec.unschedulable=true`` is
answered from the API server's watch cache and returns only the cordoned nodes (usually none),
so a poll every ``interval`` seconds costs one tiny request; the cordon reaches the operator
within that interval, which matters little: the PDB holds the eviction from the start
(render/pdb.py) and a replacement takes minutes to load anyway. And unlike a kopf watch, a
forbidden list does not hang the operator: a kopf watch the API server refuses never sends its
first list, and kopf then runs no handler at all.

Whether it may read nodes is asked once at start-up (a SelfSubjectAccessReview, as
kube/permissions.py does for the watches): an operator limited with ``--namespace`` whose
RBAC grants no cluster-scope read then runs with PDB-only protection for drains
(``cordoned() is None``) and says so in its log, once.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field

from docparser_operator.api.kinds import ref_for
from docparser_operator.core import drain
from docparser_operator.kube import permissions
from docparser_operator.kube.client import ApiError, KubeClient

log = logging.getLogger("docparser_operator")
CORDONED = "spec.unschedulable=true"


@dataclass
class CordonedNodes:
    """The last known set of cordoned nodes; None when the operator may not read nodes."""

    client: KubeClient
    _names: frozenset[str] | None = None
    forbidden: bool = False  # the last list was refused (403)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self) -> frozenset[str] | None:
        with self._lock:
            return self._names

    def start(self) -> bool:
        """Ask RBAC whether nodes may be listed, then take the first view. False: not allowed
        (PDB-only protection for drains, core/drain.py)."""
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
        self.poll()
        if self.forbidden:
            return False
        with self._lock:
            if self._names is None:  # a transient failure: no cordon known yet, keep guarding
                self._names = frozenset()
        return True

    def poll(self) -> frozenset[str]:
        """List the cordoned nodes once; returns the nodes whose cordon state changed."""
        try:
            nodes = self.client.list(ref_for("Node"), None, fields=CORDONED)
        except ApiError as exc:
            if exc.status == 403:
                self.forbidden = True
                with self._lock:
                    if self._names is not None:
                        log.warning("nodes may no longer be listed: PDB-only drain protection")
                    self._names = None
                return frozenset()
            log.warning("listing the cordoned nodes failed (kept the last view): %s", exc)
            return frozenset()
        names = drain.cordoned_names(nodes)
        self.forbidden = False
        with self._lock:
            before, self._names = self._names, names
        return names ^ (before or frozenset())
