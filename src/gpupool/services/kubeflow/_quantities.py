"""Kubernetes quantities as a manifest writes them: ``"0.5"``, ``"500m"``, ``2``, ``"4Gi"``,
``"1e9"`` (apimachinery's resource.Quantity: a decimal number, then a binary suffix Ki..Ei,
a decimal suffix n, u, m, k, M..E, or an exponent)."""

from __future__ import annotations

import math
import re
from fractions import Fraction

_SUFFIXES: dict[str, Fraction] = {
    "Ki": Fraction(2**10),
    "Mi": Fraction(2**20),
    "Gi": Fraction(2**30),
    "Ti": Fraction(2**40),
    "Pi": Fraction(2**50),
    "Ei": Fraction(2**60),
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
_QUANTITY = re.compile(
    r"^\+?(?P<number>\d+(?:\.\d*)?|\.\d+)"
    r"(?:(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)|[eE](?P<exponent>[+-]?\d{1,3}))?$"
)
EXAMPLES = '"2", "500m" or "0.5" for CPUs; "4Gi" or "512Mi" for memory'


def quantity(value: object) -> Fraction:
    """The quantity ``value`` as an exact number; ValueError when it is not one."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError(f"a quantity such as {EXAMPLES}")
    if isinstance(value, int | float):
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"a quantity of 0 or more, such as {EXAMPLES}")
        return Fraction(value)
    match = _QUANTITY.match(value.strip())
    if match is None:
        raise ValueError(f"a quantity such as {EXAMPLES}, not '{value[:40]}'")
    number = Fraction(match["number"])
    if match["exponent"] is not None:
        return number * Fraction(10) ** int(match["exponent"])
    return number * _SUFFIXES[match["suffix"] or ""]


def byte_count(value: object) -> int:
    """A memory quantity in bytes (rounded up, as Kubernetes rounds a quantity's Value)."""
    return math.ceil(quantity(value))


def whole(value: object) -> int:
    """A quantity that counts devices (``nvidia.com/gpu: 2``): a whole number."""
    amount = quantity(value)
    if amount.denominator != 1:
        raise ValueError("a whole number of devices, such as 1 or 8")
    return int(amount)
