"""kopf wiring: every trigger calls the one level-triggered ``reconcile``.

Triggers: a new generation of a DocParser (created, its spec changed, or first seen at
start), a drift resync loop, events of the Deployments we own (rollout progress and canary
readiness change the status and the routed weight), state changes of runtime pods (a Degraded
reason or a model state shows at once), and the deletion of any other child (put back at
once). kopf only delivers triggers; desired state, apply and status live in ``reconcile``.
This module holds start-up and the DocParser's own triggers; the children's watches are
``child_events.py``, and the pass every trigger runs is ``passes.run_reconcile``.

Error policy:
- a spec the API server accepted but the operator cannot serve (an invalid combination, a GPU
  that cannot hold the batch) becomes a Degraded condition and a Warning Event;
- transient API errors (5xx, 429, 409, connection trouble) raise ``kopf.TemporaryError``:
  a pass a new generation started asks for another after the delay (``track``).

State lives in the framework, not in module globals: settings are read and the API client,
per-object locks and the resync loop's view of every DocParser are created at start-up in
kopf's ``memo`` (one per operator run), so tests start operators against different clusters
in one process without resetting anything.

kopf writes nothing to a DocParser: it posts Events only for warnings, and the operator
registers no change handler (no annotation bookkeeping, ``track``), no deletion handler and
no kopf timer (so no finalizer: children go with their owner through garbage collection, and
deleting a DocParser never waits for the operator).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterable, Mapping
from typing import Any

import kopf

from docparser_operator.api import labels
from docparser_operator.api.kinds import DOCPARSER, INDEXED
from docparser_operator.api.naming import API_GROUP, PLURAL
from docparser_operator.controller import (
    child_events,  # noqa: F401  (registers the watches)
    drains,
    kopf_costs,
    post_events,
    wakeups,
)
from docparser_operator.controller.metrics import OperatorMetrics
from docparser_operator.controller.passes import plain_body, run_reconcile, state_of
from docparser_operator.controller.settings import OperatorSettings
from docparser_operator.controller.state import OperatorState
from docparser_operator.core.plan.refusals import RefusalMemory
from docparser_operator.kube.client import KubeClient, load_configuration
from docparser_operator.kube.nodes import CordonedNodes
from docparser_operator.kube.observer import IndexedObserver, IndexKey, index_key

VERSION = DOCPARSER.api_version.split("/")[1]
ANNOTATION_PREFIX = "docparser.io"
log = logging.getLogger("docparser_operator")


@kopf.on.login()
def login(**_: Any) -> kopf.ConnectionInfo:
    """kopf and our client authenticate from the same source (in-cluster, else KUBECONFIG)."""
    cfg = load_configuration(OperatorSettings().kubeconfig)
    header: str | None = cfg.get_api_key_with_prefix("BearerToken") or cfg.get_api_key_with_prefix(
        "authorization"
    )
    scheme, _sep, token = (header or "").rpartition(" ")
    return kopf.ConnectionInfo(
        server=cfg.host,
        ca_path=cfg.ssl_ca_cert,
        insecure=not cfg.verify_ssl,
        scheme=scheme or None,
        token=token or None,
        certificate_path=cfg.cert_file,
        private_key_path=cfg.key_file,
    )


# Watch-backed reads (kube/observer.py): one kopf index per indexed kind of api/kinds.py (the
# children and the runtime pods), keyed by (namespace, DocParser). kopf runs no resource handler
# before each holds its initial list.
def _index_id(kind: str) -> str:
    return f"{kind.lower()}_index"


def _by_owner(body: kopf.Body, **_: Any) -> dict[IndexKey, dict[str, Any]]:
    key = index_key(body)
    return {key: kopf_costs.index_entry(body)} if key is not None else {}


for _ref in INDEXED:
    kopf.index(
        _ref.group,
        _ref.version,
        _ref.plural,
        id=_index_id(_ref.kind),
        labels={labels.LABEL_MANAGED_BY: labels.MANAGED_BY},
    )(_by_owner)


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **kwargs: Any) -> None:
    ours = OperatorSettings()  # read once per run, from the environment of that moment
    client = KubeClient(load_configuration(ours.kubeconfig), timeout_s=ours.request_timeout_s)
    metrics = memo.get("metrics") or OperatorMetrics.create()  # run() makes it before the election
    metrics.attach(client)
    if ours.metrics_port:
        metrics.serve(ours.metrics_port)
    indexes = {r.kind: kwargs[_index_id(r.kind)] for r in INDEXED}  # kopf passes every index
    nodes = CordonedNodes(client, watch_timeout_s=ours.node_watch_timeout_s)
    aware = nodes.start()  # before any pass: a pass never plans drains from an empty view
    memo.state = OperatorState(
        settings=ours,
        client=client,
        event_limiter=post_events.EventLimiter(ours.event_interval_s),
        metrics=metrics,
        observer=IndexedObserver(indexes, client=client, cordoned=nodes if aware else lambda: None),
        nodes=nodes if aware else None,
        refusals=RefusalMemory(ours.refusal_backoff_s, ours.refusal_backoff_max_s),
    )
    # built once per run, not by each worker's first pass (the settings checked the entries)
    memo.state.analysis_sources()
    memo.state.capacity_args()
    memo.state.idle_args()
    settings.posting.level = logging.WARNING
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(
        prefix=ANNOTATION_PREFIX
    )
    settings.persistence.diffbase_storage = kopf_costs.NoDiffBase()  # no change handler
    settings.networking.request_timeout = ours.request_timeout_s
    settings.watching.server_timeout = 300
    settings.queueing.error_delays = [1, 2, 5, 10, 30, 60]


# One event handler: no kopf change handler (it keeps the last handled spec in an annotation,
# a PATCH per DocParser created or changed) and no kopf timer (a finalizer: a write each, and
# `kubectl delete` blocked while the operator is down). It keeps the latest body of every
# DocParser for the resync task, and a new generation (created, spec changed, or first seen at
# start) gets a pass at once; a transient error asks for one after the delay (wakeups).
@kopf.on.event(API_GROUP, VERSION, PLURAL)
def track(event: Mapping[str, Any], body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    state = state_of(memo)
    meta = body.get("metadata") or {}
    uid = meta.get("uid")
    if not uid:
        return
    if event.get("type") == "DELETED" or meta.get("deletionTimestamp"):
        state.deleted(uid, meta.get("namespace") or "", meta.get("name") or "")
        return
    plain = plain_body(body)
    state.saw_event(uid, plain)  # a generation passed already: our status write, a label edit
    if int(meta.get("generation") or 0) <= state.handled.get(uid, 0):
        return
    try:
        run_reconcile(state, plain, strict=False)
    except kopf.TemporaryError as exc:  # transient: a pass after the delay, not kopf's retry
        state.wakeups[uid] = time.monotonic() + float(exc.delay or state.settings.retry_delay_s)


def resync_all(state: OperatorState, uids: Iterable[str] | None = None) -> int:
    """Drift correction over every known DocParser (or those of ``uids``); a pass with
    nothing to do writes nothing."""
    done = 0
    wanted = None if uids is None else set(uids)
    for uid, body in list(state.known.items()):
        if wanted is not None and uid not in wanted:
            continue
        if state.known.get(uid) is not body:
            continue  # changed or deleted meanwhile: the newer event's handlers cover it
        try:
            run_reconcile(state, body, strict=False)
            done += 1
        except (kopf.TemporaryError, kopf.PermanentError) as exc:
            log.warning(
                "resync of %s/%s failed: %s",
                body["metadata"].get("namespace"),
                body["metadata"].get("name"),
                exc,
            )
        except Exception:  # never let one object stop the loop for the others
            log.exception("resync of %s failed", body["metadata"].get("name"))
    return done


async def _resync_loop(state: OperatorState) -> None:
    """Every DocParser each ``resync_interval_s``; in between, within a second, the ones
    that asked for a pass (an analysis window ends with no event to say so) and those whose
    scale-to-zero reading changed their idle decision (controller/wakeups.py)."""
    await asyncio.sleep(state.settings.resync_initial_delay_s)
    while True:
        await asyncio.to_thread(resync_all, state)
        deadline = time.monotonic() + state.settings.resync_interval_s
        while (now := time.monotonic()) < deadline:
            await asyncio.sleep(min(1.0, deadline - now))
            due = wakeups.due(state, time.monotonic())
            due += await asyncio.to_thread(wakeups.idle_readings, state)  # HTTP, no API
            if due:
                await asyncio.to_thread(resync_all, state, due)


@kopf.on.startup()
async def start_resync(memo: kopf.Memo, **_: Any) -> None:
    state = state_of(memo)
    state.resync_task = asyncio.get_running_loop().create_task(_resync_loop(state))
    if state.nodes is not None and state.observer is not None:
        state.node_task = asyncio.get_running_loop().create_task(
            drains.watch_loop(
                state.nodes,
                state.observer.all_pods,
                lambda owners: resync_all(state, _uids_of(state, owners)),
            )
        )


def _uids_of(state: OperatorState, owners: set[tuple[str, str]]) -> list[str]:
    return [
        uid
        for uid, body in list(state.known.items())
        if (body["metadata"].get("namespace"), body["metadata"].get("name")) in owners
    ]


@kopf.on.cleanup()
async def stop_resync(memo: kopf.Memo, **_: Any) -> None:
    state = state_of(memo)
    for task in (state.resync_task, state.node_task):
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    if state.metrics is not None and not memo.get("metrics"):
        await asyncio.to_thread(state.metrics.close)  # this run started it, so it stops it
