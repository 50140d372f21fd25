"""Scheduled capacity (issue 36), the pure part: which windows are open at a given instant,
what they raise, and the next change (core/plan/schedule.py), with the clock an argument."""

from __future__ import annotations

import datetime

import pydantic
import pytest
from docparser_operator.api.models import DocParser
from docparser_operator.api.replicas import Replicas
from docparser_operator.controller.features import raised, resource_schedule
from docparser_operator.core.plan.schedule import schedule_step

UTC = datetime.UTC


def at(text: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))


def replicas(*windows: dict, zone: str = "UTC", lo: int = 1, hi: int = 2) -> Replicas:
    return Replicas.model_validate(
        {"min": lo, "max": hi, "timeZone": zone, "schedule": list(windows)}
    )


OFFICE = {"cron": "0 8 * * 1-5", "duration": "10h", "min": 4, "max": 8}  # Mon-Fri 08-18


def test_no_schedule_is_no_step() -> None:
    assert schedule_step(Replicas(), at("2026-03-02T09:00:00Z")) is None


def test_a_window_opens_at_its_start_and_closes_at_its_end() -> None:
    spec = replicas(OFFICE)
    before = schedule_step(spec, at("2026-03-02T07:59:59Z"))  # a Monday
    assert before is not None and (before.floor, before.ceiling) == (1, 2)
    assert before.governing is None
    assert before.to_status().to_wire() == {
        "next": {"at": "2026-03-02T08:00:00Z", "min": 4, "max": 8}
    }
    start = schedule_step(spec, at("2026-03-02T08:00:00Z"))
    assert start is not None and (start.floor, start.ceiling) == (4, 8)
    assert start.to_status().to_wire() == {
        "active": {"cron": "0 8 * * 1-5", "until": "2026-03-02T18:00:00Z", "min": 4, "max": 8},
        "next": {"at": "2026-03-02T18:00:00Z", "min": 1, "max": 2},
    }
    assert start.wake_in_s(at("2026-03-02T08:00:00Z")) == 10 * 3600 + 1
    end = schedule_step(spec, at("2026-03-02T18:00:00Z"))
    assert end is not None and (end.floor, end.ceiling) == (1, 2)
    assert end.to_status().to_wire() == {"next": {"at": "2026-03-03T08:00:00Z", "min": 4, "max": 8}}
    weekend = schedule_step(spec, at("2026-03-06T18:30:00Z"))  # Friday evening: Monday next
    assert weekend is not None and weekend.next_at == at("2026-03-09T08:00:00Z")


def test_status_is_the_same_between_boundaries() -> None:
    """At rest nothing changes: every instant inside one window says the same status."""
    spec = replicas(OFFICE)
    steps = [schedule_step(spec, at(f"2026-03-02T{h:02d}:17:05Z")) for h in range(8, 18)]
    assert len({repr(s.to_status().to_wire()) for s in steps if s is not None}) == 1


def test_overlapping_windows_take_the_largest() -> None:
    rush = {"cron": "0 9 * * *", "duration": "2h", "min": 6}  # no max: the ceiling is min
    spec = replicas(OFFICE, rush, hi=3)
    both = schedule_step(spec, at("2026-03-02T10:00:00Z"))
    assert both is not None and (both.floor, both.ceiling) == (6, 8)
    assert (
        both.to_status().to_wire()["active"]["cron"] == "0 9 * * *"
    )  # the one that sets the floor
    assert both.to_status().to_wire()["next"] == {"at": "2026-03-02T11:00:00Z", "min": 4, "max": 8}
    saturday = schedule_step(spec, at("2026-03-07T10:00:00Z"))
    assert saturday is not None and (saturday.floor, saturday.ceiling) == (6, 6)


def test_a_window_never_lowers_min_or_max() -> None:
    small = {"cron": "0 8 * * *", "duration": "1h", "min": 0, "max": 1}
    step = schedule_step(replicas(small, lo=3, hi=5), at("2026-03-02T08:30:00Z"))
    assert step is not None and (step.floor, step.ceiling) == (3, 5)


