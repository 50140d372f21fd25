"""Thin, synchronous Kubernetes I/O for the operator.

Why raw REST calls instead of the generated typed APIs: the operator handles every child as a
plain dict (what the pure renderers return) and needs server-side apply with an explicit
field manager, label-selected lists and delete preconditions; the generated models add nothing
but conversion. Credentials come from the ``kubernetes`` package's config loaders (in-cluster
or KUBECONFIG). Every request is counted so benchmarks and tests can assert on writes.
"""

from __future__ import annotations

import contextlib
import copy
import json
import threading
import time
import urllib.parse
from collections import Counter
from typing import Any

from kubernetes import client as k8s_client
from kubernetes import config as k8s_config
from kubernetes.config.config_exception import ConfigException

from docparser_operator.api.kinds import ResourceRef, ref_for
from docparser_operator.api.naming import FIELD_MANAGER

USER_AGENT = "docparser-operator/0.1"
WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
IMPOSSIBLE_RESOURCE_VERSION = str(2**63 - 1)  # a precondition no object meets (apply_new)
REFUSED_VERSION = "resourceVersion should not be set"  # an old server's 500 on such a create


class ApiError(Exception):
    """A non-2xx answer from the API server (status and the server's message kept)."""

    def __init__(self, status: int, reason: str, message: str, method: str, path: str) -> None:
        super().__init__(f"{method} {path}: {status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message

    @property
    def transient(self) -> bool:
        """Worth retrying with backoff (server trouble, throttling, conflicts, timeouts)."""
        return self.status in (409, 429) or self.status >= 500 or self.status == 0


def load_configuration(kubeconfig: str | None = None) -> k8s_client.Configuration:
    """In-cluster credentials when running in a pod, else ``kubeconfig`` / ~/.kube/config.

    The path is passed in (from settings) because the kubernetes package reads KUBECONFIG
    only once, at import time."""
    cfg = k8s_client.Configuration()
    try:
        k8s_config.load_incluster_config(client_configuration=cfg)
    except ConfigException:
        k8s_config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
    return cfg


class KubeClient:
    """Dict-in, dict-out Kubernetes client with request accounting.

    Thread-safe: kopf runs sync handlers in a thread pool; urllib3's pool is thread-safe
    and the counters are guarded by a lock.
    """

    refresh_s = 1.0  # the credentials' refresh hook runs at most this often (_headers)

    def __init__(
        self,
        configuration: k8s_client.Configuration | None = None,
        *,
        user_agent: str = USER_AGENT,
        timeout_s: float = 30.0,
    ) -> None:
        self.cfg = configuration or load_configuration()
        self._rest = k8s_client.rest.RESTClientObject(self.cfg)
        self.user_agent = user_agent
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        self.counts: Counter[str] = Counter()  # method -> number of requests sent
        self._refreshed = float("-inf")  # monotonic time the credentials were last refreshed

    # accounting ---------------------------------------------------------------------------
    @property
    def writes(self) -> int:
        with self._lock:
            return sum(n for m, n in self.counts.items() if m in WRITE_METHODS)

    @property
    def total(self) -> int:
        with self._lock:
            return sum(self.counts.values())

    # transport ----------------------------------------------------------------------------
    def _headers(self, content_type: str | None) -> dict[str, str]:
        # The kubernetes package's hook re-applies the whole kubeconfig (or in-cluster config)
        # on every call: its host setter scans the environment for proxies. It ran twice per
        # request (here and inside ``auth_settings``), about a tenth of the reconcile threads'
        # CPU (py-spy, docs/benchmarks.md). It renews a token 5 minutes before its expiry
        # (in-cluster: re-reads it each minute), so once a second never sends an expired one.
        now = time.monotonic()
        if self.cfg.refresh_api_key_hook is not None and now - self._refreshed >= self.refresh_s:
            self._refreshed = now
            self.cfg.refresh_api_key_hook(self.cfg)
        headers = {"Accept": "application/json", "User-Agent": self.user_agent}
        if content_type:
            headers["Content-Type"] = content_type
        # What ``auth_settings()`` sends (its one header, the bearer token), without its call
        # of the hook: ``get_api_key_with_prefix``'s lookup of the key and its prefix.
        keys, prefixes = self.cfg.api_key, self.cfg.api_key_prefix
        key = keys.get("BearerToken", keys.get("authorization"))
        if key:
            prefix = prefixes.get("BearerToken", prefixes.get("authorization"))
            headers["authorization"] = f"{prefix} {key}" if prefix else key
        return headers

    def _send(
        self,
        method: str,
        path: str,
        query: dict[str, str] | None,
        body: Any,
        content_type: str | None,
        timeout: float | tuple[float, float],
    ) -> Any:
        """One counted request; the answer unread (a watch streams it)."""
        url = self.cfg.host.rstrip("/") + path
        if query:
            url += "?" + urllib.parse.urlencode(query)
        with self._lock:
            self.counts[method] += 1
        try:
            resp = self._rest.request(
                method,
                url,
                headers=self._headers(content_type if body is not None else None),
                body=body,  # the REST layer serialises dicts as JSON (valid YAML for apply)
                _request_timeout=timeout,
            )
        except k8s_client.exceptions.ApiException as exc:
            raise ApiError(exc.status or 0, str(exc.reason), str(exc.body), method, path) from exc
        except Exception as exc:  # connection refused, TLS, timeouts: all transient
            raise ApiError(0, type(exc).__name__, str(exc), method, path) from exc
        if not 200 <= resp.status < 300:
            data = resp.read()
            message = data.decode(errors="replace") if data else ""
            with contextlib.suppress(ValueError, AttributeError):
                message = json.loads(message).get("message", message)
            raise ApiError(resp.status, str(resp.reason), message, method, path)
        return resp

    def request(
        self,
        method: str,
        path: str,
        *,
        query: dict[str, str] | None = None,
        body: Any = None,
        content_type: str | None = "application/json",
    ) -> Any:
        resp = self._send(method, path, query, body, content_type, self.timeout_s)
        try:
            data = resp.read()
        except Exception as exc:  # the connection dropped mid-answer: transient
            raise ApiError(0, type(exc).__name__, str(exc), method, path) from exc
        return json.loads(data) if data else None

    def stream(self, path: str, query: dict[str, str], read_timeout_s: float) -> Any:
        """A watch: the urllib3 response, unread, for its newline-delimited events (counted
        as one GET). ``read_timeout_s`` bounds a silent connection (a peer gone without a
        FIN); close the response when done."""
        resp = self._send("GET", path, query, None, None, (self.timeout_s, read_timeout_s))
        return resp.response

    # verbs --------------------------------------------------------------------------------
    def get(self, ref: ResourceRef, namespace: str | None, name: str) -> dict[str, Any] | None:
        """The object, or None when it does not exist."""
        try:
            answer: dict[str, Any] = self.request("GET", ref.path(namespace, name))
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise
        return answer

    def list(
        self,
        ref: ResourceRef,
        namespace: str | None,
        *,
        selector: str | None = None,
        fields: str | None = None,
    ) -> list[dict[str, Any]]:
        """Items of a kind; a kind the server does not serve (CRD absent) lists as empty."""
        query = {"labelSelector": selector} if selector else {}
        if fields:
            query["fieldSelector"] = fields
        try:
            answer = self.request("GET", ref.path(namespace), query=query or None)
        except ApiError as exc:
            if exc.status == 404:
                return []
            raise
        items = answer.get("items") or []
        for item in items:  # lists omit kind/apiVersion on items
            item.setdefault("apiVersion", ref.api_version)
            item.setdefault("kind", ref.kind)
        return items

    def apply(
        self, obj: dict[str, Any], *, force: bool = True, manager: str = FIELD_MANAGER
    ) -> dict[str, Any]:
        """Server-side apply (JSON is valid YAML, so apply-patch+yaml takes it as is)."""
        ref = ref_for(obj)
        meta = obj["metadata"]
        query = {"fieldManager": manager}
        if force:
            query["force"] = "true"
        answer: dict[str, Any] = self.request(
            "PATCH",
            ref.path(meta.get("namespace"), meta["name"]),
            query=query,
            body=obj,
            content_type="application/apply-patch+yaml",
        )
        return answer

    def apply_new(self, obj: dict[str, Any]) -> dict[str, Any] | None:
        """Server-side apply that only creates: the object, or None when one of that name
        exists already (nothing written then).

        Why: a forced apply on an existing object takes it over, so a child the watched view
        lacks was read before its first apply (two requests to create it). The apply carries a
        ``resourceVersion`` no object can have (etcd's revisions are far below 2^63 - 1): the
        API server ignores it when it creates the object and answers 409 Conflict when an
        object of that name exists, as it does for any stale resourceVersion. The object
        created is the same as a plain apply's, owned by our field manager with an ``Apply``
        entry (a POST would leave an ``Update`` entry, and fields we stop applying would
        then never be removed). A server that refuses a resourceVersion on a create (kube
        1.22's Services answered 500) also reads as None: the caller reads the object then."""
        body = copy.deepcopy(obj)
        body["metadata"]["resourceVersion"] = IMPOSSIBLE_RESOURCE_VERSION
        try:
            return self.apply(body, force=True)
        except ApiError as exc:
            if exc.status == 409 or (exc.status == 500 and REFUSED_VERSION in exc.message):
                return None
            raise

    def patch_status(
        self, ref: ResourceRef, namespace: str, name: str, status: dict[str, Any]
    ) -> dict[str, Any]:
        """Merge-patch the status subresource (a plain replace of the fields we compute)."""
        answer: dict[str, Any] = self.request(
            "PATCH",
            ref.path(namespace, name, "status"),
            body={"status": status},
            content_type="application/merge-patch+json",
        )
        return answer

    def patch(
        self, ref: ResourceRef, namespace: str, name: str, body: dict[str, Any]
    ) -> dict[str, Any]:
        """Merge-patch an object as our field manager (scaling a previous revision, whose
        template we no longer render and so must not apply)."""
        answer: dict[str, Any] = self.request(
            "PATCH",
            ref.path(namespace, name),
            query={"fieldManager": FIELD_MANAGER},
            body=body,
            content_type="application/merge-patch+json",
        )
        return answer

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        ref = ref_for(obj)
        answer: dict[str, Any] = self.request(
            "POST", ref.path(obj["metadata"].get("namespace")), body=obj
        )
        return answer

    def delete(self, ref: ResourceRef, namespace: str | None, name: str, *, uid: str) -> bool:
        """Delete only the object with this uid (a same-named newcomer is never hit)."""
        body = {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "preconditions": {"uid": uid},
            "propagationPolicy": "Background",
        }
        try:
            self.request("DELETE", ref.path(namespace, name), body=body)
        except ApiError as exc:
            if exc.status in (404, 409):  # already gone, or replaced by someone else's object
                return False
            raise
        return True
