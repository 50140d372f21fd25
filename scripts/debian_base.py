"""The local Debian base image the docparser images build on, made without any registry.

``debootstrap --variant=minbase bookworm`` (bookworm: Python 3.11, the version the suite tests)
from the host's own Debian mirror, slimmed like the official ``-slim`` images, saved as a
root filesystem tarball in the cache and imported into buildah's storage as
``localhost/docparser/debian-base:bookworm`` with the current security updates applied.

The tarball is keyed by its recipe (suite, mirrors, RECIPE_VERSION), so it is made once; the
import runs only when the image is missing from buildah's storage (or ``refresh``).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SUITE = "bookworm"
BASE_REF = f"localhost/docparser/debian-base:{SUITE}"
# Bump when the rootfs recipe below changes, so cached tarballs are remade.
RECIPE_VERSION = 1
DEFAULT_MIRROR = "http://deb.debian.org/debian"
APT_SOURCES = Path("/etc/apt")
DEBOOTSTRAP_TIMEOUT_S = 1800
LABEL = "io.docparser.base.rootfs"  # which cached rootfs tarball the base was imported from

# Like the official slim images: no docs, man pages or translations (copyright notices stay).
DPKG_SLIM = """\
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/lintian/*
path-exclude /usr/share/linda/*
path-exclude /usr/share/locale/*
"""
# No downloaded .deb files or package caches left in a layer after apt-get install.
_APT_RM = "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb"
APT_CLEAN = f"""\
DPkg::Post-Invoke {{ "{_APT_RM} /var/cache/apt/*.bin || true"; }};
APT::Update::Post-Invoke {{ "{_APT_RM} /var/cache/apt/*.bin || true"; }};
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
Acquire::Languages "none";
"""


@dataclass(frozen=True)
class Mirrors:
    main: str
    security: str | None


def _deb822_stanzas(text: str) -> Iterable[dict[str, str]]:
    for block in re.split(r"\n\s*\n", text):
        fields: dict[str, str] = {}
        for line in block.splitlines():
            if line.startswith("#") or ":" not in line or line[:1].isspace():
                continue
            key, _, value = line.partition(":")
            fields[key.strip().lower()] = value.strip()
        if fields:
            yield fields


def _one_line_entries(text: str) -> Iterable[tuple[str, str]]:
    """(uri, suite) of each ``deb [options] URI SUITE COMPONENTS...`` line."""
    for line in text.splitlines():
        words = re.sub(r"\[[^]]*\]", "", line.split("#", 1)[0]).split()
        if len(words) >= 3 and words[0] == "deb":
            yield words[1], words[2]


def host_mirrors(apt_dir: Path = APT_SOURCES) -> Mirrors:
    """The Debian mirror (and security mirror) the host's apt uses; never a hard-coded host.

    ``DOCPARSER_DEBIAN_MIRROR`` overrides; deb.debian.org only when the host names none.
    """
    entries: list[tuple[str, str]] = []
    for path in sorted(apt_dir.glob("sources.list.d/*.sources")):
        for stanza in _deb822_stanzas(path.read_text()):
            if "deb" not in stanza.get("types", "").split():
                continue
            if stanza.get("enabled", "yes").lower() == "no":
                continue
            for uri in stanza.get("uris", "").split():
                entries += [(uri, suite) for suite in stanza.get("suites", "").split()]
    for path in [apt_dir / "sources.list", *sorted(apt_dir.glob("sources.list.d/*.list"))]:
        if path.is_file():
            entries += list(_one_line_entries(path.read_text()))
    main = os.environ.get("DOCPARSER_DEBIAN_MIRROR") or next(
        (uri for uri, suite in entries if suite == SUITE), None
    )
    security = next((uri for uri, suite in entries if suite == f"{SUITE}-security"), None)
    return Mirrors(main=(main or DEFAULT_MIRROR).rstrip("/"), security=security)


def sources_file(mirrors: Mirrors) -> str:
    """The image's apt sources: the same mirrors the host uses, updates and security too."""
    keyring = "/usr/share/keyrings/debian-archive-keyring.gpg"
    text = (
        f"Types: deb\nURIs: {mirrors.main}\nSuites: {SUITE} {SUITE}-updates\n"
        f"Components: main\nSigned-By: {keyring}\n"
    )
    if mirrors.security:
        text += (
            f"\nTypes: deb\nURIs: {mirrors.security.rstrip('/')}\nSuites: {SUITE}-security\n"
            f"Components: main\nSigned-By: {keyring}\n"
        )
    return text


def recipe_key(mirrors: Mirrors) -> str:
    recipe = {"suite": SUITE, "variant": "minbase", "version": RECIPE_VERSION, **vars(mirrors)}
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:16]


def _slim(rootfs: Path) -> None:
    """What DPKG_SLIM keeps out of future installs, removed from the debootstrapped files."""
    share = rootfs / "usr/share"
    for sub in ("man", "groff", "info", "lintian", "linda", "locale"):
        shutil.rmtree(share / sub, ignore_errors=True)
    for path in sorted((share / "doc").rglob("*"), reverse=True):
        if path.is_dir() and not path.is_symlink():
            if not any(path.iterdir()):
                path.rmdir()
        elif path.name != "copyright":
            path.unlink()
    for junk in ("var/cache/apt/archives", "var/lib/apt/lists"):
        for path in (rootfs / junk).glob("*"):
            if path.is_file() or path.is_symlink():
                path.unlink()


def _configure(rootfs: Path, mirrors: Mirrors) -> None:
    (rootfs / "etc/dpkg/dpkg.cfg.d/docparser-slim").write_text(DPKG_SLIM)
    (rootfs / "etc/apt/apt.conf.d/docparser-clean").write_text(APT_CLEAN)
    (rootfs / "etc/apt/sources.list").unlink(missing_ok=True)
    (rootfs / "etc/apt/sources.list.d/debian.sources").write_text(sources_file(mirrors))
    _slim(rootfs)


def make_rootfs_tar(cache: Path, mirrors: Mirrors, log: Path) -> Path:
    """debootstrap + slim into ``cache/debian-base-<suite>-<key>.tar`` (skipped when present)."""
    tar = cache / f"debian-base-{SUITE}-{recipe_key(mirrors)}.tar"
    if tar.exists():
        return tar
    work = Path(tempfile.mkdtemp(prefix=".rootfs-", dir=cache))
    partial = tar.with_name(tar.name + f".{os.getpid()}.tmp")
    try:
        rootfs = work / "rootfs"
        with log.open("ab") as out:
            debootstrap = ["debootstrap", "--variant=minbase", SUITE, str(rootfs), mirrors.main]
            subprocess.run(
                ["nice", "-n", "10", *debootstrap],
                stdout=out,
                stderr=subprocess.STDOUT,
                check=True,
                timeout=DEBOOTSTRAP_TIMEOUT_S,
            )
        _configure(rootfs, mirrors)
        # Device nodes, /proc and /sys come from the container runtime, not the image.
        excludes = ["--exclude=./dev/*", "--exclude=./proc/*", "--exclude=./sys/*"]
        subprocess.run(
            ["tar", "--numeric-owner", *excludes, "-C", str(rootfs), "-cf", str(partial), "."],
            check=True,
        )
        partial.rename(tar)
    finally:
        partial.unlink(missing_ok=True)
        shutil.rmtree(work, ignore_errors=True)
    return tar


def inspect_image(ref: str) -> dict[str, Any] | None:
    """``buildah inspect`` of an image, None when buildah's storage has no such image."""
    out = subprocess.run(
        ["buildah", "inspect", "--type", "image", ref], capture_output=True, text=True
    )
    return json.loads(out.stdout) if out.returncode == 0 else None


def image_id(ref: str) -> str | None:
    info = inspect_image(ref)
    return info["FromImageID"] if info else None


def import_base(tar: Path, ulimits: list[str], log: Path) -> str:
    """Import the rootfs tarball as BASE_REF, with today's updates; returns its image ID."""
    name = f"docparser-base-import-{os.getpid()}"
    with log.open("ab") as out:

        def run(*args: str) -> None:
            subprocess.run(args, stdout=out, stderr=subprocess.STDOUT, check=True, timeout=1800)

        run("buildah", "from", "--name", name, *ulimits, "scratch")
        try:
            run("buildah", "add", name, str(tar), "/")
            path = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
            run("buildah", "config", "--env", path, "--cmd", "/bin/bash", name)
            run("buildah", "config", "--label", f"{LABEL}={tar.name}", name)
            # Security and point-release updates the debootstrap of the main suite lacks.
            upgrade = (
                "apt-get update && apt-get -y upgrade && apt-get clean"
                " && rm -rf /var/lib/apt/lists/*"
            )
            run("buildah", "run", "--network", "host", name, "--", "sh", "-c", upgrade)
            run("buildah", "commit", "--rm", name, BASE_REF)
        except BaseException:
            subprocess.run(["buildah", "rm", name], capture_output=True)
            raise
    ident = image_id(BASE_REF)
    assert ident, f"{BASE_REF} missing right after its import"
    return ident


def ensure_base(cache: Path, ulimits: list[str], log: Path, *, refresh: bool = False) -> str:
    """BASE_REF in buildah's storage (made or imported as needed); returns its image ID."""
    mirrors = host_mirrors()
    if refresh:
        for old in cache.glob(f"debian-base-{SUITE}-*.tar"):
            old.unlink()
        subprocess.run(["buildah", "rmi", BASE_REF], capture_output=True)
    tar = make_rootfs_tar(cache, mirrors, log)
    info = inspect_image(BASE_REF)
    if info and (info["OCIv1"]["config"].get("Labels") or {}).get(LABEL) == tar.name:
        return str(info["FromImageID"])
    return import_base(tar, ulimits, log)
