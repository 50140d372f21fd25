"""The long-lived parent of the local cluster's daemons, and the state file it keeps.

WHY a state file: `cluster-up`, `cluster-down`, `status` and the e2e suite are separate
processes; they find the supervisor, the node IP and the kubeconfig in `cluster.json`, and
`phase` says whether the node is usable ("running") or why not ("failed: ...").
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from ..processes import ProcessFailed
from .configs import Layout, Network
from .hostclean import clean_host
from .images import ImageError, import_archive, pause_archive
from .node import Node, node_ip

IMAGE_CACHE = (
    Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "docparser" / "images"
)


@dataclass(frozen=True)
class ClusterState:
    supervisor_pid: int
    phase: str  # starting | running | stopping | failed: <why>
    node_ip: str
    server: str
    kubeconfig: str
    started_at: float
    ready_after_s: float | None = None

    def to_json(self) -> dict[str, object]:
        return asdict(self)


def load_state(layout: Layout) -> ClusterState | None:
    try:
        return ClusterState(**json.loads(layout.state_file.read_text()))
    except (OSError, ValueError, TypeError):
        return None


def _save(layout: Layout, state: ClusterState) -> None:
    partial = layout.state_file.with_suffix(".tmp")
    partial.write_text(json.dumps(state.to_json(), indent=2))
    partial.rename(layout.state_file)


def _log(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} supervisor: {message}", flush=True)


def drain_pods(node: Node, timeout: float = 30.0) -> None:
    """Delete every pod while the kubelet still runs, so CNI tears each sandbox down properly."""
    for name in ("kube-controller-manager", "kube-scheduler"):  # nothing may recreate them
        for process in node.processes:
            if process.name == name:
                process.stop()
    try:
        node.kubectl(
            "delete",
            "pods",
            "--all",
            "--all-namespaces",
            "--grace-period=1",
            "--wait=false",
            timeout=20,
        )
    except (ProcessFailed, subprocess.TimeoutExpired) as err:
        _log(f"could not delete pods: {err}")
        return
    ctr = [
        "ctr",
        "--address",
        str(node.layout.containerd_socket),
        "-n",
        "k8s.io",
        "tasks",
        "ls",
        "-q",
    ]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not subprocess.run(ctr, capture_output=True, text=True).stdout.split():
            return
        time.sleep(0.5)
    _log("pods still running after the drain window; they are killed")


def supervise(layout: Layout) -> int:
    """Start the node, report "running", watch the daemons; SIGTERM stops and cleans up."""
    layout.root.mkdir(parents=True, exist_ok=True)
    network = Network(node_ip=node_ip())
    started = time.monotonic()
    state = ClusterState(
        os.getpid(),
        "starting",
        network.node_ip,
        network.server,
        str(layout.admin_kubeconfig),
        time.time(),
    )
    _save(layout, state)
    stopping = False

    def on_term(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    node = Node(layout, network)
    code = 0
    try:
        node.start()
        _log("daemons up; importing the pause image")
        import_archive(layout, pause_archive(IMAGE_CACHE))
        node.wait_node_ready()
        node.advertise_gpus(2)
        state = ClusterState(
            **{
                **state.to_json(),
                "phase": "running",
                "ready_after_s": round(time.monotonic() - started, 1),
            }
        )
        _save(layout, state)
        _log(f"node Ready after {state.ready_after_s}s; kubeconfig {layout.admin_kubeconfig}")
        while not stopping:
            for process in node.processes:
                process.check_alive()
            time.sleep(1)
    except (ProcessFailed, ImageError, OSError, subprocess.SubprocessError) as err:
        _log(f"failed: {err}")
        state = ClusterState(**{**state.to_json(), "phase": f"failed: {str(err)[:500]}"})
        _save(layout, state)
        code = 1
    finally:
        _log("stopping")
        if node.processes:
            drain_pods(node)
        node.stop()
        problems = clean_host(layout, node.bins / "kube-proxy", remove_root=False)
        for problem in problems:
            _log(f"left behind: {problem}")
        layout.state_file.unlink(missing_ok=True)
        _log("stopped")
    return code
