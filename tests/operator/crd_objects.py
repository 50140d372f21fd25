"""DocParser objects as the real kube-apiserver's tests send them: raw dicts on the API's
own path, no model defaults applied, so the server's admission (CEL, pruning, defaults) is what
decides. A helper, not a test module: test_realcluster_crd.py (api/) and
test_realcluster_ownership.py (kube/) both create them, and test modules never import each
other across folders."""

from __future__ import annotations

import copy
import hashlib
from typing import Any

SHA_A = hashlib.sha256(b"weights manifest A").hexdigest()
SHA_B = hashlib.sha256(b"weights manifest B").hexdigest()
BASE_SPEC: dict[str, Any] = {
    "engine": "deepseek-ocr2",
    "weights": {"uri": "s3://models/deepseek-ocr-2", "version": "2026-01-27", "sha256": SHA_A},
    "runtime": {"image": "registry.example/docparser-runtime:0.1"},
}


def path(namespace: str, name: str = "", sub: str = "") -> str:
    base = f"/apis/docparser.io/v1alpha1/namespaces/{namespace}/docparsers"
    return "/".join(p for p in (base, name, sub) if p)


def docparser(name: str, spec: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": "docparser.io/v1alpha1",
        "kind": "DocParser",
        "metadata": {"name": name},
        "spec": spec,
        **extra,
    }


def with_changes(**changes: Any) -> dict[str, Any]:
    spec = copy.deepcopy(BASE_SPEC)
    for key, value in changes.items():
        if value is None:
            spec.pop(key, None)
        else:
            spec[key] = value
    return spec
