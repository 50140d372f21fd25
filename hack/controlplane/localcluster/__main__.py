"""`python -m controlplane.localcluster up|down|status|node-stop|node-start` (from hack/).

up [--nodes N]: start (or reuse) the supervisor of an N-node cluster, import the images into
every node, install the chart with the operator running as a pod, print `export
KUBECONFIG=...`. down: stop everything and remove what the cluster made on the host.
node-stop NAME / node-start NAME: fail a node abruptly and bring it back (failures.py). The
supervisor itself is `supervise` (internal).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from .configs import Layout
from .failures import RequestFailed, submit
from .hostclean import clean_host
from .node import host_tools_missing, node_binaries_missing
from .platform import PlatformError, install_platform
from .supervisor import load_state, supervise

DEFAULT_ROOT = (
    Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "docparser" / "cluster"
)
# Three nodes in three zones: what the drain, node-loss and spread scenarios need, and what
# every e2e/cluster scenario shares (one cluster for the whole suite).
DEFAULT_NODES = int(os.environ.get("DOCPARSER_CLUSTER_NODES", "3"))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return (
        Path(f"/proc/{pid}").exists()
        and "Z" not in Path(f"/proc/{pid}/stat").read_text().split()[2]
    )


def preflight() -> list[str]:
    problems = []
    if os.geteuid() != 0:
        problems.append("must run as root (containerd, CNI, mounts, iptables)")
    missing = node_binaries_missing()
    if missing:
        problems.append(
            f"kubernetes binaries not built: {', '.join(missing)} (run `make controlplane`)"
        )
    tools = host_tools_missing()
    if tools:
        problems.append(f"host tools missing: {', '.join(tools)} (run `make system-deps`)")
    return problems


def up(layout: Layout, *, timeout: float, images: bool, nodes: int) -> int:
    problems = preflight()
    if problems:
        print("cluster-up: cannot start:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 2
    state = load_state(layout)
    started = time.monotonic()
    if state and _alive(state.supervisor_pid) and state.phase == "running":
        if len(state.nodes) != nodes:
            print(
                f"cluster-up: a cluster with {len(state.nodes)} node(s) is running, not {nodes}; "
                "reusing it (`make cluster-down` first to change the count)",
                file=sys.stderr,
            )
        print(
            f"cluster-up: already running (supervisor pid {state.supervisor_pid}); "
            "refreshing images and chart"
        )
    else:
        leftovers = clean_host(layout)
        if leftovers:
            print(
                "cluster-up: could not clean earlier leftovers:\n  " + "\n  ".join(leftovers),
                file=sys.stderr,
            )
        layout.root.mkdir(parents=True, exist_ok=True)
        (layout.root / "supervisor.log").unlink(missing_ok=True)
        with (layout.root / "supervisor.log").open("ab") as log:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "controlplane.localcluster",
                    "supervise",
                    "--root",
                    str(layout.root),
                    "--nodes",
                    str(nodes),
                ],
                cwd=Path(__file__).resolve().parents[2],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while True:
            state = load_state(layout)
            if state and state.phase == "running" and state.supervisor_pid == proc.pid:
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = (layout.root / "supervisor.log").read_text(errors="replace")[-3000:]
                print(f"cluster-up: the nodes did not come up:\n{tail}", file=sys.stderr)
                if proc.poll() is None:
                    proc.terminate()
                return 1
            time.sleep(0.5)
        print(f"cluster-up: {nodes} node(s) Ready in {time.monotonic() - started:.1f}s")
    try:
        install_platform(layout, images=images, timeout=timeout)
    except PlatformError as err:
        print(f"cluster-up: {err}", file=sys.stderr)
        return 1
    print(f"cluster-up: ready in {time.monotonic() - started:.1f}s")
    print(f"export KUBECONFIG={layout.admin_kubeconfig}")
    return 0


def down(layout: Layout, *, timeout: float) -> int:
    state = load_state(layout)
    if state and _alive(state.supervisor_pid):
        os.kill(state.supervisor_pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while _alive(state.supervisor_pid) and time.monotonic() < deadline:
            time.sleep(0.3)
        if _alive(state.supervisor_pid):
            os.kill(state.supervisor_pid, signal.SIGKILL)
    problems = clean_host(layout)
    if problems:
        print("cluster-down: left behind:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 1
    print("cluster-down: everything removed")
    return 0


def status(layout: Layout) -> int:
    state = load_state(layout)
    if not state or not _alive(state.supervisor_pid):
        print("cluster: not running")
        return 1
    print(json.dumps(state.to_json(), indent=2))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="localcluster", description=__doc__)
    parser.add_argument(
        "command", choices=("up", "down", "status", "supervise", "node-stop", "node-start")
    )
    parser.add_argument("node", nargs="?", help="node-stop/node-start: the node's name")
    parser.add_argument(
        "--nodes", type=int, default=DEFAULT_NODES, help="up: how many nodes (default: %(default)s)"
    )
    parser.add_argument(
        "--root", type=Path, default=DEFAULT_ROOT, help="work dir (default: %(default)s)"
    )
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument(
        "--no-images", action="store_true", help="skip building and importing our images"
    )
    args = parser.parse_args(argv)
    layout = Layout(args.root.resolve())
    if args.command == "up":
        return up(layout, timeout=args.timeout, images=not args.no_images, nodes=args.nodes)
    if args.command == "down":
        return down(layout, timeout=args.timeout)
    if args.command == "status":
        return status(layout)
    if args.command in ("node-stop", "node-start"):
        if not args.node:
            parser.error(f"{args.command} needs a node name")
        try:
            print(submit(layout, args.command, args.node, timeout=args.timeout))
        except RequestFailed as err:
            print(f"{args.command}: {err}", file=sys.stderr)
            return 1
        return 0
    return supervise(layout, args.nodes)


if __name__ == "__main__":
    sys.exit(main())
