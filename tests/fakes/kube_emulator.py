"""A Kubernetes API emulator on kmock, faithful where the operator's correctness depends on it.

kmock's ``KubernetesEmulator`` serves discovery, records every request (so tests can assert
"zero writes") and streams watches, but it merges dicts naively. The operator relies on API
semantics that a naive merge would hide, so this subclass adds them:

- server-side apply per field manager: fields a manager applied before and omits now are
  removed, managedFields are kept, and an apply that changes nothing changes nothing (no new
  resourceVersion, no watch event), like the real server;
- metadata: uid, resourceVersion, generation (spec changes only), creationTimestamp,
  generateName, finalizers + deletionTimestamp;
- the status subresource (main-resource writes ignore status; /status writes touch only it);
- label selectors on list and watch; delete preconditions (uid);
- the garbage collector (owner deleted -> dependents deleted), which a bare kube-apiserver
  lacks, so tests can ask ``cluster.has_garbage_collector``. Like the real one it also
  collects a dependent written *after* its owners went (a reconcile in flight when its
  DocParser was deleted): once every owner it names is a uid this emulator deleted, the
  dependent is deleted right after the write that made it. Owner uids it never stored are
  left alone (unit tests stamp children with made-up owners).
"""

from __future__ import annotations

import asyncio
import copy
import datetime
import json
import secrets
import uuid
from collections import defaultdict
from typing import Any

import aiohttp.web
import kmock
import yaml
from kmock._internal import apps, parsing

_parse_path = parsing.parse_path


def _parse_path_with_namespaces(path: str) -> parsing.ParsedPath:
    """kmock reads /api/v1/namespaces[/NAME] as a namespaced path; it is the Namespace kind."""
    parts = path.strip("/").split("/")
    if parts[:3] == ["api", "v1", "namespaces"] and len(parts) <= 4:
        name = parts[3] if len(parts) == 4 else None
        return parsing.ParsedPath("", "v1", "namespaces", None, name, None)
    return _parse_path(path)


parsing.parse_path = _parse_path_with_namespaces

# plural key -> (kind, namespaced)
RESOURCES: dict[str, tuple[str, bool]] = {
    "v1/pods": ("Pod", True),
    "v1/services": ("Service", True),
    "v1/events": ("Event", True),
    "v1/namespaces": ("Namespace", False),
    "v1/nodes": ("Node", False),
    "v1/configmaps": ("ConfigMap", True),
    "v1/secrets": ("Secret", True),
    "apps/v1/deployments": ("Deployment", True),
    "apps/v1/replicasets": ("ReplicaSet", True),
    "autoscaling/v2/horizontalpodautoscalers": ("HorizontalPodAutoscaler", True),
    "policy/v1/poddisruptionbudgets": ("PodDisruptionBudget", True),
    "networking.k8s.io/v1/networkpolicies": ("NetworkPolicy", True),
    "gateway.networking.k8s.io/v1/httproutes": ("HTTPRoute", True),
    "v1/persistentvolumeclaims": ("PersistentVolumeClaim", True),
    "batch/v1/jobs": ("Job", True),
    "docparser.io/v1alpha1/docparsers": ("DocParser", True),
}

Key = tuple[str, str, str, str | None, str]  # group, version, plural, namespace, name


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _fields_v1(applied: Any) -> Any:
    """A FieldsV1-like set of the applied leaves (lists are treated as atomic)."""
    if isinstance(applied, dict):
        return {f"f:{k}": _fields_v1(v) for k, v in applied.items()}
    return {}


def _leaf_paths(obj: Any, prefix: tuple[str, ...] = ()) -> set[tuple[str, ...]]:
    if isinstance(obj, dict) and obj:
        out: set[tuple[str, ...]] = set()
        for k, v in obj.items():
            out |= _leaf_paths(v, (*prefix, k))
        return out
    return {prefix}


def _remove_path(obj: dict[str, Any], path: tuple[str, ...]) -> None:
    """Remove a released leaf and the maps it leaves empty (as SSA drops a whole owned field)."""
    if not path:
        return
    trail: list[dict[str, Any]] = []
    node: Any = obj
    for part in path[:-1]:
        if not isinstance(node, dict) or part not in node:
            return
        trail.append(node)
        node = node[part]
    if not isinstance(node, dict):
        return
    node.pop(path[-1], None)
    for parent, part in zip(reversed(trail), reversed(path[:-1]), strict=True):
        if parent.get(part) == {}:
            del parent[part]
        else:
            break


