"""Labels and selectors of children, shared by the renderers and the reconciler.

Every child carries ``app.kubernetes.io/managed-by: docparser-operator`` plus the instance
name, so the reconciler lists (and prunes) only what it created; objects without these
labels are never touched. Pod selectors use only immutable facts (instance and track):
a Deployment's selector cannot change, so the weights version is a label, not a selector.
"""

from __future__ import annotations

from typing import Literal

from docparser_operator.api.naming import Track

APP_NAME = "docparser"
# The front's pods (replicas.min 0): another name, so that no selector of the runtime pods
# (the endpoint Service at rest, the PDB, status.selector for the HPA) ever counts them.
FRONT_APP_NAME = "docparser-front"
MANAGED_BY = "docparser-operator"
# The batch pool's pods (spec.batch): another name too, so that no Service, HTTPRoute backend,
# PDB or status.selector of the serving pods counts them (they take batch lines only).
BATCH_APP_NAME = "docparser-batch"
BATCH_COMPONENT = "batch"

LABEL_NAME = "app.kubernetes.io/name"
LABEL_INSTANCE = "app.kubernetes.io/instance"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_COMPONENT = "app.kubernetes.io/component"
LABEL_TRACK = "docparser.io/track"
LABEL_VERSION = "docparser.io/version"
LABEL_REVISION = "docparser.io/revision"
# On a previous revision's Deployment: the DocParser generation at which it left the spec.
LABEL_RETIRED = "docparser.io/retired-generation"

# Children that serve both tracks (endpoint Service, HTTPRoute, PDB) carry this track value.
TRACK_SHARED: Literal["shared"] = "shared"
TrackLabel = Track | Literal["shared"]


def owned_selector(name: str) -> dict[str, str]:
    """Matches every child of one DocParser (what the reconciler lists and prunes)."""
    return {LABEL_MANAGED_BY: MANAGED_BY, LABEL_INSTANCE: name}


def _labels(name: str, key: str, value: str, version: str | None) -> dict[str, str]:
    labels = {
        LABEL_NAME: APP_NAME,
        LABEL_INSTANCE: name,
        LABEL_MANAGED_BY: MANAGED_BY,
        LABEL_COMPONENT: "runtime",
        key: value,
    }
    if version:
        labels[LABEL_VERSION] = version
    return labels


def child_labels(name: str, track: TrackLabel, version: str | None = None) -> dict[str, str]:
    """Labels of a child object: its role (track), never used to select pods."""
    return _labels(name, LABEL_TRACK, track, version)


def pod_selector(name: str, revision: str | None = None) -> dict[str, str]:
    """Runtime pods of one DocParser, optionally of one revision."""
    selector = {LABEL_NAME: APP_NAME, LABEL_INSTANCE: name}
    if revision is not None:
        selector[LABEL_REVISION] = revision
    return selector


def front_selector(name: str) -> dict[str, str]:
    """The front pods of one DocParser (replicas.min 0)."""
    return {LABEL_NAME: FRONT_APP_NAME, LABEL_INSTANCE: name}


def front_pod_labels(name: str) -> dict[str, str]:
    return {**front_selector(name), LABEL_MANAGED_BY: MANAGED_BY, LABEL_COMPONENT: "front"}


def batch_selector(name: str) -> dict[str, str]:
    """The batch pool's pods of one DocParser (spec.batch): every revision of the pool."""
    return {LABEL_NAME: BATCH_APP_NAME, LABEL_INSTANCE: name}


def batch_pod_labels(name: str, revision: str, version: str | None) -> dict[str, str]:
    """A pool pod: the stable revision it runs (its output lines name it), never selected by
    the serving pods' selectors (``LABEL_NAME`` differs)."""
    pod = {**_labels(name, LABEL_REVISION, revision, version), **batch_selector(name)}
    return {**pod, LABEL_COMPONENT: BATCH_COMPONENT}


def pod_labels(name: str, revision: str, version: str | None) -> dict[str, str]:
    """Labels of a revision's pods (its template): fixed for the revision's whole life."""
    return _labels(name, LABEL_REVISION, revision, version)


def selector_string(selector: dict[str, str]) -> str:
    """``k=v,k=v`` form (status.selector for the scale subresource, label_selector queries)."""
    return ",".join(f"{k}={v}" for k, v in sorted(selector.items()))
