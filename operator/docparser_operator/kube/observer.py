"""Where ``reconcile`` reads a DocParser's children and pods from: watch-backed indexes.

Why: listing the five child kinds and the pods on every pass made a quiet cluster cost six
requests per DocParser per resync (600 a minute at 100 DocParsers). The operator already
watches every listed child kind; kopf keeps one index per kind fed by those watches, and it runs no
resource handler before every index holds its initial list (so a pass never plans from an
empty view after a restart). ``IndexedObserver`` assembles one DocParser's ``Observed`` from
those indexes without a request; ``ListObserver`` lists (the CLI, tests calling ``reconcile``
directly, the benchmark's baseline).

A child read by name (the shadow's ConfigMap: watching ConfigMaps would mean reading every
ConfigMap in the cluster, api/kinds.py) has no index. What a pass wrote of it, or last read
with one get, is trusted for ``NAMED_TTL_S`` (10 minutes) while it matters, then read again: a
ConfigMap deleted or edited by hand during a shadow canary is put back within that time (its
pods, which mount it optionally, read the shadow as off meanwhile). One that mirrors nothing,
or none at all (``ResourceRef.inert``: every DocParser at rest), is trusted until a pass
changes it: a missing or edited one reads as off to the runtime too, so re-reading it would buy
nothing and a DocParser at rest costs no request. A new DocParser's are not read at all, and
taken as absent: its first pass creates them, if it renders them, with an apply that only
creates (kube/client.py ``apply_new``); one without a shadow renders none
(core/render/shadow.py), so its ConfigMap costs no request, then or later.

A watch lags the writes that cause it by a few milliseconds, and the pass right after a write
must not plan from a view that predates it (it could spend the surge budget twice). So the
executor's own writes are remembered, as client-go's MutationCache does: a written object
stands in for the indexed one until the watch delivers a version at least as new (by
resourceVersion), and an object we deleted stays hidden until its deletion arrives. A deletion
seen on the watch clears what we remembered of that object at once (someone removed it: the
owner must put it back now). ``ttl_s`` (``PENDING_BOUND_S``, 5 minutes) only bounds what the
watch never answers (a deletion missed while it re-connected): at 1,000 DocParsers created at
once the watch lagged the writes by more than the 10 s this used to be, and the passes after
that planned from a view without their own children, created them again (409), read them and
applied them again (0.4 applies and 0.23 reads per DocParser).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from docparser_operator.api import labels
from docparser_operator.api.kinds import (
    LISTED_CHILD_KINDS,
    NAMED_CHILDREN,
    ResourceRef,
    ref_for,
)
from docparser_operator.core.plan import drain
from docparser_operator.core.plan.children import Key, Observed
from docparser_operator.kube.client import ApiError, KubeClient

IndexKey = tuple[str, str]  # (namespace, DocParser name)
NAMED_TTL_S = 600.0  # a child read by name is read again at most this often (at rest)
# The longest our write stands in for a watch that never delivers it: kopf re-lists every
# watch at least this often (handlers.py: settings.watching.server_timeout).
PENDING_BOUND_S = 300.0
# What kopf hands over: per kind, an index of (namespace, instance) -> objects.
Indexes = Mapping[str, Mapping[IndexKey, Iterable[dict[str, Any]]]]


class Observer(Protocol):
    """Reads what a pass needs; told about the pass's own writes."""

    def __call__(self, namespace: str, name: str, *, new: bool = False) -> Observed: ...

    def remember(
        self, namespace: str, name: str, written: dict[Key, dict[str, Any]], deleted: dict[Key, str]
    ) -> None: ...


