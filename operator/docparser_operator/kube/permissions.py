"""Before the operator starts: may it watch every kind it keeps an index of?

Why: the operator reads its children and pods from kopf indexes, and kopf runs no handler
until every index holds its initial list. A watch the API server forbids (a ClusterRole
trimmed by hand) is retried for ever, so that list never arrives and the operator would sit
silent: no DocParser reconciled, no error anywhere. Asking the API server first
(SelfSubjectAccessReview, which every authenticated identity may create) turns that into an
exit with the missing permissions named, which `kubectl logs` and the pod's restarts show.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

from docparser_operator.kube.client import ApiError, KubeClient, load_configuration

log = logging.getLogger("docparser_operator")

REVIEW_PATH = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"


@dataclass(frozen=True)
class Needed:
    group: str
    resource: str
    verb: str
    namespace: str  # "" = all namespaces

    def __str__(self) -> str:
        where = f"namespace {self.namespace}" if self.namespace else "all namespaces"
        return f"{self.verb} {self.resource}.{self.group or 'core'} in {where}"


def missing(
    client: KubeClient,
    kinds: Iterable[tuple[str, str]],
    namespaces: Iterable[str],
    verbs: tuple[str, ...] = ("list", "watch"),
) -> list[Needed]:
    """The (group, resource) x verb x namespace the caller may not do ([""]: all namespaces)."""
    denied = []
    for group, resource in kinds:
        for namespace in namespaces:
            for verb in verbs:
                need = Needed(group, resource, verb, namespace)
                review = client.request(
                    "POST",
                    REVIEW_PATH,
                    body={
                        "apiVersion": "authorization.k8s.io/v1",
                        "kind": "SelfSubjectAccessReview",
                        "spec": {
                            "resourceAttributes": {
                                "group": group,
                                "resource": resource,
                                "verb": verb,
                                "namespace": namespace,
                            }
                        },
                    },
                )
                if not (review.get("status") or {}).get("allowed"):
                    denied.append(need)
    return denied


def require_watches(
    kubeconfig: str | None,
    timeout_s: float,
    kinds: list[tuple[str, str]],
    namespaces: list[str],
) -> None:
    """Exit naming what RBAC denies, rather than wait for ever on a forbidden watch
    (the module doc says why)."""
    client = KubeClient(load_configuration(kubeconfig), timeout_s=timeout_s)
    try:
        denied = missing(client, kinds, namespaces or [""])
    except ApiError as exc:  # no answer: kopf's own retries and logs take it from here
        log.warning("could not check the operator's permissions: %s", exc)
        return
    if denied:
        raise SystemExit(
            "the operator may not "
            + "; ".join(str(d) for d in denied)
            + ": it reads these kinds from watches; grant what the chart's ClusterRole lists"
        )
