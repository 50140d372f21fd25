"""Build the docparser images on this machine with buildah, no registry involved.

    python3 scripts/build_images.py            # or: make images
    python3 scripts/build_images.py --only runtime --no-cache

Builds ``docparser/runtime:dev`` (the CPU variant: rapidocr engine, no torch) and
``docparser/operator:dev`` on a local debootstrapped Debian bookworm base (debian_base.py),
verifies each one by running its CLI inside it, and writes each as an OCI archive that
``ctr -n k8s.io images import`` names ``docker.io/docparser/<name>:dev`` (what a pod's
``image: docparser/<name>:dev`` resolves to). The last lines on stdout, one per image:

    image docker.io/docparser/runtime:dev /root/.cache/docparser/images/runtime-<hash>.oci.tar

An archive is keyed by a content hash (Dockerfile, .dockerignore, lock, build arguments, the
package's files, the base image), so an unchanged tree skips the build in seconds. Archives
are written under a temporary name and renamed, and only the newest two of each image stay.
Needs root, buildah, debootstrap; buildah gets the ulimits root can grant without
CAP_SYS_RESOURCE.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import debian_base

REPO = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("DOCPARSER_IMAGE_CACHE", Path.home() / ".cache/docparser/images"))
# Root without CAP_SYS_RESOURCE cannot raise limits above the host's: buildah's defaults
# (nproc 32768, nofile 1048576) make every container start fail there.
ULIMITS = ["--ulimit", "nofile=20000:20000", "--ulimit", "nproc=1024:1024"]
BUILD_TIMEOUT_S = int(os.environ.get("DOCPARSER_IMAGE_BUILD_TIMEOUT", "3600"))
VERIFY_TIMEOUT_S = 300
KEEP_ARCHIVES = 2
# Bump when how an image is built changes in a way its inputs do not show.
RECIPE_VERSION = 1
CA_MOUNT_DIR = "/var/tmp"  # exists in every base, so the bind mount leaves no trace


@dataclass(frozen=True)
class Image:
    name: str
    dockerfile: str
    lock: str
    package_dir: str
    build_args: dict[str, str]
    checks: list[list[str]] = field(default_factory=list)

    @property
    def ref(self) -> str:
        """The name containerd gives the imported image (short names resolve to docker.io)."""
        return f"docker.io/docparser/{self.name}:dev"


IMAGES = [
    Image(
        name="runtime",
        dockerfile="Dockerfile.runtime",
        lock="runtime/requirements-image-cpu.lock",
        package_dir="runtime",
        build_args={"EXTRAS": "cloud"},
        checks=[
            ["docparser-runtime", "--help"],
            ["python", "-c", "import rapidocr_onnxruntime, docparser_runtime.server.app"],
            ["python", "-c", "import s3fs, gcsfs"],  # batch storage on s3:// and gs://
            ["/usr/bin/tini", "--version"],
            ["sh", "-c", 'test "$(id -u)" = 10001'],
        ],
    ),
    Image(
        name="operator",
        dockerfile="Dockerfile.operator",
        lock="operator/requirements-image.lock",
        package_dir="operator",
        build_args={},
        checks=[
            ["docparser-operator", "--help"],
            [
                "python",
                "-c",
                "import fsspec, kopf, kubernetes, docparser_operator.controller.handlers",
            ],
            ["sh", "-c", 'test "$(id -u)" = 10001'],
        ],
    ),
]
ENTRYPOINTS = {
    "runtime": ["/usr/bin/tini", "--", "docparser-runtime"],
    "operator": ["docparser-operator"],
}


class BuildError(RuntimeError):
    """A step failed; the message says which and where its log is."""


def say(message: str) -> None:
    print(f"build-images: {message}", file=sys.stderr, flush=True)


def package_files(package_dir: str) -> list[Path]:
    """Files a ``COPY <package_dir>/`` sends: git-tracked plus untracked-not-ignored ones.

    Without git (an exported tree), every file but caches and build output.
    """
    root = REPO / package_dir
    listing = ["ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", package_dir]
    git = subprocess.run(["git", "-C", str(REPO), *listing], capture_output=True)
    if git.returncode == 0:
        names = {n for n in git.stdout.decode().split("\0") if n}
        return sorted(p for p in (REPO / n for n in names) if p.is_file())
    skip = {"__pycache__", "build", "dist", ".pytest_cache"}
    return sorted(
        p
        for p in root.rglob("*")
        if p.is_file()
        and not skip.intersection(p.relative_to(root).parts)
        and not p.name.endswith(".pyc")
        and not any(part.endswith(".egg-info") for part in p.parts)
    )


def content_hash(image: Image, base_id: str) -> str:
    """What decides the image's content: a change in any of these rebuilds it."""
    digest = hashlib.sha256(f"recipe {RECIPE_VERSION}\nbase {base_id}\n".encode())
    for key, value in sorted(image.build_args.items()):
        digest.update(f"arg {key}={value}\n".encode())
    inputs = [REPO / image.dockerfile, REPO / ".dockerignore", REPO / image.lock]
    for path in inputs + package_files(image.package_dir):
        digest.update(f"file {path.relative_to(REPO)}\n".encode())
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()[:16]


