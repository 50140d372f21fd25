"""Node failure on demand: `localcluster node-stop NAME` / `node-start NAME`.

WHY through the supervisor: it is the parent of every daemon (they die with it, and it restarts
them), so a node is failed by asking it, through a request file, never by killing processes
from outside. A failed node loses everything at once, as a powered-off machine does: its
kubelet, kube-proxy and containerd are SIGKILLed, every process of its pods is SIGKILLed
through its cgroup tree, and its veth goes down, so connections to its pods time out instead
of being refused. Node 0 shares the host's network namespace and cgroups and cannot be failed.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from .configs import Layout
from .netns import CGROUP_ROOT, kill_cgroup_processes, set_node_link
from .topology import NodePlan

ACTIONS = ("node-stop", "node-start")


class RequestFailed(RuntimeError):
    """The supervisor refused or could not do the request; says why."""


def kill_node_processes(node: NodePlan) -> int:
    """SIGKILL every process in the node's cgroup tree (its pods); returns how many."""
    top = CGROUP_ROOT / "pids" / node.cgroup_root.strip("/")
    if node.netns is None or not top.is_dir():
        return 0
    return kill_cgroup_processes(top)


def kill_node_shims(layout: Layout, node: NodePlan) -> None:
    """The node's containerd shims (started with its socket path), so nothing restarts a pod."""
    marker = str(layout.node_dirs(node).containerd_socket)
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmdline and "containerd-shim" in cmdline:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(proc.name), signal.SIGKILL)


def fail_node(layout: Layout, node: NodePlan, kill_daemons: Callable[[], None]) -> str:
    """Cable first (no packet gets an answer), then the daemons (nothing restarts a pod or
    reports its end), then the pods and their shims."""
    if node.netns is None:
        raise RequestFailed(f"{node.name} is in the host's namespace and cannot be failed")
    set_node_link(node, up=False)
    kill_daemons()
    killed = kill_node_processes(node)
    kill_node_shims(layout, node)
    return f"{node.name}: link down, {killed} pod processes killed"


def submit(layout: Layout, action: str, node: str, timeout: float = 120.0) -> str:
    """Ask the running supervisor to do `action` on `node`; wait for and return its answer."""
    if action not in ACTIONS:
        raise RequestFailed(f"unknown action {action!r} (one of {', '.join(ACTIONS)})")
    layout.requests.mkdir(parents=True, exist_ok=True)
    request = layout.requests / f"{uuid.uuid4().hex}.json"
    partial = request.with_suffix(".tmp")
    partial.write_text(json.dumps({"action": action, "node": node}))
    partial.rename(request)
    answer = request.with_suffix(".done")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if answer.exists():
            result = json.loads(answer.read_text())
            answer.unlink()
            if not result["ok"]:
                raise RequestFailed(result["message"])
            return str(result["message"])
        time.sleep(0.2)
    request.unlink(missing_ok=True)
    raise RequestFailed(f"the supervisor did not answer {action} {node} within {timeout:.0f}s")


def pending(layout: Layout) -> list[tuple[Path, dict[str, str]]]:
    """Requests waiting for the supervisor, oldest first."""
    if not layout.requests.is_dir():
        return []
    found = []
    for path in sorted(layout.requests.glob("*.json"), key=lambda p: p.stat().st_mtime):
        try:
            found.append((path, json.loads(path.read_text())))
        except (OSError, ValueError):
            continue
    return found


def answer(request: Path, ok: bool, message: str) -> None:
    partial = request.with_suffix(".part")
    partial.write_text(json.dumps({"ok": ok, "message": message}))
    partial.rename(request.with_suffix(".done"))
    request.unlink(missing_ok=True)
