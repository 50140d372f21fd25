"""kube/client.py: the credentials' refresh hook runs at most once per ``refresh_s``.

Why: the kubernetes package's hook re-applies the whole kubeconfig on each call (its host
setter scans the environment for proxies), a tenth of the reconcile threads' CPU when it ran
twice per request (docs/benchmarks.md). Rate-limiting it must still pick up a renewed token
once the interval has passed, the first request must refresh as before, and the header must be
the one ``auth_settings()`` gave (the client now reads the key itself, without the hook).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from docparser_operator.kube.client import KubeClient, load_configuration
from kubernetes import client as k8s_client

KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: first-token}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""


def test_refresh_hook_runs_once_per_interval_and_picks_up_a_new_token(tmp_path: Path) -> None:
    """The kubeconfig loader's real hook (a token user installs one): 50 requests' headers
    in a burst refresh once; after the interval the next refresh runs and a token the hook
    now sets is the one sent."""
    path = tmp_path / "kubeconfig"
    path.write_text(KUBECONFIG)
    cfg = load_configuration(str(path))
    real = cfg.refresh_api_key_hook
    assert real is not None  # a token user: the package installed its hook
    calls: list[float] = []
    token = {"value": "first-token"}

    latest = [real]

    def counted(c: Any) -> None:
        calls.append(time.monotonic())
        latest[0](c)  # the package's hook installs a new one of itself each call: keep ours
        latest[0], c.refresh_api_key_hook = c.refresh_api_key_hook, counted
        c.api_key["BearerToken"] = f"Bearer {token['value']}"

    cfg.refresh_api_key_hook = counted
    client = KubeClient(cfg)
    client.refresh_s = 0.2
    started = time.monotonic()
    headers = [client._headers(None) for _ in range(50)]
    if time.monotonic() - started < client.refresh_s:  # a loaded machine may take longer
        assert len(calls) == 1  # was 100: here and inside auth_settings, each request
    assert {h["authorization"] for h in headers} == {"Bearer first-token"}
    token["value"] = "second-token"
    time.sleep(client.refresh_s + 0.05)
    assert client._headers("application/json")["authorization"] == "Bearer second-token"
    assert len(calls) >= 2


def test_authorization_header_is_the_one_auth_settings_gives() -> None:
    """Key with and without a prefix, under either name, and none: the same header (or
    none) as the package's ``auth_settings()``, which the client called before."""
    cases: list[tuple[dict[str, str], dict[str, str]]] = [
        ({"BearerToken": "Bearer abc"}, {}),
        ({"BearerToken": "abc"}, {"BearerToken": "Bearer"}),
        ({"authorization": "abc"}, {"authorization": "Token"}),
        ({"authorization": "abc", "BearerToken": "xyz"}, {}),
        ({}, {}),
    ]
    for keys, prefixes in cases:
        cfg = k8s_client.Configuration(host="https://127.0.0.1:1")
        cfg.api_key, cfg.api_key_prefix = dict(keys), dict(prefixes)
        settings: Any = cfg.auth_settings()  # the package types it as a bare object map
        want = {s["key"]: s["value"] for s in settings.values() if s.get("value")}
        got = KubeClient(cfg)._headers(None)
        assert {k: v for k, v in got.items() if k == "authorization"} == want, keys
