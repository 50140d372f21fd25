"""The runtime series ``status.capacity`` reads (issue 36): the service time of each tier's
pages, the decode slots, and the pod's memory against its limit (from its own cgroup)."""

from __future__ import annotations

from pathlib import Path

import pytest
from cgroup_tree import V2_MOUNT, cgroup_tree
from docparser_runtime.engines.base import ParseOptions
from docparser_runtime.server.inference.batcher import MicroBatcher
from docparser_runtime.server.ops.metrics import Metrics
from docparser_runtime.server.ops.pod_memory_metrics import PodMemoryCollector
from docparser_runtime.sizing.cgroup_memory import MemoryUsage, cgroup_memory_usage
from engines_for_tests import GatedEngine, page
from prometheus_client import CollectorRegistry

GIB = 1024**3


async def test_each_served_page_adds_its_slot_seconds_to_its_tier() -> None:
    """A real MicroBatcher: the histogram's count is the pages served at that tier, and its
    sum the seconds the scheduler measured (what the wait estimate learns from too)."""
    metrics = Metrics()
    batcher = MicroBatcher(
        GatedEngine(), max_batch_size=3, max_wait_ms=1.0, max_queue_pages=64, metrics=metrics
    )
    batcher.start()
    try:
        for tier, pages in ((0, 2), (3, 3)):
            options = ParseOptions(tier=tier, mode="markdown", max_new_tokens=16)
            await batcher.submit([page(i) for i in range(pages)], options)
    finally:
        await batcher.close()
    get = metrics.registry.get_sample_value
    assert get("docparser_decode_slots") == 3
    assert get("docparser_page_service_seconds_count", {"tier": "0"}) == 2
    assert get("docparser_page_service_seconds_count", {"tier": "3"}) == 3
    assert get("docparser_page_service_seconds_sum", {"tier": "3"}) >= 0
    assert get("docparser_page_service_seconds_count", {"tier": "6"}) is None


def test_cgroup_usage_v2_and_v1(tmp_path: Path) -> None:
    v2 = cgroup_tree(
        tmp_path / "v2",
        "0::/kubepods/pod1/ctr\n",
        V2_MOUNT,
        {
            "sys/fs/cgroup/kubepods/pod1/ctr/memory.current": str(3 * GIB),
            "sys/fs/cgroup/kubepods/pod1/ctr/memory.peak": str(5 * GIB),
        },
    )
    assert cgroup_memory_usage(v2) == MemoryUsage(3 * GIB, 5 * GIB)
    old_kernel = cgroup_tree(
        tmp_path / "v2old", "0::/\n", V2_MOUNT, {"sys/fs/cgroup/memory.current": str(GIB)}
    )
    assert cgroup_memory_usage(old_kernel) == MemoryUsage(GIB, None)
    v1_mount = "40 23 0:30 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"
    v1 = cgroup_tree(
        tmp_path / "v1",
        "4:memory:/pod2\n",
        v1_mount,
        {
            "sys/fs/cgroup/memory/pod2/memory.usage_in_bytes": str(2 * GIB),
            "sys/fs/cgroup/memory/pod2/memory.max_usage_in_bytes": str(4 * GIB),
        },
    )
    assert cgroup_memory_usage(v1) == MemoryUsage(2 * GIB, 4 * GIB)
    assert cgroup_memory_usage(cgroup_tree(tmp_path / "none", "", "", {})) is None


def test_the_collector_keeps_the_highest_it_saw_without_a_kernel_peak() -> None:
    now = [MemoryUsage(2 * GIB, None)]
    registry = CollectorRegistry()
    registry.register(PodMemoryCollector(lambda: now[0], lambda: 8 * GIB))
    assert registry.get_sample_value("docparser_memory_bytes", {"kind": "peak"}) == 2 * GIB
    now[0] = MemoryUsage(GIB, None)  # the scrape after the busy one
    assert registry.get_sample_value("docparser_memory_bytes", {"kind": "current"}) == GIB
    assert registry.get_sample_value("docparser_memory_bytes", {"kind": "peak"}) == 2 * GIB
    assert registry.get_sample_value("docparser_memory_bytes", {"kind": "limit"}) == 8 * GIB


def test_no_readable_cgroup_exports_no_memory_samples() -> None:
    registry = CollectorRegistry()
    registry.register(PodMemoryCollector(lambda: None, lambda: pytest.fail("not read")))
    assert registry.get_sample_value("docparser_memory_bytes", {"kind": "peak"}) is None
