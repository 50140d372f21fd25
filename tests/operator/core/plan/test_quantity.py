"""core/plan/quantity.py reads quantities exactly as the kubernetes client does (its reference
implementation of apimachinery's grammar), without the pure core importing that client."""

from __future__ import annotations

from decimal import Decimal

import pytest
from docparser_operator.core.plan import quantity, sizing
from kubernetes.utils.quantity import parse_quantity as reference

SAMPLES = [
    "0", "1", "0.5", "500m", "250u", "3n", "1k", "2M", "3G", "4T", "5P", "6E",
    "1Ki", "40Gi", "1.5Gi", "0.25Mi", "2Ti", "1Pi", "1Ei", "1e3", "1E3", "2.5e-3", "+1", "-1",
    "12345678901234567890", "100Mi", "7.0", ".5", "5.",
]  # fmt: skip


@pytest.mark.parametrize("text", SAMPLES)
def test_the_same_value_as_the_kubernetes_client(text: str) -> None:
    assert quantity.parse(text) == reference(text)


@pytest.mark.parametrize("text", ["", "abc", "1.2.3", "1Xi", "Gi", "1 Gi", "1gi", "--1", "."])
def test_what_is_not_a_quantity_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        quantity.parse(text)


def test_numbers_and_the_drift_check_equivalence() -> None:
    assert quantity.parse(1) == Decimal(1)
    assert quantity.parse(0.5) == quantity.parse("500m")
    with pytest.raises(ValueError):
        quantity.parse(True)


def test_memory_sizing_keeps_the_crd_pattern() -> None:
    assert sizing.parse_quantity("40Gi") == 40 * 2**30
    assert sizing.parse_quantity("80G") == 80 * 10**9
    with pytest.raises(ValueError):
        sizing.parse_quantity("500m")  # a CPU quantity is no memory size
