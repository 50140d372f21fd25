"""The Gateway API CRDs the tests install and validate against, taken from its Go module.

WHY a Go module: the suite must stand alone in any clone (no files beside the repository), and
the official CRDs ship inside ``sigs.k8s.io/gateway-api`` (``config/crd/standard/*.yaml``), which
the Go module proxy serves like any dependency; the control plane is built the same way. The
module's hash is pinned here, so a tampered or substituted download is refused.

Usage: ``python hack/controlplane/gateway_crds.py`` (``make test`` runs it) copies the standard
channel CRDs into ``~/.cache/docparser/gateway-api/<version>/`` once; later runs return at once.
Tests read the folder through ``crds_dir()`` and skip with ``missing_message()`` when it is absent.
``DOCPARSER_GATEWAY_CRDS_DIR`` points them at another folder holding the same files.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

MODULE = "sigs.k8s.io/gateway-api"
VERSION = "v1.7.0"
# `h1:` hash of the module zip, as recorded in go.sum files and the Go checksum database.
MODULE_SUM = "h1:duVnm7nO6oXfMMUWfcDoBph47CYR/ME3NGxccOVglaY="
CHANNEL = "config/crd/standard/"
HTTPROUTES = "gateway.networking.k8s.io_httproutes.yaml"


def cache_dir() -> Path:
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return root / "docparser" / "gateway-api" / VERSION


def crds_dir() -> Path:
    """Where the tests read the CRDs: DOCPARSER_GATEWAY_CRDS_DIR, else the cache."""
    return Path(os.environ.get("DOCPARSER_GATEWAY_CRDS_DIR") or cache_dir())


def available() -> bool:
    return (crds_dir() / HTTPROUTES).is_file()


def missing_message() -> str:
    return (
        f"Gateway API {VERSION} CRDs not found in {crds_dir()}: run "
        "`python hack/controlplane/gateway_crds.py` (needs Go and the Go module proxy; "
        "`make test` does it) or set DOCPARSER_GATEWAY_CRDS_DIR"
    )


def _go() -> str:
    go = shutil.which("go") or "/usr/local/go/bin/go"
    if not Path(go).is_file():
        raise RuntimeError("Go not found")
    return go


def _download() -> Path:
    """The module zip in Go's module cache, downloaded (and checked against the sum database)."""
    # The module's go.mod asks for a newer Go than may be installed; `go mod download` still
    # fetches and verifies the zip and reports the version mismatch in "Error", which does not
    # concern files we only read. So the exit status is ignored and the pinned sum decides.
    proc = subprocess.run(
        [_go(), "mod", "download", "-json", f"{MODULE}@{VERSION}"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tempfile.gettempdir(),  # outside any module: no go.mod is read or changed
        env={**os.environ, "GOFLAGS": "-mod=mod", "GOTOOLCHAIN": "local"},
    )
    try:
        info = json.loads(proc.stdout)
    except json.JSONDecodeError:
        raise RuntimeError(f"go mod download failed: {proc.stderr.strip()[-500:]}") from None
    if info.get("Sum") != MODULE_SUM:
        raise RuntimeError(f"{MODULE}@{VERSION}: sum {info.get('Sum')!r} != pinned {MODULE_SUM}")
    zip_path = Path(info.get("Zip") or "")
    if not zip_path.is_file():
        raise RuntimeError(f"go mod download left no zip: {info.get('Error') or proc.stderr}")
    return zip_path


def fetch() -> Path:
    """Copy the standard channel's CRDs (and the LICENSE) into the cache; return the folder."""
    dest = cache_dir()
    if (dest / HTTPROUTES).is_file():
        return dest
    prefix = f"{MODULE}@{VERSION}/"
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=dest.parent))  # same filesystem: atomic
    try:
        with zipfile.ZipFile(_download()) as archive:
            for member in archive.namelist():
                rel = member.removeprefix(prefix)
                in_channel = rel.startswith(CHANNEL) and "/" not in rel[len(CHANNEL) :]
                if rel == "LICENSE" or (in_channel and rel.endswith(".yaml")):
                    (tmp / Path(rel).name).write_bytes(archive.read(member))
        if not (tmp / HTTPROUTES).is_file():
            raise RuntimeError(f"{MODULE}@{VERSION} has no {CHANNEL}{HTTPROUTES}")
        with contextlib.suppress(FileExistsError, OSError):  # a concurrent fetch won: keep it
            tmp.rename(dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def main() -> int:
    try:
        where = fetch()
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
        print(f"gateway-api: {exc}; tests that need HTTPRoutes will be skipped", file=sys.stderr)
        return 1
    names = sorted(p.name for p in where.glob("*.yaml"))
    print(f"gateway-api: {VERSION} CRDs in {where} ({len(names)} files)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
