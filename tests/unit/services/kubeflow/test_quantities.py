"""Kubernetes quantities as manifests write them: CPUs in cores or milli-cores, memory with
binary or decimal suffixes or an exponent, device counts whole."""

from __future__ import annotations

from fractions import Fraction

import pytest

from gpupool.services.kubeflow._quantities import byte_count, quantity, whole


@pytest.mark.parametrize(
    ("written", "value"),
    [
        ("500m", Fraction(1, 2)),
        ("0.5", Fraction(1, 2)),
        (".5", Fraction(1, 2)),
        (2, Fraction(2)),
        (1.5, Fraction(3, 2)),
        ("4Gi", Fraction(4 * 2**30)),
        ("129M", Fraction(129 * 10**6)),
        ("1.5k", Fraction(1500)),
        ("1e3", Fraction(1000)),
        ("12E-1", Fraction(6, 5)),
        ("+3", Fraction(3)),
        (" 2 ", Fraction(2)),
    ],
)
def test_a_quantity_reads_as_kubernetes_reads_it(written: object, value: Fraction) -> None:
    assert quantity(written) == value


@pytest.mark.parametrize("written", ["abc", "1Gb", "1 Gi", "-1", "", True, None, [1], -2, "1e"])
def test_what_is_no_quantity_is_refused_with_examples(written: object) -> None:
    with pytest.raises(ValueError, match="quantity"):
        quantity(written)


def test_bytes_round_up_and_devices_are_whole() -> None:
    assert byte_count("1.5Gi") == 3 * 2**29
    assert byte_count("100m") == 1  # a tenth of a byte is a byte
    assert whole("2") == 2 and whole(8) == 8
    with pytest.raises(ValueError, match="whole number"):
        whole("1.5")
