"""The shadow canary's figures (pure): what the stable pods' comparison counters say about a
span of live pages, and the two checks the analysis judges on them.

Why from the stable pods: they send the copies and compare the canary's output with their
own, so their ``/metrics`` carry the whole story per revision pair (labels
``stable_revision``, ``canary_revision``): pages sent, pages compared, the per-page
character error rate histogram of the canary's text against stable's, pages each side cut
at ``max_new_tokens``, structure disagreements and copies dropped by reason (the runtime's
contract, docs/operations.md "Shadow canary"). The sources sum them over the stable pods
(providers/pods.py) or read their increase over a span from PromQL (providers/prometheus.py);
``ShadowCounters.minus`` turns two cumulative readings into one span, as ``TrackCounters``
does for the live-traffic checks.

The checks are against stable on the *same* pages, not absolute: a hard document both read
badly is not the canary's fault. ``shadowDisagreement`` is a quantile of the page CER (the
median hides the few pages a new model ruins; the maximum is one odd page);
``shadowTruncationIncrease`` is the share of compared pages the canary cut minus the share
stable cut.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from docparser_operator.analysis.counters import Check, histogram_quantile
from docparser_operator.api.analysis_spec import CanaryAnalysis
from docparser_operator.api.status_models import ShadowDrop, ShadowStatus

DROP_REASONS = ("busy", "budget", "error", "credential")


@dataclass(frozen=True)
class ShadowCounters:
    """The stable pods' shadow counters for one canary revision, summed over the pods."""

    mirrored: float = 0.0  # pages sent to the canary
    compared: float = 0.0  # pages compared
    cer: tuple[tuple[float, float], ...] = ()  # (upper bound, cumulative pages)
    stable_truncated: float = 0.0
    canary_truncated: float = 0.0
    structure: float = 0.0  # pages whose block or table structure differs
    dropped: tuple[tuple[str, float], ...] = ()  # (reason, requests)

    def minus(self, earlier: ShadowCounters) -> ShadowCounters | None:
        """The span's share; None when a counter went down (a stable pod left or restarted)."""
        fields = ("mirrored", "compared", "stable_truncated", "canary_truncated", "structure")
        deltas = {f: getattr(self, f) - getattr(earlier, f) for f in fields}
        before, was = dict(earlier.cer), dict(earlier.dropped)
        cer = tuple((le, n - before.get(le, 0.0)) for le, n in self.cer)
        dropped = tuple((reason, n - was.get(reason, 0.0)) for reason, n in self.dropped)
        if min([*deltas.values(), *(n for _, n in cer), *(n for _, n in dropped), 0.0]) < 0:
            return None
        return ShadowCounters(**deltas, cer=cer, dropped=dropped)

    def cer_at(self, quantile: float) -> float:
        """The page CER at ``quantile`` (PromQL's histogram_quantile over the buckets)."""
        return histogram_quantile(self.cer, quantile)

    def _share(self, pages: float) -> float:
        return pages / self.compared if self.compared else 0.0

    @property
    def truncation_increase(self) -> float:
        return self._share(self.canary_truncated) - self._share(self.stable_truncated)


def add(items: Iterable[ShadowCounters]) -> ShadowCounters:
    """The sum over pods."""
    scalars: dict[str, float] = defaultdict(float)
    cer: dict[float, float] = defaultdict(float)
    dropped: dict[str, float] = dict.fromkeys(DROP_REASONS, 0.0)
    for c in items:
        for name in ("mirrored", "compared", "stable_truncated", "canary_truncated", "structure"):
            scalars[name] += getattr(c, name)
        for le, n in c.cer:
            cer[le] += n
        for reason, n in c.dropped:
            dropped[reason] = dropped.get(reason, 0.0) + n
    return ShadowCounters(
        **scalars, cer=tuple(sorted(cer.items())), dropped=tuple(sorted(dropped.items()))
    )


def checks(config: CanaryAnalysis, span: ShadowCounters) -> tuple[Check, Check]:
    """The shadow's two checks over a span of compared pages."""
    q, limit = config.max_shadow_disagreement.quantile, config.max_shadow_disagreement.cer
    cer = span.cer_at(q)
    increase = span.truncation_increase
    return (
        Check("shadowDisagreement", cer, limit, cer <= limit, canary=cer, quantile=q),
        Check(
            "shadowTruncationIncrease",
            increase,
            config.max_shadow_truncation_increase,
            increase <= config.max_shadow_truncation_increase,
            canary=span._share(span.canary_truncated),
            stable=span._share(span.stable_truncated),
        ),
    )


def describe(found: Iterable[Check], span: ShadowCounters) -> str:
    """The figures of failed (or passed) shadow checks, for a status message."""
    parts = []
    for c in found:
        if c.name == "shadowDisagreement":
            q = round(100 * (c.quantile or 0))
            parts.append(f"p{q} page CER against stable {c.value:.4f} (max {c.threshold:g})")
        else:
            parts.append(
                f"truncated pages {c.canary or 0:.1%} vs stable's {c.stable or 0:.1%} "
                f"(+{c.value:.4f}, max {c.threshold:g})"
            )
    return "; ".join(parts) + f" over {span.compared:g} live pages compared"


@dataclass(frozen=True)
class ShadowFigures:
    """``status.canary.shadow``'s measured part: a span of the comparison and its cost."""

    since: str
    seconds: float
    quantile: float
    span: ShadowCounters

    def to_status(self) -> ShadowStatus:
        """The measured fields of ``status.canary.shadow`` (its configured ones are left unset:
        core/status/report.py adds what the shadow is told)."""
        minutes = self.seconds / 60.0
        span = self.span
        return ShadowStatus(
            since=self.since,
            pages_compared=span.compared,
            pages_mirrored=span.mirrored,
            # none over a span shorter than status' one-second clock
            pages_per_minute=round(span.mirrored / minutes, 2) if minutes > 0 else None,
            quantile=self.quantile,
            cer=round(span.cer_at(self.quantile), 4),
            truncation_increase=round(span.truncation_increase, 4),
            structure_disagreements=span.structure,
            dropped=[ShadowDrop(reason=r, requests=n) for r, n in span.dropped if n],
        )
