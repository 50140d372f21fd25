"""The golden gate's scores (pure): character error rate of each track's text against the
expected text of a golden document, and the verdict per document.

golden.py fetches the documents and has each track parse them; analysis.verified turns these
scores into the walk's next state.
"""

from __future__ import annotations

from dataclasses import dataclass

from docparser_operator.api.analysis_spec import CanaryAnalysis
from docparser_operator.api.status_models import GoldenScore as GoldenScoreStatus


def cer(expected: str, got: str) -> float:
    """Character error rate: edit distance over the expected length, on whitespace-folded
    text (a re-wrapped line is no error; a lost word is)."""
    a, b = " ".join(expected.split()), " ".join(got.split())
    if not a:
        return 0.0 if not b else 1.0
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        row = [i]
        for j, cb in enumerate(b, 1):
            row.append(min(previous[j] + 1, row[j - 1] + 1, previous[j - 1] + (ca != cb)))
        previous = row
    return min(previous[-1] / len(a), 1.0)


@dataclass(frozen=True)
class GoldenScore:
    document: str
    canary: float
    stable: float
    ok: bool

    def to_status(self) -> GoldenScoreStatus:
        """One of ``status.canary.analysis.golden``: the CERs to four places."""
        return GoldenScoreStatus(
            document=self.document,
            canary=round(self.canary, 4),
            stable=round(self.stable, 4),
            ok=self.ok,
        )


def score_golden(
    config: CanaryAnalysis, results: dict[str, tuple[str, str, str]]
) -> tuple[GoldenScore, ...]:
    """``results``: document -> (expected, canary's text, stable's text)."""
    assert config.golden is not None
    gate = config.golden
    scores = []
    for document, (expected, canary, stable) in sorted(results.items()):
        c, s = cer(expected, canary), cer(expected, stable)
        scores.append(
            GoldenScore(document, c, s, c <= gate.max_cer and c - s <= gate.max_cer_increase)
        )
    return tuple(scores)