def observe(client: KubeClient, namespace: str, name: str) -> Observed:
    """Every live object labelled as a child of this DocParser (owned or not), its pods and
    their ReplicaSets. A kind the operator may not list (403) is reported, not fatal: the
    pass goes on with what it can see and status says which permission is missing."""
    selector = labels.selector_string(labels.owned_selector(name))
    live: dict[Key, dict[str, Any]] = {}
    forbidden: list[str] = []
    for kind in LISTED_CHILD_KINDS:
        try:
            items = client.list(ref_for(kind), namespace, selector=selector)
        except ApiError as exc:
            if exc.status != 403:
                raise
            forbidden.append(kind)
            continue
        for obj in items:
            live[(kind, obj["metadata"]["name"])] = obj
    denied = read_named(client, namespace, name, live)
    forbidden += denied
    absent = frozenset(
        (ref.kind, child)
        for ref in NAMED_CHILDREN
        if ref.named is not None
        and ref.kind not in denied
        and (ref.kind, child := ref.named(name)) not in live
    )
    # One list for the runtime pods and the front's, told apart by their app name (as the
    # pods' index holds them: every pod of ours, keyed by its instance).
    pods = client.list(ref_for("Pod"), namespace, selector=selector)
    try:  # which of those pods our Deployments made (core/plan/children.readable_pods)
        replica_sets = tuple(client.list(ref_for("ReplicaSet"), namespace, selector=selector))
    except ApiError as exc:
        if exc.status != 403:
            raise
        forbidden.append("ReplicaSet")
        replica_sets = ()
    return Observed(
        live,
        _runtime(pods),
        tuple(forbidden),
        cordoned_nodes(client),
        front=_front(pods),
        replica_sets=replica_sets,
        absent=absent,
    )


def _app(pod: Mapping[str, Any]) -> str | None:
    return ((pod.get("metadata") or {}).get("labels") or {}).get(labels.LABEL_NAME)


def _runtime(pods: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for p in pods if _app(p) == labels.APP_NAME]


def _front(pods: Iterable[dict[str, Any]]) -> tuple[dict[str, Any], ...]:
    return tuple(p for p in pods if _app(p) == labels.FRONT_APP_NAME)


def cordoned_nodes(client: KubeClient) -> frozenset[str] | None:
    """The cordoned nodes (one list, filtered by the server), or None when RBAC denies it:
    then drains get PDB-only protection (core/plan/drain.py)."""
    try:
        nodes = client.list(ref_for("Node"), None, fields="spec.unschedulable=true")
    except ApiError as exc:
        if exc.status != 403:
            raise
        return None
    return drain.cordoned_names(nodes)


def read_named(
    client: KubeClient,
    namespace: str,
    name: str,
    live: dict[Key, dict[str, Any]],
    refs: tuple[ResourceRef, ...] = NAMED_CHILDREN,
) -> list[str]:
    """Add the children read by name (one get each: kinds the operator may not list, such as
    ConfigMaps) to ``live``; returns the kinds it may not read."""
    forbidden = []
    for ref in refs:
        assert ref.named is not None
        child = ref.named(name)
        try:
            obj = client.get(ref, namespace, child)
        except ApiError as exc:
            if exc.status != 403:
                raise
            forbidden.append(ref.kind)
            continue
        if obj is not None:
            live[(ref.kind, child)] = obj
    return forbidden


@dataclass(frozen=True)
class ListObserver:
    """Lists every kind on every pass (one request per kind; always current)."""

    client: KubeClient

    def __call__(self, namespace: str, name: str, *, new: bool = False) -> Observed:
        return observe(self.client, namespace, name)

    def remember(
        self, namespace: str, name: str, written: dict[Key, dict[str, Any]], deleted: dict[Key, str]
    ) -> None:
        """Nothing to remember: the next pass lists again."""


def index_key(obj: Mapping[str, Any]) -> IndexKey | None:
    """The (namespace, DocParser) an object of ours belongs to, from its instance label."""
    meta = obj.get("metadata") or {}
    instance = (meta.get("labels") or {}).get(labels.LABEL_INSTANCE)
    if not instance:
        return None
    return meta.get("namespace") or "", instance


def resource_version(obj: Mapping[str, Any] | None) -> int | None:
    """The resourceVersion as a number where the server uses numbers (etcd does)."""
    rv = str(((obj or {}).get("metadata") or {}).get("resourceVersion") or "")
    return int(rv) if rv.isdigit() else None


@dataclass(frozen=True)
class _Pending:
    """A write of ours that the watch may not have delivered yet."""

    obj: dict[str, Any] | None  # None: we deleted it
    uid: str
    version: int | None
    until: float


