"""GPU memory and utilisation of this process, for Prometheus.

Why: DCGM exporters show a node's GPUs, not what this runtime holds; the deployment guides
we follow alert on GPU memory above 95 %, and an operator sizing batches wants the
allocator's own view (allocated, reserved by the caching allocator, peak since start).
The collector reads torch only if the engine already imported it (a CPU engine never
pays for torch), and NVML (``nvidia-ml-py``) for utilisation only where it is installed.
Samples are taken at scrape time, so nothing runs between scrapes.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector


@dataclass(frozen=True)
class DeviceMemory:
    device: int
    allocated: int
    reserved: int
    peak: int


def torch_memory() -> list[DeviceMemory]:
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available():
        return []
    return [
        DeviceMemory(
            i,
            torch.cuda.memory_allocated(i),
            torch.cuda.memory_reserved(i),
            torch.cuda.max_memory_allocated(i),
        )
        for i in range(torch.cuda.device_count())
    ]


def nvml_utilisation() -> dict[int, float]:
    """Busy fraction per device from NVML, or nothing where NVML is absent."""
    try:
        import pynvml  # nvidia-ml-py
    except ImportError:
        return {}
    try:
        pynvml.nvmlInit()
        count = pynvml.nvmlDeviceGetCount()
        return {
            i: pynvml.nvmlDeviceGetUtilizationRates(pynvml.nvmlDeviceGetHandleByIndex(i)).gpu
            / 100.0
            for i in range(count)
        }
    except Exception:  # no driver, no device: no samples rather than a failed scrape
        return {}


class GpuCollector(Collector):
    def __init__(
        self,
        memory: Callable[[], list[DeviceMemory]] = torch_memory,
        utilisation: Callable[[], dict[int, float]] = nvml_utilisation,
    ) -> None:
        self.memory = memory
        self.utilisation = utilisation

    def collect(self) -> Iterator[GaugeMetricFamily]:
        devices = self.memory()
        if devices:
            mem = GaugeMetricFamily(
                "docparser_gpu_memory_bytes",
                "GPU memory of this process by device: allocated, reserved (caching "
                "allocator) and peak allocated since start.",
                labels=["device", "kind"],
            )
            for d in devices:
                for kind, value in (("allocated", d.allocated), ("reserved", d.reserved),
                                    ("peak", d.peak)):  # fmt: skip
                    mem.add_metric([str(d.device), kind], value)
            yield mem
        busy = self.utilisation()
        if busy:
            util = GaugeMetricFamily(
                "docparser_gpu_utilization_ratio",
                "GPU busy fraction by device (NVML), 0..1.",
                labels=["device"],
            )
            for device, ratio in sorted(busy.items()):
                util.add_metric([str(device)], ratio)
            yield util

    def describe(self) -> list[GaugeMetricFamily]:
        return []  # samples exist only on GPU machines: never fail a registration elsewhere
