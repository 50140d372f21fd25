"""Python side of gitopscheck: one long-lived Go process answering JSON lines (see main.go).

WHY a process per session, not per call: the rollout transition tests ask at every sample
(hundreds per test), and one round trip on a pipe costs well under a millisecond.

    with GitOpsCheck.start() as check:      # GitOpsCheckUnavailable when not built
        check.verdict(docparser_object)     # ("Current", "Healthy")
        check.action(docparser_object, "set-weight", {"weight": "25"})  # {"object", "patch"}
"""

from __future__ import annotations

import json
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[1]
CHART_FILES = REPO_ROOT / "charts/docparser-operator/files"
HEALTH_SCRIPT = CHART_FILES / "argocd-health.lua"
ACTIONS_FILE = CHART_FILES / "argocd-actions.yaml"
BUILD_HINT = "build it with `bash hack/gitopscheck/build.sh` (or `make controlplane`; needs Go)"
# kstatus verdict -> the Argo CD health that must go with it (issue 28's table).
AGREEING = {"Current": "Healthy", "InProgress": "Progressing", "Failed": "Degraded"}


class GitOpsCheckUnavailable(RuntimeError):
    """The binary is not built; tests skip with this message."""


class GitOpsCheckError(RuntimeError):
    """The tool refused (a Lua error, say): the message is the tool's own."""


def binary() -> Path | None:
    """The built binary for this tree's sources, or None (build.sh knows the cache key)."""
    found = subprocess.run(
        ["bash", str(HERE / "build.sh"), "--path"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    path = found.stdout.strip()
    return Path(path) if found.returncode == 0 and path else None


def argocd_actions() -> dict[str, Any]:
    """The chart's actions as argocd-cm holds them: ``discovery.lua`` and ``definitions``."""
    loaded: dict[str, Any] = yaml.safe_load(ACTIONS_FILE.read_text())
    return loaded


@dataclass
class GitOpsCheck:
    """A running gitopscheck process."""

    process: subprocess.Popen[str]
    health_script: str
    actions: dict[str, Any]
    lock: threading.Lock

    @classmethod
    def start(cls) -> GitOpsCheck:
        path = binary()
        if path is None:
            raise GitOpsCheckUnavailable(f"gitopscheck is not built; {BUILD_HINT}")
        process = subprocess.Popen(
            [str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1
        )
        return cls(process, HEALTH_SCRIPT.read_text(), argocd_actions(), threading.Lock())

    def __enter__(self) -> GitOpsCheck:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        if self.process.stdin:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def ask(self, request: dict[str, Any]) -> dict[str, Any]:
        assert self.process.stdin and self.process.stdout
        with self.lock:  # a sampler thread and the test may ask at once
            self.process.stdin.write(json.dumps(request) + "\n")
            self.process.stdin.flush()
            line = self.process.stdout.readline()
        if not line:
            raise GitOpsCheckError(f"gitopscheck exited ({self.process.poll()})")
        reply: dict[str, Any] = json.loads(line)
        if "error" in reply:
            raise GitOpsCheckError(reply["error"])
        return reply

    def kstatus(self, obj: dict[str, Any]) -> tuple[str, str]:
        """Flux's verdict: kstatus ``status.Compute`` (Current, InProgress, Failed, ...)."""
        reply = self.ask({"op": "kstatus", "object": obj})
        return reply["status"], reply["message"]

    def argocd_health(self, obj: dict[str, Any], script: str | None = None) -> tuple[str, str]:
        """Argo CD's verdict: the chart's health script (Healthy, Progressing, Degraded, ...)."""
        reply = self.ask({"op": "health", "object": obj, "script": script or self.health_script})
        return reply["status"], reply["message"]

    def verdict(self, obj: dict[str, Any]) -> tuple[str, str]:
        """(kstatus, Argo CD health) of one object."""
        return self.kstatus(obj)[0], self.argocd_health(obj)[0]

    def discover(self, obj: dict[str, Any], script: str | None = None) -> dict[str, dict[str, Any]]:
        """The actions Argo CD's UI offers for ``obj`` (name -> disabled, params, iconClass)."""
        script = script or self.actions["discovery.lua"]
        actions: dict[str, dict[str, Any]] = self.ask(
            {"op": "discover", "object": obj, "script": script}
        )["actions"]
        return actions

    def action(
        self,
        obj: dict[str, Any],
        name: str,
        params: dict[str, str] | None = None,
        script: str | None = None,
    ) -> dict[str, Any]:
        """Run one of the chart's actions (or ``script``): the object it writes and Argo CD's
        merge patch."""
        if script is None:
            (script,) = [d["action.lua"] for d in self.actions["definitions"] if d["name"] == name]
        return self.ask({"op": "action", "object": obj, "script": script, "params": params or {}})
