"""A deliberately small Kubernetes REST client for the test control plane.

WHY not the `kubernetes` package: the harness and the realcluster tests must show exactly what
goes over the wire (content types for merge/apply patches, fieldManager, force, the status
subresource), and must not share a client with the operator under test, so a client bug cannot
hide an operator bug.
"""

from __future__ import annotations

import json
import ssl
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import httpx
import yaml

APPLY_PATCH = "application/apply-patch+yaml"
MERGE_PATCH = "application/merge-patch+json"
HARNESS = "docparser-test-harness"
CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


class KubeApiError(RuntimeError):
    """A non-2xx answer from the API server, keeping the Status object the server sent."""

    def __init__(self, method: str, path: str, status_code: int, body: dict[str, Any] | str):
        self.status_code = status_code
        self.body = body
        message = body.get("message", "") if isinstance(body, dict) else body
        self.reason = body.get("reason", "") if isinstance(body, dict) else ""
        super().__init__(f"{method} {path} -> {status_code} {self.reason}: {message}")


class KubeApi:
    """Token-authenticated JSON calls against one API server, verifying its serving certificate."""

    def __init__(self, server: str, token: str, ca_file: Path, *, timeout: float = 30.0):
        self.server = server
        self.last_warnings: list[str] = []  # Warning headers of the last reply
        self._client = httpx.Client(
            base_url=server,
            headers={"Authorization": f"Bearer {token}", "Accept": "application/json"},
            verify=ssl.create_default_context(cafile=str(ca_file)),
            timeout=timeout,
        )

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> KubeApi:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
        params: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """One call; KubeApiError on any non-2xx status, so tests assert on the server's verdict."""
        content = None
        if body is not None:
            content = yaml.safe_dump(body) if content_type == APPLY_PATCH else json.dumps(body)
        reply = self._client.request(
            method, path, content=content, params=params, headers={"Content-Type": content_type}
        )
        self.last_warnings = reply.headers.get_list("warning")
        try:
            payload: Any = reply.json()
        except ValueError:
            payload = reply.text
        if reply.status_code >= 300:
            raise KubeApiError(method, path, reply.status_code, payload)
        return payload if isinstance(payload, dict) else {"raw": payload}

    def get(self, path: str, **params: Any) -> dict[str, Any]:
        return self.request("GET", path, params=params or None)

    def create(self, path: str, body: dict[str, Any], **params: Any) -> dict[str, Any]:
        return self.request("POST", path, body, params=params or None)

    def merge_patch(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return self.request("PATCH", path, body, content_type=MERGE_PATCH)

    def apply(
        self, path: str, body: dict[str, Any], *, field_manager: str, force: bool = False
    ) -> dict[str, Any]:
        """Server-side apply (PATCH with apply-patch+yaml) as `field_manager`."""
        params: dict[str, Any] = {"fieldManager": field_manager}
        if force:
            params["force"] = "true"
        return self.request("PATCH", path, body, content_type=APPLY_PATCH, params=params)

    def delete(self, path: str) -> dict[str, Any]:
        return self.request("DELETE", path)

    def wait_for(self, what: str, probe, *, timeout: float, interval: float = 0.1):
        """Poll `probe()` until it returns a truthy value (returned) or `timeout` seconds pass."""
        deadline = time.monotonic() + timeout
        last_error: Exception | None = None
        while time.monotonic() < deadline:
            try:
                value = probe()
            except (KubeApiError, httpx.HTTPError) as exc:
                value, last_error = None, exc
            if value:
                return value
            time.sleep(interval)
        raise TimeoutError(f"{what} not reached within {timeout:.0f}s (last error: {last_error})")

    def install_crds(
        self, manifests: Iterable[dict[str, Any]], *, timeout: float = 30.0
    ) -> list[str]:
        """Apply CRDs, wait until each is Established and its resource served; returns names."""
        names: list[str] = []
        for crd in manifests:
            name = crd["metadata"]["name"]
            self.apply(f"{CRD_PATH}/{name}", crd, field_manager=HARNESS, force=True)
            names.append(name)
        for crd in manifests:
            self._wait_served(crd, timeout=timeout)
        return names

    def _wait_served(self, crd: dict[str, Any], *, timeout: float) -> None:
        name = crd["metadata"]["name"]

        def established() -> bool:
            # a CRD just created has `status.conditions: null`: a present key with a null value
            status = self.get(f"{CRD_PATH}/{name}").get("status") or {}
            conditions = status.get("conditions") or []
            return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

        self.wait_for(f"CRD {name} Established", established, timeout=timeout)
        group, plural = crd["spec"]["group"], crd["spec"]["names"]["plural"]
        served = [v["name"] for v in crd["spec"]["versions"] if v.get("served", True)]
        # Established can precede the handler being routable for a moment: list once per version.
        for version in served:
            self.wait_for(
                f"list {plural}.{group}/{version}",
                lambda v=version: self.get(f"/apis/{group}/{v}/{plural}", limit=1),
                timeout=timeout,
            )


def load_crds(paths: Iterable[Path]) -> list[dict[str, Any]]:
    """All CustomResourceDefinition documents in YAML files (other kinds ignored)."""
    crds: list[dict[str, Any]] = []
    for path in paths:
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition":
                crds.append(doc)
    return crds