def _deep_merge(base: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """RFC 7386 merge patch (None deletes), used for merge, strategic and apply bodies."""
    out = dict(base)
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        elif isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _deep_merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def _json_patch(obj: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    for op in ops:
        parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        node: Any = out
        for part in parts[:-1]:
            node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
        last = parts[-1]
        if op["op"] == "test":
            if (node[int(last)] if isinstance(node, list) else node.get(last)) != op["value"]:
                raise kmock.KubernetesError(status=422, reason="Invalid", message="test failed")
        elif op["op"] == "remove":
            del node[int(last) if isinstance(node, list) else last]
        elif isinstance(node, list):
            idx = len(node) if last == "-" else int(last)
            node.insert(idx, op["value"]) if op["op"] == "add" else node.__setitem__(
                idx, op["value"]
            )
        else:
            node[last] = op["value"]
    return out


def _selector_matches(selector: str | None, labels: dict[str, str]) -> bool:
    """Equality-based selectors: ``k=v``, ``k==v``, ``k!=v``, ``k``, ``!k``."""
    if not selector:
        return True
    for term in filter(None, (t.strip() for t in selector.split(","))):
        if "!=" in term:
            k, v = term.split("!=", 1)
            if labels.get(k.strip()) == v.strip():
                return False
        elif "=" in term:
            k, v = term.replace("==", "=").split("=", 1)
            if labels.get(k.strip()) != v.strip():
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


def _semantic(obj: dict[str, Any]) -> dict[str, Any]:
    """The object minus server bookkeeping, to decide whether a write changed anything."""
    out = copy.deepcopy(obj)
    meta = out.get("metadata", {})
    for k in ("resourceVersion", "managedFields", "generation"):
        meta.pop(k, None)
    return out


class KubeEmulator(kmock.KubernetesEmulator):
    """kmock's emulator with the API semantics listed in the module docstring."""

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        self.store: dict[Key, dict[str, Any]] = {}
        self.applied: dict[tuple[Key, str], dict[str, Any]] = {}
        self.rv = 0
        self.garbage_collect = True
        # uids of deleted objects: a dependent naming only these is collected (the docstring)
        self.deleted_uids: set[str] = set()
        self._collecting: set[asyncio.Task[None]] = set()  # collections under way
        self.missing: set[str] = set()  # resource keys to serve as 404 (e.g. CRDs not installed)
        self.watchers: dict[tuple[str, str, str], list[asyncio.Queue[Any]]] = defaultdict(list)
        for key, (kind, namespaced) in RESOURCES.items():
            self.resources[key] = kmock.ResourceInfo(
                kind=kind,
                namespaced=namespaced,
                verbs={"get", "list", "watch", "create", "patch", "update", "delete"},
                subresources={"status"} if namespaced else set(),
            )

    # dispatch -----------------------------------------------------------------------------
    async def _handle(self, request: kmock.Request) -> aiohttp.web.StreamResponse:
        res = request.resource
        if res is None or not res.plural or request.action == kmock.action.WATCH:
            return await apps.RawHandler._handle(self, request)
        rkey = (res.group, res.version, res.plural)
        rname = "/".join(p for p in rkey if p)
        if rname not in RESOURCES or rname in self.missing:
            raise kmock.KubernetesResourceNotFoundError()
        method = str(request.method.value).upper()
        if request.name is None:
            if method == "GET":
                return aiohttp.web.json_response(self._list(request))
            if method == "POST":
                return aiohttp.web.json_response(await self._create(request), status=201)
        else:
            key: Key = (*rkey, request.namespace, request.name)
            if method == "GET":
                return aiohttp.web.json_response(self._get(key))
            if method == "PATCH":
                return aiohttp.web.json_response(await self._patch(key, request))
            if method == "DELETE":
                return aiohttp.web.json_response(await self._delete(key, request.data))
        raise kmock.KubernetesError(status=405, reason="MethodNotAllowed", message=method)

    # reads --------------------------------------------------------------------------------
    def _get(self, key: Key) -> dict[str, Any]:
        if key not in self.store:
            raise kmock.KubernetesObjectNotFoundError()
        return self.store[key]

    def _matching(self, request: kmock.Request) -> list[dict[str, Any]]:
        res = request.resource
        selector = request.params.get("labelSelector")
        return [
            obj
            for (g, v, p, ns, _), obj in self.store.items()
            if (g, v, p) == (res.group, res.version, res.plural)
            and (request.namespace is None or ns == request.namespace)
            and _selector_matches(selector, obj["metadata"].get("labels") or {})
        ]

    def _list(self, request: kmock.Request) -> dict[str, Any]:
        res = request.resource
        kind = RESOURCES["/".join(p for p in (res.group, res.version, res.plural) if p)][0]
        return {
            "apiVersion": "v1",
            "kind": f"{kind}List",
            "metadata": {"resourceVersion": str(self.rv)},
            "items": self._matching(request),
        }

    async def _serve_watch(self, request: kmock.Request) -> Any:  # type: ignore[override]
        yield b""
        for obj in self._matching(request):
            yield {"type": "ADDED", "object": obj}
        res = request.resource
        queue: asyncio.Queue[Any] = asyncio.Queue()
        subscribers = self.watchers[(res.group, res.version, res.plural)]
        subscribers.append(queue)
        selector = request.params.get("labelSelector")
        try:
            while True:
                event = await queue.get()
                meta = event["object"]["metadata"]
                if request.namespace not in (None, meta.get("namespace")):
                    continue
                if _selector_matches(selector, meta.get("labels") or {}):
                    yield event
        finally:
            subscribers.remove(queue)

    async def _emit(self, key: Key, kind: str, obj: dict[str, Any]) -> None:
        for queue in self.watchers[key[:3]]:
            queue.put_nowait({"type": kind, "object": copy.deepcopy(obj)})

    # writes -------------------------------------------------------------------------------
    def _bump(self, obj: dict[str, Any]) -> None:
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)

    def _kind(self, key: Key) -> tuple[str, str]:
        g, v, p = key[:3]
        return (f"{g}/{v}" if g else v), RESOURCES["/".join(x for x in (g, v, p) if x)][0]

    async def _store_new(self, key: Key, body: dict[str, Any]) -> dict[str, Any]:
        api_version, kind = self._kind(key)
        obj = copy.deepcopy(body)
        obj.pop("status", None)
        obj["apiVersion"], obj["kind"] = api_version, kind
        meta = obj.setdefault("metadata", {})
        meta.update(name=key[4], uid=str(uuid.uuid4()), creationTimestamp=_now(), generation=1)
        if key[3] is not None:
            meta["namespace"] = key[3]
        if kind == "Deployment":
            obj.setdefault("spec", {}).setdefault("replicas", 1)
        self._bump(obj)
        self.store[key] = obj
        await self._emit(key, "ADDED", obj)
        self._collect_if_orphaned(key, obj)
        return obj

    async def _create(self, request: kmock.Request) -> dict[str, Any]:
        body = request.data or {}
        meta = body.setdefault("metadata", {})
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + secrets.token_hex(3)
        res = request.resource
        key: Key = (res.group, res.version, res.plural, request.namespace, meta.get("name"))
        if key in self.store:
            raise kmock.KubernetesError(status=409, reason="AlreadyExists", message=str(key))
        return await self._store_new(key, body)

    async def _replace(self, key: Key, new: dict[str, Any]) -> dict[str, Any]:
        old = self.store[key]
        if _semantic(new) == _semantic(old):
            return old  # a no-op write: nothing changes, no event (like the real server)
        strip = lambda o: {k: v for k, v in o.items() if k not in ("metadata", "status")}  # noqa: E731
        if strip(new) != strip(old):
            new["metadata"]["generation"] = old["metadata"].get("generation", 1) + 1
        self._bump(new)
        meta = new["metadata"]
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            return await self._remove(key)
        self.store[key] = new
        await self._emit(key, "MODIFIED", new)
        self._collect_if_orphaned(key, new)
        return new

    async def _patch(self, key: Key, request: kmock.Request) -> dict[str, Any]:
        ctype = request.headers.get("Content-Type", "").split(";")[0]
        body = request.data if request.data is not None else yaml.safe_load(request.text or "{}")
        if ctype == "application/apply-patch+yaml":
            return await self._apply(key, body, request.params)
        if key not in self.store:
            raise kmock.KubernetesObjectNotFoundError()
        old = self.store[key]
        if ctype == "application/json-patch+json":
            new = _json_patch(old, body)
        else:
            new = _deep_merge(old, body)
        if request.subresource == "status":
            new = {**copy.deepcopy(old), "status": new.get("status", {})}
        else:
            new["status"] = copy.deepcopy(old.get("status"))
            if new["status"] is None:
                new.pop("status")
        return await self._replace(key, new)

    async def _apply(self, key: Key, body: dict[str, Any], params: Any) -> dict[str, Any]:
        manager = params.get("fieldManager")
        if not manager:
            raise kmock.KubernetesError(status=422, reason="Invalid", message="fieldManager")
        body = copy.deepcopy(body)
        body.pop("status", None)
        meta = body.get("metadata") or {}
        rv = meta.pop("resourceVersion", None)  # a precondition, as on the real server
        if rv and key in self.store and rv != self.store[key]["metadata"]["resourceVersion"]:
            raise kmock.KubernetesError(status=409, reason="Conflict", message="modified")
        entry = {
            "manager": manager,
            "operation": "Apply",
            "apiVersion": body.get("apiVersion"),
            "time": _now(),
            "fieldsType": "FieldsV1",
            "fieldsV1": _fields_v1(body),
        }
        if key not in self.store:  # managedFields before the watch event, as the server does
            obj = await self._store_new(
                key, {**body, "metadata": {**meta, "managedFields": [entry]}}
            )
            self.applied[(key, manager)] = body
            return obj
        old = self.store[key]
        base = copy.deepcopy(old)
        previous = self.applied.get((key, manager), {})
        co_owned: set[tuple[str, ...]] = set()
        for (other_key, other), applied in self.applied.items():
            if other_key == key and other != manager:
                co_owned |= _leaf_paths(applied)
        for path in _leaf_paths(previous) - _leaf_paths(body) - co_owned:
            _remove_path(base, path)  # released fields disappear (no other owner tracked)
        new = _deep_merge(base, body)
        if new.get("kind") == "Deployment":
            new.setdefault("spec", {}).setdefault("replicas", 1)  # the API's default
        self.applied[(key, manager)] = body
        # this manager's new field set; _replace ignores it when nothing else changed
        others = [m for m in old["metadata"].get("managedFields", []) if m["manager"] != manager]
        new.setdefault("metadata", {})["managedFields"] = [*others, entry]
        return await self._replace(key, new)

    async def _remove(self, key: Key) -> dict[str, Any]:
        obj = self.store.pop(key)
        self._bump(obj)
        await self._emit(key, "DELETED", obj)
        if self.garbage_collect:
            uid = obj["metadata"]["uid"]
            self.deleted_uids.add(uid)
            for dep_key, dep in list(self.store.items()):
                owners = dep["metadata"].get("ownerReferences") or []
                if any(o.get("uid") == uid for o in owners) and dep_key in self.store:
                    await self._delete(dep_key, None)
        return obj

    def _collect_if_orphaned(self, key: Key, obj: dict[str, Any]) -> None:
        """Delete ``obj`` after this write's answer when every owner it names was deleted:
        the real garbage collector finds such a dependent absent-owned and removes it, so an
        object written by a reconcile that raced its owner's deletion does not stay for ever."""
        owners = obj["metadata"].get("ownerReferences") or []
        if not self.garbage_collect or not owners:
            return
        if not all(o.get("uid") in self.deleted_uids for o in owners):
            return
        uid = obj["metadata"]["uid"]

        async def collect() -> None:
            await asyncio.sleep(0)  # the writer's answer first, as from the real collector
            live = self.store.get(key)
            if live is not None and live["metadata"]["uid"] == uid:
                await self._delete(key, None)

        task = asyncio.get_running_loop().create_task(collect())
        self._collecting.add(task)
        task.add_done_callback(self._collecting.discard)

    async def _delete(self, key: Key, options: dict[str, Any] | None) -> dict[str, Any]:
        obj = self._get(key)
        want_uid = ((options or {}).get("preconditions") or {}).get("uid")
        if want_uid and want_uid != obj["metadata"]["uid"]:
            raise kmock.KubernetesError(status=409, reason="Conflict", message="uid precondition")
        if obj["metadata"].get("finalizers"):
            if not obj["metadata"].get("deletionTimestamp"):
                new = copy.deepcopy(obj)
                new["metadata"]["deletionTimestamp"] = _now()
                return await self._replace(key, new)
            return obj
        return await self._remove(key)

    # test helpers -------------------------------------------------------------------------
    def snapshot(self) -> str:
        return json.dumps(sorted(self.store.items(), key=lambda kv: str(kv[0])), default=str)