def test_time_zone_and_a_dst_day() -> None:
    """08:00 Berlin is 07:00Z in winter and 06:00Z in summer (DST began 2026-03-29)."""
    spec = replicas(OFFICE | {"cron": "0 8 * * *"}, zone="Europe/Berlin")
    winter = schedule_step(spec, at("2026-03-28T07:30:00Z"))
    assert winter is not None and winter.floor == 4
    assert winter.to_status().to_wire()["active"]["until"] == "2026-03-28T17:00:00Z"
    night = schedule_step(spec, at("2026-03-28T23:00:00Z"))
    assert night is not None and night.next_at == at("2026-03-29T06:00:00Z")
    assert schedule_step(spec, at("2026-03-29T05:59:00Z")).floor == 1  # type: ignore[union-attr]
    assert schedule_step(spec, at("2026-03-29T06:00:00Z")).floor == 4  # type: ignore[union-attr]
    skipped = replicas(OFFICE | {"cron": "30 2 * * *", "duration": "1h"}, zone="Europe/Berlin")
    step = schedule_step(skipped, at("2026-03-28T23:00:00Z"))  # 02:30 does not exist that day
    assert step is not None and step.next_at == at("2026-03-29T01:00:00Z")  # 03:00 CEST


def test_a_window_open_past_midnight_and_longer_than_its_period() -> None:
    night = {"cron": "0 22 * * *", "duration": "10h", "min": 2}
    step = schedule_step(replicas(night), at("2026-03-03T03:00:00Z"))
    assert step is not None and step.floor == 2
    assert step.to_status().to_wire()["active"]["until"] == "2026-03-03T08:00:00Z"
    always = {"cron": "0 * * * *", "duration": "90m", "min": 2}
    step = schedule_step(replicas(always), at("2026-03-03T03:10:00Z"))
    assert step is not None and step.floor == 2 and step.next_at == at("2026-03-03T04:00:00Z")


def test_raised_reads_the_bounds_and_leaves_the_resource_alone() -> None:
    resource = {
        "metadata": {"name": "inv"},
        "spec": {"replicas": {"min": 0, "max": 2, "schedule": [OFFICE]}},
    }
    step = resource_schedule(resource, at("2026-03-02T09:00:00Z"))
    out = raised(resource, step)
    assert out["spec"]["replicas"] == {"min": 4, "max": 8, "schedule": [OFFICE]}
    assert resource["spec"]["replicas"]["min"] == 0  # never written back
    closed = resource_schedule(resource, at("2026-03-02T19:00:00Z"))
    assert raised(resource, closed) is resource


@pytest.mark.parametrize(
    ("window", "zone", "field", "words"),
    [
        ({"cron": "0 25 * * *"}, "UTC", "cron", "Bad hour"),
        ({"cron": "0 8 * *"}, "UTC", "cron", "pattern"),
        ({"cron": "@daily"}, "UTC", "cron", "pattern"),
        ({"cron": "0 0 30 2 *"}, "UTC", "cron", "Bad day-of-month"),
        ({"duration": "1d"}, "UTC", "duration", "pattern"),
        ({"duration": "5s"}, "UTC", "duration", "pattern"),
        ({"min": 5, "max": 2}, "UTC", "schedule.0", "min must be less than or equal"),
        ({}, "Mars/Olympus", "timeZone", "not an IANA time zone"),
        ({}, "../../etc/passwd", "timeZone", "not an IANA time zone"),
    ],
)
def test_a_bad_window_is_a_validation_error(
    window: dict, zone: str, field: str, words: str
) -> None:
    body = {"cron": "0 8 * * *", "duration": "1h", "min": 1} | window
    with pytest.raises(pydantic.ValidationError) as info:
        replicas(body, zone=zone)
    assert field in str(info.value) and words in str(info.value)
    resource = {"spec": {"replicas": {"timeZone": zone, "schedule": [body]}}}
    assert resource_schedule(resource, at("2026-03-02T09:00:00Z")) is None  # never raises


def test_the_whole_spec_rejects_a_bad_schedule() -> None:
    """Through the DocParser model, the one the pass reports SpecInvalid from."""
    body = {
        "apiVersion": "docparser.io/v1alpha1",
        "kind": "DocParser",
        "metadata": {"name": "inv", "namespace": "ocr"},
        "spec": {"engine": "rapidocr", "replicas": {"timeZone": "Nowhere/Land"}},
    }
    with pytest.raises(pydantic.ValidationError, match="timeZone"):
        DocParser.model_validate(body)
