"""GPU memory and utilisation samples: read at scrape time, absent without a GPU."""

from __future__ import annotations

import sys

from docparser_runtime.server.ops.gpu_metrics import DeviceMemory, GpuCollector, torch_memory
from docparser_runtime.server.ops.metrics import Metrics
from prometheus_client import CollectorRegistry, generate_latest


def test_samples_per_device_and_kind() -> None:
    registry = CollectorRegistry()
    registry.register(
        GpuCollector(
            memory=lambda: [DeviceMemory(0, 10 * 2**30, 12 * 2**30, 11 * 2**30)],
            utilisation=lambda: {0: 0.75},
        )
    )
    get = registry.get_sample_value
    assert get("docparser_gpu_memory_bytes", {"device": "0", "kind": "allocated"}) == 10 * 2**30
    assert get("docparser_gpu_memory_bytes", {"device": "0", "kind": "reserved"}) == 12 * 2**30
    assert get("docparser_gpu_memory_bytes", {"device": "0", "kind": "peak"}) == 11 * 2**30
    assert get("docparser_gpu_utilization_ratio", {"device": "0"}) == 0.75


def test_no_gpu_no_samples_and_torch_is_never_imported_for_them() -> None:
    text = generate_latest(Metrics().registry).decode()
    assert "docparser_gpu_memory_bytes" not in text  # a CPU machine: no devices
    if "torch" not in sys.modules:
        assert torch_memory() == [] and "torch" not in sys.modules
