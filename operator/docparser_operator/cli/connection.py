"""Where the rollout verbs connect, by kubectl's rules, so ``kubectl docparser`` behaves as a
kubectl plugin is expected to (and ``docparser-operator`` the same way):

- credentials: ``--kubeconfig``, else ``KUBECONFIG`` (a list of files, merged), else
  ``~/.kube/config``; in a pod with none of them, the pod's service account;
- ``--context``, else the kubeconfig's current context;
- namespace: ``-n``, else the context's namespace, else the pod's, else ``default``.

WHY here and not in kube/client.py: the controller always runs with one identity and watches
namespaces it is given; only a person's command line picks a context and a namespace.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from kubernetes import client as k8s_client
from kubernetes import config as k8s_config
from kubernetes.config.config_exception import ConfigException

SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


class NoConnection(RuntimeError):
    """No usable kubeconfig, or a context it does not have."""


@dataclass(frozen=True)
class Connection:
    configuration: k8s_client.Configuration
    namespace: str
    context: str | None  # None: in-cluster credentials


def _kubeconfig_path(kubeconfig: str | None) -> str | None:
    """The kubeconfig (list) to read, or None when there is none (then: in-cluster)."""
    if kubeconfig:
        return kubeconfig
    listed = os.environ.get("KUBECONFIG")
    if listed:
        return listed
    default = Path.home() / ".kube" / "config"
    return str(default) if default.is_file() else None


def connect(
    *, kubeconfig: str | None = None, context: str | None = None, namespace: str | None = None
) -> Connection:
    """The client configuration and namespace for one command (see the module docstring)."""
    path = _kubeconfig_path(kubeconfig)
    cfg = k8s_client.Configuration()
    if path is None:
        if context:
            raise NoConnection(f"--context {context}: no kubeconfig (KUBECONFIG, ~/.kube)")
        try:
            k8s_config.load_incluster_config(client_configuration=cfg)
        except ConfigException as exc:
            raise NoConnection(f"no kubeconfig and not in a pod: {exc}") from exc
        pod_namespace = (
            SERVICE_ACCOUNT_NAMESPACE.read_text().strip()
            if SERVICE_ACCOUNT_NAMESPACE.is_file()
            else "default"
        )
        return Connection(cfg, namespace or pod_namespace, None)
    try:
        contexts, current = k8s_config.list_kube_config_contexts(config_file=path)
        chosen = context or (current or {}).get("name")
        entry = next((c for c in contexts or [] if c.get("name") == chosen), None)
        if entry is None:
            raise NoConnection(f"context {chosen!r} is not in {path}")
        k8s_config.load_kube_config(config_file=path, context=chosen, client_configuration=cfg)
    except ConfigException as exc:
        raise NoConnection(f"{path}: {exc}") from exc
    context_namespace = (entry.get("context") or {}).get("namespace")
    return Connection(cfg, namespace or context_namespace or "default", str(chosen))
