"""A child the API server refuses is tried again after a capped, doubling wait (issue 37).

Pure parts (core/plan/refusals.py): the delay per attempt, the reason code read from the API
server's answer (never its free text), and the memory that holds a refused child until its
wait is over, starting over on a new generation or a successful apply. What the operator does
with them against a real kube-apiserver and a ResourceQuota is
tests/operator/controller/test_realcluster_refusals.py.
"""

from __future__ import annotations

import pytest
from docparser_operator.core.plan.refusals import (
    RefusalMemory,
    Refused,
    backoff_s,
    refusal_code,
    refused_problem,
)
from docparser_operator.core.status.stalls import REASONS

SERVICE = ("Service", "p-front")
QUOTA = (
    'services "p-front" is forbidden: exceeded quota: tenant-words, requested: services=1, '
    "used: services=0, limited: services=0"
)
RBAC = (
    'services "p-front" is forbidden: User "system:serviceaccount:ops:dp" cannot patch '
    'resource "services" in API group "" in the namespace "t"'
)


def test_the_delay_doubles_from_the_base_up_to_the_cap() -> None:
    assert [backoff_s(n) for n in range(0, 9)] == [0, 5, 10, 20, 40, 80, 160, 300, 300]
    assert [backoff_s(n, 2, 7) for n in (1, 2, 3, 4)] == [2, 4, 7, 7]
    assert backoff_s(10_000) == 300  # no overflow however long it lasts


@pytest.mark.parametrize(
    ("status", "message", "code"),
    [
        (403, QUOTA, "QuotaExceeded"),
        (403, RBAC, "Forbidden"),
        (
            403,
            'admission webhook "policy.example" denied the request: any words',
            "AdmissionDenied",
        ),
        (422, 'Service "p-front" is invalid: spec.ports[0].port: Invalid value', "Invalid"),
        (500, "failed to allocate a serviceIP: range is full", "AllocationFailed"),
        (404, "the server could not find the requested resource", "NotFound"),
        (500, "etcdserver: request timed out", None),  # server trouble: retried as before
        (409, "the object has been modified", None),
        (429, "too many requests", None),
    ],
)
def test_the_refusal_is_named_by_a_code(status: int, message: str, code: str | None) -> None:
    assert refusal_code(status, message) == code


def test_the_status_names_the_child_and_the_code_not_the_servers_words() -> None:
    problem = refused_problem(SERVICE, 403, "QuotaExceeded")
    assert problem.reason == "ChildRefused" and REASONS["ChildRefused"].kind == "stalled"
    assert "Service p-front" in problem.message and "403 QuotaExceeded" in problem.message
    assert "tenant-words" not in problem.message and "used:" not in problem.message


def test_a_refused_child_waits_its_backoff_and_each_refusal_doubles_it() -> None:
    memory = RefusalMemory(base_s=5, cap_s=20)
    problem = refused_problem(SERVICE, 403, "QuotaExceeded")

    def at(t: float, generation: int = 1) -> Refused:
        return Refused(memory, "uid-1", generation, t)

    assert at(0).held(SERVICE) is None  # never refused: applied
    at(0).refused(SERVICE, problem)
    assert at(4.9).held(SERVICE) == problem and at(4.9).wake_in() == pytest.approx(0.1)
    assert at(5).held(SERVICE) is None  # the wait is over: tried again
    tries = [0.0]  # the first refusal
    for t in range(5, 200):  # one pass a second for over three minutes
        if at(t).held(SERVICE) is None:
            tries.append(float(t))
            at(t).refused(SERVICE, problem)
    assert tries[:6] == [0, 5, 15, 35, 55, 75]  # 5, 10, 20, then the cap of 20
    assert len(tries) == 12  # not 196
    assert Refused(memory, "uid-2", 1, 6).held(SERVICE) is None  # other DocParsers: unaffected


def test_a_new_generation_or_an_accepted_apply_starts_over() -> None:
    memory = RefusalMemory(base_s=5, cap_s=300)
    problem = refused_problem(SERVICE, 403, "QuotaExceeded")
    for t in (0, 5, 15):
        Refused(memory, "u", 1, t).refused(SERVICE, problem)
    assert Refused(memory, "u", 1, 16).held(SERVICE) == problem
    assert Refused(memory, "u", 2, 16).held(SERVICE) is None  # a spec change: at once
    Refused(memory, "u", 2, 16).refused(SERVICE, problem)
    assert Refused(memory, "u", 2, 20).wake_in() == pytest.approx(1.0)  # from the base again
    Refused(memory, "u", 2, 21).accepted(SERVICE)
    assert memory.by_uid == {} and Refused(memory, "u", 2, 21).wake_in() is None
    Refused(memory, "u", 2, 22).refused(SERVICE, problem)
    assert Refused(memory, "u", 2, 22).wake_in() == pytest.approx(5.0)
    memory.forget("u")  # the DocParser was deleted
    assert memory.by_uid == {}
