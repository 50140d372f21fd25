"""The pod's host memory against its limit, for Prometheus (``docparser_memory_bytes``).

Why: ``status.capacity`` (issue 36) compares a pod's memory peak with its limit, so an owner
learns that ``resources.memory`` is far above (money) or near (OOM kills) what the traffic
needs. The pod's limit is charged to its cgroup (the server, its sandboxed decoders and the
engine together), so the figures are the cgroup's own (``cgroup_memory``), read at scrape
time: ``current``, ``peak`` since the cgroup started (the kernel's, or the highest this
process saw at a scrape where the kernel keeps none) and ``limit`` (the machine's RAM when no
cgroup sets one). Outside a container nothing is readable and no sample is exported.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from docparser_runtime.sizing.cgroup_memory import (
    MemoryUsage,
    cgroup_memory_usage,
    host_memory_limit,
)


class PodMemoryCollector(Collector):
    """``docparser_memory_bytes{kind=current|peak|limit}`` of this process's cgroup."""

    def __init__(
        self,
        usage: Callable[[], MemoryUsage | None] = cgroup_memory_usage,
        limit: Callable[[], int] = lambda: host_memory_limit(Path("/")).bytes,
    ) -> None:
        self.usage = usage
        self.limit = limit
        self.highest = 0  # the highest current seen, for kernels without memory.peak

    def collect(self) -> Iterator[GaugeMetricFamily]:
        used = self.usage()
        if used is None:
            return
        self.highest = max(self.highest, used.current, used.peak or 0)
        family = GaugeMetricFamily(
            "docparser_memory_bytes",
            "Host memory of this pod's cgroup: current, peak since it started, and its limit.",
            labels=["kind"],
        )
        family.add_metric(["current"], used.current)
        family.add_metric(["peak"], self.highest)
        family.add_metric(["limit"], self.limit())
        yield family

    def describe(self) -> list[GaugeMetricFamily]:
        return []  # samples exist only where a cgroup is readable
