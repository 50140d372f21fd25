"""Images for the local cluster, with no registry: the pause image, and importing archives.

WHY build a pause image: nothing can be pulled here, and containerd's CRI starts every pod
sandbox from `sandbox_image`. A static busybox (Debian's busybox-static, unpacked with dpkg)
sleeping forever is a complete pause container. The archive is cached by the busybox .deb it
came from; it is built once per machine and reused.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
from pathlib import Path

from .configs import PAUSE_IMAGE, NodeDirs

BUILDAH_ULIMITS = ["--ulimit", "nofile=20000:20000", "--ulimit", "nproc=1024:1024"]


class ImageError(RuntimeError):
    """An image could not be built or imported; says which and why."""


def _run(argv: list[str], cwd: Path | None = None, timeout: float = 300) -> str:
    result = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0:
        raise ImageError(f"{' '.join(argv[:3])}...: {result.stderr.strip()[-800:]}")
    return result.stdout.strip()


def pause_archive(cache: Path) -> Path:
    """A docker-archive of the pause image (busybox-static `sleep`), built once and cached."""
    cache.mkdir(parents=True, exist_ok=True)
    built = sorted(cache.glob("pause-*.tar"), key=lambda p: p.stat().st_mtime)
    if built:  # any busybox sleeps the same: no mirror round trip on every cluster-up
        return built[-1]
    with tempfile.TemporaryDirectory(prefix="docparser-pause-") as tmp:
        work = Path(tmp)
        _run(["apt-get", "download", "busybox-static"], cwd=work, timeout=120)
        deb = next(work.glob("busybox-static_*.deb"))
        digest = hashlib.sha256(deb.read_bytes()).hexdigest()[:12]
        archive = cache / f"pause-{digest}.tar"
        if archive.exists():
            return archive
        rootfs = work / "rootfs"
        _run(["dpkg", "-x", str(deb), str(rootfs)])
        container = _run(["buildah", "from", "scratch"])
        try:
            _run(["buildah", "copy", container, str(rootfs / "bin" / "busybox"), "/bin/busybox"])
            _run(
                [
                    "buildah",
                    "config",
                    "--entrypoint",
                    '["/bin/busybox", "sleep", "2147483647"]',
                    "--cmd",
                    "",
                    container,
                ]
            )
            image = _run(["buildah", "commit", "--rm", container, PAUSE_IMAGE])
        except ImageError:
            subprocess.run(["buildah", "rm", container], capture_output=True)
            raise
        partial = archive.with_suffix(".tmp")
        partial.unlink(missing_ok=True)
        _run(["buildah", "push", image, f"docker-archive:{partial}:{PAUSE_IMAGE}"])
        partial.rename(archive)
        for old in cache.glob("pause-*.tar"):
            if old != archive:
                old.unlink()
        return archive


def import_archive(layout: NodeDirs, archive: Path, timeout: float = 600) -> str:
    """Load an image archive into a node's containerd, namespace k8s.io (where its kubelet
    looks)."""
    if not shutil.which("ctr"):
        raise ImageError("ctr (containerd) is not installed")
    return _run(
        [
            "ctr",
            "--address",
            str(layout.containerd_socket),
            "-n",
            "k8s.io",
            "images",
            "import",
            "--all-platforms",
            str(archive),
        ],
        timeout=timeout,
    )
