"""One canary analysis pass for the reconciler: read what is due, then ``analysis.advance``.

The walk's state comes from status (analysis.current); the counters at the current window's
start live in ``AnalysisMemory``, the leader's memory (with ``analysis.prometheus`` nothing
does: PromQL's increase() over the window since ``windowStart``, prometheus.py). Pods are
read only when a window starts (to remember where it starts) or ends (to judge it), so a
quiet resync reads nothing. A window whose start the memory does not know (the operator
restarted, another replica took over) starts again now: a verdict always covers a whole
interval it measured.

What is read, and where from, is the ``Sources`` the controller passes in (providers/base.py):
a ``MetricSource`` (the pods' own ``/metrics``, cumulative, or a Prometheus, which keeps the
history) and a ``GoldenReader``. A source the allow-lists refuse is never read
(``refusals``: the controller reports it as Degraded ``SourceNotAllowed``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from docparser_operator.analysis import gates, golden_score
from docparser_operator.analysis import walk as analysis
from docparser_operator.analysis.counters import TrackCounters
from docparser_operator.analysis.shadow_score import ShadowCounters, ShadowFigures
from docparser_operator.api import labels
from docparser_operator.api.analysis_spec import CanaryAnalysis
from docparser_operator.api.models import DocParser
from docparser_operator.providers import golden
from docparser_operator.providers.base import (
    MetricSource,
    ShadowQuery,
    Sources,
    SourceUnavailable,
    TrackQuery,
)

WindowKey = tuple[str, str, int, str]  # canary revision, retry, step, window start
GATE_POLL_S = 15.0  # how often the shadow gate reads the stable pods while it waits for pages


@dataclass
class AnalysisMemory:
    """The counters (canary, stable) at the start of each DocParser's running window."""

    windows: dict[tuple[str, str], tuple[WindowKey, analysis.Window]] = field(
        default_factory=dict[tuple[str, str], tuple[WindowKey, analysis.Window]]
    )


def _key(state: analysis.AnalysisState) -> WindowKey:
    return (state.revision, state.retry, state.step, state.window_start)


def _pods(pods: Sequence[Mapping[str, Any]], revision: str) -> list[Mapping[str, Any]]:
    return [
        p
        for p in pods
        if (p.get("metadata", {}).get("labels") or {}).get(labels.LABEL_REVISION) == revision
    ]


def begin(model: DocParser, revisions: Mapping[str, str]) -> analysis.AnalysisState | None:
    """The walk's state to plan this pass with (its weight), continued from the parsed
    ``status.canary.analysis``; None without analysis. ``revisions``: role -> the spec's
    revision."""
    canary = model.spec.canary
    if canary is None or canary.analysis is None or "canary" not in revisions:
        return None
    before = model.status.canary if model.status is not None else None
    previous = before.analysis if before is not None else None
    shadow = canary.shadow is not None
    return analysis.current(canary.analysis, previous, revisions["canary"], shadow=shadow)


def refusals(sources: Sources, model: DocParser) -> list[str]:
    """Why this DocParser's analysis names a source the operator may not read (empty: none)."""
    canary = model.spec.canary
    if canary is None or canary.analysis is None:
        return []
    return sources.refusals(canary.analysis, model.metadata.namespace)


def _verify(
    sources: Sources,
    model: DocParser,
    state: analysis.AnalysisState,
    revisions: Mapping[str, str],
    pods: Sequence[Mapping[str, Any]],
    documents: Callable[[str, str], golden.Documents] | None,
) -> analysis.AnalysisState:
    """The golden gate, once per canary revision (its verdict is kept in status)."""
    assert model.spec.canary is not None and model.spec.canary.analysis is not None
    config = model.spec.canary.analysis
    assert config.golden is not None
    try:
        if config.golden.uri is not None:
            namespace = model.metadata.namespace
            refused = sources.golden.refusal(config.golden.uri, namespace)
            if refused is not None:
                raise golden.GoldenUnavailable(refused)
            docs = sources.golden.load(config.golden.uri, namespace)
        elif documents is None or config.golden.config_map_ref is None:
            raise golden.GoldenUnavailable("no ConfigMap reader")
        else:
            docs = documents(model.metadata.namespace, config.golden.config_map_ref.name)
        results = sources.golden.read(
            docs, _pods(pods, revisions["canary"]), _pods(pods, revisions.get("stable", ""))
        )
    except golden.GoldenUnavailable as exc:
        return replace(state, message=f"golden documents: {exc}")
    scores = golden_score.score_golden(config, results)
    return gates.verified(state, scores, shadow=model.spec.canary.shadow is not None)


