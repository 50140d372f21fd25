"""Child processes that cannot outlive the test session, and the service-account key pair.

WHY process groups + PR_SET_PDEATHSIG: a failing test, Ctrl-C or a killed pytest must never
leave an etcd or kube-apiserver running on the shared machine. stop() signals the whole group
(TERM, then KILL); the kernel kills each child by itself if pytest dies without any cleanup.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import httpx
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:  # runs in the child between fork and exec
    with contextlib.suppress(OSError):  # not Linux/glibc: process groups + stop() still clean up
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


class ProcessFailed(RuntimeError):
    """A control-plane process exited or never became ready; carries its log tail."""


class ManagedProcess:
    """One binary in its own process group, logging to a file."""

    def __init__(self, name: str, argv: list[str], log_path: Path):
        self.name, self.log_path = name, log_path
        self._log = log_path.open("ab")  # a restarted daemon (a node brought back) appends
        self.popen = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def check_alive(self) -> None:
        code = self.popen.poll()
        if code is not None:
            raise ProcessFailed(f"{self.name} exited with {code}:\n{self.log_tail()}")

    def wait_until(self, probe: Callable[[], bool], what: str, timeout: float) -> float:
        """Poll `probe` (connection errors mean "not yet") until true; returns seconds taken."""
        start = time.monotonic()
        while time.monotonic() - start < timeout:
            self.check_alive()
            try:
                if probe():
                    return time.monotonic() - start
            except (httpx.HTTPError, OSError, ValueError):
                pass
            time.sleep(0.1)
        raise ProcessFailed(f"{what} not ready after {timeout:.0f}s:\n{self.log_tail()}")

    def kill(self) -> None:
        """SIGKILL the process group at once (a node dying), no grace; idempotent."""
        with contextlib.suppress(ProcessLookupError):
            if self.popen.poll() is None:
                os.killpg(self.popen.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=5.0)
        self._log.close()

    def stop(self, grace: float = 10.0) -> None:
        """TERM the process group, KILL it after `grace` seconds; idempotent."""
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
            if self.popen.poll() is not None:
                break
            try:
                os.killpg(self.popen.pid, sig)
            except ProcessLookupError:
                break
            try:
                self.popen.wait(timeout=wait)
            except subprocess.TimeoutExpired:
                continue
        self._log.close()


def write_service_account_keys(directory: Path) -> tuple[Path, Path]:
    """An ECDSA P-256 pair for signing service-account tokens (fast to make; ES256 works)."""
    key = ec.generate_private_key(ec.SECP256R1())
    private = directory / "sa.key"
    public = directory / "sa.pub"
    private.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    public.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    private.chmod(0o600)
    return public, private