def _snapshot(store: Iterable[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """Copy an index store that the event loop may be updating from another thread."""
    for _ in range(10):
        try:
            return list(store or ())
        except RuntimeError:  # changed size during iteration: read again
            continue
    return list(store or ())


@dataclass
class IndexedObserver:
    """Reads from kopf indexes (one per child kind, and ``pods``) plus our recent writes."""

    indexes: Indexes
    client: KubeClient | None = None  # reads the children read by name (none: skipped)
    ttl_s: float = PENDING_BOUND_S  # at most this long does a write wait for its watch event
    named_ttl_s: float = NAMED_TTL_S  # how long a child read by name is trusted unread
    cordoned: Callable[[], frozenset[str] | None] = lambda: None  # kube/nodes.py's view
    clock: Callable[[], float] = time.monotonic
    _pending: dict[IndexKey, dict[Key, _Pending]] = field(default_factory=dict)
    _gone: dict[str, float] = field(default_factory=dict)  # uids seen deleted -> until
    _lock: threading.Lock = field(default_factory=threading.Lock)
    # (DocParser, child) -> (trusted until, the object or None when absent): what we last
    # read or wrote of the children read by name (kube/observer.py's module doc).
    _named: dict[tuple[IndexKey, Key], tuple[float, dict[str, Any] | None]] = field(
        default_factory=dict
    )

    def __call__(self, namespace: str, name: str, *, new: bool = False) -> Observed:
        return self.view(namespace, name, named=True, new=new)

    def view(self, namespace: str, name: str, *, named: bool, new: bool = False) -> Observed:
        """The indexed children and pods; ``named``: also the children read by name (a request
        each when not cached), which scale to zero's readings between passes do without;
        ``new``: a DocParser no pass has reported on yet, whose uncached children read by
        name are left unread (``_read_named``)."""
        key = (namespace, name)
        children: dict[Key, dict[str, Any]] = {}
        for kind in LISTED_CHILD_KINDS:
            index = self.indexes.get(kind) or {}
            for obj in _snapshot(index.get(key)):
                children[(kind, obj["metadata"]["name"])] = obj
        absent: set[Key] = set()
        forbidden = self._read_named(key, children, absent, new) if named else []
        pods = _snapshot((self.indexes.get("Pod") or {}).get(key))
        replica_sets = _snapshot((self.indexes.get("ReplicaSet") or {}).get(key))
        self._overlay(key, children)
        return Observed(
            children,
            _runtime(pods),
            tuple(forbidden),
            cordoned=self.cordoned(),
            front=_front(pods),
            replica_sets=tuple(replica_sets),
            absent=frozenset(absent - children.keys()),
        )

    def _read_named(
        self, key: IndexKey, children: dict[Key, dict[str, Any]], absent: set[Key], new: bool
    ) -> list[str]:
        """The children read by name, from what we last read or wrote of them while that is
        younger than ``named_ttl_s``, else with one get (returns the kinds RBAC denies); a
        get that found none adds the child to ``absent`` (fresh: no second read before its
        create). What is remembered absent is not: someone may have made it since.

        Of a ``new`` DocParser (its status has no ``observedGeneration``: its first pass, or
        one whose every pass failed before its status write) they are not read: such a child
        almost never exists, and the pass creates it with an apply that only creates
        (controller/reconcile.py), reading it only if one does. The read would be one
        request more per DocParser created. It is remembered as absent, as a read that
        found none would be, so the passes after it do not read it either."""
        if self.client is None:
            return []
        forbidden: list[str] = []
        for ref in NAMED_CHILDREN:
            assert ref.named is not None
            child = (ref.kind, ref.named(key[1]))
            with self._lock:
                until, obj = self._named.get((key, child), (0.0, None))
            if until <= self.clock():
                if new:  # neither in the view nor absent: created without a read first
                    with self._lock:
                        self._named[(key, child)] = (self._trusted_until(ref, None), None)
                    continue
                found: dict[Key, dict[str, Any]] = {}
                if read_named(self.client, key[0], key[1], found, (ref,)):
                    forbidden.append(ref.kind)
                    continue
                obj = found.get(child)
                if obj is None:
                    absent.add(child)
                with self._lock:
                    self._named[(key, child)] = (self._trusted_until(ref, obj), obj)
            if obj is not None:
                children[child] = obj
        return forbidden

    def _trusted_until(self, ref: ResourceRef, obj: dict[str, Any] | None) -> float:
        """Until when what we read or wrote of a child read by name (None: that none exists)
        stands unread: for ever when that is inert (``ResourceRef.inert``: the shadow's
        ConfigMap with nothing to mirror, or none, so a DocParser at rest costs no request),
        else ``named_ttl_s``."""
        if ref.inert is not None and ref.inert(obj):
            return float("inf")
        return self.clock() + self.named_ttl_s

    def all_pods(self) -> list[dict[str, Any]]:
        """Every indexed runtime pod (the cordon watch finds the owners of a node's pods)."""
        index = self.indexes.get("Pod") or {}
        return [p for key in list(index) for p in _snapshot(index.get(key))]

    def remember(
        self, namespace: str, name: str, written: dict[Key, dict[str, Any]], deleted: dict[Key, str]
    ) -> None:
        now = self.clock()
        until = now + self.ttl_s
        named = {(r.kind, r.named(name)): r for r in NAMED_CHILDREN if r.named is not None}
        with self._lock:  # what we wrote of a child read by name is what it holds now
            for child in named.keys() & set(written):
                obj = written[child]
                self._named[((namespace, name), child)] = (
                    self._trusted_until(named[child], obj),
                    obj,
                )
            for child in named.keys() & set(deleted):
                self._named.pop(((namespace, name), child), None)
        entries = {
            k: _Pending(obj, obj["metadata"].get("uid", ""), resource_version(obj), until)
            for k, obj in written.items()
        }
        entries.update({k: _Pending(None, uid, None, until) for k, uid in deleted.items()})
        if not entries:
            return
        with self._lock:
            now = self.clock()
            self._gone = {uid: t for uid, t in self._gone.items() if t >= now}
            live = {k: e for k, e in entries.items() if e.obj is None or e.uid not in self._gone}
            self._pending.setdefault((namespace, name), {}).update(live)

    def forget_owner(self, namespace: str, name: str) -> None:
        """The DocParser was deleted: what we read or wrote of its children no longer holds
        (they go with it), and one created again under its name starts from nothing. Why:
        a ConfigMap remembered for the deleted one (trusted for ever at rest) stood in the
        new one's view, owned by the old uid: a ChildConflict for ever."""
        with self._lock:
            for entry in [e for e in self._named if e[0] == (namespace, name)]:
                del self._named[entry]
            self._pending.pop((namespace, name), None)

    def forget(self, namespace: str, name: str, child: Key, uid: str) -> None:
        """The watch reported ``child`` (this uid) deleted: whatever we wrote of it no longer
        holds, even if the pass that wrote it only tells us after this (``_gone``)."""
        with self._lock:
            self._gone[uid] = self.clock() + self.ttl_s
            pending = self._pending.get((namespace, name)) or {}
            if child in pending and pending[child].uid == uid:
                del pending[child]

    def _overlay(self, key: IndexKey, children: dict[Key, dict[str, Any]]) -> None:
        """Lay our not-yet-watched writes over the indexed view; forget the delivered ones."""
        now = self.clock()
        with self._lock:
            pending = self._pending.get(key) or {}
            for child, write in list(pending.items()):
                seen = children.get(child)
                if now > write.until or _delivered(write, seen):
                    del pending[child]
                elif write.obj is None:
                    children.pop(child, None)
                else:
                    children[child] = write.obj
            if not pending:
                self._pending.pop(key, None)


def _delivered(write: _Pending, seen: dict[str, Any] | None) -> bool:
    """Whether the watch has caught up with ``write``."""
    if write.obj is None:  # our delete: delivered once the object (that uid) is gone
        return seen is None or seen["metadata"].get("uid") != write.uid
    if seen is None:
        return False
    have = resource_version(seen)
    if have is None or write.version is None:  # opaque versions: trust the watch
        return True
    return have >= write.version
