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
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..processes import ProcessFailed
from . import failures
from .agent import containerd_tasks
from .configs import Layout, Network
from .hostclean import clean_host
from .images import ImageError, import_archive, pause_archive
from .netns import NetworkSetupFailed, ensure_host_bridge, set_node_link
from .node import LocalCluster, node_ip
from .topology import NodePlan, node_by_name, plan_nodes

IMAGE_CACHE = (
    Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "docparser" / "images"
)
SETUP_ERRORS = (ProcessFailed, ImageError, NetworkSetupFailed, OSError, subprocess.SubprocessError)


@dataclass(frozen=True)
class ClusterState:
    supervisor_pid: int
    phase: str  # starting | running | stopping | failed: <why>
    node_ip: str
    server: str
    kubeconfig: str
    started_at: float
    ready_after_s: float | None = None
    # name, zone, address, netns ("" for the host's), containerd socket, per node
    nodes: list[dict[str, str]] = field(default_factory=list)

    def sockets(self) -> dict[str, Path]:
        """Each node's containerd socket: where `cluster-up` imports the images."""
        return {n["name"]: Path(n["containerd_socket"]) for n in self.nodes}

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


def drain_pods(cluster: LocalCluster, timeout: float = 30.0) -> None:
    """Delete every pod while the kubelets still run, so CNI tears each sandbox down properly."""
    for name in ("kube-controller-manager", "kube-scheduler"):  # nothing may recreate them
        for process in cluster.processes:
            if process.name == name:
                process.stop()
    try:
        cluster.kubectl(
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
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        running = []
        for agent in cluster.agents.values():
            if agent.processes:  # a failed node's containerd is gone: nothing to wait for
                try:
                    running += containerd_tasks(agent.dirs)
                except ProcessFailed:
                    continue
        if not running:
            return
        time.sleep(0.5)
    _log("pods still running after the drain window; they are killed")


def start_node(cluster: LocalCluster, node: NodePlan, pause: Path, timeout: float = 120.0) -> None:
    agent = cluster.agent(node)
    agent.start(timeout)
    import_archive(agent.dirs, pause)
    agent.start_rest(timeout)


def handle_requests(cluster: LocalCluster, pause: Path) -> None:
    """node-stop / node-start asked by `localcluster node-stop NAME` (failures.py)."""
    for path, request in failures.pending(cluster.layout):
        try:
            node = node_by_name(cluster.nodes, request.get("node", ""))
            agent = cluster.agent(node)
            if request.get("action") == "node-stop":
                message = failures.fail_node(cluster.layout, node, agent.kill)
            elif request.get("action") == "node-start":
                if agent.processes:
                    raise failures.RequestFailed(f"{node.name} is running")
                set_node_link(node, up=True)
                start_node(cluster, node, pause)
                cluster.wait_nodes_ready([node.name])
                cluster.advertise_gpus(node)
                message = f"{node.name}: started and Ready"
            else:
                raise failures.RequestFailed(f"unknown action {request.get('action')!r}")
        except (KeyError, failures.RequestFailed, *SETUP_ERRORS) as err:
            _log(f"request {request}: {err}")
            failures.answer(path, False, str(err))
            continue
        _log(message)
        failures.answer(path, True, message)


def supervise(layout: Layout, count: int = 1) -> int:
    """Start the cluster, report "running", watch the daemons; SIGTERM stops and cleans up."""
    layout.root.mkdir(parents=True, exist_ok=True)
    network = Network(node_ip=node_ip())
    nodes = plan_nodes(count, network.node_ip)
    started = time.monotonic()
    state = ClusterState(
        os.getpid(),
        "starting",
        network.node_ip,
        network.server,
        str(layout.admin_kubeconfig),
        time.time(),
        nodes=[
            {
                "name": n.name,
                "zone": n.zone,
                "address": n.address,
                "netns": n.netns or "",
                "containerd_socket": str(layout.node_dirs(n).containerd_socket),
            }
            for n in nodes
        ],
    )
    _save(layout, state)
    stopping = False

    def on_term(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    cluster = LocalCluster(layout, network, nodes)
    code = 0
    try:
        if count > 1:
            ensure_host_bridge(layout.root / "ip_forward.saved")
        cluster.start_control_plane()
        pause = pause_archive(IMAGE_CACHE)
        for node in nodes:
            start_node(cluster, node, pause)
        _log(f"daemons up on {count} node(s); waiting for Ready")
        cluster.wait_nodes_ready([n.name for n in nodes])
        for node in nodes:
            cluster.advertise_gpus(node)
        state = ClusterState(
            **{
                **state.to_json(),
                "phase": "running",
                "ready_after_s": round(time.monotonic() - started, 1),
            }
        )
        _save(layout, state)
        _log(f"{count} node(s) Ready after {state.ready_after_s}s")
        while not stopping:
            cluster.check_alive()
            handle_requests(cluster, pause)
            time.sleep(1)
    except SETUP_ERRORS as err:
        _log(f"failed: {err}")
        state = ClusterState(**{**state.to_json(), "phase": f"failed: {str(err)[:500]}"})
        _save(layout, state)
        code = 1
    finally:
        _log("stopping")
        if cluster.processes:
            drain_pods(cluster)
        cluster.stop()
        problems = clean_host(layout, cluster.bins / "kube-proxy", remove_root=False)
        for problem in problems:
            _log(f"left behind: {problem}")
        layout.state_file.unlink(missing_ok=True)
        _log("stopped")
    return code
