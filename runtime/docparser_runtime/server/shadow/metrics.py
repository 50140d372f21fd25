"""The shadow's Prometheus series, on the stable pod that mirrors (CONTRACTS.md, issue 24).

Every series carries ``stable_revision`` and ``canary_revision``: one pod may compare
several canaries in its life, and the analysis must judge the pair it is walking. The
series of a pair are created at zero as soon as a config names it, so ``increase()`` over
a window that starts before the first comparison is right.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

from docparser_runtime.server.shadow.compare import PageComparison
from docparser_runtime.server.shadow.config import ShadowConfig

PAIR = ("stable_revision", "canary_revision")
CER_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)
LATENCY_RATIO_BUCKETS = (0.5, 0.8, 1.0, 1.25, 1.5, 2, 3, 5)
# revision: a pod of another canary revision answered (the release before, still leaving)
DROP_REASONS = ("busy", "budget", "error", "credential", "revision")
FLAGS = ("truncated", "repetition")
SIDES = ("stable", "canary")


class ShadowMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.mirrored_pages = Counter(
            "docparser_shadow_mirrored_pages",
            "Pages this stable pod sent to the canary (the shadow's GPU cost), answered or not.",
            PAIR,
            registry=r,
        )
        self.dropped = Counter(
            "docparser_shadow_dropped",
            "Sampled requests not compared, by reason: busy (queue full, canary 429/503/"
            "timeout, memory), budget (page budget spent), error, credential.",
            ["reason", *PAIR],
            registry=r,
        )
        self.pages_compared = Counter(
            "docparser_shadow_pages_compared",
            "Pages compared between stable's answer and the canary's.",
            PAIR,
            registry=r,
        )
        self.page_cer = Histogram(
            "docparser_shadow_page_cer",
            "CER of the canary's page text against stable's (Markdown and whitespace normalised).",
            PAIR,
            buckets=CER_BUCKETS,
            registry=r,
        )
        self.structure_disagreements = Counter(
            "docparser_shadow_structure_disagreements",
            "Compared pages whose blocks (by type) or tables (by shape) differ.",
            PAIR,
            registry=r,
        )
        self.flagged_pages = Counter(
            "docparser_shadow_flagged_pages",
            "Compared pages flagged truncated or repetition-guarded, by side.",
            ["side", "flag", *PAIR],
            registry=r,
        )
        self.only_canary_flagged = Counter(
            "docparser_shadow_only_canary_flagged_pages",
            "Compared pages the canary flagged (truncated, repetition) and stable did not.",
            ["flag", *PAIR],
            registry=r,
        )
        self.latency_ratio = Histogram(
            "docparser_shadow_latency_ratio",
            "Canary seconds over stable seconds per mirrored request (server-side totals).",
            PAIR,
            buckets=LATENCY_RATIO_BUCKETS,
            registry=r,
        )

    def export_pair(self, config: ShadowConfig) -> None:
        """Create the pair's series at zero."""
        pair = config.labels
        for family in (self.mirrored_pages, self.pages_compared, self.structure_disagreements):
            family.labels(**pair)
        self.page_cer.labels(**pair)
        self.latency_ratio.labels(**pair)
        for reason in DROP_REASONS:
            self.dropped.labels(reason=reason, **pair)
        for flag in FLAGS:
            self.only_canary_flagged.labels(flag=flag, **pair)
            for side in SIDES:
                self.flagged_pages.labels(side=side, flag=flag, **pair)

    def drop(self, config: ShadowConfig, reason: str) -> None:
        self.dropped.labels(reason=reason, **config.labels).inc()

    def record(
        self, config: ShadowConfig, pages: list[PageComparison], latency_ratio: float | None
    ) -> None:
        pair = config.labels
        self.pages_compared.labels(**pair).inc(len(pages))
        cer = self.page_cer.labels(**pair)
        for page in pages:
            cer.observe(page.cer)
            if not page.structure_agrees:
                self.structure_disagreements.labels(**pair).inc()
            stable = {"truncated": page.stable.truncated, "repetition": page.stable.repetition}
            canary = {"truncated": False, "repetition": False}
            if page.canary is not None:
                canary = {"truncated": page.canary.truncated, "repetition": page.canary.repetition}
            for flag in FLAGS:
                if stable[flag]:
                    self.flagged_pages.labels(side="stable", flag=flag, **pair).inc()
                if canary[flag]:
                    self.flagged_pages.labels(side="canary", flag=flag, **pair).inc()
                    if not stable[flag]:
                        self.only_canary_flagged.labels(flag=flag, **pair).inc()
        if latency_ratio is not None:
            self.latency_ratio.labels(**pair).observe(latency_ratio)