def archive_path(image: Image, digest: str) -> Path:
    return CACHE / f"{image.name}-{digest}.oci.tar"


def prune_archives(image: Image, keep: int = KEEP_ARCHIVES) -> list[Path]:
    """Delete all but the ``keep`` newest archives of ``image``; returns what went."""
    archives = sorted(
        CACHE.glob(f"{image.name}-*.oci.tar"), key=lambda p: p.stat().st_mtime, reverse=True
    )
    for old in archives[keep:]:
        old.unlink(missing_ok=True)
    return archives[keep:]


def remove_stale_temporaries(max_age_s: float = 6 * 3600) -> None:
    """Partial files of killed runs (an interrupted run removes its own); only ours: other
    tools keep archives in the same folder."""
    now = time.time()
    ours = [f"{i.name}-*.tmp" for i in IMAGES] + ["debian-base-*.tmp", ".rootfs-*"]
    for path in [p for pattern in ours for p in CACHE.glob(pattern)]:
        if now - path.stat().st_mtime > max_age_s:
            shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)


def run_logged(argv: list[str], log: Path, timeout_s: float, what: str) -> None:
    """Run ``argv`` niced, output appended to ``log``; BuildError on failure or timeout.

    Its own process group, so a timeout stops buildah and the container processes it runs.
    """
    with log.open("ab") as out:
        out.write(f"\n$ {' '.join(argv)}\n".encode())
        out.flush()
        proc = subprocess.Popen(
            ["nice", "-n", "10", *argv],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            rc = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            raise BuildError(f"{what}: timed out after {timeout_s:.0f}s (log: {log})") from None
        except BaseException:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
    if rc != 0:
        tail = log.read_text(errors="replace").splitlines()[-25:]
        raise BuildError(f"{what}: exit {rc} (log: {log})\n" + "\n".join(tail))


@contextmanager
def build_ca_mount() -> Iterator[list[str]]:
    """buildah flags that let pip inside the build trust the host's CA bundle.

    Behind a TLS-intercepting proxy pip's own bundle fails; the host's bundle (PIP_CERT,
    DOCPARSER_BUILD_CA or the system one) is bind-mounted for RUN steps only, and the
    Dockerfiles' PIP_CERT build argument points pip at it. Nothing of it enters a layer.
    """
    source = next(
        (
            Path(c)
            for c in (
                os.environ.get("DOCPARSER_BUILD_CA"),
                os.environ.get("PIP_CERT"),
                "/etc/ssl/certs/ca-certificates.crt",
            )
            if c and Path(c).is_file()
        ),
        None,
    )
    if source is None:
        yield []
        return
    with tempfile.TemporaryDirectory(prefix="docparser-build-ca-") as tmp:
        Path(tmp).chmod(0o755)
        shutil.copyfile(source, Path(tmp) / "ca.crt")
        yield [
            "--volume",
            f"{tmp}:{CA_MOUNT_DIR}:ro",
            "--build-arg",
            f"PIP_CERT={CA_MOUNT_DIR}/ca.crt",
        ]


def verify(image: Image, log: Path) -> None:
    """Run the image's checks inside it, as its own (non-root) user."""
    info = debian_base.inspect_image(image.ref)
    entrypoint = info["OCIv1"]["config"].get("Entrypoint") if info else None
    if entrypoint != ENTRYPOINTS[image.name]:
        raise BuildError(f"{image.ref}: entrypoint {entrypoint}, want {ENTRYPOINTS[image.name]}")
    name = f"docparser-verify-{image.name}-{os.getpid()}"
    from_ = ["buildah", "from", "--pull=never", "--name", name, *ULIMITS, image.ref]
    run_logged(from_, log, 120, f"verify {image.ref}: start a container")
    try:
        for check in image.checks:
            what = f"verify {image.ref}: {' '.join(check)}"
            run_logged(["buildah", "run", name, "--", *check], log, VERIFY_TIMEOUT_S, what)
    finally:
        subprocess.run(["buildah", "rm", name], capture_output=True)


def build(image: Image, base_id: str, *, no_cache: bool, check: bool) -> Path:
    """The image's archive for the current tree: cached, or built, verified and written."""
    digest = content_hash(image, base_id)
    archive = archive_path(image, digest)
    if archive.exists() and not no_cache:
        archive.touch()  # the newest archives are the ones kept
        say(f"{image.name}: cached ({archive.name})")
        return archive
    log = CACHE / "logs" / f"{image.name}-{digest}.log"
    log.unlink(missing_ok=True)
    started = time.monotonic()
    args = {"BASE_IMAGE": debian_base.BASE_REF, "LOCK": image.lock, **image.build_args}
    bud = [
        "buildah",
        "bud",
        *ULIMITS,
        "--network",
        "host",
        "--layers",
        "--force-rm",
        "--pull=never",
    ]
    bud += ["--file", image.dockerfile, "--tag", image.ref]
    bud += [f"--build-arg={k}={v}" for k, v in args.items()]
    if no_cache:
        bud.append("--no-cache")
    say(f"{image.name}: building (log: {log})")
    with build_ca_mount() as ca_flags:
        run_logged([*bud, *ca_flags, str(REPO)], log, BUILD_TIMEOUT_S, f"build {image.name}")
    built = time.monotonic()
    if check:
        verify(image, log)
    partial = archive.with_name(f"{archive.name}.{os.getpid()}.tmp")
    try:
        push = ["buildah", "push", "--quiet", image.ref, f"oci-archive:{partial}:{image.ref}"]
        run_logged(push, log, 1800, f"write {archive.name}")
        partial.rename(archive)
    finally:
        partial.unlink(missing_ok=True)
    for old in prune_archives(image):
        say(f"{image.name}: removed old archive {old.name}")
    size = archive.stat().st_size / 2**20
    say(
        f"{image.name}: built in {built - started:.0f}s, verified and written in "
        f"{time.monotonic() - built:.0f}s ({size:.0f} MiB archive)"
    )
    return archive


@contextmanager
def exclusive_cache() -> Iterator[None]:
    """One run at a time per cache (two would race on the base import and the archives)."""
    CACHE.mkdir(parents=True, exist_ok=True)
    (CACHE / "logs").mkdir(exist_ok=True)
    with (CACHE / ".lock").open("w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say("another build-images run holds the cache; waiting")
            fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def preflight() -> None:
    missing = [tool for tool in ("buildah", "debootstrap", "tar", "git") if not shutil.which(tool)]
    if missing:
        raise BuildError(f"missing tools: {', '.join(missing)} (apt-get install them)")
    if os.geteuid() != 0:
        raise BuildError("needs root (debootstrap, and buildah's storage under /var/lib)")


def check_current(images: list[Image]) -> int:
    """Whether the archives for this tree exist (the e2e suite asks before starting a cluster;
    a build there would not fit a test's time)."""
    base_id = debian_base.image_id(debian_base.BASE_REF) if shutil.which("buildah") else None
    if not base_id:
        say(f"not built: no base image {debian_base.BASE_REF} (run `make images`)")
        return 1
    lines = []
    for image in images:
        archive = archive_path(image, content_hash(image, base_id))
        if not archive.exists():
            say(f"not built: {image.name} for this tree ({archive.name}; run `make images`)")
            return 1
        lines.append(f"image {image.ref} {archive}")
    print("\n".join(lines))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=[i.name for i in IMAGES], action="append")
    parser.add_argument("--no-cache", action="store_true", help="rebuild every layer")
    parser.add_argument("--refresh-base", action="store_true", help="debootstrap afresh")
    parser.add_argument("--no-verify", action="store_true", help="skip running the images")
    parser.add_argument(
        "--check",
        action="store_true",
        help="build nothing: exit 0 and print the image lines when every archive is current",
    )
    opts = parser.parse_args(argv)
    images = [i for i in IMAGES if not opts.only or i.name in opts.only]
    if opts.check:
        return check_current(images)
    try:
        preflight()
        with exclusive_cache():
            remove_stale_temporaries()
            started = time.monotonic()
            base_log = CACHE / "logs" / "debian-base.log"
            say(f"base {debian_base.BASE_REF} (log: {base_log})")
            try:
                base_id = debian_base.ensure_base(
                    CACHE, ULIMITS, base_log, refresh=opts.refresh_base
                )
            except subprocess.SubprocessError as exc:
                tail = base_log.read_text(errors="replace").splitlines()[-25:]
                raise BuildError(
                    f"base image: {exc} (log: {base_log})\n" + "\n".join(tail)
                ) from None
            say(f"base ready in {time.monotonic() - started:.0f}s ({base_id[:12]})")
            archives = [
                (image, build(image, base_id, no_cache=opts.no_cache, check=not opts.no_verify))
                for image in images
            ]
    except BuildError as exc:
        say(f"FAILED: {exc}")
        return 1
    say(f"done in {time.monotonic() - started:.0f}s")
    for image, archive in archives:
        print(f"image {image.ref} {archive}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