def finish(
    memory: AnalysisMemory,
    sources: Sources,
    model: DocParser,
    state: analysis.AnalysisState,
    revisions: Mapping[str, str],
    pods: Sequence[Mapping[str, Any]],
    *,
    serving: bool,
    now: str,
    documents: Callable[[str, str], golden.Documents] | None = None,
) -> analysis.AnalysisState:
    """Measure what is due and advance the walk. ``serving``: this pass's plan has the
    canary's Ready pods carrying the weight the step asks for (as near as the router can).
    ``documents``: (namespace, ConfigMap name) -> the golden documents (read by the
    controller: features.golden_documents). ``sources``: what may be read (the controller's,
    built from settings)."""
    assert model.spec.canary is not None and model.spec.canary.analysis is not None
    config = model.spec.canary.analysis
    where = (model.metadata.namespace, model.metadata.name)
    if state.phase == "Verifying":
        return _verify(sources, model, state, revisions, pods, documents)
    metrics: MetricSource = sources.metrics(config, model.metadata.namespace)
    refused = metrics.refusal()
    problem = ""

    def read(role: str, seconds: int = 0) -> TrackCounters:
        revision = revisions.get(role, "")
        query = TrackQuery(model.metadata.namespace, revision, _pods(pods, revision), seconds)
        return metrics.measure(query)

    def read_shadow(seconds: int = 0) -> ShadowCounters | None:
        if model.spec.canary is None or model.spec.canary.shadow is None:
            return None
        stable, canary = revisions.get("stable", ""), revisions.get("canary", "")
        query = ShadowQuery(model.metadata.namespace, stable, canary, _pods(pods, stable), seconds)
        return metrics.measure_shadow(query)

    def sample(seconds: int = 0) -> analysis.Window:
        return analysis.Window(
            read("canary", seconds), read("stable", seconds), read_shadow(seconds)
        )

    if state.phase == "Shadowing":
        return _shadow_gate(memory, metrics, config, state, where, read_shadow, now)

    window: analysis.Window | None = None
    end: analysis.Window | None = None
    serving = serving and state.phase == "Progressing"
    if serving and refused is not None:
        problem = refused  # nothing is fetched; the controller reports it as Degraded
    elif serving and not metrics.cumulative:
        # The source keeps the history: a window is its start in status, nothing in memory.
        if not state.window_start:
            state = replace(state, window_start=now)
        elif analysis.window_due(state, config, now):
            seconds = round(analysis.elapsed(state.window_start, now))
            try:
                window = sample(seconds)
            except SourceUnavailable as exc:
                problem = str(exc)
    elif serving:
        known = memory.windows.get(where)
        try:
            if not state.window_start or known is None or known[0] != _key(state):
                # This window's start is not in memory (a new step, a restart): it begins now.
                start = sample()
                state = replace(state, window_start=now)
                memory.windows[where] = (_key(state), start)
            elif analysis.window_due(state, config, now):
                end = sample()
                c = end.canary.minus(known[1].canary)
                s = end.stable.minus(known[1].stable)
                span = _span(end.shadow, known[1].shadow)
                shadow = span if isinstance(span, ShadowCounters) else None
                measured = c is not None and s is not None and span is not False
                window = (
                    analysis.Window(c, s, shadow)
                    if c is not None and s is not None and measured
                    else None
                )
                if window is None:  # a pod left or restarted: measure a fresh window
                    state = replace(state, window_start=now)
                    memory.windows[where] = (_key(state), end)
        except SourceUnavailable as exc:
            problem = str(exc)
    after = analysis.advance(
        state,
        config,
        window,
        now=now,
        generation=model.metadata.generation or 0,
        serving_step=serving or state.phase != "Progressing",
    )
    if problem:  # say why nothing moves (the source's words: never a remote body)
        after = replace(after, message=problem[:300])
    if window is not None and window.shadow is not None:  # the judged window's figures
        spent = analysis.elapsed(state.window_start, now)
        q = config.max_shadow_disagreement.quantile
        after = replace(after, figures=ShadowFigures(state.window_start, spent, q, window.shadow))
    if after.phase != "Progressing":
        memory.windows.pop(where, None)
    elif _key(after) != _key(state) and after.window_start and end is not None:
        memory.windows[where] = (_key(after), end)  # one window ends, the next begins
    return after


def _span(end: ShadowCounters | None, start: ShadowCounters | None) -> ShadowCounters | bool | None:
    """The shadow's share of a window: None without a shadow, False when unmeasurable."""
    if end is None or start is None:
        return None
    span = end.minus(start)
    return False if span is None else span


def _shadow_gate(
    memory: AnalysisMemory,
    metrics: MetricSource,
    config: CanaryAnalysis,
    state: analysis.AnalysisState,
    where: tuple[str, str],
    read: Callable[[int], ShadowCounters | None],
    now: str,
) -> analysis.AnalysisState:
    """The shadow gate, at weight 0 before step 1: the stable pods' comparison since the gate
    began (its start in memory for the pods' cumulative counters; a history source answers
    for the span), judged by gates.shadowed once enough pages were compared."""
    refused = metrics.refusal()
    if refused is not None:
        return replace(state, message=refused[:300])
    try:
        if not metrics.cumulative:
            if not state.window_start:
                return replace(state, window_start=now)
            seconds = analysis.elapsed(state.window_start, now)
            span = read(round(seconds))
        else:
            known = memory.windows.get(where)
            end = read(0)
            start = known[1].shadow if known is not None and known[0] == _key(state) else None
            span = end.minus(start) if end is not None and start is not None else None
            if span is None:  # a new gate, a restart, or a stable pod left: begin now
                state = replace(state, window_start=now)
                empty = TrackCounters()
                memory.windows[where] = (_key(state), analysis.Window(empty, empty, end))
                return state
            seconds = analysis.elapsed(state.window_start, now)
    except SourceUnavailable as exc:
        return replace(state, message=str(exc)[:300])
    assert span is not None
    if seconds < 1:  # status' clock has whole seconds: a span must be measurable in it
        return state
    after = gates.shadowed(state, config, span)
    if after.phase != "Shadowing":
        memory.windows.pop(where, None)
    q = config.max_shadow_disagreement.quantile
    return replace(after, figures=ShadowFigures(state.window_start, seconds, q, span))
