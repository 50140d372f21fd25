"""One typed pass (issue 37): a reconcile pass parses the DocParser once, and the typed
DocParser, with its typed status, is what every step below the controller reads.

The first test counts ``DocParser.model_validate`` (which ``DocParser.from_resource``, the
pass's ``parse``, calls) over whole passes on the `cluster` fixture, with every per-pass
feature the pass hands a parse to (spec.capacity's report, a canary with its analysis and
shadow, scale to zero's floor) on: the first pass, which creates the children and writes the
status, and the pass after it, which reads that status back. The second reads the signatures
of every function in ``core``, ``analysis`` and ``api``: none takes a DocParser status (a
parameter named ``status`` or ``previous``/``previous_status``/``old``/``new``) as a dict,
but the merge patch's, which is JSON by nature; none takes the DocParser itself as a dict (a
``resource``, ``docparser``, ``dp`` or ``model``); and
every ``to_status`` returns a status model (api/status_models.py), never a dict built by hand.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import typing
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from docparser_operator.api.kinds import DOCPARSER
from docparser_operator.api.models import DocParser
from docparser_operator.api.wire import StatusModel
from docparser_operator.controller.capacity import CapacityArgs
from docparser_operator.controller.credential import CredentialMemory
from docparser_operator.controller.reconcile import reconcile
from docparser_operator.core.status.capacity_window import CapacityMemory
from docparser_operator.providers import capacity as capacity_source
from dp_helpers import CANARY_WEIGHTS, create, docparser
from kube_cluster import Cluster, client_for

# Parameter names that carry the DocParser's status (previous or new) in core, analysis, api.
STATUS_PARAMETERS = {"status", "previous", "previous_status", "old", "new"}
# Functions whose ``status`` is a child's (a pod's containerStatus), not the DocParser's.
CHILD_STATUS = {"docparser_operator.core.status.conditions._container_state"}
# The merge patch works on the wire's JSON by nature (RFC 7386): the status as the API server
# holds it, and the typed status' to_wire(); controller/reporting.py hands it both.
WIRE = "docparser_operator.core.status.status_patch."
BELOW_THE_CONTROLLER = ("core", "analysis", "api")
# Parameter names that carry the DocParser itself (raw, it is parsed above: the controller's pass
# and cli/main.py's render_resource; DocParser.from_resource, the parse, is a classmethod).
RESOURCE_PARAMETERS = {"resource", "docparser", "dp", "model"}


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[], int]]:
    """The number of DocParser parses since the fixture began (read it, then reset it)."""
    original = DocParser.model_validate.__func__  # type: ignore[attr-defined]
    calls: list[int] = []

    def counted(cls: type[DocParser], *args: Any, **kwargs: Any) -> DocParser:
        calls.append(1)
        return typing.cast(DocParser, original(cls, *args, **kwargs))

    monkeypatch.setattr(DocParser, "model_validate", classmethod(counted))

    def taken() -> int:
        n = len(calls)
        calls.clear()
        return n

    yield taken


def test_a_pass_parses_the_docparser_once(cluster: Cluster, parses: Callable[[], int]) -> None:
    spec = docparser(
        "once",
        replicas={"min": 1, "max": 3},
        capacity={"window": "1h"},
        canary={"weights": CANARY_WEIGHTS, "weight": 10, "shadow": {"percent": 5}},
    )
    dp = create(cluster, spec)
    parses()  # creating it is not the pass
    api = client_for(cluster.kubeconfig, user_agent="docparser-operator/test")
    args = CapacityArgs(CapacityMemory(), capacity_source.guarded(()))
    credentials = CredentialMemory()
    first = reconcile(api, dp, capacity=args, credentials=credentials)
    assert not first.spec_invalid and first.status_written
    assert parses() == 1
    again = cluster.get(DOCPARSER, "once")
    assert again is not None and again.get("status")
    parses()
    second = reconcile(api, again, capacity=args, credentials=credentials)
    assert parses() == 1
    # the status it read back is the typed one the first pass wrote
    assert second.previous_status == first.status


def _signatures() -> Iterator[tuple[str, inspect.Signature, dict[str, Any]]]:
    for package in BELOW_THE_CONTROLLER:
        root = importlib.import_module(f"docparser_operator.{package}")
        modules = [root] + [
            importlib.import_module(info.name)
            for info in pkgutil.walk_packages(root.__path__, f"{root.__name__}.")
        ]
        for module in modules:
            for _, obj in inspect.getmembers(module):
                functions = [obj]
                if inspect.isclass(obj):
                    functions = [f for _, f in inspect.getmembers(obj, inspect.isfunction)]
                for fn in functions:
                    if not inspect.isfunction(fn) or fn.__module__ != module.__name__:
                        continue
                    hints = typing.get_type_hints(fn)
                    yield f"{fn.__module__}.{fn.__qualname__}", inspect.signature(fn), hints


def test_no_function_below_the_controller_takes_a_status_as_a_dict() -> None:
    found = []
    seen = 0
    for where, signature, hints in _signatures():
        seen += 1
        if where in CHILD_STATUS or where.startswith(WIRE):
            continue
        for name in signature.parameters:
            hint = hints.get(name)
            if name in STATUS_PARAMETERS and hint is not None and "dict" in str(hint):
                found.append(f"{where}({name}: {hint})")
    assert seen > 100, "the walk found the modules' functions"
    assert found == []


def test_the_walk_sees_a_dict_status_where_there_is_one() -> None:
    """The check above can fail: the walk finds the one function left out on purpose, whose
    ``status`` is a pod's containerStatus dict."""
    hits = [
        where
        for where, signature, hints in _signatures()
        if "status" in signature.parameters and "dict" in str(hints.get("status"))
    ]
    assert sorted(CHILD_STATUS) == sorted(hits)


def _takes_raw(where: str, signature: inspect.Signature, hints: dict[str, Any]) -> list[str]:
    return [
        f"{where}({name}: {hints[name]})"
        for name in signature.parameters
        if name in RESOURCE_PARAMETERS and "dict" in str(hints.get(name))
    ]


def test_no_function_below_the_controller_takes_the_docparser_as_a_dict() -> None:
    """The render command's raw resource is parsed in cli/main.py (``render_resource``), the
    pass's in the controller: core renders, plans and reports a typed DocParser only."""
    found = [hit for where, sig, hints in _signatures() for hit in _takes_raw(where, sig, hints)]
    assert found == []

    def render_all(resource: dict[str, Any], *, canary_ready: bool = True) -> None:
        """core/render's signature before it took the DocParser typed."""

    hints = typing.get_type_hints(render_all)
    assert _takes_raw("old", inspect.signature(render_all), hints)  # the check can fail


def test_every_status_part_is_returned_as_its_model() -> None:
    """Each ``to_status`` (the walk's, its checks' and golden scores', the shadow's figures,
    the idle and schedule steps') returns a StatusModel: the camelCase keys come from the
    model, never from a dict written by hand."""
    returns = {
        where: hints.get("return")
        for where, _, hints in _signatures()
        if where.endswith(".to_status")
    }
    assert len(returns) >= 6, returns
    wrong = {
        where: hint
        for where, hint in returns.items()
        if not (isinstance(hint, type) and issubclass(hint, StatusModel))
    }
    assert wrong == {}
