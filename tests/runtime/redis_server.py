"""A real ``redis-server`` (Debian package) on a random 127.0.0.1 port for tests.

``redis_url`` (registered in conftest.py) gives each test an empty database of one
session-wide server; tests that need a private server use ``RedisServer`` directly.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

REDIS_BIN = shutil.which("redis-server") or "/usr/bin/redis-server"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    """Start/stop one redis-server without persistence; bounded startup wait.

    ``appendonly``: the append-only file on (``appendfsync everysec``, as docs/operations.md
    recommends for batches), so ``crash_and_restart`` brings the data back."""

    def __init__(self, *, startup_timeout_s: float = 10.0, appendonly: bool = False) -> None:
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self._dir = tempfile.TemporaryDirectory(prefix="docparser-redis-")
        self._timeout = startup_timeout_s
        self.appendonly = appendonly
        self.proc: subprocess.Popen | None = None

    def crash_and_restart(self, down_s: float) -> None:
        """SIGKILL (no shutdown save), ``down_s`` seconds down, then the same port and dir."""
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(5)
        time.sleep(down_s)
        self.__enter__()

    def __enter__(self) -> RedisServer:
        args = [REDIS_BIN, "--bind", "127.0.0.1", "--port", str(self.port), "--save", ""]
        aof = ["--appendonly", "yes", "--appendfsync", "everysec"] if self.appendonly else []
        args += aof or ["--appendonly", "no"]
        args += ["--dir", self._dir.name, "--protected-mode", "yes"]
        log = Path(self._dir.name) / "redis.log"
        args += ["--logfile", str(log)]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + self._timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"redis-server exited: {log.read_text(errors='replace')}")
            if self._ping():
                return self
            time.sleep(0.05)
        self.__exit__(None, None, None)
        raise RuntimeError("redis-server did not answer PING in time")

    def _ping(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def flushall(self) -> None:
        with socket.create_connection(("127.0.0.1", self.port), timeout=2) as s:
            s.sendall(b"FLUSHALL\r\n")
            s.recv(16)

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._dir.cleanup()


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    if not Path(REDIS_BIN).exists():
        pytest.skip("redis-server not installed (apt-get install redis-server / make system-deps)")
    with RedisServer() as server:
        yield server


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    """URL of an empty Redis database (the session's server, flushed per test)."""
    redis_server.flushall()
    return redis_server.url
