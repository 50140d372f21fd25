"""Run ``docparser-runtime serve`` as a real child process on a free 127.0.0.1 port.

Used by the tests that need what only a real process has: uvicorn's signal handling
(drain), SIGKILL (job failover) and a network socket for the official ``openai`` client.
Every wait is bounded; the process log is kept for assertion messages.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from redis_server import free_port


class LiveServer:
    def __init__(
        self,
        *,
        engine: str = "rapidocr",
        env: dict[str, object] | None = None,
        gated_delay_s: float | None = None,
        nofile: int | None = None,
        host: str = "127.0.0.1",
        port: int | None = None,
        engine_args: tuple[str, ...] = (),
        cgroup: Path | None = None,
        python: str | None = None,
    ) -> None:
        """``gated_delay_s``: serve the test engine (``serve_test_engine.py``) whose
        batches take that long, instead of ``engine`` (``engine_args``: more of its options).
        ``nofile``: the process's limit of open file descriptors (RLIMIT_NOFILE). ``host`` /
        ``port``: another loopback address (127.0.0.2 stands in for a pod IP) and port.
        ``cgroup``: a cgroup directory the process (and so its children) starts in.
        ``python``: the interpreter that serves (another venv, e.g. one with s3fs)."""
        self.python = python or sys.executable
        self.cgroup = cgroup
        self.host = host
        self.port = port or free_port()
        self.url = f"http://{host}:{self.port}"
        self.engine_args = engine_args
        self.engine = engine
        self.gated_delay_s = gated_delay_s
        self.nofile = nofile
        self.env = {k: str(v) for k, v in (env or {}).items()}
        self._log = tempfile.NamedTemporaryFile(  # noqa: SIM115 - lives as long as the server
            prefix="docparser-live-", suffix=".log", delete=False
        )
        self.proc: subprocess.Popen | None = None
        self._final_log: str | None = None

    def start(self) -> LiveServer:
        env = {**os.environ, "DOCPARSER_LOG_LEVEL": "info", "DOCPARSER_DRAIN_GRACE_S": "0.2"}
        env.update(self.env)
        if self.gated_delay_s is None:
            args = [self.python, "-m", "docparser_runtime", "serve", "--engine", self.engine]
        else:
            script = str(Path(__file__).with_name("serve_test_engine.py"))
            args = [self.python, script, "--delay", str(self.gated_delay_s), *self.engine_args]
        args += ["--host", self.host, "--port", str(self.port)]
        limit = self.nofile
        procs = None if self.cgroup is None else str(self.cgroup / "cgroup.procs")

        def limits() -> None:
            if limit is not None:
                resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))
            if procs is not None:
                with open(procs, "w") as f:
                    f.write(str(os.getpid()))

        self.proc = subprocess.Popen(
            args, env=env, stdout=self._log, stderr=subprocess.STDOUT, preexec_fn=limits
        )
        return self

    def wait_ready(self, timeout: float = 180.0) -> LiveServer:
        """Ready in about 1.4 s on an idle machine; a start once took over 90 s at load 12."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"server exited early ({self.proc.returncode}):\n{self.log()}")
            try:
                if httpx.get(f"{self.url}/readyz", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise AssertionError(f"server not ready within {timeout}s:\n{self.log()}")

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def wait_exit(self, timeout: float) -> int:
        """The exit status; a process still running after ``timeout`` fails with its log."""
        assert self.proc is not None
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"server still running {timeout}s later:\n{self.log()}") from None

    def log(self, tail: int = 6000) -> str:
        """The process log's last ``tail`` characters (as it was at stop(), once stopped)."""
        if self._final_log is not None:
            return self._final_log[-tail:]
        return Path(self._log.name).read_text(errors="replace")[-tail:]

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        if self._final_log is None:
            self._final_log = self.log(tail=2_000_000)
            self._log.close()
            os.unlink(self._log.name)

    def __enter__(self) -> LiveServer:
        return self.start().wait_ready()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class ThreadedServer:
    """The production uvicorn server for an app built in this process, on a thread.

    For engines that are expensive to load (the tiny DeepSeek model shares the test
    process's torch import and fixture) while still giving clients a real socket: only a
    real connection can be dropped mid-stream.
    """

    def __init__(self, app, *, ready_timeout: float = 120.0) -> None:
        import uvicorn

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning")
        self.server = uvicorn.Server(config)
        self._ready_timeout = ready_timeout
        self._thread = None

    def __enter__(self) -> ThreadedServer:
        import threading

        self._thread = threading.Thread(target=self.server.run, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + self._ready_timeout
        while True:
            try:
                if httpx.get(f"{self.url}/readyz", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline or not self._thread.is_alive():
                self.__exit__()
                raise AssertionError("threaded server did not become ready")
            time.sleep(0.05)

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        if self._thread is not None:
            self._thread.join(60)


def poll_job(url: str, job_id: str, until, timeout: float = 60) -> dict:
    """GET the job on ``url`` until ``until(body)``; fails with the last state after
    ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        body = httpx.get(f"{url}/v1/jobs/{job_id}", timeout=5).json()
        if until(body):
            return body
        assert time.monotonic() < deadline, f"timed out; last state {body}"
        time.sleep(0.05)


def start_all(*servers: LiveServer) -> tuple[LiveServer, ...]:
    """Start every server, then wait for each: start-up is the slow part, so they overlap."""
    for server in servers:
        server.start()
    for server in servers:
        server.wait_ready()
    return servers
