"""Children the API server refuses: what the refusal is called, and when to try again.

A ResourceQuota that is full, a Service IP range that ran out, an admission webhook's or
policy's denial, a 422 or our own RBAC: the API server will answer the same until someone
changes the cluster, so retrying at every pass (every resync, every pod event) only costs
requests. With 47 refused DocParsers out of 300 that was 2,336 requests a minute. So each
refused child of a DocParser waits a capped, doubling delay before its next apply, the pass
meanwhile reports the refusal it remembers (the status does not change, so it is not
written again), and a spec change (a new generation) or a successful apply starts over.

Pure: the caller passes the time (seconds, any monotonic origin) and keeps the memory
(controller/state.py, one per operator run), so restarting the operator retries at once.

The status names the child and the API server's reason code, never the API server's free
text for a quota or webhook denial: a tenant may name a quota or write a webhook's message,
and that text has no place in the operator's status (and a quota's message carries the used
count, which would rewrite the status at every retry).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from docparser_operator.core.plan.children import Key
from docparser_operator.core.plan.problem import Problem

BASE_S = 5.0  # the first retry
CAP_S = 300.0  # the longest wait between two tries

# The RBAC authorizer's wording: `User "x" cannot patch resource "services" in API group ""`.
_RBAC = re.compile(r"\bcannot [a-z]+ resource\b")


def backoff_s(attempt: int, base_s: float = BASE_S, cap_s: float = CAP_S) -> float:
    """The wait after the ``attempt``-th refusal in a row: ``base_s`` doubling, at most
    ``cap_s`` (0 before any refusal)."""
    if attempt < 1:
        return 0.0
    return float(min(cap_s, base_s * 2.0 ** min(attempt - 1, 40)))


def refusal_code(status: int, message: str) -> str | None:
    """The API server's reason for refusing a write, as a fixed code; None when the answer
    is not a refusal (server trouble, throttling, a conflict: retried by the caller).

    403 is RBAC (``Forbidden``), a full quota (``QuotaExceeded``) or another admission
    plugin or webhook (``AdmissionDenied``); 422 is ``Invalid``; a 500 that failed to
    allocate (a Service's IP or node port range is full) is ``AllocationFailed``; 404 is an
    API the cluster does not serve (``NotFound``)."""
    if status == 403:
        if _RBAC.search(message):
            return "Forbidden"
        return "QuotaExceeded" if "exceeded quota" in message else "AdmissionDenied"
    if status == 404:
        return "NotFound"
    if status == 422:
        return "Invalid"
    if status == 500 and "failed to allocate" in message:
        return "AllocationFailed"
    return None


def refused_problem(key: Key, status: int, code: str) -> Problem:
    """The Degraded reason of a child refused for ``code`` (not RBAC, not a missing API)."""
    kind, name = key
    return Problem(
        "ChildRefused",
        f"{kind} {name}: the API server refuses it ({status} {code}); retried with backoff",
    )


@dataclass
class Refusal:
    """A child refused ``attempt`` times in a row, not tried again before ``due``."""

    problem: Problem
    attempt: int
    due: float
    generation: int


@dataclass
class RefusalMemory:
    """The refused children of every DocParser (by uid), and the backoff they wait."""

    base_s: float = BASE_S
    cap_s: float = CAP_S
    by_uid: dict[str, dict[Key, Refusal]] = field(default_factory=dict[str, dict[Key, Refusal]])

    def held(self, uid: str, generation: int, key: Key, at: float) -> Refusal | None:
        """The refusal ``key`` still waits out at ``at``; None when it may be applied (never
        refused, its wait is over, or the spec changed since)."""
        refusal = self.by_uid.get(uid, {}).get(key)
        if refusal is None:
            return None
        if refusal.generation != generation:
            self.forget(uid)  # a new spec: every child is tried at once
            return None
        return refusal if at < refusal.due else None

    def refused(self, uid: str, generation: int, key: Key, problem: Problem, at: float) -> None:
        """``key`` was refused at ``at``: wait twice as long as the last time, up to the cap."""
        children = self.by_uid.setdefault(uid, {})
        last = children.get(key)
        attempt = 1 if last is None or last.generation != generation else last.attempt + 1
        due = at + backoff_s(attempt, self.base_s, self.cap_s)
        children[key] = Refusal(problem, attempt, due, generation)

    def accepted(self, uid: str, key: Key) -> None:
        """``key`` was applied: a later refusal starts from the first delay again."""
        children = self.by_uid.get(uid)
        if children is not None and children.pop(key, None) is not None and not children:
            del self.by_uid[uid]

    def forget(self, uid: str) -> None:
        self.by_uid.pop(uid, None)

    def wake_in(self, uid: str, at: float) -> float | None:
        """Seconds until the earliest held child of ``uid`` may be tried again (None: none;
        a wait already over is not counted: that child is no longer desired, or was tried)."""
        dues = [r.due for r in self.by_uid.get(uid, {}).values() if r.due > at]
        return min(dues) - at if dues else None


@dataclass
class Refused:
    """One pass's view of one DocParser's refused children: the memory, bound to the
    DocParser's uid and generation and to the pass' time."""

    memory: RefusalMemory
    uid: str
    generation: int
    at: float

    def held(self, key: Key) -> Problem | None:
        """The refusal to report instead of applying ``key``; None: apply it."""
        refusal = self.memory.held(self.uid, self.generation, key, self.at)
        return None if refusal is None else refusal.problem

    def refused(self, key: Key, problem: Problem) -> None:
        self.memory.refused(self.uid, self.generation, key, problem, self.at)

    def accepted(self, key: Key) -> None:
        self.memory.accepted(self.uid, key)

    def wake_in(self) -> float | None:
        return self.memory.wake_in(self.uid, self.at)
