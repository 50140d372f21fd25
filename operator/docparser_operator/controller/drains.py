"""The cordon poll's loop: a node cordoned or uncordoned wakes only the DocParsers with pods on it.

kube/nodes.py keeps the set of cordoned nodes; every pass reads it (core/drain.py). Between
resyncs a change must still reach the owners at once (their replacements should start now,
not at the next resync), but only theirs: a cordon of a node none of our pods run on costs
nothing, and a quiet cluster's poll changes nothing and wakes no one.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from docparser_operator.kube.nodes import CordonedNodes
from docparser_operator.kube.observer import index_key

log = logging.getLogger("docparser_operator")


def owners_on(
    nodes: frozenset[str],
    pods: Iterable[Mapping[str, Any]],
) -> set[tuple[str, str]]:
    """(namespace, DocParser) of the runtime pods scheduled on ``nodes``."""
    found = set()
    for pod in pods:
        if (pod.get("spec") or {}).get("nodeName") in nodes:
            key = index_key(pod)
            if key is not None:
                found.add(key)
    return found


async def poll_loop(
    nodes: CordonedNodes,
    interval_s: float,
    pods: Callable[[], list[dict[str, Any]]],
    wake: Callable[[set[tuple[str, str]]], object],
) -> None:
    """Poll every ``interval_s``; ``wake`` the owners of pods on nodes whose cordon changed."""
    while True:
        await asyncio.sleep(interval_s)
        try:
            changed = await asyncio.to_thread(nodes.poll)
            if changed:
                owners = owners_on(changed, pods())
                if owners:
                    await asyncio.to_thread(wake, owners)
        except Exception:  # never let one bad round stop drain protection
            log.exception("the cordon poll failed")
