"""Children an earlier DocParser of the same name left: read again before a pass judges them.

A DocParser deleted and made again under its name (``kubectl delete`` then ``apply``, a GitOps
tool replacing it) finds its predecessor's children in the indexes for as long as the watch
has not delivered their deletion. The garbage collector may already have removed them: seen
through the lagging index, the new DocParser's Service or PDB "exists but is not owned by
this DocParser", a ChildConflict that left it without them until the next resync. So a child
whose controller is a DocParser of this name with another uid is read again (one GET each,
only on that rare path): gone, it leaves the view and the pass creates ours; still there (the
collector has not reached it), it stays, and its deletion wakes the new DocParser
(controller/child_events.py ``reconcile_owner``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from docparser_operator.api.kinds import ref_for
from docparser_operator.api.naming import KIND
from docparser_operator.core.plan.children import Key, Observed
from docparser_operator.kube.client import KubeClient


def left_by_predecessor(obj: Mapping[str, Any], name: str, uid: str) -> bool:
    """Whether ``obj``'s controller is a DocParser named ``name`` with another uid."""
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return any(
        r.get("controller") and r.get("kind") == KIND and r.get("name") == name for r in refs
    ) and not any(r.get("uid") == uid for r in refs)


def confirmed(
    client: KubeClient, namespace: str, name: str, uid: str, observed: Observed
) -> Observed:
    """``observed`` with each predecessor's child replaced by a fresh read (dropped if gone)."""
    stale = [key for key, obj in observed.children.items() if left_by_predecessor(obj, name, uid)]
    if not uid or not stale:
        return observed
    children: dict[Key, dict[str, Any]] = dict(observed.children)
    for kind, child in stale:
        live = client.get(ref_for(kind), namespace, child)
        if live is None:
            del children[(kind, child)]
        else:
            children[(kind, child)] = live
    return dataclasses.replace(observed, children=children)
