"""API keys: file and Secret-directory forms, rotation, 401/403 through the real app."""

from __future__ import annotations

import logging
import os

import pytest
from app_for_tests import make_settings, serving
from docparser_runtime.errors import PermissionDenied, Unauthenticated
from docparser_runtime.server.guards.auth import (
    ApiKeyStore,
    authenticate,
    bearer_token,
    key_id_of,
    parse_keys_file,
)
from engines_for_tests import png_bytes

PARSE = "/v1/document/parse"
KEY_A = "dp-key-alpha-0123456789"
KEY_B = "dp-key-bravo-9876543210"


def write_secret_dir(root, keys: dict[str, str], generation: int) -> None:
    """Lay out a directory exactly like kubelet's AtomicWriter mounts a Secret."""
    data_dir = root / f"..2026_01_0{generation}_00_00_00.000000000"
    data_dir.mkdir()
    for name, value in keys.items():
        (data_dir / name).write_text(value)
    tmp_link = root / "..data_tmp"
    tmp_link.symlink_to(data_dir.name)
    os.replace(tmp_link, root / "..data")  # the atomic swap kubelet does
    for name in keys:
        link = root / name
        if not link.is_symlink():
            link.symlink_to(f"..data/{name}")


def test_parse_keys_file_ignores_comments_and_blanks():
    text = "# rotated 2026-01\n\n  key-one  \nkey-two\n   # old: key-zero\n"
    assert parse_keys_file(text) == ["key-one", "key-two"]


def test_bearer_token_parsing():
    assert bearer_token("Bearer abc") == "abc"
    assert bearer_token("bearer   abc  ") == "abc"
    for bad in (None, "", "Basic abc", "Bearer", "Bearer   "):
        with pytest.raises(Unauthenticated):
            bearer_token(bad)


def test_file_store_matches_all_keys_and_reloads_on_change(tmp_path):
    path = tmp_path / "keys"
    path.write_text(f"{KEY_A}\n# comment\n{KEY_B}\n")
    store = ApiKeyStore(path)
    assert store.match(KEY_A) == key_id_of(KEY_A.encode())
    assert store.match(KEY_B) == key_id_of(KEY_B.encode())
    assert store.match(KEY_A[:-1]) is None and store.match(KEY_A + "x") is None
    assert store.match("") is None
    loads = store.reload_count
    assert store.match(KEY_A) and store.reload_count == loads  # unchanged file: no re-read
    path.write_text(f"{KEY_B}\n")  # rotation: A revoked
    os.utime(path, ns=(1, 1))  # make sure stat data changes even on coarse clocks
    assert store.match(KEY_A) is None
    assert store.match(KEY_B) is not None
    assert store.reload_count == loads + 1


def test_secret_directory_store_and_atomic_rotation(tmp_path):
    write_secret_dir(tmp_path, {"alice": KEY_A, "bob": KEY_B}, generation=1)
    store = ApiKeyStore(tmp_path)
    assert store.match(KEY_A) and store.match(KEY_B)
    assert store.match("..data") is None
    write_secret_dir(tmp_path, {"alice": "dp-key-alpha-rotated", "bob": KEY_B}, generation=2)
    assert store.match(KEY_A) is None
    assert store.match("dp-key-alpha-rotated") is not None
    assert store.match(KEY_B) is not None


def test_missing_or_empty_source_fails_closed(tmp_path):
    store = ApiKeyStore(tmp_path / "absent")
    with pytest.raises(PermissionDenied):
        authenticate(store, f"Bearer {KEY_A}")
    (tmp_path / "absent").write_text(f"{KEY_A}\n")  # appears later: picked up
    assert authenticate(store, f"Bearer {KEY_A}").authenticated
    empty = tmp_path / "empty"
    empty.write_text("# no keys yet\n")
    with pytest.raises(PermissionDenied):
        authenticate(ApiKeyStore(empty), f"Bearer {KEY_A}")


def test_auth_disabled_is_anonymous():
    principal = authenticate(None, None)
    assert not principal.authenticated


async def test_401_403_and_open_probes_through_the_app(tmp_path, caplog):
    keys = tmp_path / "keys"
    keys.write_text(f"{KEY_A}\n")
    files = {"file": ("a.png", png_bytes(), "image/png")}
    caplog.set_level(logging.DEBUG)
    async with serving(make_settings(api_keys_file=keys)) as (_app, client, _engine):
        missing = await client.post(PARSE, files=files)
        assert missing.status_code == 401
        assert missing.json()["error"]["code"] == "missing_api_key"
        assert missing.headers["www-authenticate"] == "Bearer"
        malformed = await client.post(PARSE, files=files, headers={"Authorization": KEY_A})
        assert malformed.status_code == 401
        wrong = await client.post(PARSE, files=files, headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 403
        assert wrong.json()["error"]["code"] == "invalid_api_key"
        ok = await client.post(PARSE, files=files, headers={"Authorization": f"Bearer {KEY_A}"})
        assert ok.status_code == 200, ok.text
        # Other /v1 routes are guarded too (the dependency is app-wide).
        assert (await client.get("/v1/jobs/some-id")).status_code == 401
        assert (await client.get("/v1/does-not-exist")).status_code == 404  # no route, no auth
        for open_path in ("/livez", "/readyz", "/metrics"):
            assert (await client.get(open_path)).status_code == 200, open_path

        keys.write_text(f"{KEY_B}\n")  # rotate without restart
        os.utime(keys, ns=(2, 2))
        old = await client.post(PARSE, files=files, headers={"Authorization": f"Bearer {KEY_A}"})
        new = await client.post(PARSE, files=files, headers={"Authorization": f"Bearer {KEY_B}"})
        assert (old.status_code, new.status_code) == (403, 200)
    assert KEY_A not in caplog.text and KEY_B not in caplog.text, "API keys must never be logged"


async def test_no_keys_configured_means_open_api():
    async with serving(make_settings()) as (_app, client, _engine):
        files = {"file": ("a.png", png_bytes(), "image/png")}
        assert (await client.post(PARSE, files=files)).status_code == 200
