"""scripts/build_images.py and debian_base.py without building anything: what decides a
rebuild, where the base comes from, archive retention, the timeout, and the Dockerfile layer
order that keeps a source edit from reinstalling the dependencies.

Building the images takes minutes and root; `make images` does it (docs/benchmarks.md).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))

import build_images  # noqa: E402
import debian_base  # noqa: E402


def _apt_dir(tmp_path: Path, sources: str, one_line: str = "") -> Path:
    (tmp_path / "sources.list.d").mkdir(parents=True)
    (tmp_path / "sources.list.d" / "debian.sources").write_text(sources)
    (tmp_path / "sources.list.d" / "other.sources.disabled").write_text(
        "Types: deb\nURIs: http://wrong.example/debian\nSuites: bookworm\n"
    )
    (tmp_path / "sources.list").write_text(one_line)
    return tmp_path


def test_mirror_comes_from_the_hosts_deb822_sources(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("DOCPARSER_DEBIAN_MIRROR", raising=False)
    apt = _apt_dir(
        tmp_path,
        "Types: deb-src\nURIs: http://src.example/debian\nSuites: bookworm\n\n"
        "Types: deb\n# a comment\nURIs: http://mirror.example/debian/\n"
        "Suites: bookworm bookworm-updates\nComponents: main\n\n"
        "Types: deb\nURIs: http://mirror.example/debian-security\nSuites: bookworm-security\n",
    )
    mirrors = debian_base.host_mirrors(apt)
    assert mirrors.main == "http://mirror.example/debian"
    assert mirrors.security == "http://mirror.example/debian-security"
    sources = debian_base.sources_file(mirrors)
    assert "Suites: bookworm bookworm-updates" in sources and "bookworm-security" in sources


def test_mirror_from_one_line_sources_and_the_override(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("DOCPARSER_DEBIAN_MIRROR", raising=False)
    apt = _apt_dir(tmp_path, "", "deb [arch=amd64] http://old.example/debian bookworm main\n")
    assert debian_base.host_mirrors(apt).main == "http://old.example/debian"
    monkeypatch.setenv("DOCPARSER_DEBIAN_MIRROR", "http://override.example/debian")
    assert debian_base.host_mirrors(apt).main == "http://override.example/debian"


def test_recipe_key_follows_the_mirror() -> None:
    a = debian_base.Mirrors("http://a.example/debian", None)
    b = debian_base.Mirrors("http://b.example/debian", None)
    assert debian_base.recipe_key(a) == debian_base.recipe_key(a) != debian_base.recipe_key(b)


@pytest.fixture
def tree(tmp_path, monkeypatch) -> Path:
    """A git repository shaped like ours: Dockerfile, .dockerignore, a lock, a package."""
    for name, text in {
        "Dockerfile.runtime": "FROM scratch\n",
        ".dockerignore": "tests\n",
        "runtime/requirements-image-cpu.lock": "numpy==2\n",
        "runtime/pkg/__init__.py": "",
        "tests/test_x.py": "",
        ".gitignore": "__pycache__/\n",
    }.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    subprocess.run(["git", "-C", str(tmp_path), "add", "-A"], check=True)
    monkeypatch.setattr(build_images, "REPO", tmp_path)
    return tmp_path


def test_content_hash_changes_with_what_enters_the_image(tree) -> None:
    image = build_images.IMAGES[0]
    first = build_images.content_hash(image, "base-1")
    assert build_images.content_hash(image, "base-1") == first
    assert build_images.content_hash(image, "base-2") != first
    (tree / "tests/test_x.py").write_text("changed")  # not in the image
    (tree / "runtime/pkg/__pycache__").mkdir()
    (tree / "runtime/pkg/__pycache__/m.pyc").write_text("ignored")
    assert build_images.content_hash(image, "base-1") == first
    for path in ["runtime/pkg/__init__.py", "runtime/requirements-image-cpu.lock"]:
        before = (tree / path).read_text()
        (tree / path).write_text(before + "# edit\n")  # uncommitted edits count
        assert build_images.content_hash(image, "base-1") != first
        (tree / path).write_text(before)
    (tree / "runtime/pkg/new.py").write_text("")  # untracked, not ignored: COPY sends it
    assert build_images.content_hash(image, "base-1") != first


def test_prune_keeps_the_two_newest_archives_of_that_image_only(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(build_images, "CACHE", tmp_path)
    now = time.time()
    for age, name in enumerate(["runtime-a", "runtime-b", "runtime-c", "operator-a", "pause-a"]):
        path = tmp_path / f"{name}.oci.tar"
        path.write_text("")
        os.utime(path, (now - age * 60, now - age * 60))
    removed = build_images.prune_archives(build_images.IMAGES[0])
    assert [p.name for p in removed] == ["runtime-c.oci.tar"]
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == [
        "operator-a.oci.tar",
        "pause-a.oci.tar",
        "runtime-a.oci.tar",
        "runtime-b.oci.tar",
    ]


def test_a_build_past_its_timeout_is_stopped_with_its_children(tmp_path) -> None:
    log = tmp_path / "build.log"
    marker = tmp_path / "child-survived"
    script = f"(sleep 3; touch {marker}) & sleep 30"
    started = time.monotonic()
    with pytest.raises(build_images.BuildError, match="timed out after 1s"):
        build_images.run_logged(["sh", "-c", script], log, 1, "build x")
    assert time.monotonic() - started < 10
    time.sleep(3.5)
    assert not marker.exists()  # the whole process group went


def test_a_failed_step_reports_its_log_tail(tmp_path) -> None:
    log = tmp_path / "build.log"
    with pytest.raises(build_images.BuildError, match=r"(?s)exit 3 \(log: .*\nno such package$"):
        build_images.run_logged(["sh", "-c", "echo no such package; exit 3"], log, 10, "b")


@pytest.mark.parametrize("dockerfile", ["Dockerfile.runtime", "Dockerfile.operator"])
def test_dependencies_install_from_the_lock_before_the_source_is_copied(dockerfile) -> None:
    lines = (REPO / dockerfile).read_text().splitlines()

    def first(predicate) -> int:
        return next(i for i, line in enumerate(lines) if predicate(line))

    lock = first(lambda line: line.startswith("COPY ${LOCK}"))
    deps = first(lambda line: "pip install --no-deps --require-hashes -r" in line)
    source = first(lambda line: line.startswith(("COPY runtime/", "COPY operator/")))
    package = first(lambda line: "--no-index --no-build-isolation" in line)
    assert lock < deps < source < package


def test_every_image_lock_is_in_the_repository() -> None:
    for image in build_images.IMAGES:
        assert (REPO / image.lock).is_file(), image.lock
    assert (REPO / "runtime/requirements-image-cuda.lock").is_file()


def _normalized(name: str) -> str:
    """A distribution's name as PEP 503 compares it (``ruamel.yaml`` is ``ruamel-yaml``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _pins(text: str) -> dict[str, str]:
    pins = {}
    for line in text.splitlines():
        if "==" in line and not line.startswith((" ", "#")):
            name, _, rest = line.partition("==")
            pins[_normalized(name.strip())] = rest.split()[0].split(";")[0]
    return pins


@pytest.mark.parametrize(
    ("pyproject", "extras", "lock"),
    [
        ("runtime/pyproject.toml", ["cloud"], "runtime/requirements-image-cpu.lock"),
        (
            "runtime/pyproject.toml",
            ["deepseek", "cloud", "otel"],
            "runtime/requirements-image-cuda.lock",
        ),
        ("operator/pyproject.toml", [], "operator/requirements-image.lock"),
    ],
)
def test_locks_pin_what_the_pyprojects_pin(pyproject, extras, lock) -> None:
    """A pyproject bump without `make images-lock` fails here, not in an image build."""
    import tomllib

    project = tomllib.loads((REPO / pyproject).read_text())["project"]
    wanted = list(project["dependencies"])
    for extra in extras:
        wanted += project["optional-dependencies"][extra]
    pins = _pins((REPO / lock).read_text())
    for requirement in wanted:
        name, _, version = requirement.partition("==")
        assert pins.get(_normalized(name)) == version, (lock, requirement)
