"""The cordon watch's loop: a node cordoned or uncordoned wakes only the DocParsers with pods on it.

kube/nodes.py keeps the set of cordoned nodes (a watch read in its own thread); every pass reads
it (core/plan/drain.py). Between resyncs a change must still reach the owners at once (their
replacements should start now, not at the next resync), but only theirs: a cordon of a node
none of our pods run on costs nothing, and a quiet cluster sends no event and wakes no one.
The watch thread only hands the changed names to the event loop: the pod index it is matched
against (kopf's) is mutated there, so it is read there.
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


async def watch_loop(
    nodes: CordonedNodes,
    pods: Callable[[], list[dict[str, Any]]],
    wake: Callable[[set[tuple[str, str]]], object],
) -> None:
    """Run the cordon watch until cancelled (operator shutdown, then the watch stops); ``wake``
    the owners of pods on nodes whose cordon changed."""
    loop = asyncio.get_running_loop()
    changes: asyncio.Queue[frozenset[str]] = asyncio.Queue()
    nodes.watch(lambda changed: loop.call_soon_threadsafe(changes.put_nowait, changed))
    try:
        while True:
            changed = await changes.get()
            try:
                owners = owners_on(changed, pods())
                if owners:
                    await asyncio.to_thread(wake, owners)
            except Exception:  # never let one bad round stop drain protection
                log.exception("waking the owners of pods on %s failed", sorted(changed))
    finally:
        await asyncio.to_thread(nodes.stop)
