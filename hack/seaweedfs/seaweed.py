"""A real S3-compatible server for tests: SeaweedFS's ``weed server`` (master, volume server,
filer and S3 gateway in one process) on free ports of 127.0.0.1 (or a given address), one access
key, given buckets.

The binary comes from ``hack/seaweedfs/build.sh`` (cached under ~/.cache/docparser/seaweedfs);
when it is not built, ``SeaweedUnavailable`` says why and the fixture skips. Every wait is
bounded and the process log is kept for the error message.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import httpx

from .s3client import REGION, S3Client, S3Error

HERE = Path(__file__).resolve().parent
VERSION = (HERE / "SEAWEEDFS_VERSION").read_text().strip()


class SeaweedUnavailable(Exception):
    """No ``weed`` binary of this tree's pin, or it did not start: the S3 tests skip."""


def weed_binary() -> Path:
    """The ``weed`` of this tree's go.mod, as built by build.sh (``--path`` prints it)."""
    override = os.environ.get("DOCPARSER_WEED")
    if override:
        return Path(override)
    try:
        out = subprocess.run(
            ["bash", str(HERE / "build.sh"), "--path"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SeaweedUnavailable(f"cannot run hack/seaweedfs/build.sh --path: {exc}") from None
    if out.returncode != 0 or not out.stdout.strip():
        raise SeaweedUnavailable(
            f"SeaweedFS weed {VERSION} is not built (its cold build is bounded by "
            "SEAWEEDFS_BUILD_TIMEOUT in `make seaweedfs` and may have been cut off); "
            "run `make seaweedfs` or `bash hack/seaweedfs/build.sh`"
        )
    return Path(out.stdout.strip())


def _free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` distinct ports the kernel had free (held open together, so none repeats)."""
    socks = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind((host, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


class SeaweedS3:
    """One ``weed server -filer -s3`` with a config granting ``access_key`` every action.

    ``host``: the address every part listens on and advertises (127.0.0.1; the e2e cluster
    scenario gives the local cluster's node bridge address, so pods reach the gateway)."""

    def __init__(
        self,
        buckets: tuple[str, ...] = (),
        *,
        start_timeout_s: float = 90.0,
        host: str = "127.0.0.1",
    ) -> None:
        self.buckets = buckets
        self.host = host
        self.access_key = "docparser-test-" + os.urandom(4).hex()
        self.secret_key = os.urandom(16).hex()
        self._dir = tempfile.TemporaryDirectory(prefix="docparser-seaweed-")
        self._timeout = start_timeout_s
        self.proc: subprocess.Popen[bytes] | None = None
        self.endpoint = ""
        self.filer_url = ""
        self.client: S3Client | None = None

    @property
    def env(self) -> dict[str, str]:
        """What a process using s3fs/botocore needs to reach this server (``AWS_*``)."""
        return {
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_DEFAULT_REGION": REGION,
            "AWS_ENDPOINT_URL_S3": self.endpoint,
            "AWS_EC2_METADATA_DISABLED": "true",
        }

    def log(self, tail: int = 4000) -> str:
        path = Path(self._dir.name) / "weed.log"
        return path.read_text(errors="replace")[-tail:] if path.exists() else ""

    def start(self) -> SeaweedS3:
        weed = weed_binary()
        root = Path(self._dir.name)
        (root / "data").mkdir()
        config = {
            "identities": [
                {
                    "name": "docparser-tests",
                    "credentials": [{"accessKey": self.access_key, "secretKey": self.secret_key}],
                    "actions": ["Admin", "Read", "List", "Tagging", "Write"],
                }
            ]
        }
        (root / "s3.json").write_text(json.dumps(config))
        master, master_g, volume, volume_g, filer, filer_g, s3, s3_g = _free_ports(8, self.host)
        self.endpoint = f"http://{self.host}:{s3}"
        self.filer_url = f"http://{self.host}:{filer}"
        args = [
            str(weed),
            "server",
            f"-ip={self.host}",
            f"-ip.bind={self.host}",
            f"-dir={root / 'data'}",
            f"-master.port={master}",
            f"-master.port.grpc={master_g}",
            "-master.telemetry=false",
            "-master.volumeSizeLimitMB=64",
            f"-volume.port={volume}",
            f"-volume.port.grpc={volume_g}",
            "-volume.max=100",  # sparse files; SeaweedFS grows 7 volumes per bucket
            "-volume.preStopSeconds=0",  # its default 10 s of goodbye heartbeats: nobody listens
            "-filer",
            f"-filer.port={filer}",
            f"-filer.port.grpc={filer_g}",
            f"-filer.localSocket={root / 'filer.sock'}",
            "-s3",
            f"-s3.port={s3}",
            f"-s3.port.grpc={s3_g}",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            f"-s3.localSocket={root / 's3.sock'}",
            f"-s3.config={root / 's3.json'}",
        ]
        with open(root / "weed.log", "wb") as log:
            self.proc = subprocess.Popen(
                args, stdout=log, stderr=subprocess.STDOUT, cwd=root, start_new_session=True
            )
        self.client = S3Client(self.endpoint, self.access_key, self.secret_key)
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self) -> None:
        """Ready when every bucket exists and an object round-trips (master, volume server,
        filer and gateway all up); bounded by ``start_timeout_s``."""
        assert self.client is not None and self.proc is not None
        deadline = time.monotonic() + self._timeout
        last = ""
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SeaweedUnavailable(f"weed exited ({self.proc.returncode}):\n{self.log()}")
            try:
                for bucket in self.buckets:
                    self.client.create_bucket(bucket)
                if self.buckets:
                    self.client.put(self.buckets[0], ".ready", b"ok")
                    if self.client.get(self.buckets[0], ".ready") == b"ok":
                        self.client.delete(self.buckets[0], ".ready")
                        return
                else:
                    self.client.request("GET", "/")
                    return
            except S3Error as exc:
                if exc.status_code < 500:  # a refusal (a bad bucket name): waiting won't help
                    raise SeaweedUnavailable(f"weed S3 refused the setup: {exc}") from None
                last = str(exc)  # 5xx: the filer or volume server is not up yet
            except httpx.HTTPError as exc:  # the gateway is not listening yet
                last = f"{type(exc).__name__}: {exc}"
            time.sleep(0.3)
        raise SeaweedUnavailable(
            f"weed S3 not ready within {self._timeout}s (last: {last}):\n{self.log()}"
        )

    def stop(self) -> None:
        """SIGTERM, then SIGKILL to its group after 5 s: its graceful stop walks every volume
        and took 8-15 s here, and the data is a throwaway temp dir."""
        if self.client is not None:
            self.client.close()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self._dir.cleanup()

    def __enter__(self) -> SeaweedS3:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
