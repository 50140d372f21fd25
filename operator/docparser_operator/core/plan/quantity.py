"""Kubernetes resource quantities (``500m``, ``0.5``, ``40Gi``, ``1e3``) as exact decimals.

Why our own: the pure core must not import the kubernetes client (its ``parse_quantity`` was the
only reason ``children.py`` did), and both the drift check (``0.5`` equals ``500m``, so a no-op
resync stays a no-op) and GPU/host sizing need the same reading of a quantity. The grammar is
the API server's (k8s.io/apimachinery resource.Quantity): a signed decimal, then a binary SI
suffix, a decimal SI suffix or a decimal exponent.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

_BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_FORM = re.compile(r"^([+-]?[0-9.]+)(?:(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])|[eE]([+-]?[0-9]+))?$")


def parse(value: str | int | float) -> Decimal:
    """The quantity's value; ValueError when it is not one."""
    if isinstance(value, bool):
        raise ValueError(f"not a quantity: {value!r}")
    if isinstance(value, int | float):
        return Decimal(str(value))
    match = _FORM.match(value.strip())
    if match is None or match.group(1).count(".") > 1 or match.group(1) in ("", ".", "+", "-"):
        raise ValueError(f"not a quantity: {value!r}")
    number, suffix, exponent = match.groups()
    try:
        base = Decimal(number)
    except InvalidOperation as err:
        raise ValueError(f"not a quantity: {value!r}") from err
    if exponent is not None:
        return base.scaleb(int(exponent))
    if suffix in _BINARY:
        return base * (Decimal(1024) ** _BINARY[suffix])
    return base.scaleb(_DECIMAL[suffix or ""])
