"""Starting the operator: the permission check, leader election, then kopf.

Kept apart from handlers.py (what each trigger does) because this is process start-up: it runs
once, before any handler, and decides whether this replica acts at all (the Lease).
"""

from __future__ import annotations

import logging

import kopf

from docparser_operator.api.kinds import INDEXED
from docparser_operator.controller import handlers  # noqa: F401  (registers the handlers)
from docparser_operator.controller.metrics import OperatorMetrics
from docparser_operator.controller.settings import OperatorSettings
from docparser_operator.kube import leader, permissions
from docparser_operator.kube.client import load_configuration


def run(namespaces: list[str]) -> None:
    """Entry point of ``docparser-operator run``: all namespaces unless some are named."""
    settings = OperatorSettings()
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )

    metrics = OperatorMetrics.create()
    if settings.metrics_port:
        metrics.serve(settings.metrics_port)

    def run_kopf() -> None:
        kopf.run(
            standalone=True,
            clusterwide=not namespaces,
            namespaces=namespaces,
            liveness_endpoint=settings.liveness_endpoint,
            memo=kopf.Memo(metrics=metrics),
        )

    permissions.require_watches(
        settings.kubeconfig,
        settings.request_timeout_s,
        [(r.group, r.plural) for r in INDEXED],
        namespaces,
    )
    if not settings.leader_elect:
        run_kopf()
        return
    lease = leader.LeaseSettings(
        name=settings.lease_name,
        namespace=settings.pod_namespace or _service_account_namespace(),
        identity=leader.LeaseSettings.identity_for(settings.pod_name),
    )
    leader.lead_then(
        run_kopf,
        lease,
        load_configuration(settings.kubeconfig),
        liveness_endpoint=settings.liveness_endpoint,
    )


def _service_account_namespace() -> str:
    path = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError as err:
        raise SystemExit(
            "leader election needs POD_NAMESPACE (or to run in a pod) to place its Lease"
        ) from err
